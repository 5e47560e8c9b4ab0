//! The `scale`, `serviceaccounts/{name}/token` and `pods/{name}/log` subresources.

use axum::body::Body;
use base64::Engine;
use http::{HeaderValue, Method, Response};
use serde_json::{Value, json};

use super::{Ctx, State, is_dry_run, json_or_yaml, parse_body, stored_object, write_options};
use crate::objects;
use crate::server::engine::{self, mstr, now};
use crate::server::error::ApiError;
use crate::server::json_response;
use crate::server::request;

pub(super) fn get_scale(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let obj = stored_object(state, ctx)?;
    Ok(json_response(200, &engine::scale_of(&ctx.info, &obj)))
}

/// PUT replaces the Scale (its resourceVersion a precondition); PATCH patches it (JSON patch,
/// else merge patch).
pub(super) fn write_scale(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let ns = ctx.namespace.clone().unwrap_or_default();
    let dry = is_dry_run(ctx)?;
    let manager = request::field_manager(&ctx.query, &ctx.headers);
    let body: Value = json_or_yaml(&ctx.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding body: {e}")))?;
    let put = ctx.method == Method::PUT;
    let opts = write_options(ctx, &manager, dry);
    let scale = engine::write_scale(state, &ctx.info, &ns, &name, &opts, put, |current| {
        if put {
            return Ok(body);
        }
        match request::content_type(&ctx.headers).as_str() {
            "application/json-patch+json" => objects::patch::json_patch(current, &body),
            _ => objects::patch::merge_patch(current, &body),
        }
        .map_err(|e| ApiError::bad_request(e.to_string()))
    })?;
    Ok(json_response(200, &scale))
}

/// The smallest `expirationSeconds` kube-apiserver accepts.
const MIN_TOKEN_SECONDS: i64 = 600;

pub(super) fn token_request(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let ns = ctx.namespace.clone().unwrap_or_default();
    let sa = stored_object(state, ctx)?;
    let mut req: Value = if ctx.body.is_empty() {
        json!({})
    } else {
        parse_body(ctx)?
    };
    let secs = req["spec"]["expirationSeconds"].as_i64().unwrap_or(3600);
    if secs < MIN_TOKEN_SECONDS {
        // kube-apiserver validates the TokenRequest as sent (no name): kubectl prints
        // `The TokenRequest "" is invalid: spec.expirationSeconds: ...`.
        let mut request_info = (*ctx.info).clone();
        request_info.group = "authentication.k8s.io".into();
        request_info.kind = "TokenRequest".into();
        return Err(ApiError::invalid_field(
            &request_info,
            "",
            "FieldValueInvalid",
            "spec.expirationSeconds",
            &format!("Invalid value: {secs}: may not specify a duration less than 10 minutes"),
        ));
    }
    let audiences = match req["spec"]["audiences"].as_array() {
        Some(a) if !a.is_empty() => Value::Array(a.clone()),
        _ => json!(["https://kubernetes.default.svc.cluster.local"]),
    };
    let issued = chrono::Utc::now();
    let exp = issued + chrono::Duration::seconds(secs);
    let claims = json!({"aud": audiences, "exp": exp.timestamp(), "iat": issued.timestamp(),
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": uuid::Uuid::new_v4().to_string(), "nbf": issued.timestamp(),
        "sub": format!("system:serviceaccount:{ns}:{name}"),
        "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": name, "uid": mstr(&sa, "uid")}}});
    req["kind"] = json!("TokenRequest");
    req["apiVersion"] = json!("authentication.k8s.io/v1");
    req["metadata"] = json!({"name": name, "namespace": ns, "creationTimestamp": now()});
    req["spec"]["audiences"] = audiences;
    req["spec"]["expirationSeconds"] = json!(secs);
    req["status"] = json!({"token": unsigned_jwt(&claims),
        "expirationTimestamp": exp.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)});
    Ok(json_response(201, &req))
}

/// A JWT with kube-apiserver's claims for a token without a bound object; it is not signed
/// (devcluster authenticates only its one `--token`), see README "Known differences".
fn unsigned_jwt(claims: &Value) -> String {
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    format!(
        "{}.{}.{}",
        b64(&json!({"alg":"none","typ":"JWT"})),
        b64(claims),
        "devcluster"
    )
}

/// pods/log: there is no kubelet, so answer like kube-apiserver does for pods it cannot reach.
pub(super) fn pod_log(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let pod = stored_object(state, ctx)?;
    let containers: Vec<String> = pod["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    match ctx.query.non_empty("container") {
        Some(c) if !containers.iter().any(|x| x == c) => {
            return Err(ApiError::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
        None if containers.len() > 1 => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            )));
        }
        _ => {}
    }
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        return Err(ApiError::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    let mut resp = Response::new(Body::empty());
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    Ok(resp)
}
