//! Pure builders of what the hub writes: ManagedCluster status from heartbeats (and when a
//! stream ends), the unschedulable taint, Description status from reports, the finalizer
//! decision, lost-cluster detection, the Subscription's aggregated status, and the HelmReleases
//! of a Description's charts.

use crate::aggregation::{self, ClusterRef, DescriptionReport};
use crate::domain::ClusterHeartbeat;
use crate::index::{ChartEntry, ChartRelease, DescEntry};
pub use crate::report_order::{earlier_stream_status_arrived, same_status};
use atoll_applier::model::{ReleaseReport, Report};
use atoll_crds::apps::{DescriptionStatus, Feed, ManifestStatus, ReportOrder, Subscription};
use atoll_crds::clusters::{ManagedClusterStatus, NodeStatistics};
use atoll_crds::helm::{HelmReleaseSpec, HelmReleaseStatus};
use atoll_crds::{conditions, known};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The Ready condition a heartbeat implies: `(status, reason, message)`.
pub fn ready_from_heartbeat(hb: &ClusterHeartbeat) -> (&'static str, &'static str, String) {
    let failing: Vec<&str> = [
        ("healthz", hb.cluster.healthz),
        ("livez", hb.cluster.livez),
        ("readyz", hb.cluster.readyz),
    ]
    .into_iter()
    .filter(|(_, ok)| !ok)
    .map(|(n, _)| n)
    .collect();
    if failing.is_empty() {
        (
            "True",
            known::REASON_MANAGED_CLUSTER_READY,
            "the agent is connected and the child API server is healthy".into(),
        )
    } else {
        (
            "False",
            known::REASON_MANAGED_CLUSTER_NOT_READY,
            format!("the child API server's {} check failed", failing.join(", ")),
        )
    }
}

fn quantities(m: &BTreeMap<String, String>) -> BTreeMap<String, Quantity> {
    m.iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| (k.clone(), Quantity(v.clone())))
        .collect()
}

/// The ManagedCluster status after heartbeat `hb` at `now`, starting from `existing` (kept:
/// fields the hub does not derive from heartbeats, and condition transition times).
pub fn status_from_heartbeat(
    hb: &ClusterHeartbeat,
    existing: Option<&ManagedClusterStatus>,
    now: Timestamp,
) -> ManagedClusterStatus {
    let mut s = existing.cloned().unwrap_or_default();
    s.last_observed_time = Some(Time(now));
    s.k8s_version = Some(hb.cluster.k8s_version.clone()).filter(|v| !v.is_empty());
    s.platform = Some(hb.cluster.platform.clone()).filter(|v| !v.is_empty());
    s.agent_version = Some(hb.agent_version.clone()).filter(|v| !v.is_empty());
    s.node_statistics = Some(NodeStatistics {
        ready_nodes: Some(hb.cluster.ready_nodes),
        not_ready_nodes: Some(hb.cluster.not_ready_nodes),
        unknown_nodes: Some(hb.cluster.unknown_nodes),
        lost_nodes: None,
    });
    s.capacity = quantities(&hb.cluster.capacity);
    s.allocatable = quantities(&hb.cluster.allocatable);
    s.healthz = hb.cluster.healthz;
    s.livez = hb.cluster.livez;
    s.readyz = hb.cluster.readyz;
    s.heartbeat_frequency_seconds = Some(i64::from(hb.heartbeat_seconds)).filter(|v| *v > 0);
    let (status, reason, message) = ready_from_heartbeat(hb);
    conditions::set(
        &mut s.conditions,
        conditions::new(
            known::CONDITION_READY,
            status,
            reason,
            &message,
            None,
            Time(now),
        ),
    );
    let held_before = conditions::get(&s.conditions, known::CONDITION_PRUNE_HELD).is_some();
    if let Some((status, reason, message)) = prune_held_from_heartbeat(hb, held_before) {
        conditions::set(
            &mut s.conditions,
            conditions::new(
                known::CONDITION_PRUNE_HELD,
                status,
                reason,
                &message,
                None,
                Time(now),
            ),
        );
    }
    s
}

/// Reason of `PruneHeld=True`.
pub const REASON_PRUNE_OVER_LIMIT: &str = "PruneOverLimit";
/// Reason of `PruneHeld=True` when the prune would delete objects an earlier registration of
/// the cluster applied (it re-registered into another dedicated namespace).
pub const REASON_PRUNE_OF_EARLIER_REGISTRATION: &str = "PruneOfEarlierRegistration";
/// Reason of `PruneHeld=False`, once a hold is over (confirmed, or no longer needed).
pub const REASON_NO_PRUNE_HELD: &str = "NoPruneHeld";

/// The PruneHeld condition a heartbeat implies: `True` with what is held and how to confirm it
/// when the agent holds a prune back; `False` when it holds none and the condition was there
/// (`held_before`), so that its end is seen; nothing when there never was a hold.
pub fn prune_held_from_heartbeat(
    hb: &ClusterHeartbeat,
    held_before: bool,
) -> Option<(&'static str, &'static str, String)> {
    match &hb.prune_hold {
        Some(h) => {
            let more = h.description_count as usize > h.descriptions.len();
            let (reason, why) = if h.earlier_registration_objects > 0 {
                (
                    REASON_PRUNE_OF_EARLIER_REGISTRATION,
                    format!(
                        "{} of them applied for an earlier registration of this cluster and \
                         taken over by no Description of this one",
                        h.earlier_registration_objects
                    ),
                )
            } else {
                (
                    REASON_PRUNE_OVER_LIMIT,
                    format!("over its limit of {}%", h.max_percent),
                )
            };
            Some((
                "True",
                reason,
                format!(
                    "the agent holds back a prune of {} Description(s) the hub no longer has ({}{}): \
                     {} of the {} objects it owns, {why}; if that is intended, \
                     confirm it with the annotation {}={} on this ManagedCluster",
                    h.description_count,
                    h.descriptions.join(", "),
                    if more { ", …" } else { "" },
                    h.objects,
                    h.owned_objects,
                    known::ANNOTATION_CONFIRM_PRUNE,
                    h.id,
                ),
            ))
        }
        None if held_before => Some((
            "False",
            REASON_NO_PRUNE_HELD,
            "the agent holds no prune back".to_string(),
        )),
        None => None,
    }
}

