//! The shared watch of every input kind the scheduler caches, and how the changes of each map
//! to triggers of the Subscriptions they affect (the list of triggers is in the parent module).

use super::{Trigger, Wiring, feeds, index, is_relist, spawn_reflector};
use crate::placement::ClusterInfo;
use atoll_crds::apps::{
    Description, Feed, Globalization, Localization, Manifest, OverridePolicy, Subscription,
};
use atoll_crds::atoll::FeedGrant;
use atoll_crds::clusters::{ApprovedResult, ClusterRegistrationRequest, ManagedCluster};
use atoll_crds::known;
use atoll_runtime::ready::Ready;
use futures::StreamExt;
use kube::api::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use tokio::sync::mpsc;

/// Starts the ManagedCluster watch. Only a change of what scheduling reads
/// ([`cluster_fingerprint`]) triggers every Subscription, so heartbeats cost no pass.
pub(super) fn clusters(client: &Client, wiring: &Wiring) -> Store<ManagedCluster> {
    let mut fingerprints: HashMap<String, u64> = HashMap::new();
    let all = wiring.all.clone();
    let bump = wiring.inputs.clone();
    spawn_reflector(
        Api::<ManagedCluster>::all(client.clone()),
        watcher::Config::default(),
        &wiring.inputs,
        &wiring.all,
        move |event| {
            let (cluster, initial) = match event {
                Event::Apply(c) | Event::Delete(c) => (c, false),
                Event::InitApply(c) => (c, true),
                _ => return Vec::new(),
            };
            let key = format!(
                "{}/{}",
                cluster.namespace().unwrap_or_default(),
                cluster.name_any()
            );
            let fingerprint = match event {
                Event::Delete(_) => 0,
                _ => cluster_fingerprint(cluster),
            };
            let previous = fingerprints.insert(key, fingerprint);
            if initial || previous == Some(fingerprint) {
                return Vec::new();
            }
            bump.bump();
            vec![Trigger::All(all.clone())]
        },
    )
}

/// Starts the Globalization watch (see [`overrides`]).
pub(super) fn globalizations(client: &Client, wiring: &Wiring) -> Store<Globalization> {
    overrides(Api::all(client.clone()), wiring, |g: &Globalization| {
        (&g.spec.feed, g.spec.override_policy)
    })
}

/// Starts the Localization watch (see [`overrides`]).
pub(super) fn localizations(client: &Client, wiring: &Wiring) -> Store<Localization> {
    overrides(Api::all(client.clone()), wiring, |l: &Localization| {
        (&l.spec.feed, l.spec.override_policy)
    })
}

/// Starts the watch of an override kind, whose objects name a feed and a policy (`target`).
/// Every change is an input change; an `ApplyNow` one also triggers the Subscriptions of its
/// feed at once (`ApplyLater` waits for their next pass).
fn overrides<K>(api: Api<K>, wiring: &Wiring, target: fn(&K) -> (&Feed, OverridePolicy)) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let override_subs = wiring.subscriptions.clone();
    let tx = wiring.one.clone();
    let bump = wiring.inputs.clone();
    spawn_reflector(
        api,
        watcher::Config::default(),
        &wiring.inputs,
        &wiring.all,
        move |event| {
            changed(event)
                .inspect(|_| bump.bump())
                .map(target)
                .filter(|(_, policy)| *policy == OverridePolicy::ApplyNow)
                .map(|(feed, _)| feed_triggers(&override_subs, feed, &tx))
                .unwrap_or_default()
        },
    )
}

/// Starts the watch of the Manifests in `clusternet-reserved`: a changed Manifest triggers the
/// Subscriptions whose feeds name the object it holds (read from its config labels).
pub(super) fn manifests(client: &Client, wiring: &Wiring) -> Store<Manifest> {
    let manifest_subs = wiring.subscriptions.clone();
    let tx = wiring.one.clone();
    let bump = wiring.inputs.clone();
    spawn_reflector(
        Api::<Manifest>::namespaced(client.clone(), known::NAMESPACE_RESERVED),
        watcher::Config::default(),
        &wiring.inputs,
        &wiring.all,
        move |event| {
            let Some(manifest) = changed(event) else {
                return Vec::new();
            };
            bump.bump();
            let labels = manifest.labels();
            let label = |k: &str| labels.get(k).map_or("", String::as_str);
            let group = label(known::LABEL_CONFIG_GROUP);
            let version = label(known::LABEL_CONFIG_VERSION);
            let api_version = if group.is_empty() {
                version.to_owned()
            } else {
                format!("{group}/{version}")
            };
            feeds::subscriptions_naming(
                &manifest_subs,
                &api_version,
                label(known::LABEL_CONFIG_KIND),
                label(known::LABEL_CONFIG_NAMESPACE),
                label(known::LABEL_CONFIG_NAME),
            )
            .into_iter()
            .map(|r| Trigger::One(tx.clone(), r))
            .collect()
        },
    )
}

