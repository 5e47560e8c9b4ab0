//! Watch streams: newline-delimited JSON events, flushed one by one, with bookmarks, initial
//! events (and the `k8s.io/initial-events-end` bookmark), resumption from a resourceVersion,
//! `410 Expired` as an ERROR event, and a clean close at `timeoutSeconds`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderValue, Response, header};
use serde_json::{Value, json};
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::Instant;

use super::engine::{api_version_is, mstr, present};
use super::error::ApiError;
use super::registry::storage_key;
use super::request::{self, Output, Query};
use super::selector::Selectors;
use super::{Ctx, State, table};
use crate::api::resource::ResourceInfo;
use crate::store::{EventType, Obj, PartialMetadata, ResKey, WatchEvent, event_line};

/// How events are rendered for one watch.
struct Renderer {
    info: Arc<ResourceInfo>,
    output: Output,
    include: crate::server::table::Include,
    first_table: bool,
}

impl Renderer {
    fn line(&mut self, type_: EventType, obj: &Obj) -> Bytes {
        match self.output {
            Output::Plain => event_line(type_, &*present(&self.info, obj)),
            Output::Metadata => event_line(type_, &PartialMetadata(obj)),
            Output::Table => {
                let mut t = table::table(
                    &self.info,
                    std::slice::from_ref(&*present(&self.info, obj)),
                    self.include,
                    json!({"resourceVersion": mstr(obj, "resourceVersion")}),
                );
                if !self.first_table
                    && let Some(m) = t.as_object_mut()
                {
                    m.remove("columnDefinitions");
                }
                self.first_table = false;
                event_line(type_, &t)
            }
        }
    }

    /// The event's line, shared with other watchers (serialised once per event) when this
    /// watcher sees the event as it happened: plain form of this version, or metadata only.
    fn event_line(&mut self, ev: &WatchEvent, type_: EventType) -> Bytes {
        if type_ == ev.type_ {
            match self.output {
                Output::Metadata => return ev.metadata_line(),
                Output::Plain
                    if ev
                        .object
                        .get("apiVersion")
                        .and_then(Value::as_str)
                        .is_some_and(|av| api_version_is(&self.info, av)) =>
                {
                    return ev.line();
                }
                _ => {}
            }
        }
        self.line(type_, &ev.object)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string(), "creationTimestamp": null});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.info.kind, "apiVersion": self.info.api_version(), "metadata": meta});
        let mut buf =
            serde_json::to_vec(&json!({"type":"BOOKMARK","object": obj})).unwrap_or_default();
        buf.push(b'\n');
        Bytes::from(buf)
    }
}

fn error_line(code: u16, reason: &str, message: &str) -> Bytes {
    let mut buf = serde_json::to_vec(&json!({"type":"ERROR","object":{
        "kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
        "message": message,"reason": reason,"code": code}}))
    .unwrap_or_default();
    buf.push(b'\n');
    Bytes::from(buf)
}

/// The parameters of a watch request.
struct WatchParams {
    /// The resourceVersion to resume after (`None`: from now, or `0`).
    from: Option<u64>,
    send_initial: bool,
    bookmarks: bool,
    timeout: Duration,
}

