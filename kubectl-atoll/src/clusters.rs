//! `kubectl atoll clusters`: the ManagedClusters as a table, and below it the registrations that
//! wait for an administrator.

use std::collections::BTreeMap;

use atoll_crds::clusters::{
    ApprovedResult, ClusterRegistrationRequest, ManagedCluster, ReRegistration,
    ReRegistrationReplaces, SyncMode,
};
use atoll_crds::known;
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;

use crate::registration::pending_re_registration;
use crate::table::{NONE, Table, age, cell};

/// Headers of the clusters table.
pub const CLUSTER_HEADERS: [&str; 11] = [
    "NAME",
    "ID",
    "NAMESPACE",
    "READY",
    "VERSION",
    "NODES",
    "CPU",
    "MEMORY",
    "LABELS",
    "TAINTS",
    "LAST HEARTBEAT",
];

/// Headers of the pending registrations table.
pub const PENDING_HEADERS: [&str; 7] = [
    "NAME",
    "CLUSTER",
    "ID",
    "SYNC MODE",
    "STATUS",
    "AGE",
    "MESSAGE",
];

/// Labels the hub sets on every ManagedCluster that repeat the NAME and ID columns; the LABELS
/// column leaves them out.
const REPEATED_LABELS: [&str; 2] = [known::LABEL_CLUSTER_ID, known::LABEL_CLUSTER_NAME];

/// The clusters table: one row per ManagedCluster, sorted by name then namespace. Ages count
/// to `now`.
pub fn cluster_table(clusters: &[ManagedCluster], now: Timestamp) -> Table {
    let mut sorted: Vec<&ManagedCluster> = clusters.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.metadata.name, &a.metadata.namespace).cmp(&(&b.metadata.name, &b.metadata.namespace))
    });
    let mut table = Table::new(&CLUSTER_HEADERS);
    table
        .rows
        .extend(sorted.into_iter().map(|mc| cluster_row(mc, now)));
    table
}

fn cluster_row(mc: &ManagedCluster, now: Timestamp) -> Vec<String> {
    let status = mc.status.as_ref();
    let allocatable = status.map(|s| &s.allocatable);
    vec![
        cell(mc.metadata.name.as_deref()),
        cell(Some(&mc.spec.cluster_id)),
        cell(mc.metadata.namespace.as_deref()),
        ready(mc, now),
        cell(status.and_then(|s| s.k8s_version.as_deref())),
        nodes(mc),
        quantity(allocatable, "cpu"),
        quantity(allocatable, "memory"),
        labels(mc.metadata.labels.as_ref()),
        taints(&mc.spec.taints),
        age(status.and_then(|s| s.last_observed_time.as_ref()), now),
    ]
}

/// The `Ready` condition's status and how long it has held, `True (5m)`; [`NONE`] without one.
pub(crate) fn ready(mc: &ManagedCluster, now: Timestamp) -> String {
    let condition = mc.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == known::CONDITION_READY)
    });
    match condition {
        Some(c) => format!("{} ({})", c.status, age(Some(&c.last_transition_time), now)),
        None => NONE.to_owned(),
    }
}

/// Ready nodes over all nodes the agent counted, `3/4`; [`NONE`] before the first report.
pub(crate) fn nodes(mc: &ManagedCluster) -> String {
    let Some(n) = mc.status.as_ref().and_then(|s| s.node_statistics.as_ref()) else {
        return NONE.to_owned();
    };
    let ready = n.ready_nodes.unwrap_or(0);
    let total = ready
        + n.not_ready_nodes.unwrap_or(0)
        + n.unknown_nodes.unwrap_or(0)
        + n.lost_nodes.unwrap_or(0);
    format!("{ready}/{total}")
}

fn quantity(allocatable: Option<&BTreeMap<String, Quantity>>, resource: &str) -> String {
    cell(
        allocatable
            .and_then(|a| a.get(resource))
            .map(|q| q.0.as_str()),
    )
}

