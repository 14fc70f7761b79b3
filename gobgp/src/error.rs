//! [`SpeakerError`]: what failed, and against which GoBGP API endpoint or gobgpd
//! binary.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::convert::ConvertError;

/// Every error of this crate. Messages name the operation and the endpoint (or the
/// program); none also marks a source it already prints.
#[derive(Debug, thiserror::Error)]
pub enum SpeakerError {
    #[error("cannot connect to the GoBGP API at {endpoint}: {reason}")]
    Connect {
        endpoint: SocketAddr,
        reason: String,
    },
    #[error("GoBGP {call} at {endpoint} failed ({code:?}): {message}")]
    Call {
        call: &'static str,
        endpoint: SocketAddr,
        code: tonic::Code,
        message: String,
    },
    #[error("GoBGP {call} at {endpoint} did not answer within {timeout:?}")]
    Timeout {
        call: &'static str,
        endpoint: SocketAddr,
        timeout: Duration,
    },
    #[error("GoBGP {call} at {endpoint} answered what this client cannot read: {reason}")]
    Unreadable {
        call: &'static str,
        endpoint: SocketAddr,
        reason: ConvertError,
    },
    #[error(
        "BGP at {endpoint} is already started with {differences}: configure the same, or \
         restart that gobgpd"
    )]
    AlreadyStarted {
        endpoint: SocketAddr,
        differences: String,
    },
    #[error("invalid request to GoBGP at {endpoint}: {reason}")]
    Invalid {
        endpoint: SocketAddr,
        reason: String,
    },
    #[error("cannot use {api} for gobgpd's API: {reason}")]
    ApiAddress { api: SocketAddr, reason: String },
    #[error("{}", not_found(program))]
    NotInstalled { program: PathBuf },
    #[error("cannot start {program}: {reason}", program = program.display())]
    Spawn { program: PathBuf, reason: String },
    #[error("{program} (API {api}) exited before its API answered: {status}", program = program.display())]
    Exited {
        program: PathBuf,
        api: SocketAddr,
        status: String,
    },
    #[error("gobgpd's API at {api} did not answer within {waited:?}: {last}")]
    NotReady {
        api: SocketAddr,
        waited: Duration,
        last: String,
    },
}

fn not_found(program: &std::path::Path) -> String {
    let hint = "install Debian's gobgpd, or set anycast.speaker.api to an external speaker";
    if program.components().count() > 1 {
        format!("{} not found: {hint}", program.display())
    } else {
        format!("{} not found on PATH: {hint}", program.display())
    }
}

/// An error and its sources on one line (tonic's transport errors say only
/// "transport error" themselves).
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        let s = e.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        source = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_gobgpd_says_what_to_do() {
        let e = SpeakerError::NotInstalled {
            program: "gobgpd".into(),
        };
        assert_eq!(
            e.to_string(),
            "gobgpd not found on PATH: install Debian's gobgpd, or set anycast.speaker.api to \
             an external speaker"
        );
        let e = SpeakerError::NotInstalled {
            program: "/opt/gobgp/gobgpd".into(),
        };
        assert!(
            e.to_string()
                .starts_with("/opt/gobgp/gobgpd not found: install"),
            "{e}"
        );
    }
}
