//! `fleet status`: tables of clusters, Subscriptions and where each feed landed, built from the
//! parent's objects by pure functions.

use std::collections::BTreeMap;

use atoll_crds::apps::{SchedulingStrategy, Subscription};
use atoll_crds::clusters::ManagedCluster;
use atoll_crds::{conditions, known};
use kube::ResourceExt;

/// Renders rows under headers, columns padded to their widest cell, separated by three spaces
/// (like `kubectl get`).
pub fn render_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            out.push_str(cell);
            if i < last {
                let pad = widths
                    .get(i)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(cell.chars().count());
                out.push_str(&" ".repeat(pad + 3));
            }
        }
        out.trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// A duration in seconds as kubectl prints ages: `42s`, `5m3s`, `2h10m`, `3d4h`.
pub fn human_age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=3599 => format!("{}m{}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// Headers of [`cluster_rows`].
pub const CLUSTER_HEADERS: [&str; 6] = [
    "NAME",
    "NAMESPACE",
    "READY",
    "NODES",
    "KUBERNETES",
    "LAST HEARTBEAT",
];

/// One row per ManagedCluster, sorted by name: name, dedicated namespace, Ready condition,
/// ready/total nodes, Kubernetes version, age of the last heartbeat. `now` is in Unix seconds.
pub fn cluster_rows(clusters: &[ManagedCluster], now: i64) -> Vec<Vec<String>> {
    let mut sorted: Vec<&ManagedCluster> = clusters.iter().collect();
    sorted.sort_by_key(|c| c.name_any());
    sorted
        .into_iter()
        .map(|c| {
            let status = c.status.as_ref();
            let ready = status
                .and_then(|s| conditions::status(&s.conditions, known::CONDITION_READY))
                .unwrap_or("Unknown")
                .to_string();
            let nodes = status
                .and_then(|s| s.node_statistics.as_ref())
                .map(|n| {
                    let ready = n.ready_nodes.unwrap_or(0);
                    let total = ready
                        + n.not_ready_nodes.unwrap_or(0)
                        + n.unknown_nodes.unwrap_or(0)
                        + n.lost_nodes.unwrap_or(0);
                    format!("{ready}/{total}")
                })
                .unwrap_or_else(|| "-".into());
            let version = status
                .and_then(|s| s.k8s_version.clone())
                .unwrap_or_else(|| "-".into());
            let heartbeat = status
                .and_then(|s| s.last_observed_time.as_ref())
                .map(|t| format!("{} ago", human_age(now - t.0.as_second())))
                .unwrap_or_else(|| "never".into());
            vec![
                c.name_any(),
                c.namespace().unwrap_or_default(),
                ready,
                nodes,
                version,
                heartbeat,
            ]
        })
        .collect()
}

/// Headers of [`subscription_rows`].
pub const SUBSCRIPTION_HEADERS: [&str; 5] = [
    "SUBSCRIPTION",
    "STRATEGY",
    "CLUSTERS",
    "RELEASES",
    "AVAILABLE",
];

/// The ManagedCluster name of a `bindingClusters` entry (`<namespace>/<name>`).
fn cluster_name(binding: &str) -> String {
    known::parse_binding_cluster(binding)
        .map(|(_, name)| name.to_string())
        .unwrap_or_else(|| binding.to_string())
}

/// One row per Subscription, sorted by namespace/name: strategy, bound cluster names,
/// completed/desired releases and whether every feed is available everywhere.
pub fn subscription_rows(subs: &[Subscription]) -> Vec<Vec<String>> {
    let mut sorted: Vec<&Subscription> = subs.iter().collect();
    sorted.sort_by_key(|s| (s.namespace(), s.name_any()));
    sorted
        .into_iter()
        .map(|s| {
            let strategy = match s.spec.scheduling_strategy {
                SchedulingStrategy::Replication => "Replication".to_string(),
                SchedulingStrategy::Dividing => match &s.spec.dividing_scheduling {
                    Some(d) => format!("Dividing/{:?}", d.type_),
                    None => "Dividing".to_string(),
                },
            };
            let status = s.status.as_ref();
            let clusters = status
                .map(|st| {
                    st.binding_clusters
                        .iter()
                        .map(|b| cluster_name(b))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| "-".into());
            let desired = status
                .and_then(|st| st.desired_releases)
                .unwrap_or_else(|| status.map_or(0, |st| st.binding_clusters.len() as i32));
            let completed = status.and_then(|st| st.completed_releases).unwrap_or(0);
            let available = match status {
                Some(st) if !st.aggregated_statuses.is_empty() => st
                    .aggregated_statuses
                    .iter()
                    .all(|a| a.feed_status_summary.available)
                    .to_string(),
                _ => "-".to_string(),
            };
            vec![
                format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()),
                strategy,
                clusters,
                format!("{completed}/{desired}"),
                available,
            ]
        })
        .collect()
}

/// Headers of [`placement_rows`].
pub const PLACEMENT_HEADERS: [&str; 5] = ["SUBSCRIPTION", "FEED", "CLUSTER", "REPLICAS", "READY"];

/// One row per (Subscription, feed with replicas, bound cluster): the replicas the scheduler
/// gave that cluster (`status.replicas`; `-` under Replication, where the feed's own count
/// applies) and the ready/desired replicas the cluster reports (`aggregatedStatuses`). Feeds
/// without replicas (Namespaces, ConfigMaps) are left out.
pub fn placement_rows(subs: &[Subscription]) -> Vec<Vec<String>> {
    let mut sorted: Vec<&Subscription> = subs.iter().collect();
    sorted.sort_by_key(|s| (s.namespace(), s.name_any()));
    let mut rows = Vec::new();
    for s in sorted {
        let Some(status) = s.status.as_ref() else {
            continue;
        };
        let sub = format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any());
        let clusters: Vec<String> = status
            .binding_clusters
            .iter()
            .map(|b| cluster_name(b))
            .collect();
        for feed in &s.spec.feeds {
            let key = feed.key();
            let scheduled = status.replicas.get(&key).filter(|r| !r.is_empty());
            let reported: BTreeMap<&str, String> = status
                .aggregated_statuses
                .iter()
                .filter(|a| a.feed == *feed)
                .flat_map(|a| a.feed_status_details.iter())
                .filter(|d| d.replica_status.replicas.is_some())
                .map(|d| {
                    let r = &d.replica_status;
                    (
                        d.cluster_name.as_str(),
                        format!(
                            "{}/{}",
                            r.ready_replicas.unwrap_or(0),
                            r.replicas.unwrap_or(0)
                        ),
                    )
                })
                .collect();
            if scheduled.is_none() && reported.is_empty() {
                continue;
            }
            let feed_name = match &feed.namespace {
                Some(ns) => format!("{} {ns}/{}", feed.kind, feed.name),
                None => format!("{} {}", feed.kind, feed.name),
            };
            for (i, cluster) in clusters.iter().enumerate() {
                let replicas = scheduled
                    .and_then(|r| r.get(i))
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "-".into());
                let ready = reported
                    .get(cluster.as_str())
                    .cloned()
                    .unwrap_or_else(|| "-".into());
                rows.push(vec![
                    sub.clone(),
                    feed_name.clone(),
                    cluster.clone(),
                    replicas,
                    ready,
                ]);
            }
        }
    }
    rows
}