/// `k=v,k2=v2`, sorted by key, without the labels that repeat other columns.
fn labels(labels: Option<&BTreeMap<String, String>>) -> String {
    let text = labels
        .into_iter()
        .flatten()
        .filter(|(k, _)| !REPEATED_LABELS.contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    cell(Some(&text))
}

/// `key=value:Effect` (or `key:Effect` without a value), comma-separated, as kubectl describes
/// node taints.
pub(crate) fn taints(taints: &[Taint]) -> String {
    let text = taints
        .iter()
        .map(|t| match t.value.as_deref() {
            Some(v) if !v.is_empty() => format!("{}={v}:{}", t.key, t.effect),
            _ => format!("{}:{}", t.key, t.effect),
        })
        .collect::<Vec<_>>()
        .join(",");
    cell(Some(&text))
}

/// Whether a registration waits for an administrator: its result is neither `Approved` nor
/// `Denied` (no result yet, or `Failed`), or a request to register it again waits.
pub fn is_pending(crr: &ClusterRegistrationRequest) -> bool {
    pending_re_registration(crr).is_some()
        || !matches!(
            crr.status.as_ref().and_then(|s| s.result),
            Some(ApprovedResult::Approved | ApprovedResult::Denied)
        )
}

/// The MESSAGE of a waiting re-registration: who asks, and what approving it replaces.
fn re_registration_message(request: &ReRegistration) -> String {
    let what = match request.replaces {
        ReRegistrationReplaces::LiveRegistration => {
            "to replace the live registration (approving takes --replace)"
        }
        ReRegistrationReplaces::RevokedToken => {
            "for a new token (the current one was revoked or expired)"
        }
        ReRegistrationReplaces::LostNamespace => {
            "to register again (its dedicated namespace is gone)"
        }
    };
    format!(
        "bootstrap token {} from {} asks {what}",
        request.bootstrap_token_id,
        request.peer.as_deref().unwrap_or("an unknown address")
    )
}

/// The pending registrations table: one row per ClusterRegistrationRequest that
/// [`is_pending`], oldest first.
pub fn pending_table(requests: &[ClusterRegistrationRequest], now: Timestamp) -> Table {
    let mut pending: Vec<&ClusterRegistrationRequest> =
        requests.iter().filter(|c| is_pending(c)).collect();
    pending.sort_by(|a, b| {
        (&a.metadata.creation_timestamp, &a.metadata.name)
            .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
    });
    let mut table = Table::new(&PENDING_HEADERS);
    table.rows.extend(pending.into_iter().map(|crr| {
        let status = crr.status.as_ref();
        if let Some(request) = pending_re_registration(crr) {
            return vec![
                cell(crr.metadata.name.as_deref()),
                cell(crr.spec.cluster_name.as_deref()),
                cell(Some(&crr.spec.cluster_id)),
                sync_mode(crr.spec.sync_mode).to_owned(),
                "ReRegistration".to_owned(),
                age(request.requested_at.as_ref(), now),
                re_registration_message(request),
            ];
        }
        let result = match status.and_then(|s| s.result) {
            Some(ApprovedResult::Failed) => "Failed",
            _ => "Pending",
        };
        vec![
            cell(crr.metadata.name.as_deref()),
            cell(crr.spec.cluster_name.as_deref()),
            cell(Some(&crr.spec.cluster_id)),
            sync_mode(crr.spec.sync_mode).to_owned(),
            result.to_owned(),
            age(crr.metadata.creation_timestamp.as_ref(), now),
            cell(status.and_then(|s| s.error_message.as_deref())),
        ]
    }));
    table
}

fn sync_mode(mode: SyncMode) -> &'static str {
    match mode {
        SyncMode::Push => "Push",
        SyncMode::Pull => "Pull",
        SyncMode::Dual => "Dual",
    }
}

