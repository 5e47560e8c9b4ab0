//! `kubectl atoll describe cluster NAME`: one ManagedCluster as `kubectl describe` shows an
//! object (aligned `Key: value` lines, indented tables), then what the cluster receives (the
//! Descriptions in its dedicated namespace, with their objects) and the Events about it.

use atoll_crds::apps::{Deployer, Description, ManifestStatus};
use atoll_crds::clusters::ManagedCluster;
use atoll_crds::known;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::clusters;
use crate::table::{NONE, Table, age, cell};

/// Headers of the conditions table.
pub const CONDITION_HEADERS: [&str; 5] = ["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"];
/// Headers of a Description's objects table.
pub const OBJECT_HEADERS: [&str; 5] = [
    "API VERSION",
    "KIND",
    "NAMESPACE",
    "NAME",
    "OBSERVED STATUS",
];
/// Headers of the events table.
pub const EVENT_HEADERS: [&str; 4] = ["TYPE", "REASON", "AGE", "MESSAGE"];

/// Why no single ManagedCluster matches a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No ManagedCluster has that name or cluster id.
    None,
    /// Several do (by name, in different dedicated namespaces): `<namespace>/<name>` of each.
    Ambiguous(Vec<String>),
}

/// The ManagedCluster `cluster` means: the one whose cluster id is `cluster`, else the one named
/// `cluster`, which must then be unique.
pub fn find<'a>(
    clusters: &'a [ManagedCluster],
    cluster: &str,
) -> Result<&'a ManagedCluster, Lookup> {
    if let Some(mc) = clusters.iter().find(|mc| mc.spec.cluster_id == cluster) {
        return Ok(mc);
    }
    let by_name: Vec<&ManagedCluster> = clusters
        .iter()
        .filter(|mc| mc.metadata.name.as_deref() == Some(cluster))
        .collect();
    match by_name.as_slice() {
        [] => Err(Lookup::None),
        [one] => Ok(one),
        several => Err(Lookup::Ambiguous(
            several
                .iter()
                .map(|mc| {
                    format!(
                        "{}/{}",
                        mc.metadata.namespace.as_deref().unwrap_or_default(),
                        mc.metadata.name.as_deref().unwrap_or_default()
                    )
                })
                .collect(),
        )),
    }
}

/// `key: value` lines with the values aligned two spaces after the longest key, each line
/// indented by `indent` spaces. A value of several lines continues under its first line.
pub fn fields(pairs: &[(&str, String)], indent: usize) -> String {
    let width = pairs
        .iter()
        .map(|(k, _)| k.chars().count() + 1)
        .max()
        .unwrap_or(0)
        + 2;
    let pad = " ".repeat(indent);
    let mut out = String::new();
    for (key, value) in pairs {
        let mut lines = value.lines();
        let first = lines.next().unwrap_or_default();
        let label = format!("{key}:");
        let line = format!("{pad}{label:<width$}{first}");
        out.push_str(line.trim_end());
        out.push('\n');
        for more in lines {
            out.push_str(&format!("{pad}{:width$}{more}\n", ""));
        }
    }
    out
}

/// `table` indented by `indent` spaces, or `<none>` on the title's line when it has no row:
/// `Title:\n  HEADERS…` or `Title:  <none>`.
fn section(title: &str, table: &Table, indent: usize) -> String {
    let pad = " ".repeat(indent);
    if table.rows.is_empty() {
        return format!("{pad}{title}:  {NONE}\n");
    }
    let mut out = format!("{pad}{title}:\n");
    for line in table.render().lines() {
        out.push_str(&format!("{pad}  {line}\n"));
    }
    out
}

