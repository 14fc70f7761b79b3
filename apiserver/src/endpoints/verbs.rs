//! The verbs of the resource endpoints, one function each: a request is parsed once
//! ([`Verb::of`], [`Call::prepare`]: the URL's shape, the scope, authorization, the
//! negotiated form), then served by its verb's function. The `status` subresource is
//! get, update and patch on [`Scope::Status`].

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use fedingress_api::{Resource, Time};
use http::{Method, StatusCode, header};
use serde_json::{Value, json};

use super::request::{
    Params, TargetPath, content_type, decode_write, flag, is_namespace, parse_dry_run, read_body,
    read_delete_options, wants_table, with_warnings, write_manager,
};
use super::{AppState, apply, collection, json_response, lists};
use crate::auth::User;
use crate::codec::{self, FieldValidation};
use crate::registry::{Filter, Registry, Scope};
use crate::status::ApiError;
use crate::table::{self, IncludeObject, Printable};
use crate::watch;

/// A verb of the resource endpoints, as kube names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    /// The verb of a request: its method, whether its URL names an object, `?watch`.
    pub(super) fn of(
        method: &Method,
        target: &TargetPath,
        params: &Params,
    ) -> Result<Self, ApiError> {
        let named = target.name.is_some();
        Ok(match (method.as_str(), named) {
            ("GET", true) => Self::Get,
            ("GET", false) if flag(&params.watch) => Self::Watch,
            ("GET", false) => Self::List,
            ("POST", false) => Self::Create,
            ("PUT", true) => Self::Update,
            ("PATCH", true) => Self::Patch,
            ("DELETE", true) => Self::Delete,
            ("DELETE", false) => Self::DeleteCollection,
            (m, _) => {
                return Err(ApiError::method_not_allowed(format!(
                    "the server does not allow this method on the requested resource ({m})"
                )));
            }
        })
    }

    /// Its name, for authorization, metrics and the audit log.
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
            Self::Patch => "patch",
            Self::Delete => "delete",
            Self::DeleteCollection => "deletecollection",
        }
    }
}

/// A request on kind `R`, checked and authorized: what every verb reads.
pub(super) struct Call<'a> {
    state: &'a AppState,
    user: &'a User,
    namespace: Option<&'a str>,
    name: &'a str,
    params: &'a Params,
    /// Whether the client asked for a Table.
    table: bool,
    include: IncludeObject,
    now: Time,
    /// The registry, writing as the request's field manager.
    registry: Registry,
    scope: Scope,
    /// Whether a patch is a server-side apply.
    applying: bool,
}

impl<'a> Call<'a> {
    /// Checks, in kube's order, that the URL's shape fits `R` and the verb, that the
    /// user may, and the query's options; `path` is the URL's, as errors name it.
    fn prepare<R: Printable>(
        state: &'a AppState,
        user: &'a User,
        target: &'a TargetPath,
        verb: Verb,
        params: &'a Params,
        headers: &http::HeaderMap,
        path: &str,
    ) -> Result<Self, ApiError> {
        let scope = scope_of::<R>(target, verb, path)?;
        let name = target.name.as_deref().unwrap_or_default();
        crate::auth::authorize(
            &state.authorizer,
            &user.resource_attributes(
                verb.name(),
                R::GROUP,
                R::PLURAL,
                target.subresource.as_deref().unwrap_or_default(),
                target.namespace.as_deref().unwrap_or_default(),
                name,
            ),
        )?;
        let table = wants_table(headers);
        let include = IncludeObject::parse(params.include_object.as_deref())?;
        let applying = verb == Verb::Patch && apply::is_apply(headers);
        if params.force.is_some() && !applying {
            return Err(ApiError::bad_request(
                "force: Invalid value: true: may not be specified for non-apply patch",
            ));
        }
        let registry = state
            .registry
            .managed_by(&write_manager(params, headers, applying)?);
        Ok(Self {
            state,
            user,
            namespace: target.namespace.as_deref(),
            name,
            params,
            table,
            include,
            now: Time(chrono::Utc::now()),
            registry,
            scope,
            applying,
        })
    }

    /// Whether the user may write `new` over `current` (`None` when creating) without
    /// escalating their own privileges.
    fn check_escalation<R: Printable>(&self, current: Option<&R>, new: &R) -> Result<(), ApiError> {
        crate::auth::escalation::check::<R>(
            &self.state.authorizer,
            self.user,
            self.namespace,
            current,
            new,
        )
    }

