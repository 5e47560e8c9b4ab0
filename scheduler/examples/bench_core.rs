//! Benchmark of the pure decision core.
//!
//! `cargo run --release -p atoll-scheduler --example bench_core` prints a markdown table:
//! placing one Subscription over 10,000 clusters (replication, static and dynamic dividing) and
//! rendering a 20 KiB Deployment through 10 overrides, with median and p99 over many runs.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use atoll_crds::apps::Feed;
use atoll_crds::apps::{
    DividingScheduling, DividingType, DynamicDividing, FieldFormat, OverrideConfig, OverrideType,
    SchedulingStrategy, Subscriber, SubscriptionSpec,
};
use atoll_scheduler::overrides::{DividedReplicas, OverrideKind, OverrideSet, render};
use atoll_scheduler::placement::{ClusterInfo, FeedReplicas, schedule};
use k8s_openapi::api::core::v1::{Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use serde_json::{Value, json};

const CLUSTERS: usize = 10_000;

fn clusters() -> Vec<ClusterInfo> {
    (0..CLUSTERS)
        .map(|i| {
            let mut labels = BTreeMap::new();
            labels.insert("zone".to_owned(), format!("zone-{}", i % 8));
            labels.insert(
                "env".to_owned(),
                if i % 3 == 0 { "dev" } else { "prod" }.to_owned(),
            );
            labels.insert(
                "clusters.clusternet.io/cluster-name".to_owned(),
                format!("child-{i:05}"),
            );
            let mut taints = Vec::new();
            if i % 50 == 0 {
                taints.push(Taint {
                    key: "dedicated".to_owned(),
                    value: Some("gpu".to_owned()),
                    effect: "NoSchedule".to_owned(),
                    time_added: None,
                });
            }
            if i % 7 == 0 {
                taints.push(Taint {
                    key: "slow".to_owned(),
                    value: None,
                    effect: "PreferNoSchedule".to_owned(),
                    time_added: None,
                });
            }
            ClusterInfo {
                namespace: format!("clusternet-{:05x}", i * 7919 % 1_048_576),
                name: format!("child-{i:05}"),
                id: format!("00000000-0000-0000-0000-{i:012}"),
                labels,
                taints,
                ready: i % 97 != 0,
                allocatable: BTreeMap::from([
                    ("cpu".to_owned(), 4_000 + (i as i64 % 13) * 1_000),
                    (
                        "memory".to_owned(),
                        (16 + (i as i64 % 5) * 8) * 1024 * 1024 * 1024 * 1000,
                    ),
                    ("pods".to_owned(), 110_000),
                ]),
            }
        })
        .collect()
}

fn web() -> Feed {
    Feed {
        api_version: "apps/v1".to_owned(),
        kind: "Deployment".to_owned(),
        namespace: Some("default".to_owned()),
        name: "web".to_owned(),
    }
}

fn subscribers(weighted: bool) -> Vec<Subscriber> {
    let w = |n: i32| if weighted { n } else { 0 };
    vec![
        Subscriber {
            cluster_affinity: LabelSelector {
                match_labels: Some(BTreeMap::from([("env".to_owned(), "prod".to_owned())])),
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "zone".to_owned(),
                    operator: "NotIn".to_owned(),
                    values: Some(vec!["zone-7".to_owned()]),
                }]),
            },
            weight: w(2),
            sub_group_strategy: None,
        },
        Subscriber {
            cluster_affinity: LabelSelector {
                match_labels: None,
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "zone".to_owned(),
                    operator: "In".to_owned(),
                    values: Some(vec!["zone-1".to_owned(), "zone-7".to_owned()]),
                }]),
            },
            weight: w(3),
            sub_group_strategy: None,
        },
    ]
}

