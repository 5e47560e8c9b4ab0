//! Unit tests of placement.

use super::*;
use atoll_crds::apps::{DividingScheduling, DynamicDividing, SubGroupStrategy, Subscriber};
use atoll_crds::clusters::{ManagedClusterSpec, ManagedClusterStatus};
use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use serde_json::json;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn cluster(ns: &str, name: &str, lbls: &[(&str, &str)]) -> ClusterInfo {
    ClusterInfo {
        namespace: ns.to_owned(),
        name: name.to_owned(),
        id: format!("id-{name}"),
        labels: labels(lbls),
        taints: vec![],
        ready: true,
        allocatable: [
            ("cpu".to_owned(), 8_000),
            ("memory".to_owned(), 16 * 1024 * 1024 * 1024 * 1000),
            ("pods".to_owned(), 110_000),
        ]
        .into(),
    }
}

fn with_cpu(mut c: ClusterInfo, cpu_milli: i64) -> ClusterInfo {
    c.allocatable.insert("cpu".to_owned(), cpu_milli);
    c
}

fn subscriber(lbls: &[(&str, &str)], weight: i32) -> Subscriber {
    Subscriber {
        cluster_affinity: LabelSelector {
            match_labels: if lbls.is_empty() {
                None
            } else {
                Some(labels(lbls))
            },
            match_expressions: None,
        },
        weight,
        sub_group_strategy: None,
    }
}

fn deploy_feed(name: &str) -> Feed {
    Feed {
        api_version: "apps/v1".to_owned(),
        kind: "Deployment".to_owned(),
        namespace: Some("default".to_owned()),
        name: name.to_owned(),
    }
}

fn cm_feed(name: &str) -> Feed {
    Feed {
        api_version: "v1".to_owned(),
        kind: "ConfigMap".to_owned(),
        namespace: Some("default".to_owned()),
        name: name.to_owned(),
    }
}

fn facts(feed: &Feed, desired: Option<i32>, cpu_milli: Option<i64>) -> FeedReplicas {
    FeedReplicas {
        feed_key: feed.key(),
        desired,
        per_replica_request: cpu_milli.map(|c| [("cpu".to_owned(), c)].into()),
    }
}

fn replication(subscribers: Vec<Subscriber>, feeds: Vec<Feed>) -> SubscriptionSpec {
    SubscriptionSpec {
        subscribers,
        feeds,
        ..Default::default()
    }
}

fn static_dividing(subscribers: Vec<Subscriber>, feeds: Vec<Feed>) -> SubscriptionSpec {
    SubscriptionSpec {
        scheduling_strategy: SchedulingStrategy::Dividing,
        dividing_scheduling: Some(DividingScheduling {
            type_: DividingType::Static,
            dynamic_dividing: None,
        }),
        subscribers,
        feeds,
        ..Default::default()
    }
}

fn dynamic_dividing(
    subscribers: Vec<Subscriber>,
    feeds: Vec<Feed>,
    min: Option<i32>,
    max: Option<i32>,
) -> SubscriptionSpec {
    SubscriptionSpec {
        scheduling_strategy: SchedulingStrategy::Dividing,
        dividing_scheduling: Some(DividingScheduling {
            type_: DividingType::Dynamic,
            dynamic_dividing: Some(DynamicDividing {
                min_clusters: min,
                max_clusters: max,
                ..Default::default()
            }),
        }),
        subscribers,
        feeds,
        ..Default::default()
    }
}

fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.to_owned(),
        value: Some("x".to_owned()),
        effect: effect.to_owned(),
        time_added: None,
    }
}

#[test]
fn replication_binds_every_matching_feasible_cluster_sorted_without_replicas() {
    let clusters = vec![
        cluster("clusternet-b", "child2", &[("env", "prod")]),
        cluster("clusternet-a", "child1", &[("env", "prod")]),
        cluster("clusternet-c", "child3", &[("env", "dev")]),
    ];
    let spec = replication(
        vec![subscriber(&[("env", "prod")], 0)],
        vec![cm_feed("cfg")],
    );
    let p = schedule(&spec, &clusters, &[]).unwrap();
    assert_eq!(
        p.binding_clusters,
        vec!["clusternet-a/child1", "clusternet-b/child2"]
    );
    assert!(p.replicas.is_empty());
    assert!(
        p.unschedulable.is_empty(),
        "non-matching clusters are not reported"
    );
    assert_eq!(p.matched, 2);
}

