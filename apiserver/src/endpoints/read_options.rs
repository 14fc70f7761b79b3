//! `resourceVersion`, `resourceVersionMatch`, `continue`, `limit` and
//! `sendInitialEvents` of get, list and watch: kube's validation and the read each
//! combination asks for (the semantics table of
//! <https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-versions>).
//! Pure: the caller does the waiting and the reading.

use fedingress_api::{FieldError, FieldPath};
use fedingress_store::Revision;

use crate::registry::parse_revision;
use crate::status::ApiError;

const EXACT: &str = "Exact";
const NOT_OLDER_THAN: &str = "NotOlderThan";

/// The read options of one request, as the query gave them (empty = absent).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadOptions<'a> {
    pub resource_version: &'a str,
    pub resource_version_match: &'a str,
    pub continue_token: &'a str,
    pub limit_set: bool,
    /// `sendInitialEvents`, when given at all (`Some(false)` counts as given).
    pub send_initial_events: Option<bool>,
    pub allow_watch_bookmarks: bool,
}

/// What a get or a list reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Read {
    /// The most recent state (resourceVersion unset, or "0": "any" is served current).
    Latest,
    /// A state at least as new as this revision: wait for the store to reach it, then
    /// read the most recent state.
    NotOlderThan(Revision),
    /// Exactly the state at this revision.
    Exact(Revision),
    /// A later page: the continue token says where and at which revision.
    Continue,
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchStart {
    /// The legacy start (no resourceVersion, or "0"): ADDED events for the current
    /// state, then changes.
    CurrentState,
    /// Changes after this revision.
    After(Revision),
    /// Watch-list (`sendInitialEvents=true`): once the store is at least at `min` (0:
    /// any), ADDED events for one snapshot, a BOOKMARK marking their end, then changes.
    InitialEvents { min: Revision },
    /// `sendInitialEvents=false`: changes after the current revision, once the store
    /// is at least at `min`.
    NoInitialEvents { min: Revision },
}

/// The 422 kube answers for invalid list options (`NewInvalid(ListOptions, "", errs)`).
fn invalid(errors: &[FieldError]) -> ApiError {
    ApiError::invalid("ListOptions", "meta.k8s.io", "", errors)
}

fn rvm() -> FieldPath {
    FieldPath::new("resourceVersionMatch")
}

/// A resourceVersion other than unset or "0", parsed.
fn revision(value: &str) -> Result<Option<Revision>, ApiError> {
    match value {
        "" | "0" => Ok(None),
        text => parse_revision(text).map(Some),
    }
}

/// The read of a get: unset = most recent, "0" = any, N = not older than N.
///
/// # Errors
/// 400 for a resourceVersion that is not a number.
pub fn get(options: &ReadOptions<'_>) -> Result<Read, ApiError> {
    Ok(match revision(options.resource_version)? {
        None => Read::Latest,
        Some(n) => Read::NotOlderThan(n),
    })
}

