//! The HTTP layer of resource requests, as kube-apiserver's `endpoints/handlers`: per verb,
//! parse the request ([`Ctx`]), call the write engine ([`super::engine`]) or read the store,
//! render the response (object, Table, `PartialObjectMetadata`, Status). Reads live in
//! [`read`], writes in [`write`](mod@write), the scale, token and log subresources in
//! [`subresources`]; this module keeps the routing and the request decoding they share.

mod read;
mod subresources;
mod write;

use std::sync::Arc;

use axum::body::Body;
use http::{HeaderValue, Method, Response};
use serde_json::{Value, json};

use super::engine::{FieldValidation, WriteOptions, meta_mut, mstr, present};
use super::error::ApiError;
use super::request::{self, Output};
use super::{Ctx, State, json_response, table, watch};
use crate::store::{Obj, PartialMetadata};

/// Routes a resource request to its verb.
pub(crate) async fn dispatch(state: Arc<State>, ctx: Ctx) -> Result<Response<Body>, ApiError> {
    check_field_manager(&ctx)?;
    if ctx.sub.is_none() {
        check_verb_served(&ctx)?;
    }
    let writes = matches!(
        ctx.method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    let response = route(state.clone(), ctx).await;
    if writes {
        // Answered once what it wrote is durable (a failed write may have written some too:
        // a collection deleted in part).
        state.store.durable().await;
    }
    response
}

/// The verb's handler for `ctx`.
async fn route(state: Arc<State>, ctx: Ctx) -> Result<Response<Body>, ApiError> {
    match (&ctx.method, ctx.name.is_some(), ctx.sub.as_deref()) {
        (&Method::GET, false, None) => {
            if ctx.query.flag("watch") {
                watch::watch(state, ctx).await
            } else {
                read::list(&state, &ctx)
            }
        }
        (&Method::GET, true, None | Some("status")) => read::get(&state, &ctx),
        (&Method::GET, true, Some("scale")) if ctx.info.scale.is_some() => {
            subresources::get_scale(&state, &ctx)
        }
        (&Method::GET, true, Some("log")) if ctx.info.builtin && ctx.info.kind == "Pod" => {
            subresources::pod_log(&state, &ctx)
        }
        (&Method::POST, false, None) => write::create(&state, &ctx),
        (&Method::POST, true, Some("token")) if ctx.info.kind == "ServiceAccount" => {
            subresources::token_request(&state, &ctx)
        }
        (&Method::PUT, true, None | Some("status") | Some("finalize")) => {
            write::update(&state, &ctx)
        }
        (&Method::PATCH, true, None | Some("status")) => write::patch(&state, &ctx),
        (&Method::PUT | &Method::PATCH, true, Some("scale")) if ctx.info.scale.is_some() => {
            subresources::write_scale(&state, &ctx)
        }
        (&Method::DELETE, true, None) => write::delete(&state, &ctx),
        (&Method::DELETE, false, None) => write::delete_collection(&state, &ctx),
        (_, true, Some(s)) if !matches!(s, "status" | "scale" | "finalize" | "token" | "log") => {
            Err(ApiError::unknown_path())
        }
        (_, true, Some("status")) if !ctx.info.status_subresource => Err(ApiError::unknown_path()),
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// `fieldManager`: at most 128 printable characters.
fn check_field_manager(ctx: &Ctx) -> Result<(), ApiError> {
    match ctx.query.get("fieldManager") {
        Some(m) if m.chars().count() > 128 || m.chars().any(|c| c.is_control()) => {
            Err(ApiError::new(
                422,
                "Invalid",
                format!(
                    "CreateOptions.meta.k8s.io \"\" is invalid: fieldManager: Invalid value: \"{m}\": must be at most 128 printable characters"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// A verb on the main resource must be one the resource serves (a terminating CRD serves
/// fewer).
fn check_verb_served(ctx: &Ctx) -> Result<(), ApiError> {
    let verb = match (&ctx.method, ctx.name.is_some()) {
        (&Method::GET, false) if ctx.query.flag("watch") => "watch",
        (&Method::GET, false) => "list",
        (&Method::GET, true) => "get",
        (&Method::POST, _) => "create",
        (&Method::PUT, _) => "update",
        (&Method::PATCH, _) => "patch",
        (&Method::DELETE, false) => "deletecollection",
        (&Method::DELETE, true) => "delete",
        _ => "",
    };
    if ctx.info.verbs.iter().any(|v| v == verb) {
        return Ok(());
    }
    Err(ApiError::new(
        405,
        "MethodNotAllowed",
        format!("{verb} not allowed while custom resource definition is terminating"),
    ))
}

fn is_dry_run(ctx: &Ctx) -> Result<bool, ApiError> {
    match ctx.query.get("dryRun") {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::invalid_field(
            &ctx.info,
            "",
            "FieldValueNotSupported",
            "dryRun",
            &format!("Unsupported value: \"{other}\": supported values: \"All\""),
        )),
    }
}

/// The engine's options of a write by `manager` through this request.
fn write_options<'a>(ctx: &'a Ctx, manager: &'a str, dry_run: bool) -> WriteOptions<'a> {
    WriteOptions {
        manager,
        sub: ctx.sub.as_deref(),
        dry_run,
        field_validation: FieldValidation::from_param(ctx.query.get("fieldValidation")),
    }
}

/// Decodes a body that may be YAML. Clients (kube-rs, kubectl) send JSON even with a YAML
/// content type, and the JSON parser is several times cheaper than the YAML one, so JSON is
/// tried first; YAML (a superset) is the fallback and gives the error. YAML is read within
/// `atoll_yaml`'s bounds (flow nesting, alias expansion), so that a small hostile body cannot
/// hold a core for seconds or expand to gigabytes.
fn json_or_yaml(body: &[u8]) -> Result<Value, atoll_yaml::Error> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{')
        && let Ok(v) = serde_json::from_slice(body)
    {
        return Ok(v);
    }
    atoll_yaml::parse_slice(body)
}

/// The request body as an object (JSON, YAML or protobuf, by content type).
fn parse_body(ctx: &Ctx) -> Result<Value, ApiError> {
    let ct = request::content_type(&ctx.headers);
    if ct.contains("protobuf") {
        return super::protobuf::decode(&ctx.body).map_err(|e| {
            ApiError::bad_request(format!("couldn't decode the protobuf request body: {e}"))
        });
    }
    let v: Value = if ct.contains("yaml") {
        json_or_yaml(&ctx.body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; yaml parse error: {e}"))
        })?
    } else {
        serde_json::from_slice(&ctx.body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })?
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(
            "couldn't get version/kind; json parse error: not an object",
        ));
    }
    Ok(v)
}

/// Checks `apiVersion`/`kind` against the path (filling them when absent) and the namespace.
fn check_type_and_namespace(ctx: &Ctx, obj: &mut Value) -> Result<(), ApiError> {
    let av = ctx.info.api_version();
    match obj.get("apiVersion").and_then(Value::as_str) {
        Some(v) if !v.is_empty() && v != av => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({av})"
            )));
        }
        _ => obj["apiVersion"] = Value::String(av),
    }
    match obj.get("kind").and_then(Value::as_str) {
        Some(k) if !k.is_empty() && k != ctx.info.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                ctx.info.kind
            )));
        }
        _ => obj["kind"] = Value::String(ctx.info.kind.clone()),
    }
    let meta = meta_mut(obj);
    if !ctx.info.namespaced {
        meta.remove("namespace");
        return Ok(());
    }
    let url_ns = ctx.namespace.clone().unwrap_or_default();
    match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() && ns != url_ns => Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        )),
        _ => {
            meta.insert("namespace".into(), Value::String(url_ns));
            Ok(())
        }
    }
}

