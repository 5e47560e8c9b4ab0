//! API errors, rendered as `metav1.Status` with kube-apiserver's codes, reasons and messages.

use axum::body::Body;
use http::{HeaderValue, Response, StatusCode, header};
use serde_json::{Value, json};

use crate::api::resource::ResourceInfo;
use crate::objects::schema::FieldError;

/// An API error, ready to be sent as a `metav1.Status`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code (also `code` in the body).
    pub code: u16,
    /// `reason`, e.g. `NotFound`.
    pub reason: &'static str,
    /// Human readable message.
    pub message: String,
    /// `details`, when the real server sends them.
    pub details: Option<Value>,
}

fn res_details(info: &ResourceInfo, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": info.plural});
    if !info.group.is_empty() {
        d["group"] = Value::String(info.group.clone());
    }
    d
}

impl ApiError {
    /// A bare error.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> ApiError {
        ApiError::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden on an object.
    pub fn forbidden(info: &ResourceInfo, name: &str, why: &str) -> ApiError {
        ApiError {
            details: Some(res_details(info, name)),
            ..ApiError::new(
                403,
                "Forbidden",
                format!("{} \"{name}\" is forbidden: {why}", info.qualified_plural()),
            )
        }
    }

    /// 404 for an unknown path or resource.
    pub fn unknown_path() -> ApiError {
        ApiError {
            details: Some(json!({})),
            ..ApiError::new(
                404,
                "NotFound",
                "the server could not find the requested resource",
            )
        }
    }

    /// 404 for a missing object.
    pub fn not_found(info: &ResourceInfo, name: &str) -> ApiError {
        ApiError {
            details: Some(res_details(info, name)),
            ..ApiError::new(
                404,
                "NotFound",
                format!("{} \"{name}\" not found", info.qualified_plural()),
            )
        }
    }

    /// 404 for a missing namespace (on create).
    pub fn namespace_not_found(ns: &str) -> ApiError {
        ApiError {
            details: Some(json!({"name": ns, "kind": "namespaces"})),
            ..ApiError::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
        }
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(message: impl Into<String>) -> ApiError {
        ApiError::new(406, "NotAcceptable", message)
    }

    /// 409 AlreadyExists.
    pub fn already_exists(info: &ResourceInfo, name: &str) -> ApiError {
        ApiError {
            details: Some(res_details(info, name)),
            ..ApiError::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", info.qualified_plural()),
            )
        }
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(info: &ResourceInfo, name: &str) -> ApiError {
        ApiError::conflict_msg(
            info,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict with a custom explanation.
    pub fn conflict_msg(info: &ResourceInfo, name: &str, why: &str) -> ApiError {
        ApiError {
            details: Some(res_details(info, name)),
            ..ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": {why}",
                    info.qualified_plural()
                ),
            )
        }
    }

    /// 410 Expired.
    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large() -> ApiError {
        ApiError::new(
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728",
        )
    }

    /// 415 UnsupportedMediaType for patches.
    pub fn unsupported_patch(content_type: &str) -> ApiError {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml \
                 (got {content_type})"
            ),
        )
    }

    /// 422 Invalid with field causes; `kind` is `Kind` or `Kind.group`.
    pub fn invalid(info: &ResourceInfo, name: &str, causes: &[FieldError]) -> ApiError {
        let qualified_kind = if info.group.is_empty() {
            info.kind.clone()
        } else {
            format!("{}.{}", info.kind, info.group)
        };
        let parts: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let joined = if parts.len() == 1 {
            parts.join("")
        } else {
            format!("[{}]", parts.join(", "))
        };
        let mut details = json!({"name": name, "kind": info.kind, "causes": causes.iter().map(|c| json!({
            "reason": c.reason, "message": c.message, "field": c.field})).collect::<Vec<_>>()});
        if !info.group.is_empty() {
            details["group"] = Value::String(info.group.clone());
        }
        ApiError {
            details: Some(details),
            ..ApiError::new(
                422,
                "Invalid",
                format!("{qualified_kind} \"{name}\" is invalid: {joined}"),
            )
        }
    }

    /// 422 Invalid with one cause.
    pub fn invalid_field(
        info: &ResourceInfo,
        name: &str,
        reason: &str,
        field: &str,
        message: &str,
    ) -> ApiError {
        ApiError::invalid(
            info,
            name,
            &[FieldError {
                reason: reason.to_string(),
                field: field.to_string(),
                message: message.to_string(),
            }],
        )
    }

    /// 500 InternalError.
    pub fn internal(message: impl std::fmt::Display) -> ApiError {
        ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
    }

    /// The `metav1.Status` body.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }

    /// The HTTP response.
    pub fn into_response(self) -> Response<Body> {
        let body = serde_json::to_vec(&self.status()).unwrap_or_default();
        let mut resp = Response::new(Body::from(body));
        *resp.status_mut() =
            StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        resp
    }
}

impl From<crate::Error> for ApiError {
    fn from(e: crate::Error) -> ApiError {
        ApiError::internal(e)
    }
}
