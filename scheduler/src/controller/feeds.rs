//! Feed resolution: a feed is a Manifest in `clusternet-reserved` labelled with its
//! group/version/kind/namespace/name, else the live object in the parent.
//!
//! Before either is read for a Subscription, [`tenancy::feed_access`] decides whether the
//! Subscription may use the feed at all; a refused feed is never looked up, so no watch is
//! started for it and whether it exists is not revealed.
//!
//! Live objects are read from one shared watch per kind, started the first time a Subscription
//! names the kind, and released by [`FeedWatches::release_unused`] once no Subscription names
//! it. Kinds are found through discovery, so a kind whose CRD appears later is picked up on the
//! next attempt.

use super::epoch::InputEpoch;
use super::plan::split_api_version;
use crate::Error;
use crate::tenancy::{self, Access, FeedOwner, Refusal};
use atoll_crds::apps::{Feed, Manifest, Subscription};
use atoll_crds::atoll::FeedGrant;
use atoll_runtime::ready::Ready;
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, mpsc};
use tokio::task::AbortHandle;

/// How long a kind that discovery did not find is remembered as missing before asking again.
const MISSING_KIND_TTL: Duration = Duration::from_secs(5);

/// Why a feed could not be resolved. Not an [`Error`]: a missing or refused feed is reported on
/// the Subscription and picked up as soon as it appears or is granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedProblem {
    /// The parent does not serve the feed's kind (yet).
    KindNotServed,
    /// Neither a Manifest nor a live object exists.
    NotFound,
    /// The Subscription may not use the feed: no FeedGrant allows it.
    NotGranted(Refusal),
    /// The feed's Manifest holds another object than its labels say (what differs).
    ManifestNotItsFeed(String),
}

/// What discovery says about a feed kind: its resource and whether it is namespaced.
#[derive(Clone)]
struct KindScope {
    resource: ApiResource,
    namespaced: bool,
}

/// One shared watch of one feed kind.
struct KindWatch {
    resource: ApiResource,
    namespaced: bool,
    store: Store<DynamicObject>,
    /// Set once the first list is in the store (many reconciles wait on it at once).
    synced: Ready,
    /// The task that runs the watch; aborted when the kind is released.
    task: AbortHandle,
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
    /// Discovery results, kept after a kind's watch is released: they are small, and access
    /// decisions need the scope of kinds that are never watched.
    scopes: Mutex<HashMap<GroupVersionKind, KindScope>>,
    missing: Mutex<HashMap<GroupVersionKind, Instant>>,
    subscriptions: Store<Subscription>,
    triggers: mpsc::Sender<ObjectRef<Subscription>>,
    ready_timeout: Duration,
    epoch: InputEpoch,
    /// Number of kinds watched, for the `feed_watches` metric.
    watched: Gauge,
}

impl FeedWatches {
    /// Feed watches that enqueue the Subscriptions naming a changed feed on `triggers`, and
    /// count the kinds they watch on `watched`.
    pub fn new(
        client: Client,
        subscriptions: Store<Subscription>,
        triggers: mpsc::Sender<ObjectRef<Subscription>>,
        ready_timeout: Duration,
        epoch: InputEpoch,
        watched: Gauge,
    ) -> Self {
        Self {
            client,
            kinds: Mutex::default(),
            scopes: Mutex::default(),
            missing: Mutex::default(),
            subscriptions,
            triggers,
            ready_timeout,
            epoch,
            watched,
        }
    }

