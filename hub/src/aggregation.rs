//! Subscription status aggregated from what each bound cluster reported in its Description
//! (Clusternet `aggregatestatus`, reference §6.4). Pure functions over plain data.
//!
//! For every feed of the Subscription, [`aggregate`] builds one `feedStatusDetails` entry per
//! binding cluster (binding order kept), filled from that cluster's Description
//! `manifestStatuses` entry for the feed (same kind, apiVersion, namespace and name; an absent
//! namespace equals an empty one). A cluster whose entry is present is `available` (the object
//! exists there and reports status), as in Clusternet; its `replicaStatus` is read from the
//! object's `.status` for the workload kinds below, other kinds report availability only.
//!
//! Replica mapping ([`replica_status`]):
//! | kind (group) | replicaStatus field ← object status field |
//! |---|---|
//! | Deployment (apps) | observedGeneration, replicas, updatedReplicas, readyReplicas, availableReplicas, unavailableReplicas |
//! | StatefulSet (apps) | observedGeneration, replicas, updatedReplicas, currentReplicas, readyReplicas, availableReplicas |
//! | ReplicaSet (apps) | observedGeneration, replicas, readyReplicas, availableReplicas |
//! | DaemonSet (apps) | observedGeneration; replicas ← desiredNumberScheduled, currentReplicas ← currentNumberScheduled, updatedReplicas ← updatedNumberScheduled, readyReplicas ← numberReady, availableReplicas ← numberAvailable, unavailableReplicas ← numberUnavailable |
//! | Job (batch) | active, succeeded, failed |
//!
//! Summary: `available` is the AND over the bound clusters (false when a cluster has not reported
//! the feed, and false when no cluster is bound, where Clusternet says true: nothing running
//! anywhere is not "available"); every count is the sum over the clusters that report it
//! (absent when none does); `observedGeneration` is the maximum.
//!
//! A status field of the wrong type makes that cluster's detail unavailable with no counts: a
//! status the hub cannot read is no evidence that the object is healthy.

use atoll_crds::apps::{
    AggregatedStatus, Description, DescriptionPhase, DescriptionStatus, Feed, FeedStatus,
    FeedStatusPerCluster, ReplicaStatus,
};
use std::collections::HashMap;

use serde_json::Value;

use crate::error::Error;

/// A binding cluster, as the Subscription's `status.bindingClusters` names it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterRef {
    /// The cluster's dedicated namespace.
    pub namespace: String,
    /// The ManagedCluster name.
    pub name: String,
    /// `ManagedCluster.spec.clusterId`.
    pub id: String,
}

/// The status one cluster reported for the Subscription's Description.
#[derive(Debug, Clone, Copy)]
pub struct DescriptionReport<'a> {
    /// Namespace of the Description, the cluster's dedicated namespace.
    pub namespace: &'a str,
    /// The Description's status.
    pub status: &'a DescriptionStatus,
}

impl<'a> DescriptionReport<'a> {
    /// The report of a Description object; `None` when it has no status or no namespace yet.
    pub fn from_description(description: &'a Description) -> Option<Self> {
        Some(DescriptionReport {
            namespace: description.metadata.namespace.as_deref()?,
            status: description.status.as_ref()?,
        })
    }
}

fn same_feed(a: &Feed, b: &Feed) -> bool {
    a.kind == b.kind
        && a.api_version == b.api_version
        && a.name == b.name
        && a.namespace.as_deref().unwrap_or("") == b.namespace.as_deref().unwrap_or("")
}

fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// Reads the replica counts of a `kind` object from its `.status` (see the module table). Kinds
/// outside the table give an empty status. Missing fields stay absent; a field that is not a
/// whole number in range is an error.
pub fn replica_status(
    api_version: &str,
    kind: &str,
    observed: &Value,
) -> Result<ReplicaStatus, Error> {
    let read = |field: &str| -> Result<Option<i64>, Error> {
        match observed.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v
                .as_i64()
                .map(Some)
                .ok_or_else(|| Error::ParseObservedStatus {
                    kind: format!("{api_version}/{kind}"),
                    field: field.to_owned(),
                    found: v.to_string(),
                }),
        }
    };
    let read32 = |field: &str| -> Result<Option<i32>, Error> {
        match read(field)? {
            None => Ok(None),
            Some(n) => i32::try_from(n)
                .map(Some)
                .map_err(|_| Error::ParseObservedStatus {
                    kind: format!("{api_version}/{kind}"),
                    field: field.to_owned(),
                    found: n.to_string(),
                }),
        }
    };
    let group = group_of(api_version);
    let workload_group = group == "apps" || group == "extensions";
    let mut s = ReplicaStatus::default();
    match kind {
        "Deployment" if workload_group => {
            s.observed_generation = read("observedGeneration")?;
            s.replicas = read32("replicas")?;
            s.updated_replicas = read32("updatedReplicas")?;
            s.ready_replicas = read32("readyReplicas")?;
            s.available_replicas = read32("availableReplicas")?;
            s.unavailable_replicas = read32("unavailableReplicas")?;
        }
        "StatefulSet" if workload_group => {
            s.observed_generation = read("observedGeneration")?;
            s.replicas = read32("replicas")?;
            s.updated_replicas = read32("updatedReplicas")?;
            s.current_replicas = read32("currentReplicas")?;
            s.ready_replicas = read32("readyReplicas")?;
            s.available_replicas = read32("availableReplicas")?;
        }
        "ReplicaSet" if workload_group => {
            s.observed_generation = read("observedGeneration")?;
            s.replicas = read32("replicas")?;
            s.ready_replicas = read32("readyReplicas")?;
            s.available_replicas = read32("availableReplicas")?;
        }
        "DaemonSet" if workload_group => {
            s.observed_generation = read("observedGeneration")?;
            s.replicas = read32("desiredNumberScheduled")?;
            s.current_replicas = read32("currentNumberScheduled")?;
            s.updated_replicas = read32("updatedNumberScheduled")?;
            s.ready_replicas = read32("numberReady")?;
            s.available_replicas = read32("numberAvailable")?;
            s.unavailable_replicas = read32("numberUnavailable")?;
        }
        "Job" if group == "batch" => {
            s.active = read32("active")?;
            s.succeeded = read32("succeeded")?;
            s.failed = read32("failed")?;
        }
        _ => {}
    }
    Ok(s)
}

fn detail(
    feed: &Feed,
    cluster: &ClusterRef,
    report: Option<&DescriptionReport<'_>>,
) -> FeedStatusPerCluster {
    let mut out = FeedStatusPerCluster {
        cluster_id: cluster.id.clone(),
        cluster_name: cluster.name.clone(),
        available: false,
        replica_status: ReplicaStatus::default(),
    };
    let entry = report.and_then(|r| {
        r.status
            .manifest_statuses
            .iter()
            .find(|m| same_feed(&m.feed, feed))
    });
    if let Some(entry) = entry {
        let observed = entry.observed_status.clone().unwrap_or(Value::Null);
        if let Ok(status) = replica_status(&feed.api_version, &feed.kind, &observed) {
            out.available = true;
            out.replica_status = status;
        }
    }
    out
}

fn add(sum: Option<i32>, v: Option<i32>) -> Option<i32> {
    match (sum, v) {
        (None, v) => v,
        (s, None) => s,
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
    }
}

fn summarize(details: &[FeedStatusPerCluster]) -> FeedStatus {
    let mut s = ReplicaStatus::default();
    for d in details {
        let r = &d.replica_status;
        s.observed_generation = match (s.observed_generation, r.observed_generation) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        s.replicas = add(s.replicas, r.replicas);
        s.updated_replicas = add(s.updated_replicas, r.updated_replicas);
        s.current_replicas = add(s.current_replicas, r.current_replicas);
        s.ready_replicas = add(s.ready_replicas, r.ready_replicas);
        s.available_replicas = add(s.available_replicas, r.available_replicas);
        s.unavailable_replicas = add(s.unavailable_replicas, r.unavailable_replicas);
        s.active = add(s.active, r.active);
        s.succeeded = add(s.succeeded, r.succeeded);
        s.failed = add(s.failed, r.failed);
    }
    FeedStatus {
        available: !details.is_empty() && details.iter().all(|d| d.available),
        replica_status: s,
    }
}

/// The most clusters a feed's `feedStatusDetails` lists: a Subscription's status must fit the
/// API server's object limit whatever the fleet's size.
pub const MAX_FEED_STATUS_DETAILS: usize = 50;