#[test]
fn binding_order_is_string_order_of_namespace_slash_name() {
    // '-' sorts before '/', so "a-b/x" < "a/x" as strings, unlike (namespace, name) tuples
    let clusters = vec![cluster("a", "x", &[]), cluster("a-b", "x", &[])];
    let spec = replication(vec![subscriber(&[], 0)], vec![]);
    let p = schedule(&spec, &clusters, &[]).unwrap();
    assert_eq!(p.binding_clusters, vec!["a-b/x", "a/x"]);
}

#[test]
fn filters_reject_clusters_with_a_reason() {
    let mut not_ready = cluster("ns1", "notready", &[]);
    not_ready.ready = false;
    let mut hard = cluster("ns2", "hard", &[]);
    hard.taints = vec![taint("dedicated", "NoSchedule")];
    let mut execute = cluster("ns3", "execute", &[]);
    execute.taints = vec![taint("dedicated", "NoExecute")];
    let mut soft = cluster("ns4", "soft", &[]);
    soft.taints = vec![taint("dedicated", "PreferNoSchedule")];
    let clusters = vec![not_ready, hard, execute, soft];

    let spec = replication(vec![subscriber(&[], 0)], vec![]);
    let p = schedule(&spec, &clusters, &[]).unwrap();
    assert_eq!(p.binding_clusters, vec!["ns4/soft"]);
    let reasons: BTreeMap<&str, &str> = p
        .unschedulable
        .iter()
        .map(|(c, r)| (c.as_str(), r.as_str()))
        .collect();
    assert!(reasons["ns1/notready"].contains("not Ready"), "{reasons:?}");
    assert!(
        reasons["ns2/hard"].contains("{dedicated: x}"),
        "{reasons:?}"
    );
    assert!(
        reasons["ns2/hard"].contains("clusterTolerations"),
        "{reasons:?}"
    );
    assert!(reasons["ns3/execute"].contains("NoExecute"), "{reasons:?}");

    let mut tolerant = spec.clone();
    tolerant.cluster_tolerations = vec![Toleration {
        key: Some("dedicated".to_owned()),
        operator: Some("Exists".to_owned()),
        ..Default::default()
    }];
    let p = schedule(&tolerant, &clusters, &[]).unwrap();
    assert_eq!(
        p.binding_clusters,
        vec!["ns2/hard", "ns3/execute", "ns4/soft"]
    );
}

#[test]
fn static_dividing_splits_by_summed_subscriber_weights() {
    let clusters = vec![
        cluster("ns-a", "a", &[("region", "eu"), ("tier", "gold")]),
        cluster("ns-b", "b", &[("region", "eu")]),
        cluster("ns-c", "c", &[("region", "us")]),
    ];
    let web = deploy_feed("web");
    let cfg = cm_feed("cfg");
    // a matches both subscribers: weight 1 + 2 = 3; b: 1; c: 0 (bound, gets 0)
    let spec = static_dividing(
        vec![
            subscriber(&[("region", "eu")], 1),
            subscriber(&[("tier", "gold")], 2),
            subscriber(&[("region", "us")], 0),
        ],
        vec![web.clone(), cfg.clone()],
    );
    let p = schedule(
        &spec,
        &clusters,
        &[facts(&web, Some(9), None), facts(&cfg, None, None)],
    )
    .unwrap();
    assert_eq!(p.binding_clusters, vec!["ns-a/a", "ns-b/b", "ns-c/c"]);
    // 9*3/4 = 6.75 -> 6, 9*1/4 = 2.25 -> 2, remainder 1 to the heaviest (a)
    assert_eq!(p.replicas[&web.key()], vec![7, 2, 0]);
    assert_eq!(p.replicas[&cfg.key()], Vec::<i32>::new());
    assert!(p.unplaced.is_empty());
}

