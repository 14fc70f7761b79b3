//! Who writes, and where.

/// The writer of one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    /// The field manager (`fieldManager` query parameter, or the client's default).
    pub manager: &'a str,
    /// The apiVersion the request was made in (`fedingress.io/v1alpha1`).
    pub api_version: &'a str,
    /// `Some("status")` for a write to the status subresource.
    pub subresource: Option<&'a str>,
    /// RFC 3339, seconds, UTC ("2026-11-24T11:00:00Z").
    pub now: &'a str,
}
