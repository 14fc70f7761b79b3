//! `/openapi/v2` as gnostic protobuf (`openapi.v2.Document`), the only form kubectl asks
//! for. kubectl 1.27 and 1.28 look in it for the `fieldValidation` parameter on each
//! kind's PATCH operation before they trust the server to validate; without it they
//! refuse to `apply` unless validation is turned off.
//!
//! Only paths and operations are served, not schema definitions, on purpose: with a
//! definition for a kind, kubectl's `apply` switches to strategic merge patch, which
//! (as for custom resources in kube-apiserver) is not accepted. Field docs come from
//! OpenAPI v3 (`kubectl explain` in kubectl 1.28+).
//!
//! Field numbers are those of gnostic's `openapiv2/OpenAPIv2.proto` (read from the
//! descriptor compiled into kubectl).

use std::sync::LazyLock;

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::get;
use bytes::Bytes;
use fedingress_api::rbac;
use fedingress_api::{Cluster, FederatedIngress, IngressClaim, IngressPool, Namespace, Resource};

/// The document, encoded once (when the router is built).
static DOCUMENT: LazyLock<Bytes> = LazyLock::new(|| Bytes::from(document()));

/// `/openapi/v2` (GET).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    LazyLock::force(&DOCUMENT);
    Router::new().route(
        "/openapi/v2",
        get(|| async {
            ([(http::header::CONTENT_TYPE, MEDIA_TYPE)], DOCUMENT.clone()).into_response()
        }),
    )
}

/// Content type of the response. kubectl asks for
/// `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, which Go's media type
/// parser cannot read back (the `@`), so the body is labelled as kube-openapi does.
pub const MEDIA_TYPE: &str = "application/octet-stream";

/// A minimal protobuf writer: just what the document needs.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.0.push((value as u8) | 0x80);
            value >>= 7;
        }
        self.0.push(value as u8);
    }

    fn bytes(&mut self, field: u32, bytes: &[u8]) -> &mut Self {
        self.varint(u64::from(field << 3 | 2));
        self.varint(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
        self
    }

    fn string(&mut self, field: u32, value: &str) -> &mut Self {
        self.bytes(field, value.as_bytes())
    }

    fn message(&mut self, field: u32, message: &Message) -> &mut Self {
        self.bytes(field, &message.0)
    }

    fn boolean(&mut self, field: u32, value: bool) -> &mut Self {
        self.varint(u64::from(field << 3));
        self.varint(u64::from(value));
        self
    }
}

fn built(f: impl FnOnce(&mut Message)) -> Message {
    let mut message = Message::default();
    f(&mut message);
    message
}

// Field numbers of the messages used.
const DOCUMENT_SWAGGER: u32 = 1;
const DOCUMENT_INFO: u32 = 2;
const DOCUMENT_PATHS: u32 = 8;
const INFO_TITLE: u32 = 1;
const INFO_VERSION: u32 = 2;
const PATHS_PATH: u32 = 2;
const NAMED_NAME: u32 = 1;
const NAMED_VALUE: u32 = 2;
const PATH_ITEM_GET: u32 = 2;
const PATH_ITEM_PUT: u32 = 3;
const PATH_ITEM_POST: u32 = 4;
const PATH_ITEM_DELETE: u32 = 5;
const PATH_ITEM_PATCH: u32 = 8;
const OPERATION_OPERATION_ID: u32 = 5;
const OPERATION_CONSUMES: u32 = 7;
const OPERATION_PARAMETERS: u32 = 8;
const OPERATION_RESPONSES: u32 = 9;
const OPERATION_VENDOR_EXTENSION: u32 = 13;
const PARAMETERS_ITEM_PARAMETER: u32 = 1;
const PARAMETER_NON_BODY: u32 = 2;
const NON_BODY_QUERY: u32 = 3;
const QUERY_IN: u32 = 2;
const QUERY_DESCRIPTION: u32 = 3;
const QUERY_NAME: u32 = 4;
const QUERY_UNIQUE_ITEMS: u32 = 20;
const QUERY_TYPE: u32 = 6;
const ANY_YAML: u32 = 2;
const RESPONSES_RESPONSE_CODE: u32 = 1;
const RESPONSE_VALUE_RESPONSE: u32 = 1;
const RESPONSE_DESCRIPTION: u32 = 1;

fn query_parameter(name: &str, description: &str) -> Message {
    let query = built(|m| {
        m.string(QUERY_IN, "query")
            .string(QUERY_DESCRIPTION, description)
            .string(QUERY_NAME, name)
            .string(QUERY_TYPE, "string")
            .boolean(QUERY_UNIQUE_ITEMS, true);
    });
    let non_body = built(|m| {
        m.message(NON_BODY_QUERY, &query);
    });
    let parameter = built(|m| {
        m.message(PARAMETER_NON_BODY, &non_body);
    });
    built(|m| {
        m.message(PARAMETERS_ITEM_PARAMETER, &parameter);
    })
}