#[test]
fn static_dividing_with_no_weighted_feasible_cluster_reports_unplaced_replicas() {
    let mut heavy = cluster("ns-a", "a", &[("w", "1")]);
    heavy.ready = false;
    let clusters = vec![heavy, cluster("ns-b", "b", &[("w", "0")])];
    let web = deploy_feed("web");
    let spec = static_dividing(
        vec![subscriber(&[("w", "1")], 1), subscriber(&[("w", "0")], 0)],
        vec![web.clone()],
    );
    let p = schedule(&spec, &clusters, &[facts(&web, Some(4), None)]).unwrap();
    assert_eq!(p.binding_clusters, vec!["ns-b/b"]);
    assert_eq!(p.replicas[&web.key()], vec![0]);
    assert_eq!(p.unplaced[&web.key()], 4);
    let none_wanted = schedule(&spec, &clusters, &[facts(&web, Some(0), None)]).unwrap();
    assert!(
        none_wanted.unplaced.is_empty(),
        "no shortfall when 0 are wanted"
    );
}

#[test]
fn zero_feasible_clusters_is_an_empty_placement_with_reasons() {
    let mut down = cluster("ns-a", "a", &[]);
    down.ready = false;
    let web = deploy_feed("web");
    let cfg = cm_feed("cfg");
    let spec = static_dividing(vec![subscriber(&[], 1)], vec![web.clone(), cfg.clone()]);
    let p = schedule(&spec, &[down], &[facts(&web, Some(3), None)]).unwrap();
    assert!(p.binding_clusters.is_empty());
    assert_eq!(p.replicas[&web.key()], Vec::<i32>::new());
    assert_eq!(p.replicas[&cfg.key()], Vec::<i32>::new());
    assert_eq!(p.unplaced[&web.key()], 3);
    assert_eq!(p.unschedulable.len(), 1);
    assert_eq!(p.matched, 1);

    let nothing = schedule(&replication(vec![subscriber(&[], 0)], vec![]), &[], &[]).unwrap();
    assert_eq!(nothing, Placement::default());
}

#[test]
fn invalid_specs_are_rejected_with_a_typed_error() {
    let web = deploy_feed("web");
    let cfg = cm_feed("cfg");
    let web_facts = vec![facts(&web, Some(3), Some(100))];
    let bad_selector = Subscriber {
        cluster_affinity: LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "k".to_owned(),
                    operator: "Like".to_owned(),
                    values: None,
                },
            ]),
            match_labels: None,
        },
        ..Default::default()
    };
    let mut no_dividing = static_dividing(vec![subscriber(&[], 1)], vec![web.clone()]);
    no_dividing.dividing_scheduling = None;
    let mut no_dynamic = dynamic_dividing(vec![subscriber(&[], 1)], vec![web.clone()], None, None);
    if let Some(d) = no_dynamic.dividing_scheduling.as_mut() {
        d.dynamic_dividing = None;
    }
    let mut binpack = dynamic_dividing(vec![subscriber(&[], 1)], vec![web.clone()], None, None);
    if let Some(dd) = binpack
        .dividing_scheduling
        .as_mut()
        .and_then(|d| d.dynamic_dividing.as_mut())
    {
        dd.strategy = DynamicDividingStrategy::Binpack;
    }
    let mut subgroup = replication(vec![subscriber(&[], 0)], vec![]);
    subgroup.scheduling_by_sub_group = Some(true);

    let cases: Vec<(&str, SubscriptionSpec, &str)> = vec![
        (
            "no subscribers",
            replication(vec![], vec![]),
            "validate_subscribers",
        ),
        (
            "negative weight",
            replication(vec![subscriber(&[], 1), subscriber(&[], -1)], vec![]),
            "validate_weight",
        ),
        (
            "bad selector",
            replication(vec![bad_selector], vec![]),
            "parse_label_selector",
        ),
        (
            "static with all weights zero",
            static_dividing(vec![subscriber(&[], 0)], vec![web.clone()]),
            "divide_static",
        ),
        (
            "dividing without dividingScheduling",
            no_dividing,
            "read_dividing_scheduling",
        ),
        (
            "dynamic without dynamicDividing",
            no_dynamic,
            "read_dynamic_dividing",
        ),
        ("binpack", binpack, "divide_binpack"),
        (
            "min above max",
            dynamic_dividing(
                vec![subscriber(&[], 1)],
                vec![web.clone()],
                Some(3),
                Some(2),
            ),
            "validate_cluster_bounds",
        ),
        (
            "max zero",
            dynamic_dividing(vec![subscriber(&[], 1)], vec![web.clone()], None, Some(0)),
            "validate_cluster_bounds",
        ),
        (
            "dividing with only non-divisible feeds",
            static_dividing(vec![subscriber(&[], 1)], vec![cfg.clone()]),
            "find_divisible_feed",
        ),
        ("subgroup without strategy", subgroup, "group_subscribers"),
    ];
    let clusters = vec![cluster("ns", "a", &[])];
    for (name, spec, want) in cases {
        let err = schedule(&spec, &clusters, &web_facts).unwrap_err();
        assert_eq!(err.label(), want, "{name}: {err}");
    }
}