    /// One object, as an object or a one-row Table.
    fn render<R: Printable>(&self, object: &R) -> Value {
        if self.table {
            table::table(
                std::slice::from_ref(object),
                self.include,
                &self.now,
                json!({"resourceVersion": object.metadata().resource_version}),
            )
        } else {
            serde_json::to_value(object).unwrap_or_default()
        }
    }
}

/// The shape of the URL must fit the kind; the only subresource is `status`, read and
/// written by get, update and patch.
fn scope_of<R: Resource>(target: &TargetPath, verb: Verb, path: &str) -> Result<Scope, ApiError> {
    let namespaced = target.namespace.is_some();
    let listing = matches!(verb, Verb::List | Verb::Watch);
    if (R::NAMESPACED && !namespaced && !listing) || (!R::NAMESPACED && namespaced) {
        return Err(ApiError::no_route(path));
    }
    match target.subresource.as_deref() {
        None => Ok(Scope::Main),
        Some("status") if matches!(verb, Verb::Get | Verb::Update | Verb::Patch) => {
            Ok(Scope::Status)
        }
        Some(_) => Err(ApiError::no_route(path)),
    }
}

/// Serves `verb` on kind `R`.
pub(super) async fn serve<R: Printable>(
    state: &AppState,
    user: &User,
    target: &TargetPath,
    verb: Verb,
    params: Params,
    request: Request,
) -> Result<Response, ApiError> {
    let path = super::layers::requested_path(&request);
    let call = Call::prepare::<R>(state, user, target, verb, &params, request.headers(), &path)?;
    match verb {
        Verb::Get => get::<R>(&call).await,
        Verb::List => list::<R>(&call).await,
        Verb::Watch => watch::<R>(&call).await,
        Verb::Create => create::<R>(&call, request).await,
        Verb::Update => update::<R>(&call, request).await,
        Verb::Patch => patch::<R>(&call, request).await,
        Verb::Delete => delete::<R>(&call, request).await,
        Verb::DeleteCollection => {
            let Call {
                ref registry,
                namespace,
                now,
                ..
            } = call;
            collection::serve::<R>(registry, namespace, &params, request, now).await
        }
    }
}

/// `get`: one object (or the one-row Table of it).
async fn get<R: Printable>(call: &Call<'_>) -> Result<Response, ApiError> {
    let Call {
        namespace,
        name,
        params,
        ref registry,
        ..
    } = *call;
    let object = lists::get::<R>(registry, namespace, name, params).await?;
    Ok(json_response(StatusCode::OK, &call.render(&object)))
}

/// `list`: a page of the collection (or its Table).
async fn list<R: Printable>(call: &Call<'_>) -> Result<Response, ApiError> {
    let Call {
        namespace,
        params,
        table,
        include,
        now,
        ref registry,
        ..
    } = *call;
    let filter = Filter::parse::<R>(
        params.label_selector.as_deref(),
        params.field_selector.as_deref(),
    )?;
    let limit = match params.limit.as_deref() {
        None | Some("") => 0,
        Some(l) => l
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit: {l:?}")))?
            .max(0) as usize,
    };
    let page = lists::list::<R>(registry, namespace, &filter, limit, params).await?;
    let mut list_meta = json!({"resourceVersion": page.resource_version.to_string()});
    if let Some(token) = &page.continue_token {
        list_meta["continue"] = json!(token);
    }
    let body = if table {
        table::table(&page.items, include, &now, list_meta)
    } else {
        json!({
            "kind": R::LIST_KIND,
            "apiVersion": R::api_version(),
            "metadata": list_meta,
            "items": page.items,
        })
    };
    Ok(json_response(StatusCode::OK, &body))
}

/// `watch`: the changes as a stream of JSON lines, from the resourceVersion asked for.
async fn watch<R: Printable>(call: &Call<'_>) -> Result<Response, ApiError> {
    let Call {
        state,
        user,
        namespace,
        params,
        table,
        include,
        ref registry,
        ..
    } = *call;
    let filter = Filter::parse::<R>(
        params.label_selector.as_deref(),
        params.field_selector.as_deref(),
    )?;
    let (after, initial_events_end) = lists::watch_start(registry, params).await?;
    let limits = &state.settings.watch;
    let (timeout, capped) = crate::watch::watch_timeout(
        params.timeout_seconds.as_deref(),
        limits,
        crate::watch::random_between,
    )
    .map_err(ApiError::bad_request)?;
    if capped {
        crate::metrics::LimitCounters::count(&state.metrics.limits.watch_timeouts_capped);
    }
    let guard = state
        .metrics
        .try_start_watch(&user.name, limits.max_watches, limits.max_watches_per_user)
        .map_err(watch::refused)?;
    let render: watch::Render<R> = if table {
        Box::new(move |object: &R| {
            table::table(
                std::slice::from_ref(object),
                include,
                &Time(chrono::Utc::now()),
                json!({"resourceVersion": object.metadata().resource_version}),
            )
        })
    } else {
        Box::new(|object: &R| serde_json::to_value(object).unwrap_or_default())
    };
    let receiver = watch::start::<R>(
        registry,
        watch::WatchRequest {
            namespace: namespace.map(String::from),
            filter,
            after,
            initial_events_end,
            bookmarks: flag(&params.allow_watch_bookmarks),
            bookmark_interval: state.settings.bookmark_interval,
            timeout,
            render,
        },
    )
    .await;
    streamed(receiver, guard)
}