/// Starts the FeedGrant watch: a changed grant triggers the Subscriptions with feeds its
/// namespace owns, so that a grant takes effect, and a revocation refuses the feed, at once.
pub(super) fn grants(client: &Client, wiring: &Wiring) -> Store<FeedGrant> {
    let grant_subs = wiring.subscriptions.clone();
    let tx = wiring.one.clone();
    let bump = wiring.inputs.clone();
    spawn_reflector(
        Api::<FeedGrant>::all(client.clone()),
        watcher::Config::default(),
        &wiring.inputs,
        &wiring.all,
        move |event| {
            let Some(grant) = changed(event) else {
                return Vec::new();
            };
            bump.bump();
            feeds::subscriptions_with_feeds_owned_by(
                &grant_subs,
                &grant.namespace().unwrap_or_default(),
            )
            .into_iter()
            .map(|r| Trigger::One(tx.clone(), r))
            .collect()
        },
    )
}

/// What a registration makes the scheduler trust: the cluster id and dedicated namespace of an
/// approved registration, nothing (`""`) otherwise. A request that waits (a new cluster's, or a
/// registered cluster's request to register again) changes no placement.
fn trusted_as(crr: &ClusterRegistrationRequest) -> String {
    match crr.status.as_ref() {
        Some(st) if st.result == Some(ApprovedResult::Approved) => format!(
            "{}:{}",
            crr.spec.cluster_id,
            st.dedicated_namespace.as_deref().unwrap_or_default()
        ),
        _ => String::new(),
    }
}

/// Starts the ClusterRegistrationRequest watch: which ManagedClusters the hub registered.
/// A change of what a registration makes the scheduler trust ([`trusted_as`]) can add or
/// remove a cluster from every placement, so it triggers every Subscription; nothing else
/// does, so that a flood of registration requests costs no reconciles.
pub(super) fn registrations(client: &Client, wiring: &Wiring) -> Store<ClusterRegistrationRequest> {
    let all = wiring.all.clone();
    let bump = wiring.inputs.clone();
    let mut registration_states: HashMap<String, String> = HashMap::new();
    spawn_reflector(
        Api::<ClusterRegistrationRequest>::all(client.clone()),
        watcher::Config::default(),
        &wiring.inputs,
        &wiring.all,
        move |event| {
            let (crr, initial) = match event {
                Event::Apply(c) | Event::Delete(c) => (c, false),
                Event::InitApply(c) => (c, true),
                _ => return Vec::new(),
            };
            let state = if matches!(event, Event::Delete(_)) {
                String::new()
            } else {
                trusted_as(crr)
            };
            let previous = registration_states.insert(crr.name_any(), state.clone());
            if initial || previous.unwrap_or_default() == state {
                return Vec::new();
            }
            bump.bump();
            vec![Trigger::All(all.clone())]
        },
    )
}

/// Starts the metadata-only watch of the Descriptions the scheduler wrote, feeding the
/// Description index; returns the index and a [`Ready`] set once the index has synced.
/// A Description deleted or edited by someone else triggers its Subscription, which writes it
/// again.
pub(super) fn descriptions(client: &Client, wiring: &Wiring) -> (index::DescriptionIndex, Ready) {
    // Metadata only: the render-hash annotation tells whether a write is needed, so the
    // scheduler never holds every rendered object in memory.
    let description_index = index::DescriptionIndex::default();
    let observed = description_index.clone();
    let bump = wiring.inputs.clone();
    let tx = wiring.one.clone();
    let description_events = watcher::watcher(
        Api::<PartialObjectMeta<Description>>::all(client.clone()),
        watcher::Config::default().labels(known::LABEL_SUBS_UID),
    )
    .default_backoff();
    let descriptions_synced = Ready::new();
    let synced = descriptions_synced.clone();
    let relisted = wiring.all.clone();
    tokio::spawn(async move {
        let mut events = std::pin::pin!(description_events);
        let mut listed = false;
        while let Some(event) = events.next().await {
            let event = match event {
                Ok(event) => event,
                Err(e) => {
                    tracing::warn!(kind = "Description", error = %e, "watch failed");
                    continue;
                }
            };
            // Descriptions deleted or edited while the watch was down: every Subscription's
            // next pass writes them again.
            if is_relist(&event, &mut listed)
                && Trigger::All(relisted.clone()).send().await.is_err()
            {
                return;
            }
            // A deleted Description, or one whose spec someone else edited, is written again
            // by its Subscription's next pass.
            let rewrite = observed.observe(&event);
            if rewrite || matches!(event, Event::InitDone) {
                bump.bump();
            }
            if observed.is_synced() {
                synced.set();
            }
            let (true, Event::Apply(description) | Event::Delete(description)) = (rewrite, &event)
            else {
                continue;
            };
            let labels = description.labels();
            if let (Some(ns), Some(name)) = (
                labels.get(known::LABEL_SUBS_NAMESPACE),
                labels.get(known::LABEL_SUBS_NAME),
            ) && tx.send(ObjectRef::new(name).within(ns)).await.is_err()
            {
                return;
            }
        }
    });
    (description_index, descriptions_synced)
}

