//! Feed resolution: a feed is a Manifest in `clusternet-reserved` labelled with its
//! group/version/kind/namespace/name, else the live object in the parent.
//!
//! Live objects are read from one shared watch per kind, started the first time a Subscription
//! names the kind. Kinds are found through discovery, so a kind whose CRD appears later is picked
//! up on the next attempt.

use super::epoch::InputEpoch;
use crate::Error;
use crate::error::KubeError;
use atoll_crds::apps::{Feed, Manifest, Subscription};
use atoll_crds::known;
use atoll_runtime::ready::Ready;
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, mpsc};

/// How long a kind that discovery did not find is remembered as missing before asking again.
const MISSING_KIND_TTL: Duration = Duration::from_secs(5);

/// Why a feed could not be resolved. Not an [`Error`]: a missing feed is reported on the
/// Subscription and picked up as soon as it appears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedProblem {
    /// The parent does not serve the feed's kind (yet).
    KindNotServed(String),
    /// Neither a Manifest nor a live object exists.
    NotFound,
}

/// One shared watch of one feed kind.
struct KindWatch {
    resource: ApiResource,
    namespaced: bool,
    store: Store<DynamicObject>,
    /// Set once the first list is in the store (many reconciles wait on it at once).
    synced: Ready,
}

impl KindWatch {
    /// Waits until the first list of the kind is in the store.
    async fn wait_synced(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.synced.wait())
            .await
            .is_ok()
    }
}

/// The live feed objects of every kind any Subscription names.
pub struct FeedWatches {
    client: Client,
    kinds: Mutex<HashMap<GroupVersionKind, Arc<KindWatch>>>,
    missing: Mutex<HashMap<GroupVersionKind, Instant>>,
    subscriptions: Store<Subscription>,
    triggers: mpsc::Sender<ObjectRef<Subscription>>,
    ready_timeout: Duration,
    epoch: InputEpoch,
}

impl FeedWatches {
    /// Feed watches that enqueue the Subscriptions naming a changed feed on `triggers`.
    pub fn new(
        client: Client,
        subscriptions: Store<Subscription>,
        triggers: mpsc::Sender<ObjectRef<Subscription>>,
        ready_timeout: Duration,
        epoch: InputEpoch,
    ) -> Self {
        Self {
            client,
            kinds: Mutex::default(),
            missing: Mutex::default(),
            subscriptions,
            triggers,
            ready_timeout,
            epoch,
        }
    }

    /// The watch of `feed`'s kind, started (and synced) if this is the first feed of the kind.
    async fn watch_for(&self, feed: &Feed) -> Result<Result<Arc<KindWatch>, FeedProblem>, Error> {
        let gvk = gvk_of(feed);
        if let Some(existing) = self.kinds.lock().await.get(&gvk) {
            return Ok(Ok(existing.clone()));
        }
        if let Some(at) = self.missing.lock().await.get(&gvk)
            && at.elapsed() < MISSING_KIND_TTL
        {
            return Ok(Err(FeedProblem::KindNotServed(kind_text(feed))));
        }
        let (resource, capabilities) = match kube::discovery::pinned_kind(&self.client, &gvk).await
        {
            Ok(found) => found,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                self.missing.lock().await.insert(gvk, Instant::now());
                return Ok(Err(FeedProblem::KindNotServed(kind_text(feed))));
            }
            Err(kube::Error::Discovery(_)) => {
                self.missing.lock().await.insert(gvk, Instant::now());
                return Ok(Err(FeedProblem::KindNotServed(kind_text(feed))));
            }
            Err(source) => {
                return Err(Error::DiscoverFeedKind {
                    kind: kind_text(feed),
                    source: KubeError::from(source),
                });
            }
        };
        let mut kinds = self.kinds.lock().await;
        if let Some(existing) = kinds.get(&gvk) {
            return Ok(Ok(existing.clone()));
        }
        let namespaced = capabilities.scope == kube::discovery::Scope::Namespaced;
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let synced = Ready::after_first_list(store.clone());
        let watch = Arc::new(KindWatch {
            resource: resource.clone(),
            namespaced,
            store: store.clone(),
            synced,
        });
        kinds.insert(gvk.clone(), watch.clone());
        drop(kinds);
        self.missing.lock().await.remove(&gvk);

