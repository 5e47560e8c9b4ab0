//! `kubectl atoll plan -f SUBSCRIPTION`: what the scheduler would do with a Subscription that is
//! not applied yet. The decision is the scheduler's own pure [`atoll_scheduler::controller::plan::plan`];
//! this module reads the Subscription from a file, resolves feeds as the scheduler does (a
//! Manifest in `clusternet-reserved` first, else the live object, refused unless a FeedGrant
//! allows it: [`atoll_scheduler::tenancy`]), and prints the plan.

use std::collections::BTreeMap;

use atoll_crds::apps::{
    DeletionPolicy, Description, Feed, Manifest, SchedulingStrategy, Subscription,
    SubscriptionStatus,
};
use atoll_crds::atoll::FeedGrant;
use atoll_crds::{conditions, known};
use atoll_scheduler::controller::plan::{Plan, Unresolved, manifest_holds};
use atoll_scheduler::tenancy::{self, Access, FeedOwner};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::Error;
use crate::manifests::{self, Object};
use crate::table::{NONE, Table, cell};

/// Headers of the conditions table (no age: nothing has happened yet).
pub const CONDITION_HEADERS: [&str; 4] = ["TYPE", "STATUS", "REASON", "MESSAGE"];
/// Headers of the bound clusters table.
pub const CLUSTER_HEADERS: [&str; 4] = ["CLUSTER", "ID", "OBJECTS", "ERROR"];
/// Headers of the replicas table (`Dividing` only).
pub const REPLICA_HEADERS: [&str; 3] = ["FEED", "CLUSTER", "REPLICAS"];
/// Headers of the table of clusters that matched but were left out.
pub const LEFT_OUT_HEADERS: [&str; 2] = ["CLUSTER", "REASON"];

/// The one Subscription in `texts` (each a file's name and its YAML or JSON, all read for the
/// argument `input`), in its own namespace or else `default_namespace`.
pub fn read_subscription(
    texts: &[(String, String)],
    input: &str,
    default_namespace: &str,
) -> Result<Subscription, Error> {
    let mut objects = Vec::new();
    for (name, text) in texts {
        objects.extend(manifests::parse(text, name)?);
    }
    let [object] = objects.as_slice() else {
        return Err(Error::NotOneSubscription {
            input: input.to_owned(),
            found: objects.len(),
        });
    };
    let Object { value, .. } = object;
    if object.api_version() != atoll_crds::apps::API_VERSION || object.kind() != "Subscription" {
        return Err(Error::NotASubscription {
            input: input.to_owned(),
            api_version: object.api_version().to_owned(),
            kind: object.kind().to_owned(),
        });
    }
    let mut sub: Subscription =
        serde_json::from_value(value.clone()).map_err(|source| Error::ParseSubscription {
            input: input.to_owned(),
            source,
        })?;
    if sub.metadata.namespace.as_deref().is_none_or(str::is_empty) {
        sub.metadata.namespace = Some(default_namespace.to_owned());
    }
    Ok(sub)
}

/// Why a Subscription in `subscription_namespace` may not use `feed` owned by `owner`, if it
/// may not ([`tenancy::feed_access`]), in the scheduler's words.
pub fn refused(
    feed: &Feed,
    owner: &FeedOwner,
    subscription_namespace: &str,
    grants: &[&FeedGrant],
) -> Option<Unresolved> {
    match tenancy::feed_access(subscription_namespace, feed, owner, grants) {
        Access::Own | Access::Granted(_) => None,
        Access::Refused(refusal) => Some(Unresolved::refused(feed, &refusal)),
    }
}

/// The template of the Manifest in `clusternet-reserved` that holds `feed`, found as the
/// scheduler finds it ([`manifest_holds`]).
pub fn manifest_template(feed: &Feed, manifests: &[Manifest]) -> Option<Value> {
    manifests
        .iter()
        .find(|m| manifest_holds(m, feed))
        .map(|m| m.template.clone())
}

fn strategy(s: SchedulingStrategy) -> &'static str {
    match s {
        SchedulingStrategy::Replication => "Replication",
        SchedulingStrategy::Dividing => "Dividing",
    }
}

fn true_false(value: bool) -> &'static str {
    if value { "True" } else { "False" }
}

/// The planned conditions, in the planner's order.
pub fn condition_table(plan: &Plan) -> Table {
    let mut table = Table::new(&CONDITION_HEADERS);
    table.rows.extend(plan.conditions.iter().map(|c| {
        vec![
            c.type_.to_owned(),
            true_false(c.status).to_owned(),
            c.reason.to_owned(),
            cell(Some(&c.message)),
        ]
    }));
    table
}