/// `details` as the status lists them: every one up to [`MAX_FEED_STATUS_DETAILS`] clusters;
/// past that only the clusters where the feed is not available, at most that many, with the
/// number left out.
fn bounded_details(details: Vec<FeedStatusPerCluster>) -> (Vec<FeedStatusPerCluster>, Option<i32>) {
    if details.len() <= MAX_FEED_STATUS_DETAILS {
        return (details, None);
    }
    let total = details.len();
    let kept: Vec<FeedStatusPerCluster> = details
        .into_iter()
        .filter(|d| !d.available)
        .take(MAX_FEED_STATUS_DETAILS)
        .collect();
    let omitted = i32::try_from(total - kept.len()).unwrap_or(i32::MAX);
    (kept, Some(omitted))
}

/// One [`AggregatedStatus`] per feed (same order as `feeds`), with one detail per binding
/// cluster (same order as `binding_clusters`; bounded by [`MAX_FEED_STATUS_DETAILS`]).
/// `descriptions` holds the reports of the Subscription's Descriptions, matched to clusters by
/// namespace; a cluster without a report is not available.
pub fn aggregate(
    feeds: &[Feed],
    binding_clusters: &[ClusterRef],
    descriptions: &[DescriptionReport<'_>],
) -> Vec<AggregatedStatus> {
    let by_namespace = index_reports(descriptions);
    let reports: Vec<Option<&DescriptionReport<'_>>> = binding_clusters
        .iter()
        .map(|c| by_namespace.get(c.namespace.as_str()).copied())
        .collect();
    feeds
        .iter()
        .map(|feed| {
            let details: Vec<FeedStatusPerCluster> = binding_clusters
                .iter()
                .zip(&reports)
                .map(|(cluster, report)| detail(feed, cluster, *report))
                .collect();
            let feed_status_summary = summarize(&details);
            let (feed_status_details, omitted) = bounded_details(details);
            AggregatedStatus {
                feed: feed.clone(),
                feed_status_summary,
                feed_status_details,
                feed_status_details_omitted: omitted,
            }
        })
        .collect()
}

/// Number of binding clusters whose Description reports phase `Success` (`status.completedReleases`,
/// which Clusternet never fills).
pub fn completed_releases(
    binding_clusters: &[ClusterRef],
    descriptions: &[DescriptionReport<'_>],
) -> i32 {
    let by_namespace = index_reports(descriptions);
    let n = binding_clusters
        .iter()
        .filter(|c| {
            by_namespace
                .get(c.namespace.as_str())
                .is_some_and(|d| d.status.phase == Some(DescriptionPhase::Success))
        })
        .count();
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// Reports by namespace; with two reports for one namespace the first wins.
fn index_reports<'r, 'a>(
    descriptions: &'r [DescriptionReport<'a>],
) -> HashMap<&'a str, &'r DescriptionReport<'a>> {
    let mut map = HashMap::with_capacity(descriptions.len());
    for d in descriptions {
        map.entry(d.namespace).or_insert(d);
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_crds::apps::ManifestStatus;
    use serde_json::json;

    fn feed(api_version: &str, kind: &str, name: &str) -> Feed {
        Feed {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: Some("default".to_owned()),
            name: name.to_owned(),
        }
    }

    fn cluster(n: u8) -> ClusterRef {
        ClusterRef {
            namespace: format!("clusternet-{n}"),
            name: format!("child{n}"),
            id: format!("00000000-0000-0000-0000-00000000000{n}"),
        }
    }

    fn status(phase: Option<DescriptionPhase>, entries: Vec<(Feed, Value)>) -> DescriptionStatus {
        DescriptionStatus {
            phase,
            manifest_statuses: entries
                .into_iter()
                .map(|(feed, observed)| ManifestStatus {
                    feed,
                    observed_status: Some(observed),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn replica_status_maps_each_workload_kind() {
        let cases: Vec<(&str, &str, Value, ReplicaStatus)> = vec![
            (
                "apps/v1",
                "Deployment",
                json!({"observedGeneration": 4, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2, "unavailableReplicas": 1, "conditions": []}),
                ReplicaStatus {
                    observed_generation: Some(4),
                    replicas: Some(3),
                    updated_replicas: Some(3),
                    ready_replicas: Some(2),
                    available_replicas: Some(2),
                    unavailable_replicas: Some(1),
                    ..Default::default()
                },
            ),
            (
                "apps/v1",
                "StatefulSet",
                json!({"observedGeneration": 1, "replicas": 2, "currentReplicas": 2, "updatedReplicas": 1, "readyReplicas": 2, "availableReplicas": 2}),
                ReplicaStatus {
                    observed_generation: Some(1),
                    replicas: Some(2),
                    current_replicas: Some(2),
                    updated_replicas: Some(1),
                    ready_replicas: Some(2),
                    available_replicas: Some(2),
                    ..Default::default()
                },
            ),
            (
                "apps/v1",
                "ReplicaSet",
                json!({"observedGeneration": 2, "replicas": 5, "readyReplicas": 4, "availableReplicas": 4, "fullyLabeledReplicas": 5}),
                ReplicaStatus {
                    observed_generation: Some(2),
                    replicas: Some(5),
                    ready_replicas: Some(4),
                    available_replicas: Some(4),
                    ..Default::default()
                },
            ),
            (
                "apps/v1",
                "DaemonSet",
                json!({"observedGeneration": 7, "desiredNumberScheduled": 3, "currentNumberScheduled": 3, "updatedNumberScheduled": 2, "numberReady": 2, "numberAvailable": 2, "numberUnavailable": 1, "numberMisscheduled": 0}),
                ReplicaStatus {
                    observed_generation: Some(7),
                    replicas: Some(3),
                    current_replicas: Some(3),
                    updated_replicas: Some(2),
                    ready_replicas: Some(2),
                    available_replicas: Some(2),
                    unavailable_replicas: Some(1),
                    ..Default::default()
                },
            ),
            (
                "batch/v1",
                "Job",
                json!({"active": 1, "succeeded": 2, "failed": 3, "ready": 1}),
                ReplicaStatus {
                    active: Some(1),
                    succeeded: Some(2),
                    failed: Some(3),
                    ..Default::default()
                },
            ),
            (
                "v1",
                "Service",
                json!({"loadBalancer": {}}),
                ReplicaStatus::default(),
            ),
            (
                "example.com/v1",
                "Deployment",
                json!({"replicas": 3}),
                ReplicaStatus::default(),
            ),
            ("apps/v1", "Deployment", json!({}), ReplicaStatus::default()),
        ];
        for (api_version, kind, observed, want) in cases {
            assert_eq!(
                replica_status(api_version, kind, &observed).unwrap(),
                want,
                "{api_version} {kind}"
            );
        }
    }

    #[test]
    fn malformed_status_fields_are_errors_naming_the_field() {
        let cases = [
            json!({"replicas": "three"}),
            json!({"replicas": 1.5}),
            json!({"replicas": 4_294_967_296_i64}),
        ];
        for observed in cases {
            let err = replica_status("apps/v1", "Deployment", &observed).unwrap_err();
            assert_eq!(err.label(), "parse_observed_status");
            assert!(err.to_string().contains("replicas"), "{err}");
        }
    }

    #[test]
    fn a_subscriptions_status_stays_small_at_a_thousand_clusters_and_ten_feeds() {
        let feeds: Vec<Feed> = (0..10)
            .map(|i| feed("apps/v1", "Deployment", &format!("web-{i:02}")))
            .collect();
        let clusters: Vec<ClusterRef> = (0..1000)
            .map(|i| ClusterRef {
                namespace: format!("clusternet-{i:05}"),
                name: format!("child-{i:04}"),
                id: format!("00000000-0000-4000-8000-{i:012}"),
            })
            .collect();
        let observed = json!({"observedGeneration": 7, "replicas": 3, "readyReplicas": 3,
            "availableReplicas": 3, "updatedReplicas": 3});
        let statuses: Vec<DescriptionStatus> = (0..1000)
            .map(|_| {
                status(
                    Some(DescriptionPhase::Success),
                    feeds
                        .iter()
                        .map(|f| (f.clone(), observed.clone()))
                        .collect(),
                )
            })
            .collect();
        // Every third cluster has not reported: unavailable everywhere.
        let reports: Vec<DescriptionReport<'_>> = clusters
            .iter()
            .zip(&statuses)
            .enumerate()
            .filter(|(i, _)| i % 3 != 0)
            .map(|(_, (c, s))| DescriptionReport {
                namespace: &c.namespace,
                status: s,
            })
            .collect();
        let aggregated = aggregate(&feeds, &clusters, &reports);
        let full = atoll_crds::apps::SubscriptionStatus {
            binding_clusters: clusters
                .iter()
                .map(|c| format!("{}/{}", c.namespace, c.name))
                .collect(),
            replicas: feeds
                .iter()
                .map(|f| (f.key(), vec![3; clusters.len()]))
                .collect(),
            aggregated_statuses: aggregated.clone(),
            ..Default::default()
        };
        let bytes = serde_json::to_vec(&full).unwrap().len();
        eprintln!("a Subscription status at 1,000 clusters x 10 feeds: {bytes} bytes");
        assert!(bytes < 256 * 1024, "{bytes} bytes");
        let web = &aggregated[0];
        // The summary counts every cluster; the details name the unavailable ones, bounded.
        assert_eq!(
            web.feed_status_summary.replica_status.replicas,
            Some(3 * 666)
        );
        assert!(!web.feed_status_summary.available);
        assert_eq!(web.feed_status_details.len(), MAX_FEED_STATUS_DETAILS);
        assert!(web.feed_status_details.iter().all(|d| !d.available));
        assert_eq!(web.feed_status_details[1].cluster_name, "child-0003");
        assert_eq!(web.feed_status_details_omitted, Some(950));
        // A fleet within the bound lists every cluster, and says nothing is left out.
        let small = aggregate(&feeds[..1], &clusters[..MAX_FEED_STATUS_DETAILS], &reports);
        assert_eq!(small[0].feed_status_details.len(), MAX_FEED_STATUS_DETAILS);
        assert_eq!(small[0].feed_status_details_omitted, None);
    }

    #[test]
    fn aggregate_fills_one_detail_per_binding_cluster_in_order() {
        let web = feed("apps/v1", "Deployment", "web");
        let cfg = feed("v1", "ConfigMap", "cfg");
        let clusters = vec![cluster(2), cluster(1), cluster(3)];
        let s1 = status(
            Some(DescriptionPhase::Success),
            vec![
                (
                    web.clone(),
                    json!({"observedGeneration": 2, "replicas": 2, "readyReplicas": 2}),
                ),
                (cfg.clone(), json!({})),
            ],
        );
        let s2 = status(
            Some(DescriptionPhase::Success),
            vec![(
                web.clone(),
                json!({"observedGeneration": 3, "replicas": 1, "readyReplicas": 0}),
            )],
        );
        let reports = vec![
            DescriptionReport {
                namespace: "clusternet-1",
                status: &s1,
            },
            DescriptionReport {
                namespace: "clusternet-2",
                status: &s2,
            },
            // a Description of an unbound cluster is ignored
            DescriptionReport {
                namespace: "clusternet-9",
                status: &s1,
            },
        ];
        let out = aggregate(&[web.clone(), cfg.clone()], &clusters, &reports);
        assert_eq!(out.len(), 2);

        let w = &out[0];
        assert_eq!(w.feed, web);
        let names: Vec<&str> = w
            .feed_status_details
            .iter()
            .map(|d| d.cluster_name.as_str())
            .collect();
        assert_eq!(names, vec!["child2", "child1", "child3"]);
        assert_eq!(w.feed_status_details[0].cluster_id, cluster(2).id);
        let avail: Vec<bool> = w.feed_status_details.iter().map(|d| d.available).collect();
        assert_eq!(avail, vec![true, true, false], "cluster 3 has not reported");
        assert_eq!(w.feed_status_details[0].replica_status.replicas, Some(1));
        assert!(!w.feed_status_summary.available);
        assert_eq!(w.feed_status_summary.replica_status.replicas, Some(3));
        assert_eq!(w.feed_status_summary.replica_status.ready_replicas, Some(2));
        assert_eq!(
            w.feed_status_summary.replica_status.observed_generation,
            Some(3)
        );
        assert_eq!(w.feed_status_summary.replica_status.active, None);

        let c = &out[1];
        let avail: Vec<bool> = c.feed_status_details.iter().map(|d| d.available).collect();
        assert_eq!(avail, vec![false, true, false]);
        assert_eq!(
            c.feed_status_summary.replica_status,
            ReplicaStatus::default()
        );
    }

    #[test]
    fn summary_availability_is_the_and_of_every_cluster() {
        let web = feed("apps/v1", "Deployment", "web");
        let ok = status(None, vec![(web.clone(), json!({"replicas": 1}))]);
        let bad = status(None, vec![(web.clone(), json!({"replicas": "x"}))]);
        let other_ns = status(
            None,
            vec![(
                Feed {
                    namespace: None,
                    ..web.clone()
                },
                json!({}),
            )],
        );
        let cases: Vec<(&str, Vec<ClusterRef>, Vec<DescriptionReport<'_>>, bool)> = vec![
            ("no cluster bound", vec![], vec![], false),
            (
                "one reported",
                vec![cluster(1)],
                vec![DescriptionReport {
                    namespace: "clusternet-1",
                    status: &ok,
                }],
                true,
            ),
            (
                "all reported",
                vec![cluster(1), cluster(2)],
                vec![
                    DescriptionReport {
                        namespace: "clusternet-1",
                        status: &ok,
                    },
                    DescriptionReport {
                        namespace: "clusternet-2",
                        status: &ok,
                    },
                ],
                true,
            ),
            (
                "one missing",
                vec![cluster(1), cluster(2)],
                vec![DescriptionReport {
                    namespace: "clusternet-1",
                    status: &ok,
                }],
                false,
            ),
            (
                "unreadable status",
                vec![cluster(1)],
                vec![DescriptionReport {
                    namespace: "clusternet-1",
                    status: &bad,
                }],
                false,
            ),
            (
                "different feed namespace",
                vec![cluster(1)],
                vec![DescriptionReport {
                    namespace: "clusternet-1",
                    status: &other_ns,
                }],
                false,
            ),
        ];
        for (name, clusters, reports, want) in cases {
            let out = aggregate(std::slice::from_ref(&web), &clusters, &reports);
            assert_eq!(out[0].feed_status_summary.available, want, "{name}");
        }
    }

    #[test]
    fn absent_and_empty_feed_namespaces_match() {
        let ns_feed = Feed {
            namespace: None,
            ..feed("v1", "Namespace", "team")
        };
        let empty_ns = Feed {
            namespace: Some(String::new()),
            ..ns_feed.clone()
        };
        let s = status(None, vec![(empty_ns, json!({"phase": "Active"}))]);
        let out = aggregate(
            std::slice::from_ref(&ns_feed),
            &[cluster(1)],
            &[DescriptionReport {
                namespace: "clusternet-1",
                status: &s,
            }],
        );
        assert!(out[0].feed_status_summary.available);
    }

    #[test]
    fn completed_releases_counts_bound_clusters_in_success() {
        let success = status(Some(DescriptionPhase::Success), vec![]);
        let failure = status(Some(DescriptionPhase::Failure), vec![]);
        let pending = status(None, vec![]);
        let clusters = vec![cluster(1), cluster(2), cluster(3)];
        let cases: Vec<(&str, Vec<DescriptionReport<'_>>, i32)> = vec![
            ("none reported", vec![], 0),
            (
                "mixed",
                vec![
                    DescriptionReport {
                        namespace: "clusternet-1",
                        status: &success,
                    },
                    DescriptionReport {
                        namespace: "clusternet-2",
                        status: &failure,
                    },
                    DescriptionReport {
                        namespace: "clusternet-3",
                        status: &pending,
                    },
                ],
                1,
            ),
            (
                "unbound success ignored",
                vec![
                    DescriptionReport {
                        namespace: "clusternet-1",
                        status: &success,
                    },
                    DescriptionReport {
                        namespace: "clusternet-3",
                        status: &success,
                    },
                    DescriptionReport {
                        namespace: "clusternet-7",
                        status: &success,
                    },
                ],
                2,
            ),
        ];
        for (name, reports, want) in cases {
            assert_eq!(completed_releases(&clusters, &reports), want, "{name}");
        }
    }

    #[test]
    fn report_from_description_needs_namespace_and_status() {
        let mut d = Description::new("default.web", Default::default());
        assert!(DescriptionReport::from_description(&d).is_none());
        d.metadata.namespace = Some("clusternet-1".to_owned());
        assert!(DescriptionReport::from_description(&d).is_none());
        d.status = Some(status(Some(DescriptionPhase::Success), vec![]));
        let r = DescriptionReport::from_description(&d).unwrap();
        assert_eq!(r.namespace, "clusternet-1");
    }
}