/// The ManagedCluster status once its agent's stream ended: `Ready=Unknown`
/// (`ClusterStatusUnknown`), everything else kept.
pub fn status_disconnected(
    existing: Option<&ManagedClusterStatus>,
    now: Timestamp,
) -> ManagedClusterStatus {
    status_with_ready(
        existing,
        "Unknown",
        known::REASON_CLUSTER_STATUS_UNKNOWN,
        "the agent's stream to the hub ended and it has not reconnected",
        now,
    )
}

/// Reason of `Ready=False` on a Push cluster whose deployer Secret the hub refuses to use.
pub const REASON_PUSH_CREDENTIALS_REFUSED: &str = "PushCredentialsRefused";

/// The ManagedCluster status of a Push cluster whose credentials cannot be used: `Ready=False`
/// (`PushCredentialsRefused`) with `message`, everything else kept.
pub fn status_push_credentials_refused(
    existing: Option<&ManagedClusterStatus>,
    message: &str,
    now: Timestamp,
) -> ManagedClusterStatus {
    status_with_ready(
        existing,
        "False",
        REASON_PUSH_CREDENTIALS_REFUSED,
        message,
        now,
    )
}

fn status_with_ready(
    existing: Option<&ManagedClusterStatus>,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> ManagedClusterStatus {
    let mut s = existing.cloned().unwrap_or_default();
    conditions::set(
        &mut s.conditions,
        conditions::new(
            known::CONDITION_READY,
            status,
            reason,
            message,
            None,
            Time(now),
        ),
    );
    s
}

/// Whether a Ready cluster's heartbeats are overdue at `now`: its last one is older than `min`
/// (the hub's `--silent-heartbeats`, see `run::SilentDetection`) and than two of the cluster's
/// own periods (one late heartbeat is not silence). This catches agents that hang with their
/// stream open, and clusters whose agent never came back after a hub restart (no stream end to
/// notice). Silence counts from `watching_since` at the earliest (when this hub started to
/// watch): while no hub ran, agents had nowhere to send heartbeats, and after a restart they
/// get the same time to come back as a running hub gives them between heartbeats.
pub fn heartbeat_overdue(
    status: Option<&ManagedClusterStatus>,
    now: Timestamp,
    min: Duration,
    watching_since: Timestamp,
) -> bool {
    let Some(s) = status else { return false };
    if conditions::status(&s.conditions, known::CONDITION_READY) != Some("True") {
        return false;
    }
    let period = u64::try_from(s.heartbeat_frequency_seconds.unwrap_or(10).max(1)).unwrap_or(10);
    let allowed = Duration::from_secs(period.saturating_mul(2)).max(min);
    let allowed = SignedDuration::try_from(allowed).unwrap_or(SignedDuration::MAX);
    s.last_observed_time
        .as_ref()
        .is_some_and(|t| now.duration_since(t.0.max(watching_since)) > allowed)
}

/// The taint list with the unschedulable taint set to `reason` (`Some`) or removed (`None`);
/// `None` when nothing changes.
pub fn with_unschedulable_taint(taints: &[Taint], reason: Option<&str>) -> Option<Vec<Taint>> {
    let current = taints
        .iter()
        .find(|t| t.key == known::TAINT_UNSCHEDULABLE && t.effect == "NoSchedule");
    match (reason, current) {
        (None, None) => None,
        (Some(r), Some(t)) if t.value.as_deref() == Some(r) => None,
        (None, Some(_)) => Some(
            taints
                .iter()
                .filter(|t| !(t.key == known::TAINT_UNSCHEDULABLE && t.effect == "NoSchedule"))
                .cloned()
                .collect(),
        ),
        (Some(r), _) => {
            let mut out: Vec<Taint> = taints
                .iter()
                .filter(|t| !(t.key == known::TAINT_UNSCHEDULABLE && t.effect == "NoSchedule"))
                .cloned()
                .collect();
            out.push(Taint {
                key: known::TAINT_UNSCHEDULABLE.into(),
                value: Some(r.into()),
                effect: "NoSchedule".into(),
                time_added: None,
            });
            Some(out)
        }
    }
}

/// A fingerprint of what a Description status says (its report order left out), for
/// remembering what was written without keeping it.
pub fn status_fingerprint(status: &DescriptionStatus) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    let bytes = if status.report_order.is_some() {
        let mut content = status.clone();
        content.report_order = None;
        serde_json::to_vec(&content)
    } else {
        serde_json::to_vec(status)
    };
    bytes.unwrap_or_default().hash(&mut hasher);
    hasher.finish()
}

/// The next report sequence number of this hub process after `last`: one more, and never below
/// the wall clock's microseconds, so that a restarted hub goes on past its earlier process.
pub fn next_report_sequence(last: i64, now_micros: i64) -> i64 {
    last.saturating_add(1).max(now_micros)
}

/// Whether a status written at `before` was replaced by a write of an earlier report, `now`.
/// Only agent streams' orders (epoch 1 and up) compare: one stream's reports reach one hub
/// process, in the order the agent saw its cluster. A pushed cluster has every hub replica
/// writing from its own view of the child, so its writes carry no order (an epoch 0 is one
/// written before that, not compared either); its writers check their reports against the
/// status instead (`push`).
pub fn report_order_went_back(before: Option<ReportOrder>, now: Option<ReportOrder>) -> bool {
    match (before, now) {
        (Some(b), Some(n)) => b.epoch > 0 && n.epoch > 0 && n < b,
        _ => false,
    }
}

/// Whether status `wanted` must be written, given the status the watch last showed and the
/// fingerprint of what this hub last wrote (`None`: nothing since the watch caught up). The
/// watch lags behind writes: with only its view, a report going back to the status the watch
/// still shows (ready, then not ready, then ready again) was skipped while the parent held the
/// one in between, and the Description kept it for good.
pub fn description_status_write_needed(
    watched: Option<&DescriptionStatus>,
    last_written: Option<u64>,
    wanted: &DescriptionStatus,
) -> bool {
    if !watched.is_some_and(|w| same_status(w, wanted)) {
        return true;
    }
    last_written.is_some_and(|written| written != status_fingerprint(wanted))
}

