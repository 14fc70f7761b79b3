//! The body of every request the HTTP proxy sends to an endpoint: [`RequestBody`].
//! [`super::http`] builds it, [`super::upstream`] sends it, and the pooled connections
//! of [`super::idle`] are typed by it, so it sits below all three. Bodies towards the
//! client are [`super::http`]'s.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// A request body towards an endpoint: none (requests that can be retried) or the
/// client's, streamed.
#[derive(Debug)]
pub(crate) enum RequestBody {
    Empty,
    Stream(Incoming),
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        match self.get_mut() {
            RequestBody::Empty => Poll::Ready(None),
            RequestBody::Stream(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Empty => true,
            RequestBody::Stream(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            RequestBody::Empty => SizeHint::with_exact(0),
            RequestBody::Stream(body) => body.size_hint(),
        }
    }
}