#[test]
fn dynamic_dividing_spreads_by_capacity() {
    let web = deploy_feed("web");
    // one replica requests 1 cpu: capacities 2, 4, 6 (pods cap 110)
    let clusters = vec![
        with_cpu(cluster("ns-a", "a", &[]), 2_000),
        with_cpu(cluster("ns-b", "b", &[]), 4_000),
        with_cpu(cluster("ns-c", "c", &[]), 6_000),
    ];
    let spec = dynamic_dividing(vec![subscriber(&[], 0)], vec![web.clone()], None, None);
    let cases: Vec<(&str, i32, Vec<i32>, Option<i32>)> = vec![
        ("proportional", 6, vec![1, 2, 3], None),
        ("fractions break ties by name", 4, vec![1, 1, 2], None),
        ("capacity exactly", 12, vec![2, 4, 6], None),
        (
            "over capacity fills and reports the rest",
            15,
            vec![2, 4, 6],
            Some(3),
        ),
        ("zero desired", 0, vec![0, 0, 0], None),
    ];
    for (name, desired, want, short) in cases {
        let p = schedule(&spec, &clusters, &[facts(&web, Some(desired), Some(1_000))]).unwrap();
        assert_eq!(
            p.binding_clusters,
            vec!["ns-a/a", "ns-b/b", "ns-c/c"],
            "{name}"
        );
        assert_eq!(p.replicas[&web.key()], want, "{name}");
        assert_eq!(p.unplaced.get(&web.key()).copied(), short, "{name}");
    }
}

#[test]
fn dynamic_dividing_honours_min_and_max_clusters() {
    let web = deploy_feed("web");
    let clusters = vec![
        with_cpu(cluster("ns-a", "a", &[]), 2_000),
        with_cpu(cluster("ns-b", "b", &[]), 6_000),
        with_cpu(cluster("ns-c", "c", &[]), 0),
        with_cpu(cluster("ns-d", "d", &[]), 6_000),
    ];
    let feed_facts = vec![facts(&web, Some(6), Some(1_000))];

    let p = schedule(
        &dynamic_dividing(vec![subscriber(&[], 0)], vec![web.clone()], None, Some(2)),
        &clusters,
        &feed_facts,
    )
    .unwrap();
    assert_eq!(
        p.binding_clusters,
        vec!["ns-b/b", "ns-d/d"],
        "largest capacity kept"
    );
    assert_eq!(p.replicas[&web.key()], vec![3, 3]);
    let reasons: BTreeMap<&str, &str> = p
        .unschedulable
        .iter()
        .map(|(c, r)| (c.as_str(), r.as_str()))
        .collect();
    assert!(reasons["ns-c/c"].contains("no room"), "{reasons:?}");
    assert!(reasons["ns-a/a"].contains("maxClusters"), "{reasons:?}");

    let ok = schedule(
        &dynamic_dividing(vec![subscriber(&[], 0)], vec![web.clone()], Some(3), None),
        &clusters,
        &feed_facts,
    )
    .unwrap();
    assert_eq!(
        ok.binding_clusters.len(),
        3,
        "zero-capacity cluster excluded"
    );

    let err = schedule(
        &dynamic_dividing(vec![subscriber(&[], 0)], vec![web.clone()], Some(4), None),
        &clusters,
        &feed_facts,
    )
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::SelectClusters {
                feasible: 3,
                min: 4
            }
        ),
        "{err}"
    );
}