/// One row per cluster the plan binds, in binding order: its key, id, and how many objects it
/// would receive, or why they could not be rendered.
pub fn cluster_table(plan: &Plan) -> Table {
    let mut table = Table::new(&CLUSTER_HEADERS);
    table.rows.extend(plan.clusters.iter().map(|c| {
        let (objects, error) = match &c.objects {
            Ok(rendered) => (rendered.objects.len().to_string(), NONE.to_owned()),
            Err(message) => (NONE.to_owned(), cell(Some(message))),
        };
        vec![c.cluster.key(), cell(Some(&c.cluster.id)), objects, error]
    }));
    table
}

/// One row per divisible feed (in the order of `spec.feeds`) and bound cluster: the replicas
/// the cluster would get. Empty under Replication.
pub fn replica_table(sub: &Subscription, plan: &Plan) -> Table {
    let mut table = Table::new(&REPLICA_HEADERS);
    let Some(placement) = &plan.placement else {
        return table;
    };
    for feed in &sub.spec.feeds {
        let key = feed.key();
        let Some(replicas) = placement.replicas.get(&key) else {
            continue;
        };
        for (cluster, n) in placement.binding_clusters.iter().zip(replicas) {
            table
                .rows
                .push(vec![key.clone(), cluster.clone(), n.to_string()]);
        }
    }
    table
}

/// The clusters that matched a subscriber but were left out, with why.
pub fn left_out_table(plan: &Plan) -> Table {
    let mut table = Table::new(&LEFT_OUT_HEADERS);
    if let Some(placement) = &plan.placement {
        table.rows.extend(
            placement
                .unschedulable
                .iter()
                .map(|(cluster, reason)| vec![cluster.clone(), cell(Some(reason))]),
        );
    }
    table
}

/// The `plan` page: a summary (Subscription, strategy, clusters bound of those registered),
/// then the conditions, clusters, replicas and left-out tables, each under a title (`<none>`
/// when empty), then with `show_objects` each cluster's rendered objects as YAML documents.
pub fn render(
    sub: &Subscription,
    plan: &Plan,
    registered: usize,
    show_objects: bool,
) -> Result<String, Error> {
    let bound = match &plan.placement {
        Some(p) => format!(
            "{} of {registered} registered clusters",
            p.binding_clusters.len()
        ),
        None => format!("none (not scheduled; {registered} registered clusters)"),
    };
    let mut out = format!(
        "Subscription:  {}/{}\nStrategy:      {}\nBound:         {bound}\n",
        sub.metadata.namespace.as_deref().unwrap_or_default(),
        sub.metadata.name.as_deref().unwrap_or_default(),
        strategy(sub.spec.scheduling_strategy),
    );
    crate::table::push_sections(
        &mut out,
        [
            ("Conditions", condition_table(plan)),
            ("Clusters", cluster_table(plan)),
            ("Replicas", replica_table(sub, plan)),
            ("Left out", left_out_table(plan)),
        ],
    );
    if show_objects {
        for c in &plan.clusters {
            let Ok(rendered) = &c.objects else { continue };
            out.push_str(&format!("\nObjects for {}:\n", c.cluster.key()));
            for object in rendered.objects.iter() {
                out.push_str("---\n");
                out.push_str(&serde_yaml::to_string(object).map_err(Error::EncodeYaml)?);
            }
        }
    }
    Ok(out)
}

/// `sub` with the status the scheduler would write (binding, replicas, conditions at `now`),
/// or none when the plan keeps the current placement.
pub fn planned_subscription(sub: &Subscription, plan: &Plan, now: Timestamp) -> Subscription {
    let mut planned = sub.clone();
    let mut status = SubscriptionStatus::default();
    if let Some(placement) = &plan.placement {
        status.binding_clusters = placement.binding_clusters.clone();
        status.replicas = placement.replicas.clone();
        status.desired_releases = i32::try_from(placement.binding_clusters.len()).ok();
    }
    status.conditions = plan
        .conditions
        .iter()
        .map(|c| {
            conditions::new(
                c.type_,
                true_false(c.status),
                c.reason,
                &c.message,
                sub.metadata.generation,
                Time(now),
            )
        })
        .collect();
    planned.status = Some(status);
    planned
}