/// The whole `clusters` page: the clusters table (or a line saying there is none) and, when
/// some registrations wait, a blank line and the pending registrations table under a title.
pub fn render(
    clusters: &[ManagedCluster],
    requests: &[ClusterRegistrationRequest],
    now: Timestamp,
) -> String {
    let mut out = if clusters.is_empty() {
        "No clusters registered.\n".to_owned()
    } else {
        cluster_table(clusters, now).render()
    };
    let pending = pending_table(requests, now);
    if !pending.rows.is_empty() {
        out.push_str("\nPending registrations (approve with `kubectl atoll approve NAME`):\n");
        out.push_str(&pending.render());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_crds::clusters::{
        ClusterRegistrationRequestSpec, ClusterRegistrationRequestStatus, ManagedClusterSpec,
        ManagedClusterStatus, NodeStatistics,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    const ID: &str = "3f1e9a52-8c41-4b7e-9d0a-2b6c5e4f7a10";

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn now() -> Timestamp {
        "2026-01-01T01:00:00Z".parse().unwrap()
    }

    fn cluster(name: &str, ns: &str) -> ManagedCluster {
        let mut mc = ManagedCluster::new(
            name,
            ManagedClusterSpec {
                cluster_id: ID.into(),
                ..ManagedClusterSpec::default()
            },
        );
        mc.metadata.namespace = Some(ns.into());
        mc
    }

    fn reported(mut mc: ManagedCluster) -> ManagedCluster {
        mc.metadata.labels = Some(BTreeMap::from([
            (known::LABEL_CLUSTER_ID.into(), ID.into()),
            (known::LABEL_CLUSTER_NAME.into(), "edge".into()),
            ("env".into(), "prod".into()),
            ("region".into(), "eu".into()),
        ]));
        mc.spec.taints = vec![
            Taint {
                key: "dedicated".into(),
                value: Some("gpu".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            },
            Taint {
                key: known::TAINT_UNSCHEDULABLE.into(),
                value: None,
                effect: "NoExecute".into(),
                time_added: None,
            },
        ];
        mc.status = Some(ManagedClusterStatus {
            last_observed_time: Some(t("2026-01-01T00:59:48Z")),
            k8s_version: Some("v1.33.1".into()),
            allocatable: BTreeMap::from([
                ("cpu".into(), Quantity("8".into())),
                ("memory".into(), Quantity("32Gi".into())),
            ]),
            node_statistics: Some(NodeStatistics {
                ready_nodes: Some(3),
                not_ready_nodes: Some(1),
                unknown_nodes: None,
                lost_nodes: None,
            }),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: known::REASON_MANAGED_CLUSTER_READY.into(),
                message: String::new(),
                last_transition_time: t("2026-01-01T00:55:00Z"),
                observed_generation: None,
            }],
            ..ManagedClusterStatus::default()
        });
        mc
    }

    fn request(
        name: &str,
        result: Option<ApprovedResult>,
        created: &str,
    ) -> ClusterRegistrationRequest {
        let mut crr = ClusterRegistrationRequest::new(
            name,
            ClusterRegistrationRequestSpec {
                cluster_id: ID.into(),
                cluster_name: Some(format!("{name}-cluster")),
                ..ClusterRegistrationRequestSpec::default()
            },
        );
        crr.metadata.creation_timestamp = Some(t(created));
        crr.status = result.map(|r| ClusterRegistrationRequestStatus {
            result: Some(r),
            error_message: (r == ApprovedResult::Failed).then(|| "namespace\ntaken".into()),
            ..ClusterRegistrationRequestStatus::default()
        });
        crr
    }

    #[test]
    fn a_reported_cluster_fills_every_column() {
        let table = cluster_table(&[reported(cluster("edge", "clusternet-abcde"))], now());
        assert_eq!(table.headers, CLUSTER_HEADERS);
        let row = &table.rows[0];
        let want = [
            "edge",
            ID,
            "clusternet-abcde",
            "True (5m)",
            "v1.33.1",
            "3/4",
            "8",
            "32Gi",
            "env=prod,region=eu",
            "dedicated=gpu:NoSchedule,clusters.clusternet.io/unschedulable:NoExecute",
            "12s",
        ];
        assert_eq!(row, &want);
    }

    #[test]
    fn a_cluster_that_never_reported_shows_none_rather_than_guesses() {
        let table = cluster_table(&[cluster("new", "clusternet-new")], now());
        assert_eq!(
            table.rows[0],
            [
                "new",
                ID,
                "clusternet-new",
                "<none>",
                "<none>",
                "<none>",
                "<none>",
                "<none>",
                "<none>",
                "<none>",
                "<none>"
            ]
        );
    }

    #[test]
    fn clusters_are_sorted_by_name() {
        let table = cluster_table(
            &[
                cluster("b", "ns-b"),
                cluster("a", "ns-z"),
                cluster("a", "ns-y"),
            ],
            now(),
        );
        assert_eq!(table.column("NAME"), ["a", "a", "b"]);
        assert_eq!(table.column("NAMESPACE"), ["ns-y", "ns-z", "ns-b"]);
    }

    #[test]
    fn only_requests_neither_approved_nor_denied_are_pending() {
        let requests = [
            request(
                "approved",
                Some(ApprovedResult::Approved),
                "2026-01-01T00:00:00Z",
            ),
            request(
                "denied",
                Some(ApprovedResult::Denied),
                "2026-01-01T00:00:00Z",
            ),
            request("waiting", None, "2026-01-01T00:58:00Z"),
            request(
                "failed",
                Some(ApprovedResult::Failed),
                "2026-01-01T00:30:00Z",
            ),
        ];
        let table = pending_table(&requests, now());
        assert_eq!(table.headers, PENDING_HEADERS);
        assert_eq!(table.column("NAME"), ["failed", "waiting"], "oldest first");
        assert_eq!(
            table.column("CLUSTER"),
            ["failed-cluster", "waiting-cluster"]
        );
        assert_eq!(table.column("STATUS"), ["Failed", "Pending"]);
        assert_eq!(table.column("AGE"), ["30m", "2m"]);
        assert_eq!(table.column("SYNC MODE"), ["Pull", "Pull"]);
        assert_eq!(table.column("MESSAGE"), ["namespace taken", "<none>"]);
    }

    #[test]
    fn a_registered_cluster_asked_to_register_again_is_listed_with_who_asks_and_what_it_replaces() {
        let mut asked = request(
            "asked",
            Some(ApprovedResult::Approved),
            "2026-01-01T00:00:00Z",
        );
        asked.status.get_or_insert_default().re_registration = Some(ReRegistration {
            id: "r1".into(),
            requested_at: Some(t("2026-01-01T00:55:00Z")),
            bootstrap_token_id: "abcdef".into(),
            peer: Some("10.1.2.3:4567".into()),
            ..ReRegistration::default()
        });
        let mut decided = asked.clone();
        decided.metadata.name = Some("decided".into());
        if let Some(r) = decided
            .status
            .as_mut()
            .and_then(|s| s.re_registration.as_mut())
        {
            r.result = Some(ApprovedResult::Denied);
        }
        let table = pending_table(&[asked, decided], now());
        assert_eq!(
            table.column("NAME"),
            ["asked"],
            "a decided request no longer waits"
        );
        assert_eq!(table.column("STATUS"), ["ReRegistration"]);
        assert_eq!(table.column("AGE"), ["5m"]);
        assert_eq!(
            table.column("MESSAGE"),
            [
                "bootstrap token abcdef from 10.1.2.3:4567 asks to replace the live registration (approving takes --replace)"
            ]
        );
    }

    #[test]
    fn the_page_says_when_there_is_no_cluster_and_hides_an_empty_pending_section() {
        assert_eq!(render(&[], &[], now()), "No clusters registered.\n");
        let approved = request(
            "approved",
            Some(ApprovedResult::Approved),
            "2026-01-01T00:00:00Z",
        );
        let page = render(&[cluster("a", "ns")], &[approved], now());
        assert!(page.starts_with("NAME "), "{page}");
        assert!(!page.contains("Pending"), "{page}");
        let waiting = request("waiting", None, "2026-01-01T00:58:00Z");
        let page = render(&[], &[waiting], now());
        assert!(
            page.starts_with("No clusters registered.\n\nPending registrations"),
            "{page}"
        );
        assert!(page.contains("\nwaiting "), "{page}");
    }
}
