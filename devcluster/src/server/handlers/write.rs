//! create, update, patch, server-side apply, delete and deletecollection: each decodes the
//! request, calls the write engine and renders what it returns.

use axum::body::Body;
use http::Response;
use serde_json::{Value, json};

use super::{
    Ctx, State, check_name, check_type_and_namespace, is_dry_run, json_or_yaml, object_response,
    parse_body, write_options,
};
use crate::api::resource::ResourceInfo;
use crate::objects;
use crate::server::engine::{self, DeleteOpts, Deleted, mstr, present};
use crate::server::error::ApiError;
use crate::server::json_response;
use crate::server::request;
use crate::server::selector::Selectors;

pub(super) fn create(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    if ctx.info.namespaced && ctx.namespace.is_none() {
        return Err(ApiError::method_not_allowed());
    }
    let dry = is_dry_run(ctx)?;
    let mut obj = parse_body(ctx)?;
    check_type_and_namespace(ctx, &mut obj)?;
    let manager = request::field_manager(&ctx.query, &ctx.headers);
    let opts = write_options(ctx, &manager, dry);
    let (stored, warnings) = engine::create(state, &ctx.info, obj, &opts)?;
    object_response(ctx, 201, &stored, &warnings)
}

pub(super) fn update(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let ns = ctx.namespace.clone().unwrap_or_default();
    if ctx.sub.as_deref() == Some("finalize") && !(ctx.info.builtin && ctx.info.kind == "Namespace")
    {
        return Err(ApiError::unknown_path());
    }
    let dry = is_dry_run(ctx)?;
    let mut obj = parse_body(ctx)?;
    check_type_and_namespace(ctx, &mut obj)?;
    check_name(&mut obj, &name)?;
    let manager = request::field_manager(&ctx.query, &ctx.headers);
    let opts = write_options(ctx, &manager, dry);
    let (written, warnings) = engine::update(state, &ctx.info, &ns, &name, obj, &opts)?;
    object_response(ctx, 200, &written.obj, &warnings)
}

pub(super) fn patch(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let ns = ctx.namespace.clone().unwrap_or_default();
    let dry = is_dry_run(ctx)?;
    let ct = request::content_type(&ctx.headers);
    match ct.as_str() {
        "application/json-patch+json" | "application/merge-patch+json" => {}
        "application/strategic-merge-patch+json" if ctx.info.builtin => {}
        "application/apply-patch+yaml" | "application/apply-patch+json" => {
            return apply(state, ctx, dry);
        }
        other => return Err(ApiError::unsupported_patch(other)),
    }
    let patch = decode_patch(ctx, &ct)?;
    let manager = request::field_manager(&ctx.query, &ctx.headers);
    let opts = write_options(ctx, &manager, dry);
    let precondition_rv = patch
        .get("metadata")
        .and_then(|m| m.get("resourceVersion"))
        .and_then(Value::as_str);
    let (written, warnings) = engine::patch(
        state,
        &ctx.info,
        &ns,
        &name,
        precondition_rv,
        &opts,
        |current| apply_patch(ctx, &ct, current, &patch),
    )?;
    object_response(ctx, 200, &written.obj, &warnings)
}

/// The patch document of a non-apply patch (`force` is refused, JSON patches have at most
/// 10,000 operations).
fn decode_patch(ctx: &Ctx, ct: &str) -> Result<Value, ApiError> {
    if ctx.query.has("force") {
        return Err(ApiError::new(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
        ));
    }
    let patch: Value = serde_json::from_slice(&ctx.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    if ct == "application/json-patch+json" && patch.as_array().is_some_and(|a| a.len() > 10_000) {
        return Err(ApiError::new(
            413,
            "RequestEntityTooLarge",
            "The allowed maximum operations in a JSON patch is 10000, got more",
        ));
    }
    Ok(patch)
}

/// Applies `patch` (of content type `ct`) to `current`, the served form of the stored object;
/// the result must still be an object of this path's type and namespace.
fn apply_patch(ctx: &Ctx, ct: &str, current: &Value, patch: &Value) -> Result<Value, ApiError> {
    let result = match ct {
        "application/json-patch+json" => objects::patch::json_patch(current, patch),
        "application/merge-patch+json" => objects::patch::merge_patch(current, patch),
        _ => objects::patch::strategic_merge_patch(&ctx.info.group, &ctx.info.kind, current, patch),
    };
    let mut new = result.map_err(|e| match e {
        objects::patch::PatchError::Malformed(m) => ApiError::bad_request(m),
        objects::patch::PatchError::OperationFailed(_) => ApiError::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        ),
    })?;
    if !new.is_object() {
        return Err(ApiError::bad_request("the patch produced a non-object"));
    }
    check_type_and_namespace(ctx, &mut new)?;
    Ok(new)
}

