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

/// Applies [`corrected`] to every response: to a status in its headers (a unary error, or
/// a stream refused before its first message) and to one in its trailers (a stream that
/// failed on the way, e.g. on a message it could not decode).
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
                rewrite(response.headers_mut(), &status);
            }
            Ok(response.map(|inner| Body::new(TrailersCorrected { inner })))
        })
    }
}

/// Puts `status` in `headers` (headers or trailers) instead of the one there.
fn rewrite(headers: &mut http::HeaderMap, status: &Status) {
    headers.remove("grpc-message");
    headers.remove("grpc-status-details-bin");
    if let Err(e) = status.add_header(headers) {
        tracing::warn!(error = %e, "cannot rewrite a status");
    }
}

/// A response body whose trailers' status is [`corrected`].
struct TrailersCorrected {
    inner: Body,
}

impl http_body::Body for TrailersCorrected {
    type Data = <Body as http_body::Body>::Data;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Status>>> {
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        let frame = match frame.into_trailers() {
            Ok(mut trailers) => {
                let better = Status::from_header_map(&trailers)
                    .as_ref()
                    .and_then(corrected);
                if let Some(status) = better {
                    rewrite(&mut trailers, &status);
                }
                http_body::Frame::trailers(trailers)
            }
            Err(data) => data,
        };
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
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

    /// A body of the given frames.
    struct Frames(std::collections::VecDeque<http_body::Frame<<Body as http_body::Body>::Data>>);

    impl http_body::Body for Frames {
        type Data = <Body as http_body::Body>::Data;
        type Error = Status;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Status>>> {
            Poll::Ready(self.0.pop_front().map(Ok))
        }
    }

    /// The trailers a stream ending with `status` reaches its caller with.
    async fn trailers_after(status: Status) -> http::HeaderMap {
        let mut trailers = http::HeaderMap::new();
        status.add_header(&mut trailers).unwrap();
        let frames = Frames(
            [
                http_body::Frame::data("a message".into()),
                http_body::Frame::trailers(trailers),
            ]
            .into(),
        );
        let mut body = TrailersCorrected {
            inner: Body::new(frames),
        };
        let mut last = None;
        while let Some(frame) =
            std::future::poll_fn(|cx| http_body::Body::poll_frame(Pin::new(&mut body), cx)).await
        {
            last = frame.unwrap().into_trailers().ok().or(last);
        }
        last.expect("trailers")
    }

    #[tokio::test]
    async fn a_stream_s_final_status_is_corrected_too() {
        let undecodable = trailers_after(Status::internal(
            "failed to decode Protobuf message: ServerReflectionRequest.host: invalid wire type",
        ))
        .await;
        let status = Status::from_header_map(&undecodable).unwrap();
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        let long = trailers_after(Status::aborted("Z".repeat(20_000))).await;
        let status = Status::from_header_map(&long).unwrap();
        assert_eq!(status.code(), Code::Aborted);
        assert!(
            status.message().len() <= MAX_MESSAGE,
            "{}",
            status.message().len()
        );
        let fine = trailers_after(Status::ok("")).await;
        assert_eq!(Status::from_header_map(&fine).unwrap().code(), Code::Ok);
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
