//! `kubectl atoll status SUBSCRIPTION`: a Subscription's conditions, the clusters it is bound to
//! with their Description's phase, and the replicas of each feed in each cluster.

use atoll_crds::apps::{
    Description, FeedStatusPerCluster, SchedulingStrategy, Subscription, SubscriptionStatus,
};
use atoll_crds::known;
use k8s_openapi::jiff::Timestamp;

use crate::table::{NONE, Table, age, cell};

/// Headers of the conditions table.
pub const CONDITION_HEADERS: [&str; 5] = ["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"];
/// Headers of the clusters table.
pub const CLUSTER_HEADERS: [&str; 5] = ["CLUSTER", "BOUND", "DESCRIPTION", "PHASE", "REASON"];
/// Headers of the feeds table.
pub const FEED_HEADERS: [&str; 5] = ["FEED", "CLUSTER", "DESIRED", "READY", "AVAILABLE"];

/// The Subscription's conditions in the order of its status, with their age.
pub fn condition_table(sub: &Subscription, now: Timestamp) -> Table {
    let mut table = Table::new(&CONDITION_HEADERS);
    table.rows.extend(status_of(sub).conditions.iter().map(|c| {
        vec![
            cell(Some(&c.type_)),
            cell(Some(&c.status)),
            cell(Some(&c.reason)),
            age(Some(&c.last_transition_time), now),
            cell(Some(&c.message)),
        ]
    }));
    table
}

/// One row per bound cluster (`<dedicated-namespace>/<name>`, in the order of
/// `status.bindingClusters`) with the Description in its dedicated namespace, then one row per
/// Description of the Subscription in a namespace no bound cluster has (left to be deleted:
/// `BOUND` is `no`).
pub fn cluster_table(sub: &Subscription, descriptions: &[Description]) -> Table {
    let status = status_of(sub);
    let mut table = Table::new(&CLUSTER_HEADERS);
    for entry in &status.binding_clusters {
        let ns = known::parse_binding_cluster(entry).map(|(ns, _)| ns);
        let desc = descriptions
            .iter()
            .find(|d| ns.is_some() && d.metadata.namespace.as_deref() == ns);
        table.rows.push(cluster_row(entry.clone(), "yes", desc));
    }
    let mut unbound: Vec<&Description> = descriptions
        .iter()
        .filter(|d| {
            !status.binding_clusters.iter().any(|entry| {
                known::parse_binding_cluster(entry).map(|(ns, _)| ns)
                    == d.metadata.namespace.as_deref()
            })
        })
        .collect();
    unbound.sort_by(|a, b| a.metadata.namespace.cmp(&b.metadata.namespace));
    for desc in unbound {
        let cluster = desc
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(known::LABEL_CLUSTER_NAME))
            .map_or("?", String::as_str);
        let ns = desc.metadata.namespace.as_deref().unwrap_or_default();
        table.rows.push(cluster_row(
            known::binding_cluster(ns, cluster),
            "no",
            Some(desc),
        ));
    }
    table
}

fn cluster_row(cluster: String, bound: &str, desc: Option<&Description>) -> Vec<String> {
    let Some(desc) = desc else {
        return vec![
            cluster,
            bound.to_owned(),
            NONE.to_owned(),
            NONE.to_owned(),
            "no Description yet".to_owned(),
        ];
    };
    let status = desc.status.as_ref();
    vec![
        cluster,
        bound.to_owned(),
        format!(
            "{}/{}",
            desc.metadata.namespace.as_deref().unwrap_or_default(),
            desc.metadata.name.as_deref().unwrap_or_default()
        ),
        cell(status.and_then(|s| s.phase).map(|p| p.as_str())),
        cell(status.and_then(|s| s.reason.as_deref())),
    ]
}

/// One row per feed (in the order of `spec.feeds`) and bound cluster: the replicas the scheduler
/// gave the cluster (`status.replicas`, `Dividing` only), and the ready replicas and
/// availability the cluster reported (`status.aggregatedStatuses`).
pub fn feed_table(sub: &Subscription) -> Table {
    let status = status_of(sub);
    let mut table = Table::new(&FEED_HEADERS);
    for feed in &sub.spec.feeds {
        let key = feed.key();
        let aggregated = status.aggregated_statuses.iter().find(|a| a.feed == *feed);
        let details = aggregated
            .map(|a| a.feed_status_details.as_slice())
            .unwrap_or_default();
        // Past the status's bound, the clusters left out are the ones where the feed is
        // available.
        let omitted = aggregated.is_some_and(|a| a.feed_status_details_omitted.is_some());
        for (i, entry) in status.binding_clusters.iter().enumerate() {
            let desired = status
                .replicas
                .get(&key)
                .and_then(|r| r.get(i))
                .map_or_else(|| NONE.to_owned(), i32::to_string);
            let name = known::parse_binding_cluster(entry).map(|(_, name)| name);
            let detail = details
                .iter()
                .find(|d| Some(d.cluster_name.as_str()) == name);
            table.rows.push(vec![
                key.clone(),
                entry.clone(),
                desired,
                ready(detail),
                match detail {
                    Some(d) => d.available.to_string(),
                    None if omitted => "true".to_owned(),
                    None => NONE.to_owned(),
                },
            ]);
        }
    }
    table
}