/// The Description status a report implies (conditions kept from `existing`).
pub fn description_status(
    report: &Report,
    existing: Option<&DescriptionStatus>,
) -> DescriptionStatus {
    let errors: Vec<String> = report
        .objects
        .iter()
        .filter_map(|o| {
            let (object, error) = (&o.object, o.error.as_ref()?);
            Some(format!(
                "{} {}/{}: {error}",
                object.kind, object.namespace, object.name
            ))
        })
        .collect();
    let reason = if !report.reason.is_empty() {
        Some(report.reason.clone())
    } else if !errors.is_empty() {
        Some(errors.join("; "))
    } else {
        None
    };
    DescriptionStatus {
        phase: Some(report.phase),
        reason,
        manifest_statuses: report
            .objects
            .iter()
            .map(|o| ManifestStatus {
                feed: Feed {
                    api_version: o.object.api_version.clone(),
                    kind: o.object.kind.clone(),
                    namespace: Some(o.object.namespace.clone()).filter(|n| !n.is_empty()),
                    name: o.object.name.clone(),
                },
                observed_status: o.status.clone(),
            })
            .collect(),
        observed_generation: Some(report.observed_generation),
        conditions: existing.map(|e| e.conditions.clone()).unwrap_or_default(),
        report_order: None,
    }
}

/// Adds to a Description status one `manifestStatuses` entry per chart whose release Helm
/// reports `deployed`, under the HelmChart feed's identity, with the release's state as its
/// observed status: the Subscription's aggregated status then shows each chart per cluster as
/// it shows any feed.
pub fn add_chart_statuses(status: &mut DescriptionStatus, charts: &[ChartEntry], report: &Report) {
    for chart in charts.iter().filter_map(|c| c.release.as_ref()) {
        let Some(release) = reported_release(chart, report)
            .filter(|r| r.error.is_none())
            .and_then(|r| r.status.as_ref())
            .filter(|s| s.phase == "deployed")
        else {
            continue;
        };
        status.manifest_statuses.push(ManifestStatus {
            feed: Feed {
                api_version: atoll_crds::apps::API_VERSION.to_owned(),
                kind: atoll_crds::helm::HELM_CHART_KIND.to_owned(),
                namespace: Some(chart.chart_namespace.clone()).filter(|n| !n.is_empty()),
                name: chart.name.clone(),
            },
            observed_status: Some(json!({
                "phase": release.phase,
                "version": release.revision,
                "chartVersion": release.chart_version,
                "lastDeployed": release.last_deployed,
            })),
        });
    }
}

/// What the report says of a chart's release.
fn reported_release<'r>(chart: &ChartRelease, report: &'r Report) -> Option<&'r ReleaseReport> {
    report
        .releases
        .iter()
        .find(|r| r.name == chart.name && r.namespace == chart.target_namespace)
}

/// The name of the HelmRelease of one chart of a Description, as Clusternet names it:
/// `<description>-<chart-namespace>-<chart-name>`.
pub fn helm_release_name(description: &str, chart_namespace: &str, chart_name: &str) -> String {
    format!("{description}-{chart_namespace}-{chart_name}")
}

/// The HelmReleases a Description's charts and its report imply, each with the server-side apply
/// body of the object (spec, labels, owned by the Description so that it goes with it) and of
/// its status. A chart whose object cannot be read is left out.
pub fn helm_releases(
    namespace: &str,
    entry: &DescEntry,
    report: &Report,
) -> Vec<(String, Value, Value)> {
    let mut out = Vec::new();
    for (chart, values) in entry
        .charts
        .iter()
        .filter_map(|c| Some((c.release.as_ref()?, &c.values)))
    {
        let name = helm_release_name(&entry.name, &chart.chart_namespace, &chart.name);
        let mut labels: BTreeMap<String, String> = entry
            .labels
            .iter()
            .filter(|(k, _)| {
                [
                    known::LABEL_SUBS_NAME,
                    known::LABEL_SUBS_NAMESPACE,
                    known::LABEL_SUBS_UID,
                    known::LABEL_CLUSTER_ID,
                    known::LABEL_CLUSTER_NAME,
                ]
                .contains(&k.as_str())
            })
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        labels.insert(known::LABEL_CONFIG_KIND.into(), "Description".into());
        labels.insert(known::LABEL_CONFIG_NAME.into(), entry.name.clone());
        labels.insert(known::LABEL_CONFIG_NAMESPACE.into(), namespace.to_owned());
        labels.insert(known::LABEL_CONFIG_UID.into(), entry.uid.clone());
        let spec = HelmReleaseSpec {
            options: chart.options.clone(),
            release_name: Some(chart.name.clone()),
            target_namespace: chart.target_namespace.clone(),
            overrides: Some(k8s_openapi::ByteString(values.to_vec())),
        };
        let object = json!({
            "apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "HelmRelease",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": labels,
                "ownerReferences": [{
                    "apiVersion": "apps.clusternet.io/v1alpha1",
                    "kind": "Description",
                    "name": entry.name,
                    "uid": entry.uid,
                    "controller": true,
                    "blockOwnerDeletion": false,
                }],
            },
            "spec": spec,
        });
        let released = reported_release(chart, report);
        let helm = released.and_then(|r| r.status.clone()).unwrap_or_default();
        let text = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        let status = HelmReleaseStatus {
            first_deployed: text(&helm.first_deployed),
            last_deployed: text(&helm.last_deployed),
            description: released
                .and_then(|r| r.error.clone())
                .or_else(|| text(&helm.description)),
            phase: text(&helm.phase).or_else(|| {
                released
                    .and_then(|r| r.error.as_ref())
                    .map(|_| "failed".to_owned())
            }),
            notes: text(&helm.notes),
            version: (helm.revision > 0).then_some(helm.revision),
        };
        let status = json!({
            "apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "HelmRelease",
            "status": status,
        });
        out.push((name, object, status));
    }
    out
}

/// The server-side apply body of a Description status.
pub fn description_status_patch(status: &DescriptionStatus) -> Value {
    json!({
        "apiVersion": "apps.clusternet.io/v1alpha1",
        "kind": "Description",
        "status": status,
    })
}

