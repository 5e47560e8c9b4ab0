//! Verb handlers: get, list, create, update, patch, delete, deletecollection, subresources.

use std::sync::Arc;

use axum::body::Body;
use base64::Engine;
use bytes::Bytes;
use http::{HeaderValue, Method, Response};
use serde_json::{Map, Value, json};

use super::error::ApiError;
use super::registry::{event_from_core, event_to_core, is_events_v1, storage_key};
use super::request::{self, Output};
use super::selector::{FieldSelector, LabelSelector};
use super::{Ctx, State, bytes_response, crd, json_response, table, watch};
use crate::api::resource::ResourceInfo;
use crate::objects;
use crate::objects::schema::FieldError;
use crate::store::{Obj, PartialMetadata, ResKey, Txn};

/// Current time, RFC 3339 seconds, UTC.
pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// `metadata.<field>` as a string (`""` when absent).
pub(crate) fn mstr<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `metadata` as a mutable map (created when missing; a non-object root becomes an object).
pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let root = ensure_object(obj);
    ensure_object(
        root.entry("metadata")
            .or_insert_with(|| Value::Object(Map::new())),
    )
}

/// Turns `v` into an object (keeping it when it already is one) and returns the map.
pub(crate) fn ensure_object(v: &mut Value) -> &mut Map<String, Value> {
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    match v {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

/// `metadata.finalizers` as strings.
pub(crate) fn finalizers(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
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

/// Routes a resource request to its verb.
pub(crate) async fn dispatch(state: Arc<State>, ctx: Ctx) -> Result<Response<Body>, ApiError> {
    let sub = ctx.sub.clone();
    if let Some(m) = ctx.query.get("fieldManager")
        && (m.chars().count() > 128 || m.chars().any(|c| c.is_control()))
    {
        return Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "CreateOptions.meta.k8s.io \"\" is invalid: fieldManager: Invalid value: \"{m}\": must be at most 128 printable characters"
            ),
        ));
    }
    if sub.is_none() {
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
        if !ctx.info.verbs.iter().any(|v| v == verb) {
            return Err(ApiError::new(
                405,
                "MethodNotAllowed",
                format!("{verb} not allowed while custom resource definition is terminating"),
            ));
        }
    }
    match (&ctx.method, ctx.name.is_some(), sub.as_deref()) {
        (&Method::GET, false, None) => {
            if ctx.query.flag("watch") {
                watch::watch(state, ctx).await
            } else {
                list(&state, &ctx)
            }
        }
        (&Method::GET, true, None | Some("status")) => get(&state, &ctx),
        (&Method::GET, true, Some("scale")) if ctx.info.scale.is_some() => get_scale(&state, &ctx),
        (&Method::GET, true, Some("log")) if ctx.info.builtin && ctx.info.kind == "Pod" => {
            pod_log(&state, &ctx)
        }
        (&Method::POST, false, None) => create(&state, &ctx),
        (&Method::POST, true, Some("token")) if ctx.info.kind == "ServiceAccount" => {
            token_request(&state, &ctx)
        }
        (&Method::PUT, true, None | Some("status") | Some("finalize")) => update(&state, &ctx),
        (&Method::PATCH, true, None | Some("status")) => patch(&state, &ctx),
        (&Method::PUT | &Method::PATCH, true, Some("scale")) if ctx.info.scale.is_some() => {
            write_scale(&state, &ctx)
        }
        (&Method::DELETE, true, None) => delete(&state, &ctx),
        (&Method::DELETE, false, None) => delete_collection(&state, &ctx),
        (_, true, Some(s)) if !matches!(s, "status" | "scale" | "finalize" | "token" | "log") => {
            Err(ApiError::unknown_path())
        }
        (_, true, Some("status")) if !ctx.info.status_subresource => Err(ApiError::unknown_path()),
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// The object as served through `info`'s version (apiVersion and kind set).
pub(crate) fn present(info: &ResourceInfo, obj: &Obj) -> Obj {
    if is_events_v1(info) && obj.get("apiVersion").and_then(Value::as_str) == Some("v1") {
        return Arc::new(event_from_core((**obj).clone()));
    }
    if obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_some_and(|av| api_version_is(info, av))
        && obj.get("kind").and_then(Value::as_str) == Some(info.kind.as_str())
    {
        return obj.clone();
    }
    let av = info.api_version();
    let mut v = (**obj).clone();
    if let Some(m) = v.as_object_mut() {
        m.insert("apiVersion".into(), Value::String(av));
        m.insert("kind".into(), Value::String(info.kind.clone()));
    }
    Arc::new(v)
}

/// Whether `av` is `info`'s apiVersion (without allocating).
pub(crate) fn api_version_is(info: &ResourceInfo, av: &str) -> bool {
    if info.group.is_empty() {
        return av == info.version;
    }
    av.len() == info.group.len() + 1 + info.version.len()
        && av.starts_with(info.group.as_str())
        && av.ends_with(info.version.as_str())
        && av.as_bytes().get(info.group.len()) == Some(&b'/')
}

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

fn get(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.as_deref().unwrap_or("");
    let ns = ctx.namespace.as_deref().unwrap_or("");
    let obj = state
        .store
        .get(&storage_key(&ctx.info), ns, name)
        .ok_or_else(|| ApiError::not_found(&ctx.info, name))?;
    object_response(ctx, 200, &obj, &[])
}

// ---------------------------------------------------------------------------------------------
// list

fn encode_continue(rv: u64, next: &(String, String)) -> String {
    let raw = json!({"rv": rv, "ns": next.0, "name": next.1}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

fn decode_continue(token: &str) -> Result<(u64, (String, String)), ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token}"));
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    Ok((
        v["rv"].as_u64().ok_or_else(bad)?,
        (
            v["ns"].as_str().ok_or_else(bad)?.to_string(),
            v["name"].as_str().ok_or_else(bad)?.to_string(),
        ),
    ))
}

/// Parsed selectors of a list or watch.
pub(crate) struct Selectors {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Selectors {
    pub(crate) fn parse(ctx: &Ctx) -> Result<Selectors, ApiError> {
        let labels = LabelSelector::parse(ctx.query.get("labelSelector").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = FieldSelector::parse(
            ctx.query.get("fieldSelector").unwrap_or(""),
            ctx.info.builtin,
        )
        .map_err(ApiError::bad_request)?;
        Ok(Selectors { labels, fields })
    }

    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

fn validate_list_options(ctx: &Ctx, watch: bool) -> Result<(), ApiError> {
    let rv = ctx.query.non_empty("resourceVersion");
    let rvm = ctx.query.non_empty("resourceVersionMatch");
    let invalid = |m: &str| {
        ApiError::new(
            422,
            "Invalid",
            format!("ListOptions.meta.k8s.io \"\" is invalid: {m}"),
        )
    };
    if let Some(m) = rvm {
        if rv.is_none() {
            return Err(invalid(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if m != "Exact" && m != "NotOlderThan" {
            return Err(invalid(&format!(
                "resourceVersionMatch: Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\""
            )));
        }
        if m == "Exact" && rv == Some("0") {
            return Err(invalid(
                "resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if !watch && ctx.query.has("sendInitialEvents") {
        return Err(invalid(
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
        ));
    }
    if let Some(v) = rv
        && v.parse::<u64>().is_err()
    {
        return Err(ApiError::bad_request(format!(
            "invalid resource version: {v}"
        )));
    }
    Ok(())
}

fn list(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    validate_list_options(ctx, false)?;
    let sel = Selectors::parse(ctx)?;
    let limit: usize = ctx
        .query
        .non_empty("limit")
        .and_then(|l| l.parse::<i64>().ok())
        .map(|l| l.max(0) as usize)
        .unwrap_or(0);
    let (first_rv, after) = match ctx.query.non_empty("continue") {
        Some(t) => {
            let (rv, key) = decode_continue(t)?;
            (Some(rv), Some(key))
        }
        None => (None, None),
    };
    let key = storage_key(&ctx.info);
    let page = state
        .store
        .list_page(&key, ctx.namespace.as_deref(), after, limit, &|o| {
            sel.matches(o)
        });
    // Every page of a paginated list reports the RV of the first page, so that a watch
    // started from it misses nothing that changed while the pages were read (the pages are
    // not a snapshot, so such changes may be replayed to the watch; that is harmless).
    let list_rv = first_rv.unwrap_or(page.rv).min(page.rv);
    let mut list_meta = json!({"resourceVersion": list_rv.to_string()});
    if let Some(next) = &page.next {
        list_meta["continue"] = Value::String(encode_continue(list_rv, next));
        if page.remaining > 0 {
            list_meta["remainingItemCount"] = json!(page.remaining);
        }
    }
    match request::output(&ctx.headers) {
        Output::Table => {
            let objs: Vec<Value> = page
                .items
                .iter()
                .map(|o| (*present(&ctx.info, o)).clone())
                .collect();
            Ok(json_response(
                200,
                &table::table(
                    &ctx.info,
                    &objs,
                    table::include_object(&ctx.query),
                    list_meta,
                ),
            ))
        }
        Output::Metadata => {
            #[derive(serde::Serialize)]
            #[serde(rename_all = "camelCase")]
            struct PartialList<'a> {
                kind: &'static str,
                api_version: &'static str,
                metadata: Value,
                items: Vec<PartialMetadata<'a>>,
            }
            Ok(json_response(
                200,
                &PartialList {
                    kind: "PartialObjectMetadataList",
                    api_version: "meta.k8s.io/v1",
                    metadata: list_meta,
                    items: page.items.iter().map(|o| PartialMetadata(o)).collect(),
                },
            ))
        }
        Output::Plain => {
            let mut buf = Vec::with_capacity(64 + page.items.len() * 512);
            buf.extend_from_slice(b"{\"kind\":");
            let head = json!({"kind": format!("{}List", ctx.info.kind)});
            let _ = serde_json::to_writer(&mut buf, &head["kind"]);
            buf.extend_from_slice(b",\"apiVersion\":");
            let _ = serde_json::to_writer(&mut buf, &ctx.info.api_version());
            buf.extend_from_slice(b",\"metadata\":");
            let _ = serde_json::to_writer(&mut buf, &list_meta);
            buf.extend_from_slice(b",\"items\":[");
            for (i, item) in page.items.iter().enumerate() {
                if i > 0 {
                    buf.push(b',');
                }
                let _ = serde_json::to_writer(&mut buf, &*present(&ctx.info, item));
            }
            buf.extend_from_slice(b"]}");
            Ok(bytes_response(200, Bytes::from(buf)))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// create / update / patch shared pieces

/// Decodes a body that may be YAML. Clients (kube-rs, kubectl) send JSON even with a YAML
/// content type, and the JSON parser is several times cheaper than the YAML one, so JSON is
/// tried first; YAML (a superset) is the fallback and gives the error.
fn json_or_yaml(body: &[u8]) -> Result<Value, serde_yaml::Error> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{')
        && let Ok(v) = serde_json::from_slice(body)
    {
        return Ok(v);
    }
    serde_yaml::from_slice(body)
}

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
    if ctx.info.namespaced {
        let url_ns = ctx.namespace.clone().unwrap_or_default();
        match meta.get("namespace").and_then(Value::as_str) {
            Some(ns) if !ns.is_empty() && ns != url_ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {
                meta.insert("namespace".into(), Value::String(url_ns));
            }
        }
    } else {
        meta.remove("namespace");
    }
    Ok(())
}

/// Converts an object written through `info` to its stored form.
fn to_storage(info: &ResourceInfo, obj: Value) -> Value {
    if is_events_v1(info) {
        event_to_core(obj)
    } else {
        obj
    }
}

fn name_rule(info: &ResourceInfo) -> objects::validate::NameRule {
    use objects::validate::NameRule;
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Namespace") => NameRule::Label,
        ("", "Service") => NameRule::Dns1035Label,
        _ => NameRule::Subdomain,
    }
}

fn validate_metadata(info: &ResourceInfo, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let name = mstr(obj, "name");
    if name.is_empty() {
        errs.push(FieldError {
            reason: "FieldValueRequired".into(),
            field: "metadata.name".into(),
            message: "Required value: name or generateName is required".into(),
        });
    } else if let Some(msg) = objects::validate::validate_name(name, name_rule(info)) {
        errs.push(FieldError {
            reason: "FieldValueInvalid".into(),
            field: "metadata.name".into(),
            message: format!("Invalid value: \"{name}\": {msg}"),
        });
    }
    if let Some(ann) = obj
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
    {
        let size: usize = ann
            .iter()
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if size > 256 * 1024 {
            errs.push(FieldError {
                reason: "FieldValueTooLong".into(),
                field: "metadata.annotations".into(),
                message: "Too long: must have at most 262144 bytes".into(),
            });
        }
    }
    if let Some(refs) = obj
        .get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
    {
        let controllers = refs.iter().filter(|r| r["controller"] == true).count();
        if controllers > 1 {
            errs.push(FieldError {
                reason: "FieldValueInvalid".into(),
                field: "metadata.ownerReferences".into(),
                message: "Invalid value: []v1.OwnerReference: Only one reference can have Controller set to true".into(),
            });
        }
        for (i, r) in refs.iter().enumerate() {
            for f in ["apiVersion", "kind", "name", "uid"] {
                if r[f].as_str().is_none_or(str::is_empty) {
                    errs.push(FieldError {
                        reason: "FieldValueRequired".into(),
                        field: format!("metadata.ownerReferences[{i}].{f}"),
                        message: "Required value".into(),
                    });
                }
            }
        }
    }
    if info.builtin && info.group.is_empty() && matches!(info.kind.as_str(), "ConfigMap" | "Secret")
    {
        let size: usize = ["data", "binaryData"]
            .iter()
            .filter_map(|f| obj.get(*f).and_then(Value::as_object))
            .flat_map(|m| m.iter())
            .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
            .sum();
        if size > 1024 * 1024 {
            errs.push(FieldError {
                reason: "FieldValueTooLong".into(),
                field: String::new(),
                message: format!(
                    "Too long: must have at most 1048576 bytes (data of a {})",
                    info.kind
                ),
            });
        }
    }
    if let Some(labels) = obj
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
    {
        for (field, message) in objects::validate::validate_labels(labels) {
            errs.push(FieldError {
                reason: "FieldValueInvalid".into(),
                field,
                message,
            });
        }
    }
    if info.builtin && info.kind == "Event" {
        errs.extend(event_namespace_error(obj));
    }
    errs
}

/// kube-apiserver's check that an Event lives where the object it is about does (either API;
/// the message always says `involvedObject`): an Event about a cluster-scoped object belongs in
/// `default` (also `kube-system` for an Event with `eventTime`, the events.k8s.io form); one
/// without `eventTime` about a namespaced object belongs in that object's namespace.
fn event_namespace_error(obj: &Value) -> Option<FieldError> {
    let event_ns = mstr(obj, "namespace");
    let target = obj
        .get("involvedObject")
        .or_else(|| obj.get("regarding"))
        .unwrap_or(&Value::Null);
    let target_ns = target
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let new_style = obj.get("eventTime").is_some_and(|t| !t.is_null());
    let ok = match (new_style, target_ns.is_empty()) {
        (false, true) => event_ns.is_empty() || event_ns == "default",
        (false, false) => event_ns == target_ns,
        (true, true) => event_ns == "default" || event_ns == "kube-system",
        (true, false) => true,
    };
    (!ok).then(|| FieldError {
        reason: "FieldValueInvalid".into(),
        field: "involvedObject.namespace".into(),
        message: format!("Invalid value: \"{target_ns}\": does not match event.namespace"),
    })
}

/// Where a write comes from, for CR field validation wording.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WriteKind {
    CreateOrUpdate,
    Patch,
}

/// CR schema handling: prune, default, validate. Returns warnings for pruned fields.
fn admit_custom(ctx: &Ctx, obj: &mut Value, write: WriteKind) -> Result<Vec<String>, ApiError> {
    let Some(schema) = ctx.info.schema.as_ref() else {
        return Ok(Vec::new());
    };
    let name = mstr(obj, "name").to_string();
    let pruned = objects::schema::prune(obj, schema);
    let mode = ctx.query.get("fieldValidation").unwrap_or("Warn");
    let mut warnings = Vec::new();
    if !pruned.is_empty() {
        match mode {
            "Strict" => {
                let list = pruned
                    .iter()
                    .map(|p| format!("unknown field \"{p}\""))
                    .collect::<Vec<_>>()
                    .join(", ");
                return Err(match write {
                    WriteKind::CreateOrUpdate => ApiError::bad_request(format!(
                        "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {list}",
                        ctx.info.kind, ctx.info.version, ctx.info.kind
                    )),
                    WriteKind::Patch => ApiError::invalid_field(
                        &ctx.info,
                        &name,
                        "FieldValueInvalid",
                        "patch",
                        &format!("Invalid value: \"patch\": strict decoding error: {list}"),
                    ),
                });
            }
            "Ignore" => {}
            _ => {
                warnings = pruned
                    .iter()
                    .map(|p| format!("unknown field \"{p}\""))
                    .collect();
            }
        }
    }
    objects::schema::apply_defaults(obj, schema);
    let errs = objects::schema::validate(obj, schema);
    if !errs.is_empty() {
        return Err(ApiError::invalid(&ctx.info, &name, &errs));
    }
    Ok(warnings)
}

const GENERATE_CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

fn generate_name(base: &str) -> String {
    use rand::Rng;
    let base: String = base.chars().take(58).collect();
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| GENERATE_CHARS[rng.random_range(0..GENERATE_CHARS.len())] as char)
        .collect();
    format!("{base}{suffix}")
}

/// Compares two objects ignoring `resourceVersion` and managedFields timestamps.
fn same_object(a: &Value, b: &Value) -> bool {
    fn strip(v: &Value) -> Value {
        let mut v = v.clone();
        if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("resourceVersion");
            if let Some(mf) = m.get_mut("managedFields").and_then(Value::as_array_mut) {
                for e in mf {
                    if let Some(e) = e.as_object_mut() {
                        e.remove("time");
                    }
                }
            }
        }
        v
    }
    strip(a) == strip(b)
}

/// Whether anything but metadata (and status, with a status subresource) differs.
fn spec_changed(info: &ResourceInfo, old: &Value, new: &Value) -> bool {
    let (Some(o), Some(n)) = (old.as_object(), new.as_object()) else {
        return old != new;
    };
    let skip = |k: &str| {
        k == "metadata"
            || k == "apiVersion"
            || k == "kind"
            || (info.status_subresource && k == "status")
    };
    let ok: Vec<_> = o.iter().filter(|(k, _)| !skip(k)).collect();
    let nk: Vec<_> = n.iter().filter(|(k, _)| !skip(k)).collect();
    if ok.len() != nk.len() {
        return true;
    }
    ok.iter().any(|(k, v)| n.get(k.as_str()) != Some(v))
}

/// Sets the server-owned fields of a new object.
fn init_created(info: &ResourceInfo, obj: &mut Value, now: &str) {
    let meta = meta_mut(obj);
    meta.insert(
        "uid".into(),
        Value::String(uuid::Uuid::new_v4().to_string()),
    );
    meta.insert("creationTimestamp".into(), Value::String(now.to_string()));
    meta.remove("deletionTimestamp");
    meta.remove("deletionGracePeriodSeconds");
    meta.remove("selfLink");
    meta.remove("resourceVersion");
    if info.has_generation {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    if info.status_subresource
        && !(info.builtin && info.kind == "Node")
        && let Some(o) = obj.as_object_mut()
    {
        o.remove("status");
    }
    kind_defaults_on_create(info, obj);
}

fn kind_defaults_on_create(info: &ResourceInfo, obj: &mut Value) {
    if !info.builtin {
        return;
    }
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Namespace") => {
            let name = mstr(obj, "name").to_string();
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
            let meta = meta_mut(obj);
            let labels = meta.entry("labels").or_insert_with(|| json!({}));
            if let Some(l) = labels.as_object_mut() {
                l.insert("kubernetes.io/metadata.name".into(), Value::String(name));
            }
        }
        ("", "Service") => {
            if obj["spec"]["type"].is_null() {
                obj["spec"]["type"] = json!("ClusterIP");
            }
            if obj["spec"]["clusterIP"].is_null() && obj["spec"]["type"] != json!("ExternalName") {
                use rand::Rng;
                let mut rng = rand::rng();
                let ip = format!(
                    "10.96.{}.{}",
                    rng.random_range(0..=255u8),
                    rng.random_range(2..=254u8)
                );
                obj["spec"]["clusterIP"] = json!(ip);
                obj["spec"]["clusterIPs"] = json!([ip]);
            }
        }
        ("", "Pod") => {
            obj["status"] = json!({"phase": "Pending"});
        }
        ("apps", kind @ ("Deployment" | "StatefulSet" | "ReplicaSet" | "DaemonSet")) => {
            let spec = ensure_object(&mut obj["spec"]);
            if kind != "DaemonSet" {
                spec.entry("replicas").or_insert(json!(1));
            }
            match kind {
                "Deployment" => {
                    spec.entry("strategy")
                        .or_insert(json!({"type": "RollingUpdate",
                        "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}}));
                    spec.entry("revisionHistoryLimit").or_insert(json!(10));
                    spec.entry("progressDeadlineSeconds").or_insert(json!(600));
                }
                "StatefulSet" => {
                    spec.entry("updateStrategy").or_insert(
                        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}),
                    );
                    spec.entry("podManagementPolicy")
                        .or_insert(json!("OrderedReady"));
                }
                "DaemonSet" => {
                    spec.entry("updateStrategy")
                        .or_insert(json!({"type": "RollingUpdate",
                        "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}}));
                }
                _ => {}
            }
        }
        ("batch", "Job") => {
            for f in ["completions", "parallelism"] {
                if obj["spec"][f].is_null() {
                    obj["spec"][f] = json!(1);
                }
            }
        }
        _ => {}
    }
    secret_string_data(info, obj);
}

/// Secrets: `stringData` is write-only and merged into `data` (base64); `type` defaults to
/// `Opaque`.
fn secret_string_data(info: &ResourceInfo, obj: &mut Value) {
    if !(info.builtin && info.group.is_empty() && info.kind == "Secret") {
        return;
    }
    let Some(o) = obj.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(sd)) = o.remove("stringData") {
        let data = o.entry("data").or_insert_with(|| json!({}));
        if !data.is_object() {
            *data = json!({});
        }
        if let Some(d) = data.as_object_mut() {
            for (k, v) in sd {
                let text = match v {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                d.insert(
                    k,
                    Value::String(base64::engine::general_purpose::STANDARD.encode(text)),
                );
            }
        }
    }
    if o.get("type").is_none_or(Value::is_null) {
        o.insert("type".into(), json!("Opaque"));
    }
}

/// Copies the immutable and server-owned metadata of `old` into `new`.
fn carry_metadata(info: &ResourceInfo, old: &Value, new: &mut Value) {
    let old_meta = old.get("metadata").cloned().unwrap_or(json!({}));
    let meta = meta_mut(new);
    for f in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "name",
        "namespace",
        "generation",
        "resourceVersion",
    ] {
        match old_meta.get(f) {
            Some(v) => {
                meta.insert(f.into(), v.clone());
            }
            None => {
                meta.remove(f);
            }
        }
    }
    meta.remove("selfLink");
    if info.builtin && info.group.is_empty() && info.kind == "Namespace" {
        let name = mstr(old, "name").to_string();
        let meta = meta_mut(new);
        let labels = meta.entry("labels").or_insert_with(|| json!({}));
        if let Some(l) = labels.as_object_mut() {
            l.insert("kubernetes.io/metadata.name".into(), Value::String(name));
        }
    }
}

/// How managed fields are recorded for a write.
pub(crate) enum Manager<'a> {
    /// A non-apply write by this manager.
    Update(&'a str),
    /// Already recorded by server-side apply.
    Applied,
    /// Internal write by devcluster (controllers); recorded under this name.
    Internal(&'a str),
}

/// Outcome of a write.
pub(crate) struct Written {
    pub obj: Obj,
}

/// The common tail of update, patch and apply: keeps immutable metadata, enforces finalizer
/// and status rules, bumps generation, skips no-ops, stores.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish_update(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    old: &Obj,
    new: Value,
    sub: Option<&str>,
    manager: Manager<'_>,
    dry_run: bool,
) -> Result<Written, ApiError> {
    let new = prepare_update(info, old, new, sub, manager)?;
    commit_update(state, txn, info, old, new, dry_run)
}

/// The part of an update that needs only the old object, not the store: immutable metadata,
/// finalizer and status rules, validation, managedFields, generation. Done before the store
/// lock is taken (see [`optimistic`]).
pub(crate) fn prepare_update(
    info: &ResourceInfo,
    old: &Obj,
    mut new: Value,
    sub: Option<&str>,
    manager: Manager<'_>,
) -> Result<Value, ApiError> {
    let name = mstr(old, "name").to_string();
    carry_metadata(info, old, &mut new);
    // Subresource rules.
    match sub {
        Some("status") => {
            let status = new.get("status").cloned();
            let mut merged = (**old).clone();
            match status {
                Some(s) => merged["status"] = s,
                None => {
                    if let Some(o) = merged.as_object_mut() {
                        o.remove("status");
                    }
                }
            }
            if let Some(mf) = new.get("metadata").and_then(|m| m.get("managedFields")) {
                meta_mut(&mut merged).insert("managedFields".into(), mf.clone());
            }
            new = merged;
        }
        Some("finalize") => {
            let spec = new.get("spec").cloned();
            let mut merged = (**old).clone();
            if let Some(s) = spec {
                merged["spec"] = s;
            }
            new = merged;
        }
        _ => {
            if info.status_subresource {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        if let Some(o) = new.as_object_mut() {
                            o.remove("status");
                        }
                    }
                }
            }
            if info.builtin && info.group.is_empty() && info.kind == "Namespace" {
                new["spec"] = old.get("spec").cloned().unwrap_or(json!({}));
            }
        }
    }
    // No new finalizers once deleting.
    if !mstr(old, "deletionTimestamp").is_empty() {
        let before = finalizers(old);
        let added: Vec<String> = finalizers(&new)
            .into_iter()
            .filter(|f| !before.contains(f))
            .collect();
        if !added.is_empty() {
            return Err(ApiError::invalid_field(
                info,
                &name,
                "FieldValueForbidden",
                "metadata.finalizers",
                &format!(
                    "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    added
                        .iter()
                        .map(|f| format!("{f:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    if info.builtin && info.group == "apiextensions.k8s.io" {
        crd::prepare(info, &mut new, Some(old))?;
    }
    secret_string_data(info, &mut new);
    let errs = validate_metadata(info, &new);
    if !errs.is_empty() {
        return Err(ApiError::invalid(info, &name, &errs));
    }
    let now = now();
    match manager {
        Manager::Update(m) | Manager::Internal(m) => {
            objects::apply::record_update(Some(old), &mut new, m, sub, &now)
        }
        Manager::Applied => {}
    }
    if info.has_generation && spec_changed(info, old, &new) {
        let g = old
            .get("metadata")
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        meta_mut(&mut new).insert("generation".into(), json!(g + 1));
    }
    Ok(new)
}

/// Stores a prepared update of `old` (which must still be the stored object): skips no-ops,
/// completes a deletion whose last finalizer went, runs the write hooks.
pub(crate) fn commit_update(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    old: &Obj,
    new: Value,
    dry_run: bool,
) -> Result<Written, ApiError> {
    let name = mstr(old, "name");
    if same_object(old, &new) {
        return Ok(Written { obj: old.clone() });
    }
    if dry_run {
        return Ok(Written { obj: Arc::new(new) });
    }
    let key = storage_key(info);
    let deleting = !mstr(&new, "deletionTimestamp").is_empty();
    let is_namespace = info.builtin && info.group.is_empty() && info.kind == "Namespace";
    let spec_finalizers_empty = new["spec"]["finalizers"]
        .as_array()
        .is_none_or(|a| a.is_empty());
    if deleting && finalizers(&new).is_empty() && (!is_namespace || spec_finalizers_empty) {
        let uid = mstr(&new, "uid").to_string();
        let ns = mstr(&new, "namespace").to_string();
        // Store the final state first so the DELETED event carries it.
        txn.put(&key, new);
        let removed = txn
            .remove(&key, &ns, name)
            .ok_or_else(|| ApiError::internal("object vanished"))?;
        state.removed(&uid);
        after_remove(state, info, &removed);
        return Ok(Written { obj: removed });
    }
    let stored = txn.put(&key, new);
    after_write(state, txn, info, &stored);
    Ok(Written { obj: stored })
}

/// Hooks after an object was stored.
fn after_write(state: &State, txn: &Txn<'_>, info: &ResourceInfo, obj: &Obj) {
    // A dependent whose owner does not exist (any more) is garbage, as for the real GC.
    for r in obj["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(uid) = r["uid"].as_str()
            && txn.by_uid(uid).is_none()
        {
            state.removed(uid);
        }
    }
    if info.builtin && info.group == "apiextensions.k8s.io" {
        crd::register(state, obj);
    }
    if !mstr(obj, "deletionTimestamp").is_empty() {
        state.wake();
    }
}

/// Hooks after an object was removed.
pub(crate) fn after_remove(state: &State, info: &ResourceInfo, obj: &Obj) {
    if info.builtin && info.group == "apiextensions.k8s.io" {
        state.registry.write().remove_crd(mstr(obj, "name"));
    }
    state.wake();
}

fn check_namespace_writable(
    txn: &Txn<'_>,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
) -> Result<(), ApiError> {
    if !info.namespaced {
        return Ok(());
    }
    let nskey = ResKey::new("", "namespaces");
    match txn.get(&nskey, "", ns) {
        None => Err(ApiError::namespace_not_found(ns)),
        Some(n) if !mstr(&n, "deletionTimestamp").is_empty() => {
            let mut e = ApiError::forbidden(
                info,
                name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            );
            if let Some(d) = e.details.as_mut() {
                d["causes"] = json!([{"reason":"NamespaceTerminating",
                    "message": format!("namespace {ns} is being terminated"),
                    "field":"metadata.namespace"}]);
            }
            Err(e)
        }
        Some(_) => Ok(()),
    }
}

/// Stores a new object (create, or apply that creates). Returns the stored object.
#[allow(clippy::too_many_arguments)]
pub(crate) fn store_new(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    mut obj: Value,
    manager: Manager<'_>,
    dry_run: bool,
) -> Result<Obj, ApiError> {
    prepare_new(info, &mut obj, manager)?;
    insert_new(state, txn, info, obj, dry_run)
}

/// The part of a create that needs no stored state (server-owned fields, CRD status,
/// managedFields): done before the store lock is taken.
pub(crate) fn prepare_new(
    info: &ResourceInfo,
    obj: &mut Value,
    manager: Manager<'_>,
) -> Result<(), ApiError> {
    let now = now();
    init_created(info, obj, &now);
    if info.builtin && info.group == "apiextensions.k8s.io" {
        crd::prepare(info, obj, None)?;
    }
    match manager {
        Manager::Update(m) | Manager::Internal(m) => {
            objects::apply::record_update(None, obj, m, None, &now)
        }
        Manager::Applied => {}
    }
    Ok(())
}

/// Stores a prepared new object: name generation, validation, namespace checks, conflicts.
pub(crate) fn insert_new(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    mut obj: Value,
    dry_run: bool,
) -> Result<Obj, ApiError> {
    let generate = mstr(&obj, "name").is_empty() && !mstr(&obj, "generateName").is_empty();
    let key = storage_key(info);
    let ns = mstr(&obj, "namespace").to_string();
    let mut attempts = 0;
    loop {
        if generate {
            let base = mstr(&obj, "generateName").to_string();
            meta_mut(&mut obj).insert("name".into(), Value::String(generate_name(&base)));
        }
        let name = mstr(&obj, "name").to_string();
        let errs = validate_metadata(info, &obj);
        if !errs.is_empty() {
            return Err(ApiError::invalid(info, &name, &errs));
        }
        check_namespace_writable(txn, info, &ns, &name)?;
        if txn.get(&key, &ns, &name).is_some() {
            attempts += 1;
            if generate && attempts < 8 {
                continue;
            }
            return Err(ApiError::already_exists(info, &name));
        }
        break;
    }
    if dry_run {
        meta_mut(&mut obj).insert("resourceVersion".into(), Value::String(String::new()));
        return Ok(Arc::new(obj));
    }
    let stored = txn.put(&key, obj);
    after_create(state, txn, info, &stored);
    after_write(state, txn, info, &stored);
    Ok(stored)
}

/// Hooks after a create: a new Namespace gets its `default` ServiceAccount and
/// `kube-root-ca.crt` ConfigMap.
fn after_create(state: &State, txn: &mut Txn<'_>, info: &ResourceInfo, obj: &Obj) {
    let _ = state;
    if info.builtin && info.group.is_empty() && info.kind == "Namespace" {
        let ns = mstr(obj, "name").to_string();
        super::controllers::namespace_defaults(txn, &ns);
    }
}

fn create(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    if ctx.info.namespaced && ctx.namespace.is_none() {
        return Err(ApiError::method_not_allowed());
    }
    let dry = is_dry_run(ctx)?;
    let mut obj = parse_body(ctx)?;
    check_type_and_namespace(ctx, &mut obj)?;
    if !mstr(&obj, "resourceVersion").is_empty() {
        return Err(ApiError::internal(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    if mstr(&obj, "name").is_empty() && mstr(&obj, "generateName").is_empty() {
        return Err(ApiError::invalid_field(
            &ctx.info,
            "",
            "FieldValueRequired",
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    }
    let warnings = admit_custom(ctx, &mut obj, WriteKind::CreateOrUpdate)?;
    let mut obj = to_storage(&ctx.info, obj);
    let manager = request::field_manager(&ctx.query, &ctx.headers);
    prepare_new(&ctx.info, &mut obj, Manager::Update(&manager))?;
    let mut txn = state.store.begin();
    let stored = insert_new(state, &mut txn, &ctx.info, obj, dry)?;
    txn.commit()?;
    object_response(ctx, 201, &stored, &warnings)
}

fn update(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let sub = ctx.sub.as_deref();
    if sub == Some("finalize") && !(ctx.info.builtin && ctx.info.kind == "Namespace") {
        return Err(ApiError::unknown_path());
    }
    let dry = is_dry_run(ctx)?;
    let mut obj = parse_body(ctx)?;
    check_type_and_namespace(ctx, &mut obj)?;
    let body_name = mstr(&obj, "name").to_string();
    if body_name.is_empty() {
        meta_mut(&mut obj).insert("name".into(), Value::String(name.clone()));
    } else if body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let body_rv = mstr(&obj, "resourceVersion").to_string();
    let warnings = admit_custom(ctx, &mut obj, WriteKind::CreateOrUpdate)?;
    let manager = request::field_manager(&ctx.query, &ctx.headers);
    let key = storage_key(&ctx.info);
    let ns = ctx.namespace.clone().unwrap_or_default();
    let obj = to_storage(&ctx.info, obj);
    let written = optimistic(
        state,
        &ctx.info,
        &key,
        &ns,
        &name,
        |old| {
            let old = old.ok_or_else(|| ApiError::not_found(&ctx.info, &name))?;
            if body_rv.is_empty() {
                if !ctx.info.builtin {
                    return Err(ApiError::invalid_field(
                        &ctx.info,
                        &name,
                        "FieldValueInvalid",
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    ));
                }
            } else if body_rv != mstr(old, "resourceVersion") {
                return Err(ApiError::conflict(&ctx.info, &name));
            }
            let uid = mstr(&obj, "uid");
            if !uid.is_empty() && uid != mstr(old, "uid") {
                return Err(ApiError::conflict_msg(
                    &ctx.info,
                    &name,
                    &format!(
                        "Precondition failed: UID in precondition: {}, UID in object meta: {uid}",
                        mstr(old, "uid")
                    ),
                ));
            }
            if !mstr(&obj, "deletionTimestamp").is_empty()
                && mstr(old, "deletionTimestamp").is_empty()
            {
                return Err(ApiError::invalid_field(
                    &ctx.info,
                    &name,
                    "FieldValueForbidden",
                    "metadata.deletionTimestamp",
                    "Forbidden: field is immutable; may only be changed via deletion",
                ));
            }
            prepare_update(&ctx.info, old, obj.clone(), sub, Manager::Update(&manager))
        },
        |txn, old, new| {
            let old = old.ok_or_else(|| ApiError::not_found(&ctx.info, &name))?;
            commit_update(state, txn, &ctx.info, old, new, dry)
        },
    )?;
    object_response(ctx, 200, &written.obj, &warnings)
}

fn patch(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let ns = ctx.namespace.clone().unwrap_or_default();
    let dry = is_dry_run(ctx)?;
    let ct = request::content_type(&ctx.headers);
    let builtin = ctx.info.builtin;
    match ct.as_str() {
        "application/json-patch+json" | "application/merge-patch+json" => {}
        "application/strategic-merge-patch+json" if builtin => {}
        "application/apply-patch+yaml" | "application/apply-patch+json" => {
            return apply(state, ctx, dry);
        }
        other => return Err(ApiError::unsupported_patch(other)),
    }
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
    let manager = request::field_manager(&ctx.query, &ctx.headers);
    let key = storage_key(&ctx.info);
    let (written, warnings) = optimistic(
        state,
        &ctx.info,
        &key,
        &ns,
        &name,
        |old| {
            let old = old.ok_or_else(|| ApiError::not_found(&ctx.info, &name))?;
            if let Some(rv) = patch
                .get("metadata")
                .and_then(|m| m.get("resourceVersion"))
                .and_then(Value::as_str)
                && !rv.is_empty()
                && rv != mstr(old, "resourceVersion")
            {
                return Err(ApiError::conflict(&ctx.info, &name));
            }
            let current = present(&ctx.info, old);
            let result = match ct.as_str() {
                "application/json-patch+json" => objects::patch::json_patch(&current, &patch),
                "application/merge-patch+json" => objects::patch::merge_patch(&current, &patch),
                _ => objects::patch::strategic_merge_patch(
                    &ctx.info.group,
                    &ctx.info.kind,
                    &current,
                    &patch,
                ),
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
            if mstr(&new, "name") != name {
                return Err(ApiError::invalid_field(
                    &ctx.info,
                    &name,
                    "FieldValueInvalid",
                    "metadata.name",
                    "Invalid value: field is immutable",
                ));
            }
            let uid = mstr(&new, "uid");
            if !uid.is_empty() && uid != mstr(old, "uid") {
                return Err(ApiError::invalid_field(
                    &ctx.info,
                    &name,
                    "FieldValueInvalid",
                    "metadata.uid",
                    &format!("Invalid value: \"{uid}\": field is immutable"),
                ));
            }
            admit_update(ctx, old, new, Manager::Update(&manager))
        },
        |txn, old, (new, warnings)| {
            let old = old.ok_or_else(|| ApiError::not_found(&ctx.info, &name))?;
            Ok((
                commit_update(state, txn, &ctx.info, old, new, dry)?,
                warnings,
            ))
        },
    )?;
    object_response(ctx, 200, &written.obj, &warnings)
}

fn apply(state: &State, ctx: &Ctx, dry: bool) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let ns = ctx.namespace.clone().unwrap_or_default();
    let sub = ctx.sub.as_deref();
    let Some(manager) = ctx.query.non_empty("fieldManager").map(str::to_string) else {
        return Err(ApiError::new(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    };
    let force = ctx.query.flag("force");
    let mut applied: Value = json_or_yaml(&ctx.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !applied.is_object() {
        return Err(ApiError::bad_request("error decoding YAML: not an object"));
    }
    let av = ctx.info.api_version();
    let got_av = applied
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
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
    check_type_and_namespace(ctx, &mut applied)?;
    let applied_name = mstr(&applied, "name").to_string();
    if applied_name.is_empty() {
        meta_mut(&mut applied).insert("name".into(), Value::String(name.clone()));
    } else if applied_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({applied_name}) does not match the name on the URL ({name})"
        )));
    }
    let applied_rv = mstr(&applied, "resourceVersion").to_string();
    let key = storage_key(&ctx.info);
    let now = now();
    let map_err = |e: objects::apply::ApplyError| match e {
        objects::apply::ApplyError::Conflicts(cs) => conflict_error(&ctx.info, &name, &cs),
        objects::apply::ApplyError::Invalid(m) => ApiError::new(422, "Invalid", m),
    };
    let (created, stored, warnings) = optimistic(
        state,
        &ctx.info,
        &key,
        &ns,
        &name,
        |old| {
            if !applied_rv.is_empty()
                && old.is_none_or(|o| mstr(o, "resourceVersion") != applied_rv)
            {
                return Err(ApiError::conflict(&ctx.info, &name));
            }
            match old {
                None => {
                    if sub.is_some() {
                        return Err(ApiError::not_found(&ctx.info, &name));
                    }
                    let uid = mstr(&applied, "uid");
                    if !uid.is_empty() {
                        return Err(ApiError::conflict_msg(
                            &ctx.info,
                            &name,
                            &format!(
                                "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
                            ),
                        ));
                    }
                    let mut new =
                        objects::apply::server_side_apply(None, &applied, &manager, force, &now)
                            .map_err(map_err)?;
                    let warnings = admit_custom(ctx, &mut new, WriteKind::Patch)?;
                    let mut new = to_storage(&ctx.info, new);
                    prepare_new(&ctx.info, &mut new, Manager::Applied)?;
                    Ok((new, warnings))
                }
                Some(old) => {
                    let live = present(&ctx.info, old);
                    let new = objects::apply::server_side_apply(
                        Some(&live),
                        &applied,
                        &manager,
                        force,
                        &now,
                    )
                    .map_err(map_err)?;
                    admit_update(ctx, old, new, Manager::Applied)
                }
            }
        },
        |txn, old, (new, warnings)| match old {
            None => Ok((true, insert_new(state, txn, &ctx.info, new, dry)?, warnings)),
            Some(old) => {
                let written = commit_update(state, txn, &ctx.info, old, new, dry)?;
                Ok((false, written.obj, warnings))
            }
        },
    )?;
    object_response(ctx, if created { 201 } else { 200 }, &stored, &warnings)
}

/// The tail of a patch or apply computed from `old`: admission (CRD schema) and the update
/// rules. Returns the object to store and the admission warnings.
fn admit_update(
    ctx: &Ctx,
    old: &Obj,
    mut new: Value,
    manager: Manager<'_>,
) -> Result<(Value, Vec<String>), ApiError> {
    let warnings = admit_custom(ctx, &mut new, WriteKind::Patch)?;
    let new = prepare_update(
        &ctx.info,
        old,
        to_storage(&ctx.info, new),
        ctx.sub.as_deref(),
        manager,
    )?;
    Ok((new, warnings))
}

/// Runs a write computed from the stored object the way kube-apiserver's GuaranteedUpdate
/// does: `prepare` works on a snapshot without the store lock (patching, server-side apply,
/// validation and managedFields are the expensive part), then `commit` runs under the lock
/// only if the object is still that snapshot; otherwise the write is prepared again from the
/// newer object. Writes to different objects thus run in parallel.
fn optimistic<T, R>(
    state: &State,
    info: &ResourceInfo,
    key: &ResKey,
    ns: &str,
    name: &str,
    mut prepare: impl FnMut(Option<&Obj>) -> Result<T, ApiError>,
    mut commit: impl FnMut(&mut Txn<'_>, Option<&Obj>, T) -> Result<R, ApiError>,
) -> Result<R, ApiError> {
    /// After this many lost races the client gets a Conflict and retries itself.
    const ATTEMPTS: usize = 16;
    for _ in 0..ATTEMPTS {
        let seen = state.store.get(key, ns, name);
        let prepared = prepare(seen.as_ref())?;
        let mut txn = state.store.begin();
        let current = txn.get(key, ns, name);
        let unchanged = match (&seen, &current) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                Arc::ptr_eq(a, b) || mstr(a, "resourceVersion") == mstr(b, "resourceVersion")
            }
            _ => false,
        };
        if !unchanged {
            continue;
        }
        let result = commit(&mut txn, seen.as_ref(), prepared)?;
        txn.commit()?;
        return Ok(result);
    }
    Err(ApiError::conflict(info, name))
}

fn conflict_error(
    info: &ResourceInfo,
    name: &str,
    cs: &[objects::apply::FieldConflict],
) -> ApiError {
    let message = if cs.len() == 1 {
        format!(
            "Apply failed with 1 conflict: conflict with \"{}\": {}",
            cs[0].manager, cs[0].field
        )
    } else {
        let mut m = format!("Apply failed with {} conflicts: ", cs.len());
        let mut last = "";
        for c in cs {
            if c.manager != last {
                m.push_str(&format!("conflicts with \"{}\":\n", c.manager));
                last = &c.manager;
            }
            m.push_str(&format!("- {}\n", c.field));
        }
        m.trim_end().to_string()
    };
    let mut d = json!({"name": name, "kind": info.plural, "causes": cs.iter().map(|c| json!({
        "reason":"FieldManagerConflict","message": format!("conflict with \"{}\"", c.manager),
        "field": c.field})).collect::<Vec<_>>()});
    if !info.group.is_empty() {
        d["group"] = json!(info.group);
    }
    ApiError {
        details: Some(d),
        ..ApiError::new(409, "Conflict", message)
    }
}

// ---------------------------------------------------------------------------------------------
// scale

fn get_path<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path.trim_start_matches('.').split('.') {
        cur = cur.get(seg)?;
    }
    Some(cur)
}

fn set_path(obj: &mut Value, path: &str, v: Value) {
    let segs: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut cur = obj;
    for (i, seg) in segs.iter().enumerate() {
        if !cur.is_object() {
            *cur = json!({});
        }
        if i == segs.len() - 1 {
            cur[*seg] = v;
            return;
        }
        cur = &mut cur[*seg];
    }
}

fn scale_of(info: &ResourceInfo, obj: &Value) -> Value {
    let Some(sc) = &info.scale else {
        return json!({});
    };
    let spec = get_path(obj, &sc.spec_replicas_path)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let status = get_path(obj, &sc.status_replicas_path)
        .and_then(Value::as_i64)
        .unwrap_or(0);
    // Built-in workloads: kube-apiserver prints `spec.selector`; custom resources: the string
    // at the CRD's labelSelectorPath.
    let selector = match sc.label_selector_path.as_deref() {
        Some(p) => get_path(obj, p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        None if info.builtin => crate::api::table::format_selector(obj["spec"].get("selector")),
        None => String::new(),
    };
    let meta = obj.get("metadata").cloned().unwrap_or(json!({}));
    let mut m = json!({});
    for f in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = meta.get(f) {
            m[f] = v.clone();
        }
    }
    // autoscaling/v1 omits a zero `spec.replicas` and an empty `status.selector`.
    let mut scale = json!({"kind":"Scale","apiVersion":"autoscaling/v1","metadata": m,
        "spec":{},"status":{"replicas": status}});
    if spec != 0 {
        scale["spec"]["replicas"] = json!(spec);
    }
    if !selector.is_empty() {
        scale["status"]["selector"] = json!(selector);
    }
    scale
}

fn get_scale(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.as_deref().unwrap_or("");
    let ns = ctx.namespace.as_deref().unwrap_or("");
    let obj = state
        .store
        .get(&storage_key(&ctx.info), ns, name)
        .ok_or_else(|| ApiError::not_found(&ctx.info, name))?;
    Ok(json_response(200, &scale_of(&ctx.info, &obj)))
}

fn write_scale(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let ns = ctx.namespace.clone().unwrap_or_default();
    let dry = is_dry_run(ctx)?;
    let Some(sc) = ctx.info.scale.clone() else {
        return Err(ApiError::unknown_path());
    };
    let manager = request::field_manager(&ctx.query, &ctx.headers);
    let body: Value = json_or_yaml(&ctx.body)
        .map_err(|e| ApiError::bad_request(format!("error decoding body: {e}")))?;
    let key = storage_key(&ctx.info);
    let mut txn = state.store.begin();
    let old = txn
        .get(&key, &ns, &name)
        .ok_or_else(|| ApiError::not_found(&ctx.info, &name))?;
    let current = scale_of(&ctx.info, &old);
    let new_scale = if ctx.method == Method::PUT {
        body
    } else {
        match request::content_type(&ctx.headers).as_str() {
            "application/json-patch+json" => objects::patch::json_patch(&current, &body),
            _ => objects::patch::merge_patch(&current, &body),
        }
        .map_err(|e| ApiError::bad_request(e.to_string()))?
    };
    let rv = mstr(&new_scale, "resourceVersion");
    if ctx.method == Method::PUT && !rv.is_empty() && rv != mstr(&old, "resourceVersion") {
        return Err(ApiError::conflict(&ctx.info, &name));
    }
    let replicas = new_scale["spec"]["replicas"].as_i64().unwrap_or(0);
    let mut new = (*present(&ctx.info, &old)).clone();
    set_path(&mut new, &sc.spec_replicas_path, json!(replicas));
    let written = finish_update(
        state,
        &mut txn,
        &ctx.info,
        &old,
        new,
        None,
        Manager::Update(&manager),
        dry,
    )?;
    txn.commit()?;
    Ok(json_response(200, &scale_of(&ctx.info, &written.obj)))
}

// ---------------------------------------------------------------------------------------------
// delete

/// Deletion options from the body and the query.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeleteOpts {
    pub propagation: Option<String>,
    pub dry_run: bool,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

fn delete_opts(ctx: &Ctx) -> Result<DeleteOpts, ApiError> {
    let mut o = DeleteOpts {
        dry_run: is_dry_run(ctx)?,
        propagation: ctx.query.non_empty("propagationPolicy").map(str::to_string),
        ..DeleteOpts::default()
    };
    if !ctx.body.iter().all(u8::is_ascii_whitespace) {
        let v: Value = serde_json::from_slice(&ctx.body)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
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

/// Result of deleting one object.
pub(crate) enum Deleted {
    /// Removed now (last state).
    Removed(Obj),
    /// Still there, terminating (finalizers pending).
    Pending(Obj),
}

/// Deletes one object with kube-apiserver semantics (finalizers, propagation, namespaces,
/// CRDs). Used by the DELETE handler, deletecollection and the controllers.
pub(crate) fn delete_object(
    state: &State,
    txn: &mut Txn<'_>,
    info: &ResourceInfo,
    ns: &str,
    name: &str,
    opts: &DeleteOpts,
) -> Result<Deleted, ApiError> {
    let key = storage_key(info);
    let old = txn
        .get(&key, ns, name)
        .ok_or_else(|| ApiError::not_found(info, name))?;
    if let Some(uid) = &opts.precondition_uid
        && uid != mstr(&old, "uid")
    {
        return Err(ApiError::conflict_msg(
            info,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                mstr(&old, "uid")
            ),
        ));
    }
    if let Some(rv) = &opts.precondition_rv
        && rv != mstr(&old, "resourceVersion")
    {
        return Err(ApiError::conflict_msg(
            info,
            name,
            &format!(
                "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                mstr(&old, "resourceVersion")
            ),
        ));
    }
    let is_namespace = info.builtin && info.group.is_empty() && info.kind == "Namespace";
    let is_crd = info.builtin && info.group == "apiextensions.k8s.io";
    if is_namespace && matches!(name, "default" | "kube-system" | "kube-public") {
        return Err(ApiError::forbidden(
            info,
            name,
            "this namespace may not be deleted",
        ));
    }
    if !mstr(&old, "deletionTimestamp").is_empty() {
        return Ok(Deleted::Pending(old));
    }
    let uid = mstr(&old, "uid").to_string();
    let mut fins = finalizers(&old);
    let has_dependents = !txn.dependents(&uid).is_empty();
    match opts.propagation.as_deref() {
        Some("Foreground") if has_dependents => fins.push("foregroundDeletion".into()),
        Some("Orphan") if has_dependents && !opts.dry_run => {
            super::controllers::orphan_dependents(state, txn, &uid);
        }
        _ => {}
    }
    if is_crd {
        fins.push("customresourcecleanup.apiextensions.k8s.io".into());
    }
    if fins.is_empty() && !is_namespace {
        if opts.dry_run {
            return Ok(Deleted::Removed(old));
        }
        let removed = txn
            .remove(&key, ns, name)
            .ok_or_else(|| ApiError::not_found(info, name))?;
        state.removed(&uid);
        after_remove(state, info, &removed);
        return Ok(Deleted::Removed(removed));
    }
    let mut new = (*old).clone();
    let now = now();
    {
        let meta = meta_mut(&mut new);
        meta.insert("deletionTimestamp".into(), json!(now));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        if !fins.is_empty() {
            meta.insert("finalizers".into(), json!(fins));
        }
        if info.has_generation {
            let g = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
            meta.insert("generation".into(), json!(g + 1));
        }
    }
    if is_namespace {
        new["status"]["phase"] = json!("Terminating");
    }
    if is_crd {
        crd::set_terminating(&mut new);
    }
    if opts.dry_run {
        return Ok(Deleted::Pending(Arc::new(new)));
    }
    let stored = txn.put(&key, new);
    if finalizers(&stored)
        .iter()
        .any(|f| f == "foregroundDeletion")
    {
        state.foreground.lock().insert(crate::store::ObjRef {
            key,
            namespace: ns.to_string(),
            name: name.to_string(),
        });
    }
    state.wake();
    Ok(Deleted::Pending(stored))
}

fn returns_deleted_object(info: &ResourceInfo) -> bool {
    info.builtin
        && info.group.is_empty()
        && matches!(
            info.kind.as_str(),
            "Pod" | "ServiceAccount" | "Namespace" | "Node"
        )
}

fn delete(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let ns = ctx.namespace.clone().unwrap_or_default();
    let opts = delete_opts(ctx)?;
    let mut txn = state.store.begin();
    let result = delete_object(state, &mut txn, &ctx.info, &ns, &name, &opts)?;
    txn.commit()?;
    match result {
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

fn delete_collection(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let sel = Selectors::parse(ctx)?;
    let opts = delete_opts(ctx)?;
    let key = storage_key(&ctx.info);
    let mut txn = state.store.begin();
    let targets: Vec<Obj> = txn
        .list(&key, ctx.namespace.as_deref())
        .into_iter()
        .filter(|o| sel.matches(o))
        .collect();
    let mut items = Vec::new();
    for t in targets {
        match delete_object(
            state,
            &mut txn,
            &ctx.info,
            mstr(&t, "namespace"),
            mstr(&t, "name"),
            &opts,
        ) {
            Ok(Deleted::Removed(o)) | Ok(Deleted::Pending(o)) => {
                items.push((*present(&ctx.info, &o)).clone())
            }
            Err(e) if e.code == 403 => {}
            Err(e) => return Err(e),
        }
    }
    let rv = txn.current_rv();
    txn.commit()?;
    Ok(json_response(
        200,
        &json!({"kind": format!("{}List", ctx.info.kind), "apiVersion": ctx.info.api_version(),
            "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
    ))
}

// ---------------------------------------------------------------------------------------------
// serviceaccounts/token

fn token_request(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let ns = ctx.namespace.clone().unwrap_or_default();
    let sa = state
        .store
        .get(&storage_key(&ctx.info), &ns, &name)
        .ok_or_else(|| ApiError::not_found(&ctx.info, &name))?;
    let mut req: Value = if ctx.body.is_empty() {
        json!({})
    } else {
        parse_body(ctx)?
    };
    let secs = req["spec"]["expirationSeconds"].as_i64().unwrap_or(3600);
    if secs < 600 {
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
    let b64 = |v: &Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
    // The claims kube-apiserver puts in a token without a bound object; the token is not
    // signed (devcluster authenticates only its one `--token`), see README "Known differences".
    let token = format!(
        "{}.{}.{}",
        b64(&json!({"alg":"none","typ":"JWT"})),
        b64(
            &json!({"aud": audiences, "exp": exp.timestamp(), "iat": issued.timestamp(),
            "iss": "https://kubernetes.default.svc.cluster.local",
            "jti": uuid::Uuid::new_v4().to_string(), "nbf": issued.timestamp(),
            "sub": format!("system:serviceaccount:{ns}:{name}"),
            "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": name, "uid": mstr(&sa, "uid")}}})
        ),
        "devcluster"
    );
    req["kind"] = json!("TokenRequest");
    req["apiVersion"] = json!("authentication.k8s.io/v1");
    req["metadata"] = json!({"name": name, "namespace": ns, "creationTimestamp": now()});
    req["spec"]["audiences"] = audiences;
    req["spec"]["expirationSeconds"] = json!(secs);
    req["status"] = json!({"token": token,
        "expirationTimestamp": exp.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)});
    Ok(json_response(201, &req))
}

// ---------------------------------------------------------------------------------------------
// pods/log: there is no kubelet, so answer like kube-apiserver does for pods it cannot reach.

fn pod_log(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let name = ctx.name.clone().unwrap_or_default();
    let ns = ctx.namespace.clone().unwrap_or_default();
    let pod = state
        .store
        .get(&storage_key(&ctx.info), &ns, &name)
        .ok_or_else(|| ApiError::not_found(&ctx.info, &name))?;
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
