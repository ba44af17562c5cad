//! W3C trace-context propagation across gRPC hops, as tower layers.
//!
//! [`ServerTraceLayer`] wraps a tonic server: it extracts `traceparent`/`tracestate` from
//! the request headers and opens a server span (`rpc.service`, `rpc.method`, gRPC status)
//! whose parent is the caller's span. [`ClientTraceLayer`] wraps a client channel: it opens
//! a client span per call and injects its context into the request headers. Span fields
//! carry names and status codes only, never request contents.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{HeaderMap, HeaderName, HeaderValue, Request, Response};
use opentelemetry::propagation::{Extractor, Injector};
use tower_layer::Layer;
use tower_service::Service;
use tracing::Instrument;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(HeaderName::as_str).collect()
    }
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(key.as_bytes()),
            HeaderValue::from_str(&value),
        ) else {
            return;
        };
        self.0.insert(name, value);
    }
}

/// The current span's W3C `traceparent` (empty when there is no valid one): kept with a
/// piece of work that another call will finish, so that call can join the same trace.
pub fn current_traceparent() -> String {
    let context = tracing::Span::current().context();
    let mut headers = HeaderMap::new();
    opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.inject_context(&context, &mut HeaderInjector(&mut headers));
    });
    headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

/// The context a kept `traceparent` names (an empty context for an empty or malformed one:
/// a span given it as parent starts a trace of its own). Read as W3C trace context whatever
/// propagator the process installed (the terminal installs none).
pub fn context_of(traceparent: &str) -> opentelemetry::Context {
    use opentelemetry::propagation::TextMapPropagator;
    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_str(traceparent) {
        headers.insert("traceparent", value);
    }
    opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .extract(&HeaderExtractor(&headers))
}

/// Makes `span` (not entered yet) a child of the span a kept `traceparent` names: work that
/// answers something (a click on a card) joins the trace of what it answers. An empty or
/// malformed one leaves the span a trace of its own.
pub fn continue_trace(span: &tracing::Span, traceparent: &str) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = context_of(traceparent);
    {
        use opentelemetry::trace::TraceContextExt;
        if !context.span().span_context().is_valid() {
            return;
        }
    }
    let _ = span.set_parent(context);
}

/// `message` as a request in the trace a kept `traceparent` names, for a caller with no
/// trace of its own (the terminal answering a card: issue 41, one message, one trace). A
/// malformed or empty one is left out.
pub fn in_trace<T>(message: T, traceparent: &str) -> tonic::Request<T> {
    use opentelemetry::trace::TraceContextExt;
    let mut request = tonic::Request::new(message);
    if context_of(traceparent).span().span_context().is_valid()
        && let Ok(value) = traceparent.parse()
    {
        request.metadata_mut().insert("traceparent", value);
    }
    request
}

/// Splits `/pkg.Service/Method` into (`pkg.Service`, `Method`).
fn rpc_names(path: &str) -> (&str, &str) {
    let trimmed = path.trim_start_matches('/');
    trimmed.split_once('/').unwrap_or((trimmed, ""))
}