/// The status `previous` showed when `current` (the same Description, by uid) shows one of an
/// older generation, or of the same generation from an earlier report: every writer of a
/// Description's status reports the newest generation its cluster applied, and the hub orders
/// its report writes ([`ReportOrder`]), so such a status is an older write landing late (a
/// request held up in the network) and must be written again as it was. `None` otherwise.
pub fn status_taken_back<'a>(
    previous: &'a DescEntry,
    current: &DescEntry,
) -> Option<&'a DescriptionStatus> {
    if previous.uid != current.uid {
        return None;
    }
    let before = previous.status.as_ref()?;
    let now = current.status.as_ref()?;
    let (was, is) = (before.observed_generation?, now.observed_generation?);
    let back =
        was > is || (was == is && report_order_went_back(before.report_order, now.report_order));
    back.then_some(before)
}

/// A merge patch that puts `status` back on a Description still at `resource_version` (the
/// API server answers 409 once anything changed it since), clearing what `status` lacks.
pub fn status_restore_patch(status: &DescriptionStatus, resource_version: &str) -> Value {
    let mut fields = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    if let Some(map) = fields.as_object_mut() {
        for key in [
            "phase",
            "reason",
            "manifestStatuses",
            "observedGeneration",
            "conditions",
            "reportOrder",
        ] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    json!({"metadata": {"resourceVersion": resource_version}, "status": fields})
}

/// The server-side apply body of a ManagedCluster status.
pub fn managed_cluster_status_patch(status: &ManagedClusterStatus) -> Value {
    json!({
        "apiVersion": "clusters.clusternet.io/v1beta1",
        "kind": "ManagedCluster",
        "status": status,
    })
}

/// The state of a Description's cluster, for the finalizer decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterState {
    /// A ManagedCluster exists in the namespace and is not lost.
    Registered,
    /// The ManagedCluster has not been Ready for longer than the lost-cluster timeout.
    Lost,
    /// No ManagedCluster in the namespace (never registered, or deleted).
    Absent,
}

/// What to do with the hub's finalizer on a Description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalizerAction {
    /// Add it.
    Add,
    /// Remove it.
    Remove,
    /// Leave it.
    Keep,
}

/// Whether [`finalizer_action`] for `entry` depends on its cluster's state: only for a live
/// Description without the finalizer or a deleting one with it. Every other entry (nearly every
/// update: a live Description that has it) is `Keep` whatever the cluster, so the caller can skip
/// looking its cluster up (a scan of every ManagedCluster).
pub fn finalizer_depends_on_cluster(entry: &DescEntry) -> bool {
    entry.deleting == entry.has_finalizer()
}

/// The finalizer rule: a live Description of a registered cluster carries the finalizer; a
/// deleting Description keeps it until its agent reports `deleted` (handled by the report
/// path) or its cluster is lost or gone.
pub fn finalizer_action(entry: &DescEntry, cluster: ClusterState) -> FinalizerAction {
    match (entry.deleting, entry.has_finalizer(), cluster) {
        (true, true, ClusterState::Lost | ClusterState::Absent) => FinalizerAction::Remove,
        (false, false, ClusterState::Registered) => FinalizerAction::Add,
        _ => FinalizerAction::Keep,
    }
}

/// Whether a cluster is lost at `now`: its Ready condition is not True and has not been for
/// longer than `timeout` (a cluster that never reported counts from `created`).
pub fn cluster_lost(
    status: Option<&ManagedClusterStatus>,
    created: Option<Timestamp>,
    now: Timestamp,
    timeout: Duration,
) -> bool {
    let since = match status.and_then(|s| conditions::get(&s.conditions, known::CONDITION_READY)) {
        Some(c) if c.status == "True" => return false,
        Some(c) => Some(c.last_transition_time.0),
        None => created,
    };
    let timeout = SignedDuration::try_from(timeout).unwrap_or(SignedDuration::MAX);
    since.is_some_and(|t| now.duration_since(t) > timeout)
}

