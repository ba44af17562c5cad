//! The last word on what a status tells a caller, for every service (issue 18): a request
//! body that cannot be decoded is the caller's mistake (INVALID_ARGUMENT, not tonic's
//! INTERNAL), and no status message is longer than [`MAX_MESSAGE`] bytes — whatever an
//! error quoted — so a standard client can always read it (it travels in a header).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::{Code, Status};
use tower_layer::Layer;
use tower_service::Service;

/// The largest request any service decodes: every field within its limit fits with room
/// to spare (the largest are 64 KiB of arguments plus 64 KiB of intent). A larger message
/// is refused before it is buffered whole (OUT_OF_RANGE, as tonic answers a message over
/// its decoding limit), so a flood of huge requests cannot fill a service's memory.
pub const MAX_REQUEST_BYTES: usize = 512 * 1024;

/// Longest status message sent, in bytes.
pub const MAX_MESSAGE: usize = 1024;

/// What prost says of a body it cannot decode (tonic passes it on as INTERNAL).
const DECODE_FAILURE: &str = "failed to decode Protobuf message";

/// The status a caller should get instead of `status`, if any.
pub fn corrected(status: &Status) -> Option<Status> {
    let message = status.message();
    if status.code() == Code::Internal && message.starts_with(DECODE_FAILURE) {
        let detail = message
            .strip_prefix(DECODE_FAILURE)
            .unwrap_or_default()
            .trim_start_matches(':')
            .trim();
        return Some(Status::invalid_argument(bounded(&format!(
            "the request body is not a valid message of this RPC: {detail}"
        ))));
    }
    if message.len() > MAX_MESSAGE {
        return Some(Status::new(status.code(), bounded(message)));
    }
    None
}

/// `message` cut to [`MAX_MESSAGE`] bytes on a character boundary, `…` when cut.
fn bounded(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// Applies [`corrected`] to every response whose status is in its headers (a unary error,
/// or a stream refused before its first message).
#[derive(Debug, Clone, Copy, Default)]
pub struct StatusLayer;

impl<S> Layer<S> for StatusLayer {
    type Service = Corrected<S>;

    fn layer(&self, inner: S) -> Corrected<S> {
        Corrected { inner }
    }
}

/// See [`StatusLayer`].
#[derive(Debug, Clone)]
pub struct Corrected<S> {
    inner: S,
}

impl<S> Service<http::Request<Body>> for Corrected<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let future = self.inner.call(request);
        Box::pin(async move {
            let mut response = future.await?;
            let better = Status::from_header_map(response.headers())
                .as_ref()
                .and_then(corrected);
            if let Some(status) = better {
                let headers = response.headers_mut();
                headers.remove("grpc-message");
                headers.remove("grpc-status-details-bin");
                if let Err(e) = status.add_header(headers) {
                    tracing::warn!(error = %e, "cannot rewrite a status");
                }
            }
            Ok(response)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_undecodable_body_is_the_callers_mistake() {
        let status = Status::internal(
            "failed to decode Protobuf message: RunTurnRequest.query: invalid wire type",
        );
        let better = corrected(&status).unwrap();
        assert_eq!(better.code(), Code::InvalidArgument);
        assert!(better.message().contains("invalid wire type"), "{better:?}");
        assert!(corrected(&Status::internal("the store failed")).is_none());
    }

    #[test]
    fn a_long_message_is_cut_on_a_character_boundary() {
        let status = Status::not_found("é".repeat(10_000));
        let better = corrected(&status).unwrap();
        assert_eq!(better.code(), Code::NotFound);
        assert!(better.message().len() <= MAX_MESSAGE);
        assert!(better.message().ends_with('…'));
        assert!(corrected(&Status::not_found("short")).is_none());
    }
}