/// A watch's answer: its events as JSON lines while `guard` counts it open; a watch
/// too old to start is 200 with one ERROR event, as kube-apiserver answers it.
fn streamed(
    receiver: Result<tokio::sync::mpsc::Receiver<bytes::Bytes>, ApiError>,
    guard: crate::metrics::WatchGuard,
) -> Result<Response, ApiError> {
    let receiver = match receiver {
        Ok(receiver) => receiver,
        // kube-apiserver answers a too-old watch with 200 and an ERROR event.
        Err(e) if e.code == StatusCode::GONE => {
            let mut line = json!({"type": "ERROR", "object": e.to_status()}).to_string();
            line.push('\n');
            return Ok(([(header::CONTENT_TYPE, "application/json")], line).into_response());
        }
        Err(e) => return Err(e),
    };
    let stream =
        futures_util::stream::unfold((receiver, guard), |(mut receiver, guard)| async move {
            receiver
                .recv()
                .await
                .map(|bytes| (Ok::<_, std::convert::Infallible>(bytes), (receiver, guard)))
        });
    Ok((
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-cache, private"),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// The answer to a write: `object` with `status` and the decoder's `warnings`.
fn written<R: Printable>(status: StatusCode, object: &R, warnings: &[String]) -> Response {
    with_warnings(
        json_response(status, &serde_json::to_value(object).unwrap_or_default()),
        warnings,
    )
}

/// `create` (POST on the collection).
async fn create<R: Printable>(call: &Call<'_>, request: Request) -> Result<Response, ApiError> {
    let Call {
        namespace,
        params,
        now,
        ref registry,
        ..
    } = *call;
    let (object, warnings, dry_run) = decode_write::<R>(params, request).await?;
    call.check_escalation(None, &object)?;
    let created = registry.create(namespace, object, now, dry_run).await?;
    let mut response = written(StatusCode::CREATED, &created, &warnings);
    // The audit log names the created object, as kube's does.
    response
        .extensions_mut()
        .insert(crate::auth::audit::CreatedName(
            created.metadata().name.clone().unwrap_or_default(),
        ));
    Ok(response)
}

/// `update` (PUT): the object or its status, replaced.
async fn update<R: Printable>(call: &Call<'_>, request: Request) -> Result<Response, ApiError> {
    let Call {
        namespace,
        name,
        params,
        ref registry,
        scope,
        ..
    } = *call;
    let (object, warnings, dry_run) = decode_write::<R>(params, request).await?;
    if object.metadata().name.as_deref().is_some_and(|n| n != name)
        || object.metadata().name.is_none()
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            object.metadata().name.clone().unwrap_or_default()
        )));
    }
    let updated = registry
        .update::<R>(namespace, name, scope, dry_run, |current| {
            call.check_escalation(Some(current), &object)?;
            Ok(object.clone())
        })
        .await?;
    Ok(written(StatusCode::OK, &updated, &warnings))
}

