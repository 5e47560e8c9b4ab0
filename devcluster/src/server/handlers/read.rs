//! get and list (with `limit`/`continue` pages), rendered plain, as metadata or as a Table.

use axum::body::Body;
use base64::Engine;
use bytes::Bytes;
use http::Response;
use serde_json::{Value, json};

use super::{Ctx, State, object_response, stored_object};
use crate::server::engine::present;
use crate::server::error::ApiError;
use crate::server::registry::storage_key;
use crate::server::request::{self, Output};
use crate::server::selector::Selectors;
use crate::server::{bytes_response, json_response, table};
use crate::store::{Page, PartialMetadata};

pub(super) fn get(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    let obj = stored_object(state, ctx)?;
    object_response(ctx, 200, &obj, &[])
}

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

pub(super) fn list(state: &State, ctx: &Ctx) -> Result<Response<Body>, ApiError> {
    validate_list_options(ctx, false)?;
    let sel = Selectors::parse(&ctx.query, ctx.info.builtin)?;
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
    let list_meta = list_metadata(&page, first_rv);
    Ok(render_list(ctx, &page, list_meta))
}

/// The list's `metadata`: resourceVersion, and `continue`/`remainingItemCount` when more
/// follow.
fn list_metadata(page: &Page, first_rv: Option<u64>) -> Value {
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
    list_meta
}

fn render_list(ctx: &Ctx, page: &Page, list_meta: Value) -> Response<Body> {
    match request::output(&ctx.headers) {
        Output::Table => {
            let objs: Vec<Value> = page
                .items
                .iter()
                .map(|o| (*present(&ctx.info, o)).clone())
                .collect();
            json_response(
                200,
                &table::table(
                    &ctx.info,
                    &objs,
                    table::include_object(&ctx.query),
                    list_meta,
                ),
            )
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
            json_response(
                200,
                &PartialList {
                    kind: "PartialObjectMetadataList",
                    api_version: "meta.k8s.io/v1",
                    metadata: list_meta,
                    items: page.items.iter().map(|o| PartialMetadata(o)).collect(),
                },
            )
        }
        Output::Plain => plain_list(ctx, page, &list_meta),
    }
}

/// A plain list, written item by item (each in the served form).
fn plain_list(ctx: &Ctx, page: &Page, list_meta: &Value) -> Response<Body> {
    let mut buf = Vec::with_capacity(64 + page.items.len() * 512);
    buf.extend_from_slice(b"{\"kind\":");
    let head = json!({"kind": format!("{}List", ctx.info.kind)});
    let _ = serde_json::to_writer(&mut buf, &head["kind"]);
    buf.extend_from_slice(b",\"apiVersion\":");
    let _ = serde_json::to_writer(&mut buf, &ctx.info.api_version());
    buf.extend_from_slice(b",\"metadata\":");
    let _ = serde_json::to_writer(&mut buf, list_meta);
    buf.extend_from_slice(b",\"items\":[");
    for (i, item) in page.items.iter().enumerate() {
        if i > 0 {
            buf.push(b',');
        }
        let _ = serde_json::to_writer(&mut buf, &*present(&ctx.info, item));
    }
    buf.extend_from_slice(b"]}");
    bytes_response(200, Bytes::from(buf))
}