/// Fills an empty `metadata.name` with the one on the URL; refuses a different one.
fn check_name(obj: &mut Value, name: &str) -> Result<(), ApiError> {
    let body_name = mstr(obj, "name").to_string();
    if body_name.is_empty() {
        meta_mut(obj).insert("name".into(), Value::String(name.to_string()));
    } else if body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    Ok(())
}

/// Renders one object as the client asked (plain, metadata only or Table) with `Warning`
/// headers.
fn object_response(
    ctx: &Ctx,
    code: u16,
    obj: &Obj,
    warnings: &[String],
) -> Result<Response<Body>, ApiError> {
    let obj = present(&ctx.info, obj);
    let mut resp = match request::output(&ctx.headers) {
        Output::Plain => json_response(code, &*obj),
        Output::Metadata => json_response(code, &PartialMetadata(&obj)),
        Output::Table => json_response(
            code,
            &table::table(
                &ctx.info,
                std::slice::from_ref(&*obj),
                table::include_object(&ctx.query),
                json!({"resourceVersion": mstr(&obj, "resourceVersion")}),
            ),
        ),
    };
    add_warnings(&mut resp, warnings);
    Ok(resp)
}

fn add_warnings(resp: &mut Response<Body>, warnings: &[String]) {
    for w in warnings {
        let text = format!("299 - {}", Value::String(w.clone()));
        if let Ok(v) = HeaderValue::from_str(&text) {
            resp.headers_mut().append("warning", v);
        }
    }
}

/// Reads `ctx`'s object from the store (404 when absent).
fn stored_object(state: &State, ctx: &Ctx) -> Result<Obj, ApiError> {
    let name = ctx.name.as_deref().unwrap_or("");
    let ns = ctx.namespace.as_deref().unwrap_or("");
    state
        .store
        .get(&super::registry::storage_key(&ctx.info), ns, name)
        .ok_or_else(|| ApiError::not_found(&ctx.info, name))
}