/// What of a ManagedCluster affects scheduling (not its heartbeat timestamps).
fn cluster_fingerprint(cluster: &ManagedCluster) -> u64 {
    let info = ClusterInfo::from_managed_cluster(cluster);
    let mut hasher = DefaultHasher::new();
    info.labels.hash(&mut hasher);
    info.ready.hash(&mut hasher);
    info.allocatable.hash(&mut hasher);
    for taint in &info.taints {
        (&taint.key, &taint.value, &taint.effect).hash(&mut hasher);
    }
    cluster
        .metadata
        .deletion_timestamp
        .is_some()
        .hash(&mut hasher);
    hasher.finish()
}

/// The objects of `event` that changed (not the initial list).
fn changed<K>(event: &Event<K>) -> Option<&K> {
    match event {
        Event::Apply(k) | Event::Delete(k) => Some(k),
        _ => None,
    }
}

/// Triggers of the Subscriptions whose feeds name the object `feed` names.
fn feed_triggers(
    subscriptions: &Store<Subscription>,
    feed: &Feed,
    tx: &mpsc::Sender<ObjectRef<Subscription>>,
) -> Vec<Trigger> {
    feeds::subscriptions_naming(
        subscriptions,
        &feed.api_version,
        &feed.kind,
        feed.namespace.as_deref().unwrap_or(""),
        &feed.name,
    )
    .into_iter()
    .map(|r| Trigger::One(tx.clone(), r))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_crds::clusters::{
        ClusterRegistrationRequestSpec, ClusterRegistrationRequestStatus, ReRegistration,
    };

    fn request(status: Option<ClusterRegistrationRequestStatus>) -> ClusterRegistrationRequest {
        let mut crr = ClusterRegistrationRequest::new(
            "clusternet-a",
            ClusterRegistrationRequestSpec {
                cluster_id: "a".into(),
                ..ClusterRegistrationRequestSpec::default()
            },
        );
        crr.status = status;
        crr
    }

    fn status(
        result: Option<ApprovedResult>,
        ns: Option<&str>,
    ) -> ClusterRegistrationRequestStatus {
        ClusterRegistrationRequestStatus {
            result,
            dedicated_namespace: ns.map(str::to_owned),
            ..ClusterRegistrationRequestStatus::default()
        }
    }

    #[test]
    fn only_what_an_approved_registration_names_changes_placements() {
        let untrusted = [
            request(None),
            request(Some(status(None, None))),
            request(Some(status(
                Some(ApprovedResult::Denied),
                Some("clusternet-x"),
            ))),
            request(Some(status(Some(ApprovedResult::Failed), None))),
        ];
        for crr in &untrusted {
            assert_eq!(trusted_as(crr), "", "{:?}", crr.status);
        }
        let approved = request(Some(status(
            Some(ApprovedResult::Approved),
            Some("clusternet-x"),
        )));
        assert_eq!(trusted_as(&approved), "a:clusternet-x");
        // A request to register it again leaves what the registration names as it is.
        let mut asked = approved.clone();
        if let Some(st) = asked.status.as_mut() {
            st.re_registration = Some(ReRegistration::default());
            st.error_message = Some("anything".into());
        }
        assert_eq!(trusted_as(&asked), trusted_as(&approved));
        let moved = request(Some(status(
            Some(ApprovedResult::Approved),
            Some("clusternet-y"),
        )));
        assert_ne!(trusted_as(&moved), trusted_as(&approved));
    }
}