fn spec(strategy: &str) -> SubscriptionSpec {
    let (scheduling_strategy, dividing_scheduling) = match strategy {
        "static" => (
            SchedulingStrategy::Dividing,
            Some(DividingScheduling {
                type_: DividingType::Static,
                dynamic_dividing: None,
            }),
        ),
        "dynamic" => (
            SchedulingStrategy::Dividing,
            Some(DividingScheduling {
                type_: DividingType::Dynamic,
                dynamic_dividing: Some(DynamicDividing {
                    max_clusters: Some(2_000),
                    ..Default::default()
                }),
            }),
        ),
        _ => (SchedulingStrategy::Replication, None),
    };
    SubscriptionSpec {
        scheduling_strategy,
        dividing_scheduling,
        subscribers: subscribers(strategy == "static"),
        cluster_tolerations: vec![Toleration {
            key: Some("slow".to_owned()),
            operator: Some("Exists".to_owned()),
            effect: Some("PreferNoSchedule".to_owned()),
            ..Default::default()
        }],
        feeds: vec![
            web(),
            Feed {
                api_version: "v1".to_owned(),
                kind: "ConfigMap".to_owned(),
                namespace: Some("default".to_owned()),
                name: "web-config".to_owned(),
            },
        ],
        ..Default::default()
    }
}

/// A Deployment of about 20 KiB of JSON: containers with many env vars, plus an embedded YAML
/// config in an annotation for the field patches.
fn deployment() -> Value {
    let env: Vec<Value> = (0..60)
        .map(|i| json!({"name": format!("SETTING_NUMBER_{i:03}"), "value": format!("value-of-setting-{i:03}-with-some-padding")}))
        .collect();
    let containers: Vec<Value> = (0..4)
        .map(|c| {
            json!({
                "name": format!("container-{c}"),
                "image": format!("registry.example.com/team/app-{c}:1.2.3"),
                "ports": [{"containerPort": 8080 + c, "name": "http", "protocol": "TCP"}],
                "env": env,
                "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
                "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080 + c}, "periodSeconds": 5},
            })
        })
        .collect();
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web", "namespace": "default", "uid": "0b5b1c1e", "resourceVersion": "123",
            "generation": 4, "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {"app": "web", "tier": "frontend"},
            "annotations": {
                "example.com/config": "server:\n  port: 8080\n  hosts:\n  - a.example.com\n  - b.example.com\nlog:\n  level: info\n",
                "kubectl.kubernetes.io/last-applied-configuration": "{}"
            },
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}]
        },
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": containers}}
        },
        "status": {"replicas": 3, "readyReplicas": 3}
    })
}

fn overrides() -> Vec<OverrideSet> {
    let o = |name: &str, type_: OverrideType, value: &str| OverrideConfig {
        name: Some(name.to_owned()),
        value: value.to_owned(),
        type_,
        override_chart: None,
        field_path: None,
        field_format: None,
    };
    let field = |name: &str, type_: OverrideType, value: &str| OverrideConfig {
        field_path: Some("/metadata/annotations/example.com~1config".to_owned()),
        field_format: Some(FieldFormat::YAML),
        ..o(name, type_, value)
    };
    let glob = vec![
        o(
            "labels",
            OverrideType::MergePatch,
            r#"{"metadata":{"labels":{"owner":"platform"}}}"#,
        ),
        o(
            "image",
            OverrideType::JSONPatch,
            r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"registry.example.com/team/app-0:1.2.4"}]"#,
        ),
        o(
            "yaml-merge",
            OverrideType::MergePatch,
            "spec:\n  template:\n    metadata:\n      annotations:\n        rollout: \"2\"\n",
        ),
        field(
            "port",
            OverrideType::FieldMergePatch,
            "server: {port: 9090}",
        ),
        o(
            "env",
            OverrideType::JSONPatch,
            r#"[{"op":"add","path":"/spec/template/spec/containers/1/env/-","value":{"name":"REGION","value":"eu"}}]"#,
        ),
    ];
    let loc = vec![
        o(
            "replicas",
            OverrideType::JSONPatch,
            r#"[{"op":"replace","path":"/spec/replicas","value":5}]"#,
        ),
        field(
            "hosts",
            OverrideType::FieldJSONPatch,
            r#"[{"op":"add","path":"/server/hosts/-","value":"c.example.com"}]"#,
        ),
        o(
            "cpu",
            OverrideType::MergePatch,
            r#"{"spec":{"template":{"spec":{"priorityClassName":"high"}}}}"#,
        ),
        o(
            "test-and-set",
            OverrideType::JSONPatch,
            r#"[{"op":"test","path":"/metadata/name","value":"web"},{"op":"add","path":"/metadata/labels/cluster","value":"child-1"}]"#,
        ),
        field("log", OverrideType::FieldMergePatch, "log: {level: debug}"),
    ];
    vec![
        OverrideSet {
            kind: OverrideKind::Globalization,
            namespace: None,
            name: "platform".to_owned(),
            priority: 100,
            created: None,
            overrides: glob,
        },
        OverrideSet {
            kind: OverrideKind::Localization,
            namespace: Some("clusternet-00001".to_owned()),
            name: "child-1".to_owned(),
            priority: 500,
            created: None,
            overrides: loc,
        },
    ]
}