/// The Description the scheduler would write for each bound cluster whose objects rendered:
/// `<sub-namespace>.<sub-name>` in the cluster's dedicated namespace, labelled with the
/// Subscription (all but its uid, which a Subscription not applied yet has not) and the cluster,
/// annotated with the render hash, holding the rendered objects.
pub fn descriptions(sub: &Subscription, plan: &Plan) -> Vec<Description> {
    let namespace = sub.metadata.namespace.clone().unwrap_or_default();
    let name = sub.metadata.name.clone().unwrap_or_default();
    plan.clusters
        .iter()
        .filter_map(|c| {
            let rendered = c.objects.as_ref().ok()?;
            let mut d = Description::new(
                &known::description_name(&namespace, &name),
                rendered.description_spec(),
            );
            d.metadata.namespace = Some(c.cluster.namespace.clone());
            let mut labels = BTreeMap::from([
                (known::LABEL_SUBS_NAME.to_owned(), name.clone()),
                (known::LABEL_SUBS_NAMESPACE.to_owned(), namespace.clone()),
                (known::LABEL_CLUSTER_ID.to_owned(), c.cluster.id.clone()),
                (known::LABEL_CLUSTER_NAME.to_owned(), c.cluster.name.clone()),
                (
                    known::LABEL_CREATED_BY.to_owned(),
                    known::CREATED_BY_SCHEDULER.to_owned(),
                ),
            ]);
            if sub.spec.deletion_policy == Some(DeletionPolicy::Orphan) {
                labels.insert(
                    known::LABEL_DELETION_POLICY.to_owned(),
                    known::DELETION_POLICY_ORPHAN.to_owned(),
                );
            }
            d.metadata.labels = Some(labels);
            d.metadata.annotations = Some(BTreeMap::from([(
                known::ANNOTATION_RENDER_HASH.to_owned(),
                rendered.hash.clone(),
            )]));
            Some(d)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_crds::apps::{Globalization, Localization};
    use atoll_scheduler::controller::plan::{self, ResolvedFeed};
    use atoll_scheduler::placement::ClusterInfo;
    use serde_json::json;

    const SUB: &str = "\
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata:
  name: web
spec:
  schedulingStrategy: Dividing
  dividingScheduling: {type: Static}
  subscribers:
  - clusterAffinity: {}
    weight: 1
  feeds:
  - apiVersion: apps/v1
    kind: Deployment
    namespace: shop
    name: web
";

    /// `text` as the only file read, `a.yaml`.
    fn one(text: &str) -> [(String, String); 1] {
        [("a.yaml".to_owned(), text.to_owned())]
    }

    fn feed() -> Feed {
        Feed {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("shop".into()),
            name: "web".into(),
        }
    }

    fn deployment(replicas: i64) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "shop", "uid": "x"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                {"name": "web", "image": "nginx"}]}}},
            "status": {"replicas": 3},
        })
    }

    fn cluster(name: &str) -> ClusterInfo {
        ClusterInfo {
            namespace: format!("clusternet-{name}"),
            name: name.into(),
            id: format!("id-{name}"),
            ready: true,
            ..ClusterInfo::default()
        }
    }

    fn planned(sub: &Subscription, object: Result<Value, Unresolved>) -> Plan {
        let feeds = [ResolvedFeed {
            feed: feed(),
            object,
        }];
        let globs: [&Globalization; 0] = [];
        let locs: [&Localization; 0] = [];
        plan::plan(
            &sub.spec,
            &feeds,
            &[cluster("a"), cluster("b")],
            &globs,
            &locs,
            &[],
        )
    }

    #[test]
    fn a_subscription_is_read_in_its_namespace_or_the_default_one() {
        let sub = read_subscription(&one(SUB), "web.yaml", "shop").unwrap();
        assert_eq!(sub.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(sub.spec.scheduling_strategy, SchedulingStrategy::Dividing);
        let text = SUB.replace("  name: web\nspec", "  name: web\n  namespace: ops\nspec");
        let sub = read_subscription(&one(&text), "web.yaml", "shop").unwrap();
        assert_eq!(sub.metadata.namespace.as_deref(), Some("ops"));
    }

    #[test]
    fn anything_but_one_subscription_is_refused() {
        let e = read_subscription(&one(""), "a.yaml", "d").unwrap_err();
        assert!(
            matches!(e, Error::NotOneSubscription { found: 0, .. }),
            "{e}"
        );
        let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n";
        let e = read_subscription(&one(cm), "a.yaml", "d").unwrap_err();
        assert_eq!(
            e.to_string(),
            "a.yaml: a v1 ConfigMap, not an apps.clusternet.io/v1alpha1 Subscription"
        );
        let bad = SUB.replace("Dividing", "Sometimes");
        let e = read_subscription(&one(&bad), "a.yaml", "d").unwrap_err();
        assert!(matches!(e, Error::ParseSubscription { .. }), "{e}");
        let e = read_subscription(&one("a: ["), "a.yaml", "d").unwrap_err();
        assert!(matches!(e, Error::ParseYaml { .. }), "{e}");
    }

    #[test]
    fn a_manifest_is_found_by_its_config_labels() {
        let object = manifests::parse(&deployment(3).to_string(), "-").unwrap();
        let kind = manifests::Kind {
            plural: "deployments".into(),
            namespaced: true,
        };
        let m = manifests::manifest(&object[0], &kind, "default");
        let found = manifest_template(&feed(), std::slice::from_ref(&m)).unwrap();
        assert_eq!(found["spec"]["replicas"], 3);
        let mut other = feed();
        other.name = "api".into();
        assert!(manifest_template(&other, &[m]).is_none());
    }

    #[test]
    fn a_feed_of_another_namespace_is_refused_in_the_schedulers_words() {
        let owner = FeedOwner::Namespace("shop".into());
        assert!(refused(&feed(), &owner, "shop", &[]).is_none());
        let refusal = refused(&feed(), &owner, "ops", &[]).unwrap();
        assert_eq!(refusal.reason, "FeedNotGranted");
    }

    #[test]
    fn the_page_shows_the_split_and_the_objects_on_demand() {
        let sub = read_subscription(&one(SUB), "-", "shop").unwrap();
        let plan = planned(&sub, Ok(deployment(3)));
        let replicas = replica_table(&sub, &plan);
        let total: i32 = replicas
            .column("REPLICAS")
            .iter()
            .map(|n| n.parse::<i32>().unwrap())
            .sum();
        assert_eq!(total, 3);
        assert_eq!(
            replicas.column("CLUSTER"),
            ["clusternet-a/a", "clusternet-b/b"]
        );
        let clusters = cluster_table(&plan);
        assert_eq!(clusters.rows[0], ["clusternet-a/a", "id-a", "1", "<none>"]);
        let page = render(&sub, &plan, 2, false).unwrap();
        assert!(page.starts_with("Subscription:  shop/web\nStrategy:      Dividing\n"));
        assert!(
            page.contains("Bound:         2 of 2 registered clusters\n"),
            "{page}"
        );
        assert!(page.contains("\nLeft out:\n<none>\n"), "{page}");
        assert!(!page.contains("Objects for"), "{page}");
        let page = render(&sub, &plan, 2, true).unwrap();
        assert!(
            page.contains("\nObjects for clusternet-a/a:\n---\napiVersion: apps/v1\n"),
            "{page}"
        );
        assert!(!page.contains("uid:"), "server fields are stripped: {page}");
    }

    #[test]
    fn unresolved_feeds_are_conditions_and_bind_nothing() {
        let sub = read_subscription(&one(SUB), "-", "shop").unwrap();
        let plan = planned(&sub, Err(Unresolved::not_found(&feed())));
        let conditions = condition_table(&plan);
        assert_eq!(conditions.column("TYPE"), ["FeedsResolved", "Scheduled"]);
        assert_eq!(conditions.column("STATUS"), ["False", "False"]);
        assert_eq!(conditions.column("REASON")[0], "FeedNotFound");
        let page = render(&sub, &plan, 2, true).unwrap();
        assert!(
            page.contains("Bound:         none (not scheduled; 2 registered clusters)\n"),
            "{page}"
        );
        assert!(descriptions(&sub, &plan).is_empty());
        let status = planned_subscription(&sub, &plan, Timestamp::UNIX_EPOCH)
            .status
            .unwrap();
        assert!(status.binding_clusters.is_empty());
        assert_eq!(status.conditions[0].reason, "FeedNotFound");
    }

    #[test]
    fn each_bound_cluster_gets_the_description_the_scheduler_would_write() {
        let sub = read_subscription(&one(SUB), "-", "shop").unwrap();
        let plan = planned(&sub, Ok(deployment(4)));
        let all = descriptions(&sub, &plan);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].metadata.name.as_deref(), Some("shop.web"));
        assert_eq!(all[1].metadata.namespace.as_deref(), Some("clusternet-b"));
        let labels = all[1].metadata.labels.clone().unwrap();
        assert_eq!(labels[known::LABEL_CLUSTER_NAME], "b");
        assert_eq!(all[0].spec.raw[0]["spec"]["replicas"], 2);
        let status = planned_subscription(&sub, &plan, Timestamp::UNIX_EPOCH)
            .status
            .unwrap();
        assert_eq!(
            status.binding_clusters,
            ["clusternet-a/a", "clusternet-b/b"]
        );
        assert_eq!(status.replicas[&feed().key()], [2, 2]);
    }
}