/// `ready/replicas` as the cluster reported them; [`NONE`] without a report or a replica count.
fn ready(detail: Option<&FeedStatusPerCluster>) -> String {
    match detail.map(|d| &d.replica_status) {
        Some(r) if r.replicas.is_some() => {
            format!(
                "{}/{}",
                r.ready_replicas.unwrap_or(0),
                r.replicas.unwrap_or(0)
            )
        }
        _ => NONE.to_owned(),
    }
}

fn status_of(sub: &Subscription) -> &SubscriptionStatus {
    static EMPTY: std::sync::LazyLock<SubscriptionStatus> =
        std::sync::LazyLock::new(SubscriptionStatus::default);
    sub.status.as_ref().unwrap_or(&EMPTY)
}

fn strategy(s: SchedulingStrategy) -> &'static str {
    match s {
        SchedulingStrategy::Replication => "Replication",
        SchedulingStrategy::Dividing => "Dividing",
    }
}

/// The whole `status` page: a summary, then the conditions, clusters and feeds tables, each
/// under a title, or `<none>` when it has no row.
pub fn render(sub: &Subscription, descriptions: &[Description], now: Timestamp) -> String {
    let status = status_of(sub);
    let generation = match (sub.metadata.generation, status.observed_generation) {
        (Some(g), Some(o)) if o < g => format!("{g} (status describes {o}: not scheduled yet)"),
        (Some(g), _) => g.to_string(),
        (None, _) => NONE.to_owned(),
    };
    let releases = match (status.completed_releases, status.desired_releases) {
        (c, Some(d)) => format!("{}/{d} clusters completed", c.unwrap_or(0)),
        _ => NONE.to_owned(),
    };
    let mut out = format!(
        "Subscription:  {}/{}\nStrategy:      {}\nReleases:      {releases}\nGeneration:    {generation}\n",
        sub.metadata.namespace.as_deref().unwrap_or_default(),
        sub.metadata.name.as_deref().unwrap_or_default(),
        strategy(sub.spec.scheduling_strategy),
    );
    crate::table::push_sections(
        &mut out,
        [
            ("Conditions", condition_table(sub, now)),
            ("Clusters", cluster_table(sub, descriptions)),
            ("Feeds", feed_table(sub)),
        ],
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_crds::apps::{
        AggregatedStatus, DescriptionPhase, DescriptionSpec, DescriptionStatus, Feed,
        ReplicaStatus, SubscriptionSpec,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use std::collections::BTreeMap;

    fn now() -> Timestamp {
        "2026-01-01T01:00:00Z".parse().unwrap()
    }

    fn feed(kind: &str, name: &str) -> Feed {
        Feed {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            namespace: Some("default".into()),
            name: name.into(),
        }
    }

    fn sub_without_status() -> Subscription {
        let mut sub = Subscription::new(
            "web",
            SubscriptionSpec {
                scheduling_strategy: SchedulingStrategy::Dividing,
                feeds: vec![feed("Deployment", "web"), feed("ConfigMap", "conf")],
                ..SubscriptionSpec::default()
            },
        );
        sub.metadata.namespace = Some("default".into());
        sub.metadata.generation = Some(3);
        sub
    }

    fn scheduled() -> Subscription {
        let mut sub = sub_without_status();
        let web = feed("Deployment", "web");
        sub.status = Some(SubscriptionStatus {
            binding_clusters: vec!["clusternet-a/alpha".into(), "clusternet-b/beta".into()],
            replicas: BTreeMap::from([
                (web.key(), vec![2, 1]),
                (feed("ConfigMap", "conf").key(), vec![]),
            ]),
            desired_releases: Some(2),
            completed_releases: Some(1),
            aggregated_statuses: vec![AggregatedStatus {
                feed: web,
                feed_status_details: vec![FeedStatusPerCluster {
                    cluster_id: "id-a".into(),
                    cluster_name: "alpha".into(),
                    available: true,
                    replica_status: ReplicaStatus {
                        replicas: Some(2),
                        ready_replicas: Some(1),
                        ..ReplicaStatus::default()
                    },
                }],
                ..AggregatedStatus::default()
            }],
            conditions: vec![Condition {
                type_: "Scheduled".into(),
                status: "True".into(),
                reason: "Scheduled".into(),
                message: "bound to\n2 clusters".into(),
                last_transition_time: Time("2026-01-01T00:58:00Z".parse().unwrap()),
                observed_generation: None,
            }],
            observed_generation: Some(2),
            ..SubscriptionStatus::default()
        });
        sub
    }

    fn description(ns: &str, cluster: &str, phase: DescriptionPhase, reason: &str) -> Description {
        let mut d = Description::new("default.web", DescriptionSpec::default());
        d.metadata.namespace = Some(ns.into());
        d.metadata.labels = Some(BTreeMap::from([(
            known::LABEL_CLUSTER_NAME.into(),
            cluster.into(),
        )]));
        d.status = Some(DescriptionStatus {
            phase: Some(phase),
            reason: (!reason.is_empty()).then(|| reason.into()),
            ..DescriptionStatus::default()
        });
        d
    }

    #[test]
    fn conditions_show_type_status_reason_age_and_message() {
        let table = condition_table(&scheduled(), now());
        assert_eq!(table.headers, CONDITION_HEADERS);
        assert_eq!(
            table.rows,
            [[
                "Scheduled",
                "True",
                "Scheduled",
                "2m",
                "bound to 2 clusters"
            ]]
        );
    }

    #[test]
    fn each_bound_cluster_shows_its_description_and_leftovers_are_marked_unbound() {
        let descriptions = [
            description("clusternet-z", "zeta", DescriptionPhase::Success, ""),
            description(
                "clusternet-a",
                "alpha",
                DescriptionPhase::Failure,
                "apply Deployment default/web:\nforbidden",
            ),
        ];
        let table = cluster_table(&scheduled(), &descriptions);
        assert_eq!(table.headers, CLUSTER_HEADERS);
        assert_eq!(
            table.rows,
            [
                [
                    "clusternet-a/alpha",
                    "yes",
                    "clusternet-a/default.web",
                    "Failure",
                    "apply Deployment default/web: forbidden"
                ],
                [
                    "clusternet-b/beta",
                    "yes",
                    "<none>",
                    "<none>",
                    "no Description yet"
                ],
                [
                    "clusternet-z/zeta",
                    "no",
                    "clusternet-z/default.web",
                    "Success",
                    "<none>"
                ],
            ]
        );
    }

    #[test]
    fn replicas_are_given_per_feed_and_cluster() {
        let table = feed_table(&scheduled());
        let web = "apps/v1/Deployment/default/web";
        let conf = "apps/v1/ConfigMap/default/conf";
        assert_eq!(
            table.rows,
            [
                [web, "clusternet-a/alpha", "2", "1/2", "true"],
                [web, "clusternet-b/beta", "1", "<none>", "<none>"],
                [conf, "clusternet-a/alpha", "<none>", "<none>", "<none>"],
                [conf, "clusternet-b/beta", "<none>", "<none>", "<none>"],
            ]
        );
    }

    #[test]
    fn clusters_a_bounded_status_leaves_out_are_the_available_ones() {
        let mut sub = scheduled();
        if let Some(status) = sub.status.as_mut() {
            status.aggregated_statuses[0].feed_status_details_omitted = Some(1);
        }
        let table = feed_table(&sub);
        let web = "apps/v1/Deployment/default/web";
        assert_eq!(
            table.rows[1],
            [web, "clusternet-b/beta", "1", "<none>", "true"]
        );
    }

    #[test]
    fn the_page_summarises_and_says_when_the_status_is_behind() {
        let page = render(&scheduled(), &[], now());
        assert!(page.starts_with("Subscription:  default/web\n"), "{page}");
        assert!(page.contains("Strategy:      Dividing\n"), "{page}");
        assert!(
            page.contains("Releases:      1/2 clusters completed\n"),
            "{page}"
        );
        assert!(
            page.contains("Generation:    3 (status describes 2: not scheduled yet)\n"),
            "{page}"
        );
        assert!(page.contains("\nConditions:\nTYPE "), "{page}");
    }

    #[test]
    fn a_subscription_without_status_has_empty_sections() {
        let sub = sub_without_status();
        assert!(condition_table(&sub, now()).rows.is_empty());
        assert!(cluster_table(&sub, &[]).rows.is_empty());
        assert!(feed_table(&sub).rows.is_empty());
        let page = render(&sub, &[], now());
        assert_eq!(
            page,
            "Subscription:  default/web\nStrategy:      Dividing\nReleases:      <none>\n\
             Generation:    3\n\nConditions:\n<none>\n\nClusters:\n<none>\n\nFeeds:\n<none>\n"
        );
    }
}