/// The whole `fleet status` report: the processes table (given), clusters, Subscriptions and
/// placements.
pub fn report(
    processes: &[Vec<String>],
    clusters: &[ManagedCluster],
    subs: &[Subscription],
    now: i64,
) -> String {
    let mut out = String::new();
    out.push_str("Processes\n");
    out.push_str(&render_table(&PROCESS_HEADERS, processes));
    out.push_str("\nClusters\n");
    out.push_str(&render_table(
        &CLUSTER_HEADERS,
        &cluster_rows(clusters, now),
    ));
    out.push_str("\nSubscriptions\n");
    out.push_str(&render_table(
        &SUBSCRIPTION_HEADERS,
        &subscription_rows(subs),
    ));
    let placements = placement_rows(subs);
    if !placements.is_empty() {
        out.push_str("\nReplicas per cluster\n");
        out.push_str(&render_table(&PLACEMENT_HEADERS, &placements));
    }
    out
}

/// Headers of the processes table.
pub const PROCESS_HEADERS: [&str; 5] = ["PROCESS", "PID", "STATE", "ADMIN", "LOG"];

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_crds::apps::{
        AggregatedStatus, DividingScheduling, DividingType, Feed, FeedStatus, FeedStatusPerCluster,
        ReplicaStatus, SubscriptionSpec, SubscriptionStatus,
    };
    use atoll_crds::clusters::{ManagedClusterSpec, ManagedClusterStatus, NodeStatistics};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn cluster(
        name: &str,
        ready: Option<&str>,
        nodes: Option<(i32, i32)>,
        seen: Option<i64>,
    ) -> ManagedCluster {
        let mut c = ManagedCluster::new(name, ManagedClusterSpec::default());
        c.metadata.namespace = Some(format!("clusternet-{name}"));
        let mut status = ManagedClusterStatus {
            k8s_version: Some("v1.33.0".into()),
            ..Default::default()
        };
        if let Some(r) = ready {
            status.conditions.push(Condition {
                type_: "Ready".into(),
                status: r.into(),
                reason: "X".into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            });
        }
        status.node_statistics = nodes.map(|(r, n)| NodeStatistics {
            ready_nodes: Some(r),
            not_ready_nodes: Some(n),
            ..Default::default()
        });
        status.last_observed_time =
            seen.map(|s| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap()));
        c.status = Some(status);
        c
    }

    #[test]
    fn cluster_rows_show_ready_nodes_version_and_heartbeat_age_sorted_by_name() {
        let clusters = [
            cluster("child-2", Some("False"), Some((1, 2)), Some(900)),
            cluster("child-1", Some("True"), Some((3, 0)), Some(995)),
            cluster("child-3", None, None, None),
        ];
        let rows = cluster_rows(&clusters, 1000);
        let want = [
            [
                "child-1",
                "clusternet-child-1",
                "True",
                "3/3",
                "v1.33.0",
                "5s ago",
            ],
            [
                "child-2",
                "clusternet-child-2",
                "False",
                "1/3",
                "v1.33.0",
                "100s ago",
            ],
            [
                "child-3",
                "clusternet-child-3",
                "Unknown",
                "-",
                "v1.33.0",
                "never",
            ],
        ];
        assert_eq!(rows.len(), want.len());
        for (row, want) in rows.iter().zip(want) {
            assert_eq!(row, &want.map(String::from).to_vec());
        }
    }

    #[test]
    fn ages_are_printed_like_kubectl() {
        let cases = [
            (-3, "0s"),
            (5, "5s"),
            (119, "119s"),
            (303, "5m3s"),
            (7800, "2h10m"),
            (273_600, "3d4h"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_age(secs), want, "{secs}");
        }
    }

    fn feed(kind: &str, ns: &str, name: &str) -> Feed {
        Feed {
            api_version: if kind == "Deployment" {
                "apps/v1"
            } else {
                "v1"
            }
            .into(),
            kind: kind.into(),
            namespace: Some(ns.into()),
            name: name.into(),
        }
    }

    fn detail(cluster: &str, ready: i32, replicas: i32) -> FeedStatusPerCluster {
        FeedStatusPerCluster {
            cluster_id: String::new(),
            cluster_name: cluster.into(),
            available: ready == replicas,
            replica_status: ReplicaStatus {
                replicas: Some(replicas),
                ready_replicas: Some(ready),
                ..Default::default()
            },
        }
    }

    fn dividing_sub() -> Subscription {
        let deploy = feed("Deployment", "demo", "api");
        let ns = Feed {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            namespace: None,
            name: "demo".into(),
        };
        let mut sub = Subscription::new(
            "api",
            SubscriptionSpec {
                scheduling_strategy: SchedulingStrategy::Dividing,
                dividing_scheduling: Some(DividingScheduling {
                    type_: DividingType::Static,
                    ..Default::default()
                }),
                feeds: vec![ns.clone(), deploy.clone()],
                ..Default::default()
            },
        );
        sub.metadata.namespace = Some("demo".into());
        sub.status = Some(SubscriptionStatus {
            binding_clusters: vec!["clusternet-a/child-1".into(), "clusternet-b/child-2".into()],
            replicas: BTreeMap::from([(deploy.key(), vec![2, 4]), (ns.key(), vec![])]),
            desired_releases: Some(2),
            completed_releases: Some(1),
            aggregated_statuses: vec![
                AggregatedStatus {
                    feed: ns,
                    feed_status_summary: FeedStatus {
                        available: true,
                        ..Default::default()
                    },
                    feed_status_details: vec![],
                    feed_status_details_omitted: None,
                },
                AggregatedStatus {
                    feed: deploy,
                    feed_status_summary: FeedStatus {
                        available: false,
                        ..Default::default()
                    },
                    feed_status_details: vec![detail("child-1", 2, 2), detail("child-2", 1, 4)],
                    feed_status_details_omitted: None,
                },
            ],
            ..Default::default()
        });
        sub
    }

    fn replication_sub() -> Subscription {
        let mut sub = Subscription::new(
            "web",
            SubscriptionSpec {
                feeds: vec![
                    feed("ConfigMap", "demo", "cfg"),
                    feed("Deployment", "demo", "web"),
                ],
                ..Default::default()
            },
        );
        sub.metadata.namespace = Some("demo".into());
        sub
    }

    #[test]
    fn subscription_rows_show_strategy_bound_clusters_releases_and_availability() {
        let rows = subscription_rows(&[dividing_sub(), replication_sub()]);
        let want = [
            [
                "demo/api",
                "Dividing/Static",
                "child-1,child-2",
                "1/2",
                "false",
            ],
            ["demo/web", "Replication", "-", "0/0", "-"],
        ];
        for (row, want) in rows.iter().zip(want) {
            assert_eq!(row, &want.map(String::from).to_vec());
        }
        assert_eq!(rows.len(), 2);
    }

    #[test]
    fn placement_rows_pair_scheduled_replicas_with_reported_readiness_per_cluster() {
        let rows = placement_rows(&[dividing_sub(), replication_sub()]);
        let want = [
            ["demo/api", "Deployment demo/api", "child-1", "2", "2/2"],
            ["demo/api", "Deployment demo/api", "child-2", "4", "1/4"],
        ];
        assert_eq!(rows.len(), want.len(), "{rows:?}");
        for (row, want) in rows.iter().zip(want) {
            assert_eq!(row, &want.map(String::from).to_vec());
        }
    }

    #[test]
    fn render_table_pads_columns_to_the_widest_cell() {
        let rows = vec![vec![
            "a".to_string(),
            "long-value".to_string(),
            "x".to_string(),
        ]];
        let got = render_table(&["LONGHEADER", "B", "C"], &rows);
        assert_eq!(
            got,
            "LONGHEADER   B            C\na            long-value   x\n"
        );
    }
}