#[test]
fn dynamic_dividing_without_requests_uses_allocatable_pods() {
    let web = deploy_feed("web");
    let mut small = cluster("ns-a", "a", &[]);
    small.allocatable.insert("pods".to_owned(), 10_000);
    let mut none = cluster("ns-b", "b", &[]);
    none.allocatable.remove("pods");
    let spec = dynamic_dividing(vec![subscriber(&[], 0)], vec![web.clone()], None, None);
    let p = schedule(&spec, &[small, none], &[facts(&web, Some(20), None)]).unwrap();
    assert_eq!(p.binding_clusters, vec!["ns-a/a"]);
    assert_eq!(p.replicas[&web.key()], vec![10]);
    assert_eq!(p.unplaced[&web.key()], 10);
}

#[test]
fn subgroups_pick_min_clusters_per_subscriber_best_score_first() {
    let mut soft = cluster("ns-a", "a", &[("zone", "1")]);
    soft.taints = vec![taint("slow", "PreferNoSchedule")];
    let clusters = vec![
        soft,
        cluster("ns-b", "b", &[("zone", "1")]),
        cluster("ns-c", "c", &[("zone", "1")]),
        cluster("ns-d", "d", &[("zone", "2")]),
        cluster("ns-e", "e", &[("zone", "2")]),
    ];
    let mut s1 = subscriber(&[("zone", "1")], 0);
    s1.sub_group_strategy = Some(SubGroupStrategy { min_clusters: 2 });
    let mut s2 = subscriber(&[("zone", "2")], 0);
    s2.sub_group_strategy = Some(SubGroupStrategy { min_clusters: 1 });
    let mut spec = replication(vec![s1, s2], vec![]);
    spec.scheduling_by_sub_group = Some(true);
    let p = schedule(&spec, &clusters, &[]).unwrap();
    // zone 1: b and c beat the soft-tainted a; zone 2: d (name order on equal score)
    assert_eq!(p.binding_clusters, vec!["ns-b/b", "ns-c/c", "ns-d/d"]);
}

#[test]
fn spec_hash_is_deterministic_and_tracks_changes() {
    let web = deploy_feed("web");
    let base = static_dividing(vec![subscriber(&[("env", "prod")], 1)], vec![web.clone()]);
    assert_eq!(spec_hash(&base), spec_hash(&base.clone()));
    let mut heavier = base.clone();
    heavier.subscribers[0].weight = 2;
    let mut other_feed = base.clone();
    other_feed.feeds[0].name = "api".to_owned();
    let mut replicated = base.clone();
    replicated.scheduling_strategy = SchedulingStrategy::Replication;
    let hashes = [
        spec_hash(&base),
        spec_hash(&heavier),
        spec_hash(&other_feed),
        spec_hash(&replicated),
    ];
    for i in 0..hashes.len() {
        for j in (i + 1)..hashes.len() {
            assert_ne!(hashes[i], hashes[j], "{i} vs {j}");
        }
    }
}

#[test]
fn fnv1a_64_matches_reference_vectors() {
    let cases: &[(&[u8], u64)] = &[
        (b"", 0xcbf2_9ce4_8422_2325),
        (b"a", 0xaf63_dc4c_8601_ec8c),
        (b"foobar", 0x8594_4171_f739_67e8),
    ];
    for (input, want) in cases {
        let mut h = Fnv1a64::default();
        h.write(input);
        assert_eq!(h.finish(), *want, "{input:?}");
    }
}