/// `patch`: a JSON, merge or (RBAC kinds and Namespaces) strategic merge patch, or a server-side apply.
async fn patch<R: Printable>(call: &Call<'_>, request: Request) -> Result<Response, ApiError> {
    let Call {
        namespace,
        name,
        params,
        now,
        ref registry,
        scope,
        applying,
        ..
    } = *call;
    let dry_run = parse_dry_run(&params.dry_run)?;
    let validation = FieldValidation::parse(params.field_validation.as_deref())?;
    let (headers, body) = read_body(request).await?;
    if applying {
        // An apply is a write like any other: it may not escalate privileges.
        return apply::serve::<R>(
            registry,
            namespace,
            name,
            scope,
            params,
            &headers,
            &body,
            now,
            |current, new| call.check_escalation(current, new),
        )
        .await;
    }
    let patch = if (R::GROUP == fedingress_api::rbac::GROUP || is_namespace::<R>())
        && codec::media_type(content_type(&headers)) == "application/strategic-merge-patch+json"
    {
        Patch::strategic(&body)?
    } else {
        Patch::parse(content_type(&headers), &body)?
    };
    let mut warnings = Vec::new();
    let updated = registry
        .update::<R>(namespace, name, scope, dry_run, |current| {
            let mut document = serde_json::to_value(current)
                .map_err(|e| ApiError::internal(format!("encoding current object: {e}")))?;
            // The patch sees the current resourceVersion (kubectl's managedFields
            // upgrade replaces it as a precondition); only one the patch changed
            // is a precondition, so an unrelated race is retried.
            patch.apply(&mut document)?;
            let current_rv = current.metadata().resource_version.as_deref();
            if let Some(meta) = document.get_mut("metadata").and_then(Value::as_object_mut)
                && meta.get("resourceVersion").and_then(Value::as_str) == current_rv
            {
                meta.remove("resourceVersion");
            }
            let (object, found) = codec::decode::<R>(document, validation)?;
            warnings = found;
            call.check_escalation(Some(current), &object)?;
            Ok(object)
        })
        .await?;
    Ok(written(StatusCode::OK, &updated, &warnings))
}

/// `delete`: one object, with DeleteOptions' preconditions.
async fn delete<R: Printable>(call: &Call<'_>, request: Request) -> Result<Response, ApiError> {
    let Call {
        namespace,
        name,
        params,
        now,
        ref registry,
        ..
    } = *call;
    let (options, dry_run) = read_delete_options(params, request).await?;
    let deleted = registry
        .delete::<R>(
            namespace,
            name,
            &options.preconditions.unwrap_or_default(),
            now,
            dry_run,
        )
        .await?;
    Ok(json_response(
        StatusCode::OK,
        &serde_json::to_value(&deleted).unwrap_or_default(),
    ))
}

/// A parsed PATCH body.
enum Patch {
    Merge(Value),
    Json(json_patch::Patch),
}

impl Patch {
    fn parse(content_type: Option<&str>, body: &[u8]) -> Result<Self, ApiError> {
        let essence = codec::media_type(content_type);
        let parse = |body: &[u8]| -> Result<Value, ApiError> {
            serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("couldn't decode the patch as JSON: {e}"))
            })
        };
        match essence.as_str() {
            "application/merge-patch+json" => {
                let value = parse(body)?;
                if !value.is_object() {
                    return Err(ApiError::bad_request("a merge patch must be a JSON object"));
                }
                Ok(Self::Merge(value))
            }
            "application/json-patch+json" => {
                let value = parse(body)?;
                serde_json::from_value(value)
                    .map(Self::Json)
                    .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))
            }
            other => Err(ApiError::unsupported_media_type(format!(
                "the body of the request was in an unknown format ({other}) - accepted media types include: application/json-patch+json, application/merge-patch+json"
            ))),
        }
    }

    /// A strategic merge patch on a kind whose lists all replace whole (the RBAC kinds:
    /// `rules` and `subjects` carry no merge key in kube): a JSON merge patch once the
    /// `$` directives kubectl adds are taken out.
    fn strategic(body: &[u8]) -> Result<Self, ApiError> {
        let mut value: Value = serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't decode the patch as JSON: {e}"))
        })?;
        if !value.is_object() {
            return Err(ApiError::bad_request(
                "a strategic merge patch must be a JSON object",
            ));
        }
        fn strip(value: &mut Value) {
            if let Value::Object(map) = value {
                map.retain(|key, _| !key.starts_with('$'));
                map.values_mut().for_each(strip);
            }
        }
        strip(&mut value);
        Ok(Self::Merge(value))
    }

    fn apply(&self, document: &mut Value) -> Result<(), ApiError> {
        match self {
            Self::Merge(patch) => {
                json_patch::merge(document, patch);
                Ok(())
            }
            Self::Json(patch) => json_patch::patch(document, patch)
                .map_err(|e| ApiError::invalid_patch(e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_types() {
        assert!(Patch::parse(Some("application/merge-patch+json"), b"{\"a\":1}").is_ok());
        assert!(
            Patch::parse(
                Some("application/json-patch+json"),
                b"[{\"op\":\"remove\",\"path\":\"/a\"}]"
            )
            .is_ok()
        );
        let smp = Patch::parse(Some("application/strategic-merge-patch+json"), b"{}")
            .err()
            .unwrap();
        assert_eq!(smp.code, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
}