    /// The resource and scope of `feed`'s kind, from discovery (cached).
    async fn scope_of(&self, feed: &Feed) -> Result<Result<KindScope, FeedProblem>, Error> {
        let gvk = gvk_of(feed);
        if let Some(known) = self.scopes.lock().await.get(&gvk) {
            return Ok(Ok(known.clone()));
        }
        if let Some(at) = self.missing.lock().await.get(&gvk)
            && at.elapsed() < MISSING_KIND_TTL
        {
            return Ok(Err(FeedProblem::KindNotServed));
        }
        let (resource, capabilities) = match kube::discovery::pinned_kind(&self.client, &gvk).await
        {
            Ok(found) => found,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                self.missing.lock().await.insert(gvk, Instant::now());
                return Ok(Err(FeedProblem::KindNotServed));
            }
            Err(kube::Error::Discovery(_)) => {
                self.missing.lock().await.insert(gvk, Instant::now());
                return Ok(Err(FeedProblem::KindNotServed));
            }
            Err(source) => {
                return Err(Error::DiscoverFeedKind {
                    kind: kind_text(feed),
                    source,
                });
            }
        };
        self.missing.lock().await.remove(&gvk);
        let scope = KindScope {
            resource,
            namespaced: capabilities.scope == kube::discovery::Scope::Namespaced,
        };
        self.scopes.lock().await.insert(gvk, scope.clone());
        Ok(Ok(scope))
    }

    /// The watch of `feed`'s kind, started if this is the first feed of the kind.
    async fn watch_for(&self, feed: &Feed, scope: &KindScope) -> Arc<KindWatch> {
        let gvk = gvk_of(feed);
        let mut kinds = self.kinds.lock().await;
        if let Some(existing) = kinds.get(&gvk) {
            return existing.clone();
        }
        let resource = scope.resource.clone();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &resource);
        let writer = reflector::store::Writer::new(resource.clone());
        let store = writer.as_reader();
        let synced = Ready::after_first_list(store.clone());

        let subscriptions = self.subscriptions.clone();
        let triggers = self.triggers.clone();
        let api_version = resource.api_version.clone();
        let kind = resource.kind.clone();
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|object: &mut DynamicObject| object.metadata.managed_fields = None)
            .reflect(writer);
        let epoch = self.epoch.clone();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut listed = false;
            let mut prints = ContentPrints::default();
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Init) => prints.init(),
                    Ok(watcher::Event::InitApply(object)) => prints.init_apply(&object),
                    // A (re-)list may hide changes made while the watch was down (the watch
                    // expired, or the API server restarted): every Subscription with a feed of
                    // this kind needs a pass.
                    Ok(event @ watcher::Event::InitDone) => {
                        prints.init_done();
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
                    // A change of nothing rendering sees (status, say) needs no pass.
                    Ok(watcher::Event::Apply(object)) => {
                        if prints.changed(&object) {
                            epoch.bump();
                            if !notify(&subscriptions, &triggers, &api_version, &kind, &object)
                                .await
                            {
                                return;
                            }
                        }
                    }
                    Ok(watcher::Event::Delete(object)) => {
                        prints.forget(&object);
                        epoch.bump();
                        if !notify(&subscriptions, &triggers, &api_version, &kind, &object).await {
                            return;
                        }
                    }
                    Err(e) => tracing::warn!(%api_version, %kind, error = %e, "feed watch failed"),
                }
            }
        });
        let watch = Arc::new(KindWatch {
            resource,
            namespaced: scope.namespaced,
            store,
            synced,
            task: task.abort_handle(),
        });
        kinds.insert(gvk, watch.clone());
        self.watched
            .set(i64::try_from(kinds.len()).unwrap_or(i64::MAX));
        tracing::debug!(kind = %kind_text(feed), "feed watch started");
        watch
    }

    /// Stops the watch of every kind that no Subscription (not being deleted) names any more,
    /// and drops its objects. Returns the kinds released.
    pub async fn release_unused(&self) -> Vec<GroupVersionKind> {
        // Under the lock, so that a watch started for a Subscription already in the store is
        // never released by a sweep that read the store before it.
        let mut kinds = self.kinds.lock().await;
        let needed = named_kinds(&self.subscriptions.state());
        let unused: Vec<GroupVersionKind> = kinds
            .keys()
            .filter(|gvk| !needed.contains(*gvk))
            .cloned()
            .collect();
        for gvk in &unused {
            if let Some(watch) = kinds.remove(gvk) {
                watch.task.abort();
                tracing::info!(
                    kind = %format!("{} {}", watch.resource.api_version, watch.resource.kind),
                    "no Subscription names this kind any more; its feed watch is released"
                );
            }
        }
        self.watched
            .set(i64::try_from(kinds.len()).unwrap_or(i64::MAX));
        unused
    }

    /// Resolves `feed` to its object for a Subscription in `subscription_namespace`: the
    /// Manifest's template, else the live object; refused unless `grants` allow it.
    pub async fn resolve(
        &self,
        feed: &Feed,
        manifests: &Store<Manifest>,
        subscription_namespace: &str,
        grants: &[&FeedGrant],
    ) -> Result<Result<Value, FeedProblem>, Error> {
        let refused = |owner: FeedOwner| match tenancy::feed_access(
            subscription_namespace,
            feed,
            &owner,
            grants,
        ) {
            Access::Own | Access::Granted(_) => None,
            Access::Refused(refusal) => Some(FeedProblem::NotGranted(refusal)),
        };
        let scope = self.scope_of(feed).await?;
        if let Some(template) = manifest_template(feed, manifests) {
            // A Manifest is a copy of a feed, judged as the object it copies: its scope from
            // discovery (a kind the parent does not serve counts as cluster-scoped), and its
            // template must be that object, whatever its labels say.
            let namespaced = scope.as_ref().is_ok_and(|s| s.namespaced);
            if let Some(problem) = refused(tenancy::feed_owner(feed, namespaced)) {
                return Ok(Err(problem));
            }
            if let Some(difference) = super::plan::manifest_difference(feed, &template, namespaced)
            {
                return Ok(Err(FeedProblem::ManifestNotItsFeed(difference)));
            }
            return Ok(Ok(template));
        }
        let scope = match scope {
            Ok(scope) => scope,
            Err(problem) => return Ok(Err(problem)),
        };
        if let Some(problem) = refused(tenancy::feed_owner(feed, scope.namespaced)) {
            return Ok(Err(problem));
        }
        let watch = self.watch_for(feed, &scope).await;
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

/// Sends every Subscription naming `object` (of `api_version` and `kind`) to be reconciled.
/// False when the controller stopped listening.
async fn notify(
    subscriptions: &Store<Subscription>,
    triggers: &mpsc::Sender<ObjectRef<Subscription>>,
    api_version: &str,
    kind: &str,
    object: &DynamicObject,
) -> bool {
    let namespace = object.namespace().unwrap_or_default();
    for sub in subscriptions_naming(
        subscriptions,
        api_version,
        kind,
        &namespace,
        &object.name_any(),
    ) {
        if triggers.send(sub).await.is_err() {
            return false;
        }
    }
    true
}

/// What each feed object of one kind renders to, as a fingerprint: a watch event that changes
/// only what rendering strips (the parent's controllers writing status, a rollout revision) needs
/// no pass of its Subscriptions. Feeds are shared by many Subscriptions of many clusters each, so
/// a Deployment's status churning in the parent would otherwise re-render them all.
#[derive(Default)]
struct ContentPrints {
    current: HashMap<(String, String), u64>,
    /// Filled during a (re-)list, swapped in when it completes (objects deleted meanwhile go).
    relisting: Option<HashMap<(String, String), u64>>,
}

impl ContentPrints {
    fn init(&mut self) {
        self.relisting = Some(HashMap::new());
    }

    fn init_apply(&mut self, object: &DynamicObject) {
        if let Some(relisting) = &mut self.relisting {
            relisting.insert(object_key(object), content_fingerprint(object));
        }
    }

    fn init_done(&mut self) {
        if let Some(relisted) = self.relisting.take() {
            self.current = relisted;
        }
    }

    /// Records a watched change of `object`: whether what it renders to changed. Being deleted
    /// (a deletionTimestamp) is a change.
    fn changed(&mut self, object: &DynamicObject) -> bool {
        let print = content_fingerprint(object);
        let before = self.current.insert(object_key(object), print);
        object.metadata.deletion_timestamp.is_some() || before != Some(print)
    }

    /// Forgets a deleted object.
    fn forget(&mut self, object: &DynamicObject) {
        self.current.remove(&object_key(object));
    }
}

fn object_key(object: &DynamicObject) -> (String, String) {
    (object.namespace().unwrap_or_default(), object.name_any())
}

/// A hash of `object` as rendering sees it (server fields and status stripped).
fn content_fingerprint(object: &DynamicObject) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut doc = serde_json::to_value(object).unwrap_or(Value::Null);
    crate::overrides::strip_server_fields(&mut doc);
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    doc.to_string().hash(&mut hasher);
    hasher.finish()
}