#[test]
fn cluster_info_reads_a_managed_cluster() {
    let mut mc = ManagedCluster::new(
        "child1",
        ManagedClusterSpec {
            cluster_id: "c1".to_owned(),
            taints: vec![taint("t", "NoSchedule")],
            ..Default::default()
        },
    );
    mc.metadata.namespace = Some("clusternet-abcde".to_owned());
    mc.metadata.labels = Some(labels(&[("env", "prod")]));
    let condition = |status: &str| Condition {
        type_: "Ready".to_owned(),
        status: status.to_owned(),
        reason: "ManagedClusterReady".to_owned(),
        message: String::new(),
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ),
        observed_generation: None,
    };
    mc.status = Some(ManagedClusterStatus {
        allocatable: [
            ("cpu".to_owned(), Quantity("4".to_owned())),
            ("memory".to_owned(), Quantity("1Gi".to_owned())),
            ("bogus".to_owned(), Quantity("lots".to_owned())),
        ]
        .into(),
        conditions: vec![condition("True")],
        ..Default::default()
    });
    let info = ClusterInfo::from(&mc);
    assert_eq!(info.key(), "clusternet-abcde/child1");
    assert_eq!(info.id, "c1");
    assert!(info.ready);
    assert_eq!(info.labels, labels(&[("env", "prod")]));
    assert_eq!(info.taints.len(), 1);
    assert_eq!(
        info.allocatable,
        Resources::from([
            ("cpu".to_owned(), 4_000),
            ("memory".to_owned(), 1024 * 1024 * 1024 * 1000)
        ])
    );
    if let Some(s) = mc.status.as_mut() {
        s.conditions = vec![condition("Unknown")];
    }
    assert!(!ClusterInfo::from(&mc).ready);
    mc.status = None;
    assert!(!ClusterInfo::from(&mc).ready);
}

#[test]
fn feed_replicas_read_replicas_and_pod_requests() {
    let web = deploy_feed("web");
    let object = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "spec": {"replicas": 5, "template": {"spec": {
            "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}],
            "containers": [
                {"resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "1", "memory": "128Mi"}}},
                {"resources": {"limits": {"cpu": "500m"}}}
            ]
        }}}
    });
    let f = FeedReplicas::from_object(&web, &object).unwrap();
    assert_eq!(f.feed_key, "apps/v1/Deployment/default/web");
    assert_eq!(f.desired, Some(5));
    assert_eq!(
        f.per_replica_request,
        Some(Resources::from([
            // containers 250m + 500m (limit as request) = 750m, init container 2 cpu is larger
            ("cpu".to_owned(), 2_000),
            ("memory".to_owned(), 128 * 1024 * 1024 * 1000),
        ]))
    );

    let defaulted = FeedReplicas::from_object(&web, &json!({"spec": {}})).unwrap();
    assert_eq!(
        defaulted.desired,
        Some(1),
        "Kubernetes defaults replicas to 1"
    );
    assert_eq!(defaulted.per_replica_request, None);

    let cm = FeedReplicas::from_object(&cm_feed("cfg"), &json!({"data": {}})).unwrap();
    assert_eq!(cm.desired, None);

    let bad = json!({"spec": {"template": {"spec": {"containers": [
        {"resources": {"requests": {"cpu": "lots"}}}]}}}});
    assert_eq!(
        FeedReplicas::from_object(&web, &bad).unwrap_err().label(),
        "parse_quantity"
    );
}

#[test]
fn content_hash_ignores_key_order_and_tracks_values() {
    let a: Value = serde_json::from_str(r#"{"b": 1, "a": [1, {"y": 2, "x": 1}]}"#).unwrap();
    let b: Value = serde_json::from_str(r#"{"a": [1, {"x": 1, "y": 2}], "b": 1}"#).unwrap();
    let c: Value = serde_json::from_str(r#"{"a": [1, {"x": 1, "y": 3}], "b": 1}"#).unwrap();
    assert_eq!(content_hash(&a), content_hash(&b));
    assert_ne!(content_hash(&a), content_hash(&c));
    assert_eq!(content_hash(&a).len(), 16);
}

#[test]
fn key_prefix_orders_like_the_key() {
    let keys = [
        "",
        "a",
        "a-b/x",
        "a/x",
        "ab",
        "clusternet-abcde/child1",
        "clusternet-abcde/child10",
        "clusternet-abcde/child2",
        "clusternet-abcdf/a",
        "clusternet-abcd/zzzzzzzzzzzzzzzz",
    ];
    for a in keys {
        for b in keys {
            let (pa, pb) = (key_prefix(a), key_prefix(b));
            if pa != pb {
                assert_eq!(pa.cmp(&pb), a.cmp(b), "{a} vs {b}");
            }
        }
    }
}