/// The read of a list, after kube's `ValidateListOptions`.
///
/// # Errors
/// 422 (`ListOptions.meta.k8s.io "" is invalid: ...`) for the combinations kube
/// forbids; 400 for resourceVersion (other than "0") with continue, and for a
/// resourceVersion that is not a number.
pub fn list(options: &ReadOptions<'_>) -> Result<Read, ApiError> {
    let mut errors = Vec::new();
    let matched = options.resource_version_match;
    if !matched.is_empty() {
        if options.resource_version.is_empty() {
            errors.push(FieldError::forbidden(
                rvm(),
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if !options.continue_token.is_empty() {
            errors.push(FieldError::forbidden(
                rvm(),
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if matched != EXACT && matched != NOT_OLDER_THAN {
            errors.push(FieldError::not_supported(
                rvm(),
                matched,
                &[EXACT, NOT_OLDER_THAN, ""],
            ));
        }
        if matched == EXACT && options.resource_version == "0" {
            errors.push(FieldError::forbidden(
                rvm(),
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if options.send_initial_events.is_some() {
        errors.push(FieldError::forbidden(
            FieldPath::new("sendInitialEvents"),
            "sendInitialEvents is forbidden for list",
        ));
    }
    if !errors.is_empty() {
        return Err(invalid(&errors));
    }
    if !options.continue_token.is_empty() {
        if !matches!(options.resource_version, "" | "0") {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        return Ok(Read::Continue);
    }
    let Some(n) = revision(options.resource_version)? else {
        return Ok(Read::Latest);
    };
    Ok(match matched {
        EXACT => Read::Exact(n),
        NOT_OLDER_THAN => Read::NotOlderThan(n),
        // Unset: a paged list at N is Exact (the legacy rule), a whole one NotOlderThan.
        _ if options.limit_set => Read::Exact(n),
        _ => Read::NotOlderThan(n),
    })
}

/// Where a watch starts, after kube's `validateWatchOptions` (and its rule that a
/// watch-list needs bookmarks, its only way to say the initial events are over).
///
/// # Errors
/// 422 for the combinations kube forbids; 400 for a resourceVersion that is not a
/// number.
pub fn watch(options: &ReadOptions<'_>) -> Result<WatchStart, ApiError> {
    let mut errors = Vec::new();
    let matched = options.resource_version_match;
    if let Some(send) = options.send_initial_events {
        if matched != NOT_OLDER_THAN {
            errors.push(FieldError::forbidden(
                rvm(),
                format!(
                    "sendInitialEvents requires setting resourceVersionMatch to {NOT_OLDER_THAN}"
                ),
            ));
        }
        if send && !options.allow_watch_bookmarks {
            errors.push(FieldError::forbidden(
                FieldPath::new("allowWatchBookmarks"),
                "sendInitialEvents requires setting allowWatchBookmarks to true",
            ));
        }
    }
    if !matched.is_empty() {
        if options.send_initial_events.is_none() {
            errors.push(FieldError::forbidden(
                rvm(),
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if matched != NOT_OLDER_THAN {
            errors.push(FieldError::not_supported(rvm(), matched, &[NOT_OLDER_THAN]));
        }
        if !options.continue_token.is_empty() {
            errors.push(FieldError::forbidden(
                rvm(),
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
    }
    if !errors.is_empty() {
        return Err(invalid(&errors));
    }
    let n = revision(options.resource_version)?;
    Ok(match (options.send_initial_events, n) {
        (Some(true), n) => WatchStart::InitialEvents {
            min: n.unwrap_or(0),
        },
        (Some(false), n) => WatchStart::NoInitialEvents {
            min: n.unwrap_or(0),
        },
        (None, None) => WatchStart::CurrentState,
        (None, Some(n)) => WatchStart::After(n),
    })
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::*;

    fn opts<'a>(rv: &'a str, matched: &'a str) -> ReadOptions<'a> {
        ReadOptions {
            resource_version: rv,
            resource_version_match: matched,
            ..ReadOptions::default()
        }
    }

    /// The list rows of kube's semantics table.
    #[test]
    fn list_follows_the_semantics_table() {
        assert_eq!(list(&opts("", "")).unwrap(), Read::Latest);
        assert_eq!(list(&opts("0", "")).unwrap(), Read::Latest);
        assert_eq!(list(&opts("7", "")).unwrap(), Read::NotOlderThan(7));
        let paged = |rv| ReadOptions {
            limit_set: true,
            ..opts(rv, "")
        };
        assert_eq!(list(&paged("")).unwrap(), Read::Latest);
        assert_eq!(list(&paged("0")).unwrap(), Read::Latest);
        assert_eq!(list(&paged("7")).unwrap(), Read::Exact(7));
        assert_eq!(list(&opts("7", "Exact")).unwrap(), Read::Exact(7));
        assert_eq!(
            list(&opts("7", "NotOlderThan")).unwrap(),
            Read::NotOlderThan(7)
        );
        assert_eq!(list(&opts("0", "NotOlderThan")).unwrap(), Read::Latest);
        let continued = |rv| ReadOptions {
            continue_token: "t",
            limit_set: true,
            ..opts(rv, "")
        };
        assert_eq!(list(&continued("")).unwrap(), Read::Continue);
        assert_eq!(list(&continued("0")).unwrap(), Read::Continue);
        let error = list(&continued("7")).unwrap_err();
        assert_eq!(error.code, StatusCode::BAD_REQUEST);
        assert_eq!(
            error.message,
            "specifying resource version is not allowed when using continue"
        );
    }

    #[test]
    fn list_refuses_what_kube_refuses() {
        let message = |o: ReadOptions<'_>| {
            let error = list(&o).unwrap_err();
            assert_eq!(error.code, StatusCode::UNPROCESSABLE_ENTITY);
            error.message
        };
        assert_eq!(
            message(opts("", "Exact")),
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
        );
        assert_eq!(
            message(opts("0", "Exact")),
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\""
        );
        assert_eq!(
            message(opts("5", "Newest")),
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Unsupported value: \"Newest\": supported values: \"Exact\", \"NotOlderThan\", \"\""
        );
        assert!(
            message(ReadOptions {
                continue_token: "t",
                ..opts("5", "Exact")
            })
            .contains("resourceVersionMatch is forbidden when continue is provided")
        );
        assert!(
            message(ReadOptions {
                send_initial_events: Some(true),
                ..opts("", "")
            })
            .contains("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list")
        );
        assert_eq!(
            list(&opts("x", "")).unwrap_err().code,
            StatusCode::BAD_REQUEST
        );
    }

    #[test]
    fn get_reads_latest_or_not_older_than() {
        assert_eq!(get(&opts("", "")).unwrap(), Read::Latest);
        assert_eq!(get(&opts("0", "")).unwrap(), Read::Latest);
        assert_eq!(get(&opts("12", "")).unwrap(), Read::NotOlderThan(12));
    }

    fn watch_list<'a>(rv: &'a str) -> ReadOptions<'a> {
        ReadOptions {
            send_initial_events: Some(true),
            allow_watch_bookmarks: true,
            ..opts(rv, "NotOlderThan")
        }
    }

    #[test]
    fn watch_list_as_kube_rs_and_client_go_ask_for_it() {
        assert_eq!(
            watch(&watch_list("")).unwrap(),
            WatchStart::InitialEvents { min: 0 }
        );
        assert_eq!(
            watch(&watch_list("0")).unwrap(),
            WatchStart::InitialEvents { min: 0 }
        );
        assert_eq!(
            watch(&watch_list("9")).unwrap(),
            WatchStart::InitialEvents { min: 9 }
        );
        let no_initial = ReadOptions {
            send_initial_events: Some(false),
            ..watch_list("9")
        };
        assert_eq!(
            watch(&no_initial).unwrap(),
            WatchStart::NoInitialEvents { min: 9 }
        );
        assert_eq!(watch(&opts("", "")).unwrap(), WatchStart::CurrentState);
        assert_eq!(watch(&opts("0", "")).unwrap(), WatchStart::CurrentState);
        assert_eq!(watch(&opts("4", "")).unwrap(), WatchStart::After(4));
    }

    #[test]
    fn watch_refuses_what_kube_refuses() {
        let message = |o: ReadOptions<'_>| {
            let error = watch(&o).unwrap_err();
            assert_eq!(error.code, StatusCode::UNPROCESSABLE_ENTITY);
            error.message
        };
        assert!(
            message(ReadOptions {
                resource_version_match: "",
                ..watch_list("")
            })
            .contains("resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
        );
        assert!(
            message(ReadOptions {
                allow_watch_bookmarks: false,
                ..watch_list("")
            })
            .contains("allowWatchBookmarks: Forbidden")
        );
        assert!(message(opts("5", "NotOlderThan")).contains(
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
        ));
        assert!(
            message(ReadOptions {
                resource_version_match: "Exact",
                ..watch_list("5")
            })
            .contains("supported values: \"NotOlderThan\"")
        );
    }
}