struct Row {
    case: String,
    runs: usize,
    min: Duration,
    median: Duration,
    p99: Duration,
    target: Duration,
    note: String,
}

fn measure(runs: usize, mut f: impl FnMut()) -> (Duration, Duration, Duration) {
    for _ in 0..runs.min(20) {
        f();
    }
    let mut samples: Vec<Duration> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort();
    let median = samples[samples.len() / 2];
    let p99 = samples[(samples.len() * 99 / 100).min(samples.len() - 1)];
    (samples[0], median, p99)
}

fn fmt(d: Duration) -> String {
    if d >= Duration::from_millis(1) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.1} µs", d.as_secs_f64() * 1e6)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // optional filter: `bench_core dynamic` runs only the cases whose name contains "dynamic"
    let only = std::env::args().nth(1).unwrap_or_default();
    let clusters = clusters();
    let feeds = vec![FeedReplicas::from_object(
        &web(),
        &json!({
            "spec": {"replicas": 1_000, "template": {"spec": {"containers": [
                {"resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}}
            ]}}}
        }),
    )?];
    let mut rows = Vec::new();
    for strategy in ["replication", "static", "dynamic"] {
        if !strategy.contains(only.as_str()) {
            continue;
        }
        let spec = spec(strategy);
        let placement = schedule(&spec, &clusters, &feeds)?;
        let placed: i32 = placement
            .replicas
            .get(&web().key())
            .map_or(0, |r| r.iter().sum());
        let (min, median, p99) = measure(200, || {
            let p = schedule(black_box(&spec), black_box(&clusters), black_box(&feeds));
            black_box(p).ok();
        });
        rows.push(Row {
            case: format!("schedule 1 Subscription over {CLUSTERS} clusters, {strategy}"),
            runs: 200,
            min,
            median,
            p99,
            target: Duration::from_millis(5),
            note: format!(
                "{} bound, {} filtered, {} replicas placed",
                placement.binding_clusters.len(),
                placement.unschedulable.len(),
                placed
            ),
        });
    }

    if !"render".contains(only.as_str()) {
        print_rows(rows);
        return Ok(());
    }
    let template = deployment();
    let size = serde_json::to_vec(&template)?.len();
    let sets = overrides();
    let n_overrides: usize = sets.iter().map(|s| s.overrides.len()).sum();
    let rendered = render(&template, &sets, Some(DividedReplicas { replicas: 7 }))?;
    let (min, median, p99) = measure(5_000, || {
        let out = render(
            black_box(&template),
            black_box(&sets),
            Some(DividedReplicas { replicas: 7 }),
        );
        black_box(out).ok();
    });
    rows.push(Row {
        case: format!(
            "render a {:.1} KiB Deployment through {n_overrides} overrides",
            size as f64 / 1024.0
        ),
        runs: 5_000,
        min,
        median,
        p99,
        target: Duration::from_micros(200),
        note: format!(
            "output {:.1} KiB",
            serde_json::to_vec(&rendered)?.len() as f64 / 1024.0
        ),
    });

    print_rows(rows);
    Ok(())
}

fn print_rows(rows: Vec<Row>) {
    println!("| case | runs | min | median | p99 | target | within target | notes |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | < {} | {} | {} |",
            r.case,
            r.runs,
            fmt(r.min),
            fmt(r.median),
            fmt(r.p99),
            fmt(r.target),
            if r.p99 < r.target {
                "yes (p99)"
            } else if r.median < r.target {
                "median only"
            } else {
                "no"
            },
            r.note
        );
    }
}