/// The cluster's conditions in the order of its status, with their age.
pub fn condition_table(mc: &ManagedCluster, now: Timestamp) -> Table {
    let mut table = Table::new(&CONDITION_HEADERS);
    let conditions = mc.status.as_ref().map(|s| s.conditions.as_slice());
    table
        .rows
        .extend(conditions.unwrap_or_default().iter().map(|c| {
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

/// One line per item, `<none>` without any.
fn lines(items: impl IntoIterator<Item = String>) -> String {
    let all: Vec<String> = items.into_iter().collect();
    if all.is_empty() {
        NONE.to_owned()
    } else {
        all.join("\n")
    }
}

/// The cluster's own part of the page: identity, labels, taints, versions, nodes,
/// allocatable, last heartbeat, then its conditions.
pub fn cluster_fields(mc: &ManagedCluster, now: Timestamp) -> String {
    let status = mc.status.as_ref();
    let labels = lines(
        mc.metadata
            .labels
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v}")),
    );
    let taints = lines(
        mc.spec
            .taints
            .iter()
            .map(|t| clusters::taints(std::slice::from_ref(t))),
    );
    let allocatable = lines(
        status
            .map(|s| &s.allocatable)
            .into_iter()
            .flatten()
            .map(|(k, q)| format!("{k}: {}", q.0)),
    );
    let heartbeat = match status.and_then(|s| s.last_observed_time.as_ref()) {
        Some(t) => format!("{} ({} ago)", t.0, age(Some(t), now)),
        None => NONE.to_owned(),
    };
    let nodes = match clusters::nodes(mc).as_str() {
        NONE => NONE.to_owned(),
        n => format!("{n} ready"),
    };
    let mut out = fields(
        &[
            ("Name", cell(mc.metadata.name.as_deref())),
            ("Cluster ID", cell(Some(&mc.spec.cluster_id))),
            ("Namespace", cell(mc.metadata.namespace.as_deref())),
            ("Ready", clusters::ready(mc, now)),
            ("Labels", labels),
            ("Taints", taints),
            (
                "Version",
                cell(status.and_then(|s| s.k8s_version.as_deref())),
            ),
            (
                "Agent Version",
                cell(status.and_then(|s| s.agent_version.as_deref())),
            ),
            ("Nodes", nodes),
            ("Allocatable", allocatable),
            ("Last Heartbeat", heartbeat),
        ],
        0,
    );
    out.push_str(&section("Conditions", &condition_table(mc, now), 0));
    out
}

/// `metadata.<field>` of an embedded object, if it is a string.
fn meta<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

fn same_namespace(a: Option<&str>, b: Option<&str>) -> bool {
    a.unwrap_or_default() == b.unwrap_or_default()
}

/// The observed status of `object` among `statuses`, as one line of JSON; [`NONE`] when the
/// agent reported none.
fn observed(object: &Value, statuses: &[ManifestStatus]) -> String {
    let found = statuses.iter().find(|s| {
        Some(s.feed.api_version.as_str()) == object.get("apiVersion").and_then(Value::as_str)
            && Some(s.feed.kind.as_str()) == object.get("kind").and_then(Value::as_str)
            && Some(s.feed.name.as_str()) == meta(object, "name")
            && same_namespace(s.feed.namespace.as_deref(), meta(object, "namespace"))
    });
    match found.and_then(|s| s.observed_status.as_ref()) {
        Some(v) => cell(Some(&v.to_string())),
        None => NONE.to_owned(),
    }
}

/// One row per object of the Description (`spec.raw`, in order) with the status the agent
/// observed for it in the child cluster.
pub fn object_table(desc: &Description) -> Table {
    let statuses = desc
        .status
        .as_ref()
        .map(|s| s.manifest_statuses.as_slice())
        .unwrap_or_default();
    let mut table = Table::new(&OBJECT_HEADERS);
    table.rows.extend(desc.spec.raw.iter().map(|object| {
        vec![
            cell(object.get("apiVersion").and_then(Value::as_str)),
            cell(object.get("kind").and_then(Value::as_str)),
            cell(meta(object, "namespace")),
            cell(meta(object, "name")),
            observed(object, statuses),
        ]
    }));
    table
}

/// One Description: where it comes from, its deployer, phase and reason, and its objects.
pub fn description_fields(desc: &Description) -> String {
    let labels = desc.metadata.labels.as_ref();
    let label = |key: &str| labels.and_then(|l| l.get(key)).map(String::as_str);
    let subscription = match (
        label(known::LABEL_SUBS_NAMESPACE),
        label(known::LABEL_SUBS_NAME),
    ) {
        (Some(ns), Some(name)) => format!("{ns}/{name}"),
        _ => NONE.to_owned(),
    };
    let status = desc.status.as_ref();
    let mut pairs = vec![
        ("Subscription", subscription),
        (
            "Deployer",
            match desc.spec.deployer {
                Deployer::Generic => "Generic",
                Deployer::Helm => "Helm",
            }
            .to_owned(),
        ),
        (
            "Phase",
            cell(status.and_then(|s| s.phase).map(|p| p.as_str())),
        ),
        ("Reason", cell(status.and_then(|s| s.reason.as_deref()))),
    ];
    if desc.spec.deployer == Deployer::Helm {
        pairs.push((
            "Charts",
            lines(
                desc.spec
                    .charts
                    .iter()
                    .map(|c| format!("{}/{}", c.namespace, c.name)),
            ),
        ));
        return fields(&pairs, 4);
    }
    pairs.push(("Objects", desc.spec.raw.len().to_string()));
    let mut out = fields(&pairs, 4);
    let objects = object_table(desc);
    if !objects.rows.is_empty() {
        for line in objects.render().lines() {
            out.push_str(&format!("      {line}\n"));
        }
    }
    out
}

/// When an Event was last seen: its `lastTimestamp`, else its `eventTime`, else its
/// `firstTimestamp`, else its creation.
fn last_seen(event: &Event) -> Option<Time> {
    event
        .last_timestamp
        .clone()
        .or_else(|| event.event_time.as_ref().map(|t| Time(t.0)))
        .or_else(|| event.first_timestamp.clone())
        .or_else(|| event.metadata.creation_timestamp.clone())
}

/// The Events as `kubectl describe` lists them, oldest first: type, reason, age of the last
/// occurrence (`5m (x3 over 10m)` for a repeated one) and message.
pub fn event_table(events: &[Event], now: Timestamp) -> Table {
    let mut sorted: Vec<(Option<Time>, &Event)> =
        events.iter().map(|e| (last_seen(e), e)).collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut table = Table::new(&EVENT_HEADERS);
    table.rows.extend(sorted.into_iter().map(|(seen, e)| {
        let mut when = age(seen.as_ref(), now);
        if let (Some(count), Some(first)) = (e.count.filter(|c| *c > 1), &e.first_timestamp) {
            when = format!("{when} (x{count} over {})", age(Some(first), now));
        }
        vec![
            cell(e.type_.as_deref()),
            cell(e.reason.as_deref()),
            when,
            cell(e.message.as_deref()),
        ]
    }));
    table
}

/// The whole `describe cluster` page: the cluster, its Descriptions sorted by name, and the
/// Events about it.
pub fn render(
    mc: &ManagedCluster,
    descriptions: &[Description],
    events: &[Event],
    now: Timestamp,
) -> String {
    let mut out = cluster_fields(mc, now);
    let mut sorted: Vec<&Description> = descriptions.iter().collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    if sorted.is_empty() {
        out.push_str(&format!("Descriptions:  {NONE}\n"));
    } else {
        out.push_str("Descriptions:\n");
        for desc in sorted {
            out.push_str(&format!(
                "  {}:\n",
                desc.metadata.name.as_deref().unwrap_or_default()
            ));
            out.push_str(&description_fields(desc));
        }
    }
    out.push_str(&section("Events", &event_table(events, now), 0));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_crds::apps::{DescriptionPhase, DescriptionSpec, DescriptionStatus, Feed};
    use atoll_crds::clusters::{ManagedClusterSpec, ManagedClusterStatus, NodeStatistics};
    use k8s_openapi::api::core::v1::{ObjectReference, Taint};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use serde_json::json;
    use std::collections::BTreeMap;

    const ID: &str = "3f1e9a52-8c41-4b7e-9d0a-2b6c5e4f7a10";

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn now() -> Timestamp {
        "2026-01-01T01:00:00Z".parse().unwrap()
    }

    fn cluster(name: &str, ns: &str, id: &str) -> ManagedCluster {
        let mut mc = ManagedCluster::new(
            name,
            ManagedClusterSpec {
                cluster_id: id.into(),
                ..ManagedClusterSpec::default()
            },
        );
        mc.metadata.namespace = Some(ns.into());
        mc
    }

    fn reported() -> ManagedCluster {
        let mut mc = cluster("edge", "clusternet-edge", ID);
        mc.metadata.labels = Some(BTreeMap::from([
            ("env".into(), "prod".into()),
            ("region".into(), "eu".into()),
        ]));
        mc.spec.taints = vec![Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }];
        mc.status = Some(ManagedClusterStatus {
            last_observed_time: Some(t("2026-01-01T00:40:00Z")),
            k8s_version: Some("v1.33.1".into()),
            allocatable: BTreeMap::from([
                ("cpu".into(), Quantity("8".into())),
                ("memory".into(), Quantity("32Gi".into())),
            ]),
            node_statistics: Some(NodeStatistics {
                ready_nodes: Some(3),
                not_ready_nodes: Some(1),
                ..NodeStatistics::default()
            }),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "ManagedClusterReady".into(),
                message: "cluster is healthy".into(),
                last_transition_time: t("2026-01-01T00:30:00Z"),
                observed_generation: None,
            }],
            ..ManagedClusterStatus::default()
        });
        mc
    }

    fn description() -> Description {
        let mut d = Description::new(
            "shop.web",
            DescriptionSpec {
                raw: vec![
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}),
                    json!({"apiVersion": "apps/v1", "kind": "Deployment",
                           "metadata": {"name": "web", "namespace": "shop"}}),
                ],
                ..DescriptionSpec::default()
            },
        );
        d.metadata.namespace = Some("clusternet-edge".into());
        d.metadata.labels = Some(BTreeMap::from([
            (known::LABEL_SUBS_NAME.into(), "web".into()),
            (known::LABEL_SUBS_NAMESPACE.into(), "shop".into()),
        ]));
        d.status = Some(DescriptionStatus {
            phase: Some(DescriptionPhase::Success),
            manifest_statuses: vec![ManifestStatus {
                feed: Feed {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    namespace: Some("shop".into()),
                    name: "web".into(),
                },
                observed_status: Some(json!({"readyReplicas": 2})),
            }],
            ..DescriptionStatus::default()
        });
        d
    }

    fn event(reason: &str, last: &str, count: Option<i32>) -> Event {
        Event {
            type_: Some("Normal".into()),
            reason: Some(reason.into()),
            message: Some(format!("{reason} happened")),
            last_timestamp: Some(t(last)),
            first_timestamp: Some(t("2026-01-01T00:00:00Z")),
            count,
            involved_object: ObjectReference::default(),
            ..Event::default()
        }
    }

    #[test]
    fn a_cluster_is_found_by_id_then_by_unique_name() {
        let all = [
            cluster("edge", "clusternet-a", "id-a"),
            cluster("edge", "clusternet-b", "id-b"),
            cluster("core", "clusternet-c", "id-c"),
        ];
        assert_eq!(find(&all, "id-b").unwrap().spec.cluster_id, "id-b");
        assert_eq!(find(&all, "core").unwrap().spec.cluster_id, "id-c");
        assert_eq!(find(&all, "ghost").unwrap_err(), Lookup::None);
        assert_eq!(
            find(&all, "edge").unwrap_err(),
            Lookup::Ambiguous(vec!["clusternet-a/edge".into(), "clusternet-b/edge".into()])
        );
    }

    #[test]
    fn fields_align_their_values_and_continue_long_ones_below() {
        let text = fields(&[("Name", "edge".into()), ("Labels", "a=1\nb=2".into())], 2);
        assert_eq!(text, "  Name:    edge\n  Labels:  a=1\n           b=2\n");
    }

    #[test]
    fn the_cluster_part_shows_identity_resources_and_conditions() {
        let page = cluster_fields(&reported(), now());
        for line in [
            "Name:            edge\n",
            &format!("Cluster ID:      {ID}\n"),
            "Namespace:       clusternet-edge\n",
            "Ready:           True (30m)\n",
            "Labels:          env=prod\n                 region=eu\n",
            "Taints:          dedicated=gpu:NoSchedule\n",
            "Version:         v1.33.1\n",
            "Nodes:           3/4 ready\n",
            "Allocatable:     cpu: 8\n                 memory: 32Gi\n",
            "Last Heartbeat:  2026-01-01T00:40:00Z (20m ago)\n",
            "Conditions:\n  TYPE    STATUS   REASON                AGE   MESSAGE\n",
            "  Ready   True     ManagedClusterReady   30m   cluster is healthy\n",
        ] {
            assert!(page.contains(line), "{line:?} in:\n{page}");
        }
    }

    #[test]
    fn a_cluster_that_never_reported_shows_none() {
        let page = cluster_fields(&cluster("new", "clusternet-n", "id-n"), now());
        for line in [
            "Labels:          <none>\n",
            "Nodes:           <none>\n",
            "Last Heartbeat:  <none>\n",
            "Conditions:  <none>\n",
        ] {
            assert!(page.contains(line), "{line:?} in:\n{page}");
        }
    }

    #[test]
    fn each_object_of_a_description_shows_its_observed_status() {
        let table = object_table(&description());
        assert_eq!(table.headers, OBJECT_HEADERS);
        assert_eq!(
            table.rows,
            [
                ["v1", "Namespace", "<none>", "shop", "<none>"],
                [
                    "apps/v1",
                    "Deployment",
                    "shop",
                    "web",
                    "{\"readyReplicas\":2}"
                ],
            ]
        );
        let text = description_fields(&description());
        assert!(text.starts_with("    Subscription:  shop/web\n"), "{text}");
        assert!(text.contains("    Phase:         Success\n"), "{text}");
        assert!(text.contains("    Objects:       2\n"), "{text}");
        assert!(text.contains("      API VERSION   KIND"), "{text}");
    }

    #[test]
    fn events_are_listed_oldest_first_with_their_repetitions() {
        let events = [
            event("Later", "2026-01-01T00:55:00Z", Some(3)),
            event("Earlier", "2026-01-01T00:50:00Z", None),
        ];
        let table = event_table(&events, now());
        assert_eq!(
            table.rows,
            [
                ["Normal", "Earlier", "10m", "Earlier happened"],
                ["Normal", "Later", "5m (x3 over 60m)", "Later happened"],
            ]
        );
    }

    #[test]
    fn the_page_has_every_section_even_when_empty() {
        let page = render(&reported(), &[], &[], now());
        assert!(page.starts_with("Name:            edge\n"), "{page}");
        assert!(page.contains("\nDescriptions:  <none>\n"), "{page}");
        assert!(page.ends_with("\nEvents:  <none>\n"), "{page}");
        let page = render(&reported(), &[description()], &[], now());
        assert!(
            page.contains("\nDescriptions:\n  shop.web:\n    Subscription:  shop/web\n"),
            "{page}"
        );
    }
}