fn operation<R: Resource>(id: &str, action: &str, writes: bool, patch: bool) -> Message {
    let gvk = format!(
        "group: {}\nkind: {}\nversion: {}\n",
        R::GROUP,
        R::KIND,
        R::VERSION
    );
    let ok = built(|m| {
        let response = built(|r| {
            r.string(RESPONSE_DESCRIPTION, "OK");
        });
        let value = built(|v| {
            v.message(RESPONSE_VALUE_RESPONSE, &response);
        });
        let named = built(|n| {
            n.string(NAMED_NAME, "200").message(NAMED_VALUE, &value);
        });
        m.message(RESPONSES_RESPONSE_CODE, &named);
    });
    built(|m| {
        m.string(OPERATION_OPERATION_ID, id);
        if patch {
            m.string(OPERATION_CONSUMES, "application/json-patch+json")
                .string(OPERATION_CONSUMES, "application/merge-patch+json");
            if R::GROUP == fedingress_api::rbac::GROUP || R::GROUP.is_empty() {
                m.string(OPERATION_CONSUMES, "application/strategic-merge-patch+json");
            }
        }
        if writes {
            m.message(
                OPERATION_PARAMETERS,
                &query_parameter("dryRun", "When present (All), nothing is persisted."),
            )
            .message(
                OPERATION_PARAMETERS,
                &query_parameter("fieldManager", "A name for the actor making the change."),
            )
            .message(
                OPERATION_PARAMETERS,
                &query_parameter(
                    "fieldValidation",
                    "How unknown fields are handled: Ignore, Warn (default) or Strict.",
                ),
            );
        }
        m.message(OPERATION_RESPONSES, &ok);
        for (name, yaml) in [
            ("x-kubernetes-action", format!("{action}\n")),
            ("x-kubernetes-group-version-kind", gvk.clone()),
        ] {
            let any = built(|a| {
                a.string(ANY_YAML, &yaml);
            });
            let named = built(|n| {
                n.string(NAMED_NAME, name).message(NAMED_VALUE, &any);
            });
            m.message(OPERATION_VENDOR_EXTENSION, &named);
        }
    })
}

fn add_paths<R: Resource>(paths: &mut Message) {
    let kind = R::KIND;
    let base = crate::openapi::api_base::<R>();
    let collection = if R::NAMESPACED {
        format!("{base}/namespaces/{{namespace}}/{}", R::PLURAL)
    } else {
        format!("{base}/{}", R::PLURAL)
    };
    let id = |verb: &str| {
        if R::GROUP == fedingress_api::rbac::GROUP {
            format!("{verb}RbacAuthorizationV1{kind}")
        } else if R::GROUP.is_empty() {
            format!("{verb}CoreV1{kind}")
        } else {
            format!("{verb}FedingressIoV1alpha1{kind}")
        }
    };
    let items = [
        (
            collection.clone(),
            built(|p| {
                p.message(
                    PATH_ITEM_GET,
                    &operation::<R>(&id("list"), "list", false, false),
                )
                .message(
                    PATH_ITEM_POST,
                    &operation::<R>(&id("create"), "post", true, false),
                );
            }),
        ),
        (
            format!("{collection}/{{name}}"),
            built(|p| {
                p.message(
                    PATH_ITEM_GET,
                    &operation::<R>(&id("read"), "get", false, false),
                )
                .message(
                    PATH_ITEM_PUT,
                    &operation::<R>(&id("replace"), "put", true, false),
                )
                .message(
                    PATH_ITEM_DELETE,
                    &operation::<R>(&id("delete"), "delete", false, false),
                )
                .message(
                    PATH_ITEM_PATCH,
                    &operation::<R>(&id("patch"), "patch", true, true),
                );
            }),
        ),
        (
            format!("{collection}/{{name}}/status"),
            built(|p| {
                p.message(
                    PATH_ITEM_GET,
                    &operation::<R>(&id("readStatus"), "get", false, false),
                )
                .message(
                    PATH_ITEM_PUT,
                    &operation::<R>(&id("replaceStatus"), "put", true, false),
                )
                .message(
                    PATH_ITEM_PATCH,
                    &operation::<R>(&id("patchStatus"), "patch", true, true),
                );
            }),
        ),
    ];
    // The RBAC kinds have no status subresource.
    let served = if R::GROUP == fedingress_api::rbac::GROUP {
        2
    } else {
        items.len()
    };
    for (path, item) in items.into_iter().take(served) {
        let named = built(|n| {
            n.string(NAMED_NAME, &path).message(NAMED_VALUE, &item);
        });
        paths.message(PATHS_PATH, &named);
    }
}

/// The encoded document.
pub fn document() -> Vec<u8> {
    let mut paths = Message::default();
    add_paths::<FederatedIngress>(&mut paths);
    add_paths::<Cluster>(&mut paths);
    add_paths::<IngressPool>(&mut paths);
    add_paths::<IngressClaim>(&mut paths);
    add_paths::<rbac::Role>(&mut paths);
    add_paths::<rbac::ClusterRole>(&mut paths);
    add_paths::<rbac::RoleBinding>(&mut paths);
    add_paths::<rbac::ClusterRoleBinding>(&mut paths);
    add_paths::<Namespace>(&mut paths);
    let info = built(|i| {
        i.string(INFO_TITLE, "fedingress")
            .string(INFO_VERSION, env!("CARGO_PKG_VERSION"));
    });
    built(|d| {
        d.string(DOCUMENT_SWAGGER, "2.0")
            .message(DOCUMENT_INFO, &info)
            .message(DOCUMENT_PATHS, &paths);
    })
    .0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_fields_encode_like_protobuf() {
        let mut m = Message::default();
        m.varint(300);
        assert_eq!(m.0, [0xac, 0x02]);
        let m = built(|m| {
            m.string(1, "2.0");
        });
        assert_eq!(m.0, [0x0a, 3, b'2', b'.', b'0']);
        let m = built(|m| {
            m.boolean(20, true);
        });
        assert_eq!(m.0, [0xa0, 0x01, 1]);
    }

    #[test]
    fn document_names_field_validation_on_patch() {
        let doc = document();
        let text = String::from_utf8_lossy(&doc);
        assert!(text.contains("fieldValidation"));
        assert!(text.contains("kind: FederatedIngress"));
        assert!(text.starts_with("\n\u{3}2.0"));
    }
}
