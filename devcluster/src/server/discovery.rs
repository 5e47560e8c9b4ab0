//! Discovery and OpenAPI endpoints, wired to the documents of [`crate::api`].

use axum::body::Body;
use http::{HeaderMap, HeaderValue, Response, StatusCode, header};
use serde_json::Value;
use std::collections::HashMap;

use bytes::Bytes;
use sha2::{Digest, Sha512};

use super::State;
use super::error::ApiError;
use super::request::Query;
use crate::api::discovery as disc;

fn etag_of(body: &[u8]) -> String {
    let digest = Sha512::digest(body);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("\"{hex}\"")
}

fn with_type(body: Vec<u8>, content_type: &str, headers: &HeaderMap) -> Response<Body> {
    let etag = etag_of(&body);
    let not_modified = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == etag);
    let mut resp = if not_modified {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        Response::new(Body::from(body))
    };
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::VARY, HeaderValue::from_static("Accept"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("public"));
    resp
}

fn json_doc(v: &Value, content_type: &str, headers: &HeaderMap) -> Response<Body> {
    with_type(
        serde_json::to_vec(v).unwrap_or_default(),
        content_type,
        headers,
    )
}

/// Answers discovery and OpenAPI paths; `None` for everything else.
pub(crate) fn route(
    state: &State,
    path: &str,
    query: &Query,
    headers: &HeaderMap,
) -> Option<Result<Response<Body>, ApiError>> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let resources = || state.registry.read().all();
    match segs.as_slice() {
        ["api"] => Some(Ok(if disc::wants_aggregated(accept) {
            json_doc(
                &disc::aggregated_discovery(&resources(), true),
                disc::AGGREGATED_CONTENT_TYPE,
                headers,
            )
        } else {
            json_doc(&disc::legacy_api_versions(), "application/json", headers)
        })),
        ["apis"] => Some(Ok(if disc::wants_aggregated(accept) {
            json_doc(
                &disc::aggregated_discovery(&resources(), false),
                disc::AGGREGATED_CONTENT_TYPE,
                headers,
            )
        } else {
            json_doc(
                &disc::legacy_group_list(&resources()),
                "application/json",
                headers,
            )
        })),
        ["api", v] => Some(
            disc::legacy_resource_list(&resources(), "", v)
                .map(|d| json_doc(&d, "application/json", headers))
                .ok_or_else(ApiError::unknown_path),
        ),
        ["apis", g] => Some(
            disc::legacy_group(&resources(), g)
                .map(|d| json_doc(&d, "application/json", headers))
                .ok_or_else(ApiError::unknown_path),
        ),
        ["apis", g, v] => Some(
            disc::legacy_resource_list(&resources(), g, v)
                .map(|d| json_doc(&d, "application/json", headers))
                .ok_or_else(ApiError::unknown_path),
        ),
        ["openapi", "v3"] => Some(Ok(openapi_index(state, headers))),
        ["openapi", "v3", rest @ ..] => Some(openapi_doc(state, &rest.join("/"), query, headers)),
        ["openapi", "v2"] => Some(Ok(openapi_v2(accept, headers))),
        ["openapi", ..] => Some(Err(ApiError::unknown_path())),
        _ => None,
    }
}

/// `Document.swagger` (field 1) = "2.0" and `Document.info` (field 2) = {title (1):
/// "Kubernetes", version (2): "v1.32.0"} of gnostic's `openapi_v2.Document`, protobuf-encoded.
const OPENAPI_V2_PROTO: &[u8] = b"\x0a\x032.0\x12\x15\x0a\x0aKubernetes\x12\x07v1.32.0";

/// `GET /openapi/v2`: a document without definitions. kubectl falls back to it to validate a
/// kind whose group-version is not in the OpenAPI v3 index (a CRD not installed yet); finding
/// no schema there, it skips validation and reports the missing kind as with kube-apiserver
/// ("no matches for kind ... ensure CRDs are installed first") instead of failing on a 404.
fn openapi_v2(accept: &str, headers: &HeaderMap) -> Response<Body> {
    if accept.contains("protobuf") {
        with_type(
            OPENAPI_V2_PROTO.to_vec(),
            "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
            headers,
        )
    } else {
        json_doc(
            &serde_json::json!({"swagger": "2.0",
                "info": {"title": "Kubernetes", "version": "v1.32.0"},
                "paths": {}, "definitions": {}}),
            "application/json",
            headers,
        )
    }
}

/// Cached OpenAPI documents, valid for one registry generation.
#[derive(Default)]
pub(crate) struct OpenApiCache {
    generation: u64,
    index: Option<Bytes>,
    docs: HashMap<String, Option<(Bytes, String)>>,
}

impl OpenApiCache {
    fn check(&mut self, generation: u64) {
        if self.generation != generation {
            self.generation = generation;
            self.index = None;
            self.docs.clear();
        }
    }
}

fn openapi_index(state: &State, headers: &HeaderMap) -> Response<Body> {
    let (generation, all) = {
        let r = state.registry.read();
        (r.generation(), r.all())
    };
    let body = {
        let mut cache = state.openapi_cache.lock();
        cache.check(generation);
        cache.index.clone()
    };
    let body = match body {
        Some(b) => b,
        None => {
            let b = Bytes::from(
                serde_json::to_vec(&crate::api::openapi::openapi_v3_index(&all))
                    .unwrap_or_default(),
            );
            let mut cache = state.openapi_cache.lock();
            cache.check(generation);
            cache.index = Some(b.clone());
            b
        }
    };
    with_type(body.to_vec(), "application/json", headers)
}

fn openapi_doc(
    state: &State,
    key: &str,
    query: &Query,
    headers: &HeaderMap,
) -> Result<Response<Body>, ApiError> {
    let (generation, all) = {
        let r = state.registry.read();
        (r.generation(), r.all())
    };
    let cached = {
        let mut cache = state.openapi_cache.lock();
        cache.check(generation);
        cache.docs.get(key).cloned()
    };
    let entry = match cached {
        Some(e) => e,
        None => {
            let e = crate::api::openapi::openapi_v3_document(&all, key).map(|(doc, hash)| {
                (
                    Bytes::from(serde_json::to_vec(&doc).unwrap_or_default()),
                    hash,
                )
            });
            let mut cache = state.openapi_cache.lock();
            cache.check(generation);
            cache.docs.insert(key.to_string(), e.clone());
            e
        }
    };
    let Some((body, hash)) = entry else {
        return Err(ApiError::unknown_path());
    };
    match query.non_empty("hash") {
        Some(h) if h != hash => {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::MOVED_PERMANENTLY;
            if let Ok(v) = HeaderValue::from_str(&format!("/openapi/v3/{key}?hash={hash}")) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            Ok(r)
        }
        Some(_) => {
            let mut r = with_type(body.to_vec(), "application/json", headers);
            let h = r.headers_mut();
            h.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, immutable"),
            );
            let expires = (chrono::Utc::now() + chrono::Duration::days(365))
                .format("%a, %d %b %Y %H:%M:%S GMT")
                .to_string();
            if let Ok(v) = HeaderValue::from_str(&expires) {
                h.insert(header::EXPIRES, v);
            }
            Ok(r)
        }
        None => Ok(with_type(body.to_vec(), "application/json", headers)),
    }
}