        let subscriptions = self.subscriptions.clone();
        let triggers = self.triggers.clone();
        let api_version = resource.api_version.clone();
        let kind = resource.kind.clone();
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|object: &mut DynamicObject| object.metadata.managed_fields = None)
            .reflect(writer);
        let epoch = self.epoch.clone();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut listed = false;
            while let Some(event) = stream.next().await {
                match event {
                    // A (re-)list may hide changes made while the watch was down (the watch
                    // expired, or the API server restarted): every Subscription with a feed of
                    // this kind needs a pass.
                    Ok(event @ watcher::Event::InitDone) => {
                        epoch.bump();
                        if !super::is_relist(&event, &mut listed) {
                            continue;
                        }
                        for sub in subscriptions_with_kind(&subscriptions, &api_version, &kind) {
                            if triggers.send(sub).await.is_err() {
                                return;
                            }
                        }
                    }
                    Ok(watcher::Event::Apply(object) | watcher::Event::Delete(object)) => {
                        epoch.bump();
                        let namespace = object.namespace().unwrap_or_default();
                        let name = object.name_any();
                        for sub in subscriptions_naming(
                            &subscriptions,
                            &api_version,
                            &kind,
                            &namespace,
                            &name,
                        ) {
                            if triggers.send(sub).await.is_err() {
                                return;
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(%api_version, %kind, error = %e, "feed watch failed"),
                }
            }
        });
        Ok(Ok(watch))
    }

    /// Resolves `feed` to its object: the Manifest's template, else the live object.
    pub async fn resolve(
        &self,
        feed: &Feed,
        manifests: &Store<Manifest>,
    ) -> Result<Result<Value, FeedProblem>, Error> {
        if let Some(template) = manifest_template(feed, manifests) {
            return Ok(Ok(template));
        }
        let watch = match self.watch_for(feed).await? {
            Ok(watch) => watch,
            Err(problem) => return Ok(Err(problem)),
        };
        // Another reconcile may have started this watch a moment ago: wait for its first list.
        if !watch.wait_synced(self.ready_timeout).await {
            return Err(Error::SyncFeedKind {
                kind: kind_text(feed),
            });
        }
        let mut key = ObjectRef::new_with(&feed.name, watch.resource.clone());
        if watch.namespaced {
            key = key.within(feed.namespace.as_deref().unwrap_or("default"));
        }
        let Some(object) = watch.store.get(&key) else {
            return Ok(Err(FeedProblem::NotFound));
        };
        let mut value = serde_json::to_value(object.as_ref()).map_err(|e| Error::EncodeObject {
            what: kind_text(feed),
            reason: e.to_string(),
        })?;
        // DynamicObject does not always carry apiVersion/kind of the watched resource.
        if let Some(map) = value.as_object_mut() {
            map.insert("apiVersion".into(), Value::from(feed.api_version.clone()));
            map.insert("kind".into(), Value::from(feed.kind.clone()));
        }
        Ok(Ok(value))
    }
}

/// The Manifest template of `feed`, found by the labels the hub and Clusternet put on Manifests.
pub fn manifest_template(feed: &Feed, manifests: &Store<Manifest>) -> Option<Value> {
    let (group, version) = split_api_version(&feed.api_version);
    let namespace = feed.namespace.as_deref().unwrap_or("");
    manifests
        .find(|m| {
            m.metadata.namespace.as_deref() == Some(known::NAMESPACE_RESERVED)
                && m.metadata.deletion_timestamp.is_none()
                && label_is(m, known::LABEL_CONFIG_GROUP, group)
                && label_is(m, known::LABEL_CONFIG_VERSION, version)
                && label_is(m, known::LABEL_CONFIG_KIND, &feed.kind)
                && label_is(m, known::LABEL_CONFIG_NAME, &feed.name)
                && label_is(m, known::LABEL_CONFIG_NAMESPACE, namespace)
        })
        .map(|m| m.template.clone())
}