/// The `status.aggregatedStatuses`/`completedReleases` the hub owns on a Subscription, as a
/// server-side apply body, or `None` when the Subscription already shows them. `cluster_id`
/// maps a binding cluster's `(namespace, name)` to its ManagedCluster's clusterId.
pub fn subscription_status_patch(
    sub: &Subscription,
    descriptions: &[Arc<DescEntry>],
    cluster_id: impl Fn(&str, &str) -> Option<String>,
) -> Option<Value> {
    let bindings: Vec<ClusterRef> = sub
        .status
        .as_ref()
        .map(|s| s.binding_clusters.as_slice())
        .unwrap_or_default()
        .iter()
        .filter_map(|b| known::parse_binding_cluster(b))
        .map(|(ns, name)| ClusterRef {
            namespace: ns.to_string(),
            name: name.to_string(),
            id: cluster_id(ns, name).unwrap_or_default(),
        })
        .collect();
    let reports: Vec<DescriptionReport<'_>> = descriptions
        .iter()
        .filter(|d| !d.deleting)
        .filter_map(|d| {
            d.status.as_ref().map(|status| DescriptionReport {
                namespace: &d.namespace,
                status,
            })
        })
        .collect();
    let aggregated = aggregation::aggregate(&sub.spec.feeds, &bindings, &reports);
    let completed = aggregation::completed_releases(&bindings, &reports);
    let current = sub.status.as_ref();
    let same = current.is_some_and(|s| {
        s.aggregated_statuses == aggregated && s.completed_releases == Some(completed)
    });
    if same {
        return None;
    }
    Some(json!({
        "apiVersion": "apps.clusternet.io/v1alpha1",
        "kind": "Subscription",
        "status": {
            "aggregatedStatuses": aggregated,
            "completedReleases": completed,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_applier::heartbeat::Heartbeat;
    use atoll_applier::model::{ObjectRef, ObjectReport};
    use atoll_crds::apps::DescriptionPhase;
    use atoll_crds::apps::{SubscriptionSpec, SubscriptionStatus};

    #[test]
    fn a_status_the_lagging_watch_still_shows_is_written_when_another_was_written_since() {
        let status = |phase: DescriptionPhase, reason: &str| DescriptionStatus {
            phase: Some(phase),
            reason: Some(reason.to_owned()).filter(|r| !r.is_empty()),
            ..DescriptionStatus::default()
        };
        let ready = status(DescriptionPhase::Success, "");
        let not_ready = status(DescriptionPhase::Failure, "Deployment web: not ready");
        // Nothing written since the watch caught up: its view decides.
        assert!(!description_status_write_needed(Some(&ready), None, &ready));
        assert!(description_status_write_needed(
            Some(&ready),
            None,
            &not_ready
        ));
        assert!(description_status_write_needed(None, None, &ready));
        // `not_ready` was written and the watch still shows `ready`: going back to `ready`
        // must be written (it was skipped, and the Description kept `not_ready` for good).
        let written = Some(status_fingerprint(&not_ready));
        assert!(description_status_write_needed(
            Some(&ready),
            written,
            &ready
        ));
        // The same status written again while the watch lags: no second write needed.
        let written = Some(status_fingerprint(&ready));
        assert!(!description_status_write_needed(
            Some(&ready),
            written,
            &ready
        ));
        // The watch shows the order of the last write; a report saying the same (not yet
        // numbered) needs no write, whatever the order.
        let mut ordered = ready.clone();
        ordered.report_order = Some(ReportOrder {
            epoch: 3,
            sequence: 7,
        });
        assert!(!description_status_write_needed(
            Some(&ordered),
            None,
            &ready
        ));
        assert!(!description_status_write_needed(
            Some(&ordered),
            Some(status_fingerprint(&ordered)),
            &ready
        ));
    }

    #[test]
    fn a_stream_gets_its_description_again_when_an_earlier_streams_status_arrives() {
        let status = |phase: DescriptionPhase, epoch: Option<i64>| DescriptionStatus {
            phase: Some(phase),
            report_order: epoch.map(|epoch| ReportOrder { epoch, sequence: 1 }),
            ..DescriptionStatus::default()
        };
        let (success, failure) = (DescriptionPhase::Success, DescriptionPhase::Failure);
        for (before, now, stream, again, why) in [
            (
                Some(status(success, Some(2))),
                Some(status(failure, Some(3))),
                4,
                true,
                "stream 3's write seen while stream 4 runs",
            ),
            (
                None,
                Some(status(failure, Some(3))),
                4,
                true,
                "the first status seen",
            ),
            (
                Some(status(failure, Some(2))),
                Some(status(failure, Some(3))),
                4,
                false,
                "the same status",
            ),
            (
                Some(status(success, Some(4))),
                Some(status(failure, Some(3))),
                4,
                false,
                "this stream's status taken back: restored instead",
            ),
            (
                Some(status(success, Some(2))),
                Some(status(failure, Some(4))),
                4,
                false,
                "this stream's own write",
            ),
            (
                Some(status(success, Some(2))),
                Some(status(failure, Some(5))),
                4,
                false,
                "a newer stream's write",
            ),
            (
                Some(status(success, Some(2))),
                Some(status(failure, None)),
                4,
                false,
                "a rejection, written without an order",
            ),
            (
                Some(status(success, Some(0))),
                Some(status(failure, Some(0))),
                0,
                false,
                "a pushed cluster",
            ),
            (Some(status(success, Some(2))), None, 4, false, "no status"),
        ] {
            assert_eq!(
                earlier_stream_status_arrived(before.as_ref(), now.as_ref(), stream),
                again,
                "{why}"
            );
        }
    }

    #[test]
    fn report_sequence_numbers_grow_and_start_past_an_earlier_process() {
        assert_eq!(next_report_sequence(0, 1_000), 1_000, "a new process");
        assert_eq!(
            next_report_sequence(1_000, 1_000),
            1_001,
            "the same microsecond"
        );
        assert_eq!(
            next_report_sequence(5_000, 1_000),
            5_001,
            "the clock went back"
        );
        assert_eq!(next_report_sequence(1_001, 9_000), 9_000);
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn hb(h: bool, l: bool, r: bool) -> ClusterHeartbeat {
        ClusterHeartbeat {
            cluster: Heartbeat {
                k8s_version: "v1.33.1".into(),
                platform: "linux/amd64".into(),
                ready_nodes: 3,
                capacity: [("cpu".to_string(), "8".to_string())].into(),
                allocatable: [("cpu".to_string(), "7".to_string())].into(),
                healthz: h,
                livez: l,
                readyz: r,
                ..Heartbeat::default()
            },
            agent_version: "0.1.0".into(),
            heartbeat_seconds: 10,
            ..Default::default()
        }
    }

    #[test]
    fn a_held_prune_shows_as_a_condition_that_says_how_to_confirm_it_and_clears_after() {
        let now = ts("2026-01-01T00:00:00Z");
        let quiet = status_from_heartbeat(&hb(true, true, true), None, now);
        assert!(
            conditions::get(&quiet.conditions, known::CONDITION_PRUNE_HELD).is_none(),
            "no condition while there never was a hold"
        );
        let mut held = hb(true, true, true);
        held.prune_hold = Some(crate::domain::PruneHold {
            id: "abc123".into(),
            descriptions: vec!["c.a".into(), "c.b".into()],
            description_count: 3,
            objects: 6,
            owned_objects: 8,
            max_percent: 50,
            earlier_registration_objects: 0,
        });
        let s = status_from_heartbeat(&held, Some(&quiet), now);
        let c = conditions::get(&s.conditions, known::CONDITION_PRUNE_HELD).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", REASON_PRUNE_OVER_LIMIT)
        );
        for part in [
            "3 Description(s)",
            "c.a, c.b, …",
            "6 of the 8",
            "50%",
            "hub.atoll.io/confirm-prune=abc123",
        ] {
            assert!(c.message.contains(part), "{part} in {}", c.message);
        }
        let mut earlier = held.clone();
        if let Some(h) = earlier.prune_hold.as_mut() {
            h.earlier_registration_objects = 2;
        }
        let e = status_from_heartbeat(&earlier, Some(&quiet), now);
        let c = conditions::get(&e.conditions, known::CONDITION_PRUNE_HELD).unwrap();
        assert_eq!(c.reason, REASON_PRUNE_OF_EARLIER_REGISTRATION);
        assert!(
            c.message
                .contains("2 of them applied for an earlier registration"),
            "{}",
            c.message
        );
        let later = ts("2026-01-01T00:01:00Z");
        let s = status_from_heartbeat(&hb(true, true, true), Some(&s), later);
        let c = conditions::get(&s.conditions, known::CONDITION_PRUNE_HELD).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", REASON_NO_PRUNE_HELD)
        );
        assert_eq!(c.last_transition_time.0, later);
    }

    #[test]
    fn ready_condition_follows_the_health_probes() {
        let cases = [
            (
                (true, true, true),
                "True",
                known::REASON_MANAGED_CLUSTER_READY,
                "",
            ),
            (
                (false, true, true),
                "False",
                known::REASON_MANAGED_CLUSTER_NOT_READY,
                "healthz",
            ),
            (
                (true, true, false),
                "False",
                known::REASON_MANAGED_CLUSTER_NOT_READY,
                "readyz",
            ),
            (
                (true, false, false),
                "False",
                known::REASON_MANAGED_CLUSTER_NOT_READY,
                "livez, readyz",
            ),
        ];
        for ((h, l, r), status, reason, mentions) in cases {
            let (s, why, msg) = ready_from_heartbeat(&hb(h, l, r));
            assert_eq!((s, why), (status, reason));
            assert!(msg.contains(mentions), "{msg}");
        }
    }

    #[test]
    fn heartbeat_status_fills_fields_and_keeps_transition_time_while_ready() {
        let t0 = ts("2026-01-01T00:00:00Z");
        let t1 = ts("2026-01-01T00:00:10Z");
        let s0 = status_from_heartbeat(&hb(true, true, true), None, t0);
        assert_eq!(s0.k8s_version.as_deref(), Some("v1.33.1"));
        assert_eq!(s0.capacity.get("cpu"), Some(&Quantity("8".into())));
        assert_eq!(s0.allocatable.get("cpu"), Some(&Quantity("7".into())));
        assert_eq!(
            s0.node_statistics.as_ref().and_then(|n| n.ready_nodes),
            Some(3)
        );
        assert_eq!(s0.heartbeat_frequency_seconds, Some(10));
        let s1 = status_from_heartbeat(&hb(true, true, true), Some(&s0), t1);
        assert_eq!(s1.last_observed_time, Some(Time(t1)));
        let ready = conditions::get(&s1.conditions, "Ready").unwrap();
        assert_eq!(ready.last_transition_time, Time(t0));
        let s2 = status_from_heartbeat(&hb(false, true, true), Some(&s1), t1);
        let ready = conditions::get(&s2.conditions, "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.last_transition_time.clone()),
            ("False", Time(t1))
        );
    }

    #[test]
    fn disconnect_sets_ready_unknown_and_keeps_the_rest() {
        let t0 = ts("2026-01-01T00:00:00Z");
        let s0 = status_from_heartbeat(&hb(true, true, true), None, t0);
        let s1 = status_disconnected(Some(&s0), ts("2026-01-01T00:01:00Z"));
        let ready = conditions::get(&s1.conditions, "Ready").unwrap();
        assert_eq!(ready.status, "Unknown");
        assert_eq!(ready.reason, known::REASON_CLUSTER_STATUS_UNKNOWN);
        assert_eq!(s1.k8s_version, s0.k8s_version);
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn unschedulable_taint_is_added_replaced_removed_and_left_alone() {
        let other = Taint {
            key: "other".into(),
            effect: "NoExecute".into(),
            ..Default::default()
        };
        let ours = |v: &str| Taint {
            key: known::TAINT_UNSCHEDULABLE.into(),
            value: Some(v.into()),
            effect: "NoSchedule".into(),
            time_added: None,
        };
        let cases: Vec<(Vec<Taint>, Option<&str>, Option<Vec<Taint>>)> = vec![
            (vec![], None, None),
            (
                vec![other.clone()],
                Some("ClusterStatusUnknown"),
                Some(vec![other.clone(), ours("ClusterStatusUnknown")]),
            ),
            (
                vec![ours("ClusterStatusUnknown")],
                Some("ClusterStatusUnknown"),
                None,
            ),
            (vec![ours("A")], Some("B"), Some(vec![ours("B")])),
            (
                vec![ours("A"), other.clone()],
                None,
                Some(vec![other.clone()]),
            ),
        ];
        for (taints, reason, want) in cases {
            assert_eq!(
                with_unschedulable_taint(&taints, reason),
                want,
                "{taints:?} {reason:?}"
            );
        }
    }

    #[test]
    fn deployed_charts_become_feed_statuses_and_helm_releases_follow_the_report() {
        use atoll_applier::model::{ReleaseReport, ReleaseStatus};
        let chart = |name: &str| {
            ChartEntry::new(
                "apps",
                &json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
                        "metadata": {"name": name, "namespace": "apps"},
                        "spec": {"repo": "http://r", "chart": "hello", "version": "0.1.0",
                                 "targetNamespace": "demo"}}),
                &json!({"message": "hi"}),
            )
        };
        let release = |name: &str, phase: &str, error: Option<&str>| ReleaseReport {
            name: name.into(),
            namespace: "demo".into(),
            status: Some(ReleaseStatus {
                phase: phase.into(),
                revision: 3,
                chart_version: "0.1.0".into(),
                ..ReleaseStatus::default()
            }),
            error: error.map(str::to_owned),
        };
        let mut report = Report::from_objects("apps.web", "u", 1, vec![]);
        report.releases = vec![
            release("good", "deployed", None),
            release("pending", "pending-install", None),
            release("bad", "failed", Some("boom")),
        ];
        let charts = [chart("good"), chart("pending"), chart("bad")];
        let mut st = description_status(&report, None);
        add_chart_statuses(&mut st, &charts, &report);
        let names: Vec<&str> = st
            .manifest_statuses
            .iter()
            .map(|m| m.feed.name.as_str())
            .collect();
        assert_eq!(names, ["good"], "only deployed releases are available");
        assert_eq!(st.manifest_statuses[0].feed.kind, "HelmChart");
        assert_eq!(
            st.manifest_statuses[0].feed.namespace.as_deref(),
            Some("apps")
        );
        assert_eq!(
            st.manifest_statuses[0].observed_status.as_ref().unwrap()["version"],
            3
        );

        let mut entry = crate::index::tests::entry("clusternet-a", "apps.web", "1", 1);
        entry.uid = "desc-uid".into();
        entry.charts = charts.to_vec();
        let releases = helm_releases("clusternet-a", &entry, &report);
        let names: Vec<&str> = releases.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "apps.web-apps-good",
                "apps.web-apps-pending",
                "apps.web-apps-bad"
            ]
        );
        let (_, object, status) = &releases[2];
        assert_eq!(object["metadata"]["ownerReferences"][0]["uid"], "desc-uid");
        assert_eq!(object["spec"]["targetNamespace"], "demo");
        assert_eq!(status["status"]["phase"], "failed");
        assert_eq!(status["status"]["description"], "boom");
    }

    #[test]
    fn description_status_from_report_collects_phase_errors_and_objects() {
        let report = Report {
            name: "apps.web".into(),
            observed_generation: 4,
            phase: DescriptionPhase::Failure,
            objects: vec![
                ObjectReport {
                    object: ObjectRef {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        namespace: "apps".into(),
                        name: "web".into(),
                    },
                    status: Some(json!({"replicas": 1})),
                    error: None,
                },
                ObjectReport {
                    object: ObjectRef {
                        api_version: "v1".into(),
                        kind: "Namespace".into(),
                        namespace: String::new(),
                        name: "apps".into(),
                    },
                    status: None,
                    error: Some("forbidden".into()),
                },
            ],
            ..Default::default()
        };
        let s = description_status(&report, None);
        assert_eq!(s.phase, Some(DescriptionPhase::Failure));
        assert_eq!(s.observed_generation, Some(4));
        assert_eq!(s.reason.as_deref(), Some("Namespace /apps: forbidden"));
        assert_eq!(s.manifest_statuses.len(), 2);
        assert_eq!(s.manifest_statuses[1].feed.namespace, None);
        assert_eq!(
            s.manifest_statuses[0].observed_status,
            Some(json!({"replicas": 1}))
        );
        let ok = description_status(
            &Report {
                phase: DescriptionPhase::Success,
                reason: "applied".into(),
                ..Default::default()
            },
            None,
        );
        assert_eq!(
            (ok.phase, ok.reason.as_deref()),
            (Some(DescriptionPhase::Success), Some("applied"))
        );
    }

    #[test]
    fn finalizer_rule_table() {
        use ClusterState::*;
        use FinalizerAction::*;
        let mk = |deleting: bool, has: bool| {
            let mut e = DescEntry {
                namespace: "c".into(),
                name: "d".into(),
                uid: "u".into(),
                resource_version: "1".into(),
                generation: 1,
                objects: vec![],
                charts: Vec::new(),
                deleting,
                labels: Default::default(),
                finalizers: vec![],
                status: None,
                rejected: None,
            };
            if has {
                e.finalizers.push(known::FINALIZER.into());
            }
            e
        };
        let cases = [
            (false, false, Registered, Add),
            (false, true, Registered, Keep),
            (false, false, Absent, Keep),
            (false, false, Lost, Keep),
            (true, true, Registered, Keep),
            (true, true, Lost, Remove),
            (true, true, Absent, Remove),
            (true, false, Absent, Keep),
        ];
        for (deleting, has, cluster, want) in cases {
            assert_eq!(
                finalizer_action(&mk(deleting, has), cluster),
                want,
                "{deleting} {has} {cluster:?}"
            );
        }
        // Where the cluster does not matter, the action is Keep in every cluster state.
        for (deleting, has) in [(false, false), (false, true), (true, false), (true, true)] {
            let e = mk(deleting, has);
            let actions: Vec<_> = [Registered, Lost, Absent]
                .into_iter()
                .map(|c| finalizer_action(&e, c))
                .collect();
            assert_eq!(
                finalizer_depends_on_cluster(&e),
                actions.iter().any(|a| *a != Keep),
                "{deleting} {has}: {actions:?}"
            );
        }
    }

    #[test]
    fn overdue_heartbeats_table() {
        let now = ts("2026-01-01T00:01:00Z");
        let st = |ready: &str, last: &str, period: i64| ManagedClusterStatus {
            conditions: vec![conditions::new(
                "Ready",
                ready,
                "r",
                "",
                None,
                Time(ts("2026-01-01T00:00:00Z")),
            )],
            last_observed_time: Some(Time(ts(last))),
            heartbeat_frequency_seconds: Some(period),
            ..Default::default()
        };
        let min = Duration::from_secs(20);
        let cases = [
            (Some(st("True", "2026-01-01T00:00:55Z", 10)), false),
            (Some(st("True", "2026-01-01T00:00:25Z", 10)), true),
            (Some(st("True", "2026-01-01T00:00:35Z", 10)), true),
            (Some(st("True", "2026-01-01T00:00:41Z", 10)), false),
            (Some(st("True", "2026-01-01T00:00:45Z", 1)), false),
            (Some(st("True", "2026-01-01T00:00:35Z", 1)), true),
            (Some(st("Unknown", "2026-01-01T00:00:00Z", 10)), false),
            (Some(st("False", "2026-01-01T00:00:00Z", 10)), false),
            (None, false),
        ];
        let long_ago = ts("2025-01-01T00:00:00Z");
        for (i, (s, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                heartbeat_overdue(s.as_ref(), now, min, long_ago),
                want,
                "case {i}"
            );
        }
        // A hub that started watching 10 s ago gives every cluster the same 20 s, however old
        // its last heartbeat; once they are over, silence is silence.
        let silent = st("True", "2026-01-01T00:00:00Z", 10);
        assert!(!heartbeat_overdue(
            Some(&silent),
            now,
            min,
            ts("2026-01-01T00:00:50Z")
        ));
        assert!(heartbeat_overdue(
            Some(&silent),
            now,
            min,
            ts("2026-01-01T00:00:39Z")
        ));
    }

    #[test]
    fn lost_cluster_detection_table() {
        let now = ts("2026-01-01T01:00:00Z");
        let five = Duration::from_secs(300);
        let with_ready = |status: &str, at: &str| ManagedClusterStatus {
            conditions: vec![conditions::new(
                "Ready",
                status,
                "r",
                "",
                None,
                Time(ts(at)),
            )],
            ..Default::default()
        };
        let cases = [
            (
                Some(with_ready("True", "2026-01-01T00:00:00Z")),
                None,
                false,
            ),
            (
                Some(with_ready("Unknown", "2026-01-01T00:50:00Z")),
                None,
                true,
            ),
            (
                Some(with_ready("Unknown", "2026-01-01T00:58:00Z")),
                None,
                false,
            ),
            (
                Some(with_ready("False", "2026-01-01T00:00:00Z")),
                None,
                true,
            ),
            (None, Some(ts("2026-01-01T00:59:00Z")), false),
            (None, Some(ts("2026-01-01T00:00:00Z")), true),
            (None, None, false),
        ];
        for (i, (status, created, lost)) in cases.into_iter().enumerate() {
            assert_eq!(
                cluster_lost(status.as_ref(), created, now, five),
                lost,
                "case {i}"
            );
        }
    }

    #[test]
    fn a_status_taken_back_to_an_older_generation_or_report_is_found_and_restored_whole() {
        let entry = |uid: &str, generation: Option<i64>, phase: DescriptionPhase| DescEntry {
            namespace: "ns".into(),
            name: "d".into(),
            uid: uid.into(),
            resource_version: "7".into(),
            generation: 5,
            objects: Vec::new(),
            charts: Vec::new(),
            deleting: false,
            labels: BTreeMap::new(),
            finalizers: Vec::new(),
            status: Some(DescriptionStatus {
                phase: Some(phase),
                observed_generation: generation,
                ..DescriptionStatus::default()
            }),
            rejected: None,
        };
        let newer = entry("u", Some(5), DescriptionPhase::Success);
        let older = entry("u", Some(4), DescriptionPhase::Pending);
        assert_eq!(
            status_taken_back(&newer, &older),
            newer.status.as_ref(),
            "back from 5 to 4"
        );
        assert_eq!(status_taken_back(&older, &newer), None, "forward");
        assert_eq!(
            status_taken_back(&newer, &entry("u", Some(5), DescriptionPhase::Failure)),
            None,
            "the same generation"
        );
        assert_eq!(
            status_taken_back(&newer, &entry("other", Some(1), DescriptionPhase::Pending)),
            None,
            "another Description of the same name"
        );
        let ordered = |phase: DescriptionPhase, epoch: i64, sequence: i64| {
            let mut e = entry("u", Some(5), phase);
            if let Some(s) = e.status.as_mut() {
                s.report_order = Some(ReportOrder { epoch, sequence });
            }
            e
        };
        let late = ordered(DescriptionPhase::Pending, 2, 10);
        for (was, is, back) in [
            (ordered(DescriptionPhase::Success, 2, 11), &late, true),
            (ordered(DescriptionPhase::Success, 3, 1), &late, true),
            (ordered(DescriptionPhase::Success, 2, 9), &late, false),
            (ordered(DescriptionPhase::Success, 1, 99), &late, false),
            // Nor across a cluster moved between pushed (epoch 0) and pulled.
            (ordered(DescriptionPhase::Success, 0, 99), &late, false),
            (
                ordered(DescriptionPhase::Success, 2, 11),
                &ordered(DescriptionPhase::Pending, 0, 1),
                false,
            ),
            // Pushed clusters' writes are not compared (every replica writes from its view).
            (
                ordered(DescriptionPhase::Success, 0, 11),
                &ordered(DescriptionPhase::Pending, 0, 10),
                false,
            ),
            // A status without an order (a rejection the hub wrote) is not compared.
            (ordered(DescriptionPhase::Success, 2, 11), &newer, false),
        ] {
            let got = status_taken_back(&was, is).is_some();
            assert_eq!(got, back, "{:?} then {:?}", was.status, is.status);
        }
        let patch = status_restore_patch(newer.status.as_ref().unwrap(), "7");
        assert_eq!(patch["metadata"]["resourceVersion"], "7");
        assert_eq!(patch["status"]["observedGeneration"], 5);
        assert_eq!(patch["status"]["phase"], "Success");
        assert_eq!(patch["status"]["reason"], Value::Null, "cleared");
        assert_eq!(patch["status"]["reportOrder"], Value::Null, "cleared");
    }

    #[test]
    fn subscription_patch_only_when_aggregate_changes() {
        let mut sub = Subscription::new("web", SubscriptionSpec::default());
        sub.metadata.namespace = Some("apps".into());
        sub.spec.feeds = vec![Feed {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("apps".into()),
            name: "web".into(),
        }];
        sub.status = Some(SubscriptionStatus {
            binding_clusters: vec!["c1/one".into(), "c2/two".into()],
            ..Default::default()
        });
        let mut d1 = DescEntry {
            namespace: "c1".into(),
            name: "apps.web".into(),
            uid: "u".into(),
            resource_version: "1".into(),
            generation: 1,
            objects: vec![],
            charts: Vec::new(),
            deleting: false,
            labels: Default::default(),
            finalizers: vec![],
            status: None,
            rejected: None,
        };
        d1.status = Some(description_status(
            &Report {
                phase: DescriptionPhase::Success,
                objects: vec![ObjectReport {
                    object: ObjectRef {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        namespace: "apps".into(),
                        name: "web".into(),
                    },
                    status: Some(json!({"replicas": 2, "readyReplicas": 2})),
                    error: None,
                }],
                ..Default::default()
            },
            None,
        ));
        let descs = vec![Arc::new(d1)];
        let ids = |ns: &str, _: &str| Some(format!("id-{ns}"));
        let patch = subscription_status_patch(&sub, &descs, ids).unwrap();
        assert_eq!(patch["status"]["completedReleases"], json!(1));
        let details = &patch["status"]["aggregatedStatuses"][0]["feedStatusDetails"];
        assert_eq!(details.as_array().map(Vec::len), Some(2));
        assert_eq!(details[0]["clusterId"], json!("id-c1"));
        // Applying the patch makes the next computation a no-op.
        let st: SubscriptionStatus = serde_json::from_value(patch["status"].clone()).unwrap();
        let s = sub.status.as_mut().unwrap();
        s.aggregated_statuses = st.aggregated_statuses;
        s.completed_releases = st.completed_releases;
        assert!(subscription_status_patch(&sub, &descs, ids).is_none());
    }
}