impl WatchParams {
    fn parse(q: &Query) -> Result<WatchParams, ApiError> {
        if q.has("sendInitialEvents") && q.non_empty("resourceVersionMatch") != Some("NotOlderThan")
        {
            return Err(ApiError::new(
                422,
                "Invalid",
                "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        let from: Option<u64> = match q.non_empty("resourceVersion") {
            None | Some("0") => None,
            Some(v) => Some(
                v.parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid resource version: {v}")))?,
            ),
        };
        let send_initial = match q.get("sendInitialEvents") {
            Some("true") => true,
            Some(_) => false,
            None => from.is_none(),
        };
        let timeout = q
            .non_empty("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .filter(|t| *t > 0)
            .map(Duration::from_secs)
            .unwrap_or_else(|| {
                use rand::Rng;
                Duration::from_secs(rand::rng().random_range(1800..3600))
            });
        Ok(WatchParams {
            from,
            send_initial,
            bookmarks: q.flag("allowWatchBookmarks"),
            timeout,
        })
    }
}

/// When a watch ends and its bookmarks are due. Like kube-apiserver: a bookmark every minute
/// and one shortly before the timeout.
struct Clock {
    deadline: Instant,
    final_bookmark: Option<Instant>,
}

impl Clock {
    const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

    fn start(timeout: Duration) -> Clock {
        let deadline = Instant::now() + timeout;
        let final_bookmark = (timeout > Duration::from_secs(2))
            .then(|| deadline.checked_sub(Duration::from_secs(2)))
            .flatten();
        Clock {
            deadline,
            final_bookmark,
        }
    }

    fn first_bookmark(&self) -> Instant {
        match self.final_bookmark {
            Some(f) => (Instant::now() + Self::BOOKMARK_EVERY).min(f),
            None => Instant::now() + Self::BOOKMARK_EVERY,
        }
    }

    /// The bookmark after the one sent now (after the final one, a time past the deadline).
    fn next_bookmark(&self) -> Instant {
        let now = Instant::now();
        match self.final_bookmark {
            Some(f) if f > now => (now + Self::BOOKMARK_EVERY).min(f),
            _ => self.deadline + Self::BOOKMARK_EVERY,
        }
    }
}

/// The lines to send first, the receiver of later events and the resourceVersion they follow.
type Start = (Vec<Bytes>, Receiver<Arc<WatchEvent>>, u64);

/// Serves `?watch=true`.
pub(crate) async fn watch(state: Arc<State>, ctx: Ctx) -> Result<Response<Body>, ApiError> {
    let sel = Selectors::parse(&ctx.query, ctx.info.builtin)?;
    let params = WatchParams::parse(&ctx.query)?;
    let key = storage_key(&ctx.info);
    let namespace = ctx.namespace.clone();
    let mut renderer = Renderer {
        info: ctx.info.clone(),
        output: request::output(&ctx.headers),
        include: table::include_object(&ctx.query),
        first_table: true,
    };
    let (initial, mut rx, mut last_rv) = match start(
        &state,
        &key,
        namespace.as_deref(),
        &sel,
        &params,
        &mut renderer,
    ) {
        Ok(start) => start,
        Err(expired) => return Ok(stream_response(Body::from(expired))),
    };
    let WatchParams {
        bookmarks, timeout, ..
    } = params;
    let mut shutdown = state.shutdown_rx();
    let stream = async_stream::stream! {
        for line in initial {
            yield Ok::<Bytes, std::io::Error>(line);
        }
        let clock = Clock::start(timeout);
        let deadline = clock.deadline;
        let mut next_bookmark = clock.first_bookmark();
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Ok(ev) => {
                        if ev.rv <= last_rv {
                            continue;
                        }
                        last_rv = ev.rv;
                        if ev.key != key {
                            continue;
                        }
                        if let Some(line) = filter_event(&ev, &sel, namespace.as_deref(), &mut renderer) {
                            yield Ok(line);
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        match catch_up(&state, &key, last_rv, namespace.as_deref(), &sel, &mut renderer) {
                            Ok((lines, new_rx, rv)) => {
                                rx = new_rx;
                                for line in lines {
                                    yield Ok(line);
                                }
                                last_rv = last_rv.max(rv);
                            }
                            Err(expired) => {
                                yield Ok(expired);
                                break;
                            }
                        }
                    }
                    Err(RecvError::Closed) => break,
                },
                _ = tokio::time::sleep_until(deadline) => break,
                _ = tokio::time::sleep_until(next_bookmark), if bookmarks => {
                    next_bookmark = clock.next_bookmark();
                    yield Ok(renderer.bookmark(last_rv, false));
                }
                _ = shutdown.changed() => break,
            }
        }
    };
    Ok(stream_response(Body::from_stream(stream)))
}

/// Where a watch starts: the current objects (as ADDED, with the initial-events-end
/// bookmark) when it sends initial events, else nothing; or the events after `from` from the
/// history. `Err` is the `410 Expired` line when the history no longer reaches back.
fn start(
    state: &State,
    key: &ResKey,
    namespace: Option<&str>,
    sel: &Selectors,
    params: &WatchParams,
    renderer: &mut Renderer,
) -> Result<Start, Bytes> {
    let Some(n) = params.from.filter(|_| !params.send_initial) else {
        let (objs, rx, rv) = state.store.snapshot_and_subscribe(key, namespace);
        let mut initial = Vec::new();
        if params.send_initial {
            for o in objs.iter().filter(|o| sel.matches(o)) {
                initial.push(renderer.line(EventType::Added, o));
            }
            if params.bookmarks {
                initial.push(renderer.bookmark(rv, true));
            }
        }
        return Ok((initial, rx, rv));
    };
    let (lines, rx, rv) = catch_up(state, key, n, namespace, sel, renderer)?;
    Ok((lines, rx, rv.max(n)))
}

/// The events after `rv` from the resource's history (a watch that fell behind the broadcast
/// or resumes), with a new receiver; `Err` is the `410 Expired` line.
fn catch_up(
    state: &State,
    key: &ResKey,
    rv: u64,
    namespace: Option<&str>,
    sel: &Selectors,
    renderer: &mut Renderer,
) -> Result<Start, Bytes> {
    match state.store.watch_from(key, rv) {
        Ok((events, rx, current)) => {
            let lines = events
                .iter()
                .filter_map(|ev| filter_event(ev, sel, namespace, renderer))
                .collect();
            Ok((lines, rx, current))
        }
        Err(floor) => Err(error_line(
            410,
            "Expired",
            &format!("too old resource version: {rv} ({floor})"),
        )),
    }
}

fn stream_response(body: Body) -> Response<Body> {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    resp
}

/// Applies namespace and selector filtering, turning selector transitions into ADDED/DELETED.
fn filter_event(
    ev: &WatchEvent,
    sel: &Selectors,
    namespace: Option<&str>,
    r: &mut Renderer,
) -> Option<Bytes> {
    if let Some(ns) = namespace
        && ev.namespace != ns
    {
        return None;
    }
    let new_matches = sel.matches(&ev.object);
    let old_matches = ev.prev.as_ref().is_some_and(|p| sel.matches(p));
    let type_ = match ev.type_ {
        EventType::Added => new_matches.then_some(EventType::Added)?,
        EventType::Deleted => old_matches.then_some(EventType::Deleted)?,
        EventType::Modified => match (old_matches, new_matches) {
            (true, true) => EventType::Modified,
            (false, true) => EventType::Added,
            (true, false) => EventType::Deleted,
            (false, false) => return None,
        },
    };
    Some(r.event_line(ev, type_))
}