/// The feed kinds that Subscriptions not being deleted name: the kinds whose watches are
/// still needed.
pub fn named_kinds(subscriptions: &[Arc<Subscription>]) -> HashSet<GroupVersionKind> {
    subscriptions
        .iter()
        .filter(|sub| sub.metadata.deletion_timestamp.is_none())
        .flat_map(|sub| sub.spec.feeds.iter().map(gvk_of))
        .collect()
}

/// The Subscriptions whose feeds a FeedGrant in `namespace` can decide about: feeds in that
/// namespace, the Namespace object of that name, and feeds without a namespace (read from
/// `default`, or cluster-scoped and granted in `clusternet-system`).
pub fn subscriptions_with_feeds_owned_by(
    subscriptions: &Store<Subscription>,
    namespace: &str,
) -> Vec<ObjectRef<Subscription>> {
    subscriptions_with_feed(subscriptions, |feed| {
        let feed_namespace = feed.namespace.as_deref().unwrap_or("");
        feed_namespace == namespace
            || feed_namespace.is_empty()
            || (feed.kind == "Namespace" && feed.name == namespace)
    })
}

/// The Manifest template of `feed`, found by the labels the hub and Clusternet put on Manifests.
pub fn manifest_template(feed: &Feed, manifests: &Store<Manifest>) -> Option<Value> {
    manifests
        .find(|m| super::plan::manifest_holds(m, feed))
        .map(|m| m.template.clone())
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
    fn only_kinds_named_by_subscriptions_not_being_deleted_keep_their_watch() {
        let mut leaving = sub("leaving", &[("v1", "Secret", "s")]);
        leaving.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let subscriptions = vec![
            Arc::new(sub(
                "a",
                &[("v1", "ConfigMap", "x"), ("apps/v1", "Deployment", "y")],
            )),
            Arc::new(sub("b", &[("v1", "ConfigMap", "z")])),
            Arc::new(leaving),
        ];
        let want: HashSet<GroupVersionKind> = [
            GroupVersionKind::gvk("", "v1", "ConfigMap"),
            GroupVersionKind::gvk("apps", "v1", "Deployment"),
        ]
        .into();
        assert_eq!(named_kinds(&subscriptions), want);
        assert!(named_kinds(&[]).is_empty());
    }

    #[test]
    fn a_grant_reaches_the_subscriptions_whose_feeds_its_namespace_owns() {
        let (store, mut writer) = reflector::store::<Subscription>();
        let mut other = sub("other", &[("v1", "ConfigMap", "x")]);
        other.spec.feeds[0].namespace = Some("elsewhere".into());
        let mut namespace = sub("ns", &[("v1", "Namespace", "apps")]);
        namespace.spec.feeds[0].namespace = None;
        for s in [sub("a", &[("v1", "Secret", "s")]), other, namespace] {
            writer.apply_watcher_event(&Event::Apply(s));
        }
        let mut names: Vec<String> = subscriptions_with_feeds_owned_by(&store, "apps")
            .into_iter()
            .map(|r| r.name)
            .collect();
        names.sort();
        assert_eq!(names, ["a", "ns"]);
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

    fn deployment(patch: serde_json::Value) -> DynamicObject {
        let mut doc = serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "apps", "resourceVersion": "1", "generation": 1},
            "spec": {"replicas": 3},
        });
        json_patch::merge(&mut doc, &patch);
        serde_json::from_value(doc).unwrap()
    }

    #[test]
    fn only_changes_rendering_sees_make_a_feed_changed() {
        let mut prints = ContentPrints::default();
        assert!(
            prints.changed(&deployment(serde_json::json!({}))),
            "first sight"
        );
        let not_rendered = [
            serde_json::json!({"metadata": {"resourceVersion": "2"}, "status": {"readyReplicas": 3}}),
            serde_json::json!({"metadata": {"resourceVersion": "3", "annotations": {"deployment.kubernetes.io/revision": "1"}}}),
        ];
        for patch in not_rendered {
            assert!(!prints.changed(&deployment(patch.clone())), "{patch}");
        }
        let rendered = [
            serde_json::json!({"spec": {"replicas": 4}}),
            serde_json::json!({"spec": {"replicas": 4}, "metadata": {"labels": {"tier": "web"}}}),
            serde_json::json!({"spec": {"replicas": 4}, "metadata": {"labels": {"tier": "web"}, "deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        ];
        for patch in rendered {
            assert!(prints.changed(&deployment(patch.clone())), "{patch}");
        }
        prints.forget(&deployment(serde_json::json!({})));
        assert!(
            prints.changed(&deployment(serde_json::json!({}))),
            "seen again after a deletion"
        );
    }

    #[test]
    fn a_relist_replaces_the_fingerprints_so_objects_deleted_meanwhile_are_forgotten() {
        let mut prints = ContentPrints::default();
        prints.changed(&deployment(serde_json::json!({})));
        prints.init();
        prints.init_apply(&deployment(
            serde_json::json!({"metadata": {"name": "api"}}),
        ));
        assert!(
            !prints.changed(&deployment(serde_json::json!({}))),
            "old prints serve until done"
        );
        prints.init_done();
        assert_eq!(prints.current.len(), 1);
        assert!(
            prints.changed(&deployment(serde_json::json!({}))),
            "web was gone from the list"
        );
        assert!(!prints.changed(&deployment(
            serde_json::json!({"metadata": {"name": "api"}})
        )));
    }
}