fn label_is(manifest: &Manifest, key: &str, value: &str) -> bool {
    let found = manifest
        .metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(key))
        .map_or("", String::as_str);
    found == value
}

/// The Subscriptions (not being deleted) with a feed `api_version/kind namespace/name`.
pub fn subscriptions_naming(
    subscriptions: &Store<Subscription>,
    api_version: &str,
    kind: &str,
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<Subscription>> {
    subscriptions_with_feed(subscriptions, |feed| {
        feed.api_version == api_version
            && feed.kind == kind
            && feed.name == name
            && feed.namespace.as_deref().unwrap_or("") == namespace
    })
}

/// The Subscriptions with a feed of `api_version`/`kind`.
pub fn subscriptions_with_kind(
    subscriptions: &Store<Subscription>,
    api_version: &str,
    kind: &str,
) -> Vec<ObjectRef<Subscription>> {
    subscriptions_with_feed(subscriptions, |feed| {
        feed.api_version == api_version && feed.kind == kind
    })
}

fn subscriptions_with_feed(
    subscriptions: &Store<Subscription>,
    matches: impl Fn(&Feed) -> bool,
) -> Vec<ObjectRef<Subscription>> {
    subscriptions
        .state()
        .iter()
        .filter(|sub| sub.spec.feeds.iter().any(&matches))
        .map(|sub| ObjectRef::from_obj(sub.as_ref()))
        .collect()
}

/// `(group, version)` of an apiVersion; the core group is `""`.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((group, version)) => (group, version),
        None => ("", api_version),
    }
}

fn gvk_of(feed: &Feed) -> GroupVersionKind {
    let (group, version) = split_api_version(&feed.api_version);
    GroupVersionKind::gvk(group, version, &feed.kind)
}

fn kind_text(feed: &Feed) -> String {
    format!("{} {}", feed.api_version, feed.kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_crds::apps::SubscriptionSpec;
    use kube::runtime::watcher::Event;

    fn sub(name: &str, feeds: &[(&str, &str, &str)]) -> Subscription {
        let mut s = Subscription::new(
            name,
            SubscriptionSpec {
                feeds: feeds
                    .iter()
                    .map(|(api_version, kind, name)| Feed {
                        api_version: api_version.to_string(),
                        kind: kind.to_string(),
                        namespace: Some("apps".into()),
                        name: name.to_string(),
                    })
                    .collect(),
                ..Default::default()
            },
        );
        s.metadata.namespace = Some("apps".into());
        s
    }

    #[test]
    fn a_relist_of_a_kind_reaches_every_subscription_with_a_feed_of_that_kind() {
        let (store, mut writer) = reflector::store::<Subscription>();
        for s in [
            sub("a", &[("v1", "ConfigMap", "x")]),
            sub(
                "b",
                &[("apps/v1", "Deployment", "y"), ("v1", "ConfigMap", "z")],
            ),
            sub("c", &[("apps/v1", "Deployment", "y")]),
        ] {
            writer.apply_watcher_event(&Event::Apply(s));
        }
        let names = |refs: Vec<ObjectRef<Subscription>>| {
            let mut n: Vec<String> = refs.into_iter().map(|r| r.name).collect();
            n.sort();
            n
        };
        assert_eq!(
            names(subscriptions_with_kind(&store, "v1", "ConfigMap")),
            ["a", "b"]
        );
        assert_eq!(
            names(subscriptions_with_kind(&store, "apps/v1", "Deployment")),
            ["b", "c"]
        );
        assert!(subscriptions_with_kind(&store, "v1", "Secret").is_empty());
        assert_eq!(
            names(subscriptions_naming(&store, "v1", "ConfigMap", "apps", "z")),
            ["b"]
        );
    }
}