/// The gRPC status of a response whose status travels in the headers (errors answered
/// "trailers-only"); a normal response carries it in trailers, where 0 is the rule.
fn header_status(headers: &HeaderMap) -> i64 {
    headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn record_status(span: &tracing::Span, code: i64) {
    span.record("rpc.grpc.status_code", code);
    if code != 0 {
        span.record("otel.status_code", "ERROR");
    }
}

/// The span of one gRPC call, server or client side, named after the RPC.
fn rpc_span(kind: &'static str, path: &str) -> tracing::Span {
    let (service, method) = rpc_names(path);
    let span = match kind {
        "server" => tracing::info_span!(
            "grpc.server",
            otel.name = Empty,
            otel.kind = "server",
            otel.status_code = Empty,
            rpc.system = "grpc",
            rpc.service = service,
            rpc.method = method,
            rpc.grpc.status_code = Empty,
        ),
        _ => tracing::info_span!(
            "grpc.client",
            otel.name = Empty,
            otel.kind = "client",
            otel.status_code = Empty,
            rpc.system = "grpc",
            rpc.service = service,
            rpc.method = method,
            rpc.grpc.status_code = Empty,
        ),
    };
    span.record("otel.name", format!("{service}/{method}"));
    span
}

/// Runs the inner call's future inside `span`, recording the gRPC status it answers.
fn traced<F, R, E>(
    future: F,
    span: tracing::Span,
) -> Pin<Box<dyn Future<Output = Result<Response<R>, E>> + Send>>
where
    F: Future<Output = Result<Response<R>, E>> + Send + 'static,
{
    Box::pin(
        async move {
            let result = future.await;
            if let Ok(response) = &result {
                record_status(&tracing::Span::current(), header_status(response.headers()));
            }
            result
        }
        .instrument(span),
    )
}

/// Server side: extract the caller's trace context, open a server span.
#[derive(Debug, Clone, Copy, Default)]
pub struct ServerTraceLayer;

impl<S> Layer<S> for ServerTraceLayer {
    type Service = ServerTrace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ServerTrace { inner }
    }
}

/// See [`ServerTraceLayer`].
#[derive(Debug, Clone)]
pub struct ServerTrace<S> {
    inner: S,
}

impl<S, B, R> Service<Request<B>> for ServerTrace<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.extract(&HeaderExtractor(request.headers()))
        });
        let span = rpc_span("server", request.uri().path());
        // A context without a valid remote span (no traceparent) starts a new trace.
        let _ = span.set_parent(parent);
        let future = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        traced(future, span)
    }
}

/// Client side: open a client span per call and inject its W3C context.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClientTraceLayer;

impl<S> Layer<S> for ClientTraceLayer {
    type Service = ClientTrace<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientTrace { inner }
    }
}

/// See [`ClientTraceLayer`]. Use it wherever a generated client takes a channel.
#[derive(Debug, Clone)]
pub struct ClientTrace<S> {
    inner: S,
}

impl<S, B, R> Service<Request<B>> for ClientTrace<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        let span = rpc_span("client", request.uri().path());
        // Entered first, so the export layer that took the span starts it (issue 41):
        // asked for the context of a span not yet started, the subscriber starts it with
        // the first export layer it finds — under `metnos up`, the first service's, which
        // exported the planner's client calls as `metnos-policy`.
        let context = span.in_scope(|| tracing::Span::current().context());
        opentelemetry::global::get_text_map_propagator(|propagator| {
            propagator.inject_context(&context, &mut HeaderInjector(request.headers_mut()));
        });
        traced(self.inner.call(request), span)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rpc_names_split_the_path() {
        assert_eq!(
            rpc_names("/metnos.policy.v1.PolicyService/Check"),
            ("metnos.policy.v1.PolicyService", "Check")
        );
        assert_eq!(rpc_names("/odd"), ("odd", ""));
    }

    #[test]
    fn status_is_read_from_trailers_only_headers() {
        let mut headers = HeaderMap::new();
        assert_eq!(header_status(&headers), 0);
        headers.insert("grpc-status", HeaderValue::from_static("12"));
        assert_eq!(header_status(&headers), 12);
    }

    #[test]
    fn injected_context_is_extracted_unchanged() {
        use opentelemetry::trace::{
            SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState,
        };
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        let span_context = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        let context = opentelemetry::Context::new().with_remote_span_context(span_context.clone());
        let mut headers = HeaderMap::new();
        opentelemetry::global::get_text_map_propagator(|p| {
            p.inject_context(&context, &mut HeaderInjector(&mut headers))
        });
        assert_eq!(
            headers.get("traceparent").unwrap(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        let extracted = opentelemetry::global::get_text_map_propagator(|p| {
            p.extract(&HeaderExtractor(&headers))
        });
        assert_eq!(
            extracted.span().span_context().trace_id(),
            span_context.trace_id()
        );
        assert_eq!(
            extracted.span().span_context().span_id(),
            span_context.span_id()
        );
    }
}