fn apply(state: &State, ctx: &Ctx, dry: bool) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let ns = ctx.namespace.clone().unwrap_or_default();
    let Some(manager) = ctx.query.non_empty("fieldManager").map(str::to_string) else {
        return Err(ApiError::new(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    };
    let force = ctx.query.flag("force");
    let mut applied = decode_applied(ctx)?;
    check_type_and_namespace(ctx, &mut applied)?;
    check_name(&mut applied, &name)?;
    let opts = write_options(ctx, &manager, dry);
    let result = engine::apply(state, &ctx.info, &ns, &name, &applied, force, &opts)?;
    let code = if result.created { 201 } else { 200 };
    object_response(ctx, code, &result.obj, &result.warnings)
}

/// The applied configuration: YAML or JSON of this path's apiVersion and kind, without
/// managedFields.
fn decode_applied(ctx: &Ctx) -> Result<Value, ApiError> {
    let applied: Value = json_or_yaml(&ctx.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !applied.is_object() {
        return Err(ApiError::bad_request("error decoding YAML: not an object"));
    }
    let av = ctx.info.api_version();
    let got_av = applied
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    if got_av != av {
        return Err(ApiError::bad_request(format!(
            "Incorrect version specified in apply patch. Specified patch version: {got_av}, expected: {av}"
        )));
    }
    if applied.get("kind").and_then(Value::as_str) != Some(ctx.info.kind.as_str()) {
        return Err(ApiError::bad_request(format!(
            "the kind in the data does not match the expected kind ({})",
            ctx.info.kind
        )));
    }
    if applied
        .get("metadata")
        .and_then(|m| m.get("managedFields"))
        .is_some_and(|m| !m.is_null())
    {
        return Err(ApiError::bad_request("metadata.managedFields must be nil"));
    }
    Ok(applied)
}

/// Deletion options from the body and the query.
fn delete_opts(ctx: &Ctx) -> Result<DeleteOpts, ApiError> {
    let mut o = DeleteOpts {
        dry_run: is_dry_run(ctx)?,
        propagation: ctx.query.non_empty("propagationPolicy").map(str::to_string),
        ..DeleteOpts::default()
    };
    if !ctx.body.iter().all(u8::is_ascii_whitespace) {
        // client-go's typed clients (helm's release storage) send DeleteOptions as protobuf.
        let v: Value = if request::content_type(&ctx.headers).contains("protobuf") {
            crate::server::protobuf::decode(&ctx.body)
                .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?
        } else {
            serde_json::from_slice(&ctx.body)
                .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?
        };
        if let Some(p) = v.get("propagationPolicy").and_then(Value::as_str) {
            o.propagation = Some(p.to_string());
        }
        if let Some(orphan) = v.get("orphanDependents").and_then(Value::as_bool) {
            o.propagation = Some(if orphan { "Orphan" } else { "Background" }.to_string());
        }
        if let Some(d) = v.get("dryRun").and_then(Value::as_array)
            && d.iter().any(|x| x == "All")
        {
            o.dry_run = true;
        }
        o.precondition_uid = v["preconditions"]["uid"].as_str().map(str::to_string);
        o.precondition_rv = v["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
    }
    if let Some(p) = &o.propagation
        && !matches!(p.as_str(), "Background" | "Foreground" | "Orphan")
    {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{p}\": supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
            ),
        ));
    }
    Ok(o)
}

/// Kinds whose DELETE answers with the removed object rather than a Status.
fn returns_deleted_object(info: &ResourceInfo) -> bool {
    info.builtin
        && info.group.is_empty()
        && matches!(
            info.kind.as_str(),
            "Pod" | "ServiceAccount" | "Namespace" | "Node"
        )
}

pub(super) fn delete(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let ns = ctx.namespace.clone().unwrap_or_default();
    let opts = delete_opts(ctx)?;
    match engine::delete(state, &ctx.info, &ns, &name, &opts)? {
        Deleted::Pending(obj) => object_response(ctx, 200, &obj, &[]),
        Deleted::Removed(obj) if returns_deleted_object(&ctx.info) => {
            object_response(ctx, 200, &obj, &[])
        }
        Deleted::Removed(obj) => {
            let mut details =
                json!({"name": name, "kind": ctx.info.plural, "uid": mstr(&obj, "uid")});
            if !ctx.info.group.is_empty() {
                details["group"] = json!(ctx.info.group);
            }
            Ok(json_response(
                200,
                &json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success",
                    "details": details}),
            ))
        }
    }
}

pub(super) fn delete_collection(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let sel = Selectors::parse(&ctx.query, ctx.info.builtin)?;
    let opts = delete_opts(ctx)?;
    let (deleted, rv) = engine::delete_collection(
        state,
        &ctx.info,
        ctx.namespace.as_deref(),
        |o| sel.matches(o),
        &opts,
    )?;
    let items: Vec<Value> = deleted
        .iter()
        .map(|o| (*present(&ctx.info, o)).clone())
        .collect();
    Ok(json_response(
        200,
        &json!({"kind": format!("{}List", ctx.info.kind), "apiVersion": ctx.info.api_version(),
            "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
    ))
}
