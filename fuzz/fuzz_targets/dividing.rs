//! Dividing arithmetic against its invariants: `divide_static` (weights), `divide` (capacity)
//! and `schedule` end to end in both dividing modes, with `minClusters`/`maxClusters`.
//!
//! Checked: the counts sum to the desired replicas (or, in `schedule`, with `unplaced` make up
//! the desired count); each cluster is within one replica of its exact weighted share where the
//! code promises it; raising a weight never lowers that cluster's count; no cluster gets more
//! than its capacity; the bounds hold; the same input gives the same output, whatever the order
//! of the clusters.
#![no_main]

use arbitrary::Arbitrary;
use atoll_crds::apps::SubscriptionSpec;
use atoll_scheduler::placement::divide::{Resources, divide, divide_static, max_replicas};
use atoll_scheduler::placement::{ClusterInfo, FeedReplicas, schedule};
use libfuzzer_sys::fuzz_target;
use serde_json::json;

#[derive(Arbitrary, Debug)]
enum Input {
    Static {
        desired: i32,
        weights: Vec<i64>,
        bump: (u8, u32),
    },
    Dynamic {
        desired: i64,
        weights: Vec<i64>,
    },
    Schedule(Scenario),
}

#[derive(Arbitrary, Debug)]
struct Scenario {
    dynamic: bool,
    desired: i32,
    /// Weights of the subscribers selecting `group=a`, `group=b` and every cluster.
    weights: [i16; 3],
    clusters: Vec<Cluster>,
    min: Option<i8>,
    max: Option<i8>,
    request_cpu: Option<u16>,
}

#[derive(Arbitrary, Debug, Clone)]
struct Cluster {
    group_b: bool,
    /// Absent from every subscriber but the catch-all (weight 2 only).
    unlabelled: bool,
    cpu_milli: Option<u32>,
    pods: Option<u16>,
}

fn check_static(desired: i32, weights: &[i64], bump: (u8, u32)) {
    let r = divide_static(desired, weights);
    assert_eq!(r, divide_static(desired, weights), "not deterministic");
    assert_eq!(r.len(), weights.len());
    let w: Vec<i128> = weights.iter().map(|w| i128::from((*w).max(0))).collect();
    let sum: i128 = w.iter().sum();
    if sum == 0 || desired <= 0 {
        assert!(r.iter().all(|x| *x == 0), "{r:?}");
        return;
    }
    let d = i128::from(desired);
    let placed: i128 = r.iter().map(|x| i128::from(*x)).sum();
    assert_eq!(placed, d, "divide_static({desired}, {weights:?}) = {r:?}");
    for (i, (ri, wi)) in r.iter().zip(&w).enumerate() {
        // |r - w*d/sum| <= 1, in integers. Not < 1: leftovers go by weight (Clusternet), not by
        // largest remainder, so a heavy cluster with an exact share can get one more.
        let off = (i128::from(*ri) * sum - wi * d).abs();
        assert!(off <= sum, "cluster {i} got {ri}, share {wi}*{d}/{sum}");
        assert!(*wi > 0 || *ri == 0, "zero weight got {ri}");
    }
    // Raising one cluster's weight never lowers its count.
    if !weights.is_empty() {
        let k = usize::from(bump.0) % weights.len();
        let mut raised = weights.to_vec();
        raised[k] = raised[k].max(0).saturating_add(i64::from(bump.1));
        let r2 = divide_static(desired, &raised);
        assert!(
            r2[k] >= r[k],
            "raising weight {k} lowered {} to {}",
            r[k],
            r2[k]
        );
    }
}

fn check_dynamic(d: i64, w: &[i64]) {
    let r = divide(d, w);
    assert_eq!(r, divide(d, w), "not deterministic");
    assert_eq!(r.len(), w.len());
    // Negative capacities count as 0.
    let w: Vec<i64> = w.iter().map(|x| (*x).max(0)).collect();
    let sum: i128 = w.iter().map(|x| i128::from(*x)).sum();
    if sum == 0 || i128::from(d) > sum {
        assert_eq!(
            r, w,
            "over capacity must fill every cluster to its capacity"
        );
        return;
    }
    let placed: i128 = r.iter().map(|x| i128::from(*x)).sum();
    assert_eq!(placed, i128::from(d), "divide({d}, {w:?}) = {r:?}");
    for (i, (ri, wi)) in r.iter().zip(&w).enumerate() {
        let off = (i128::from(*ri) * sum - i128::from(*wi) * i128::from(d)).abs();
        assert!(off < sum, "cluster {i} got {ri}, share {wi}*{d}/{sum}");
        if d >= 0 {
            assert!(ri <= wi, "cluster {i} got {ri} over its capacity {wi}");
        }
    }
}

fn check_schedule(s: &Scenario) {
    let clusters: Vec<ClusterInfo> = s
        .clusters
        .iter()
        .take(16)
        .enumerate()
        .map(|(i, c)| {
            let mut labels = std::collections::BTreeMap::new();
            if !c.unlabelled {
                labels.insert(
                    "group".to_owned(),
                    if c.group_b { "b" } else { "a" }.to_owned(),
                );
            }
            let mut allocatable = Resources::new();
            if let Some(cpu) = c.cpu_milli {
                allocatable.insert("cpu".to_owned(), i64::from(cpu));
            }
            if let Some(p) = c.pods {
                allocatable.insert("pods".to_owned(), i64::from(p) * 1000);
            }
            ClusterInfo {
                namespace: format!("clusternet-{i:02}"),
                name: format!("c{i}"),
                id: format!("id-{i}"),
                labels,
                taints: Vec::new(),
                ready: true,
                allocatable,
            }
        })
        .collect();
    let subscriber = |selector: serde_json::Value, weight: i16| json!({"clusterAffinity": selector, "weight": weight});
    let dividing = if s.dynamic {
        let mut dynamic = json!({"strategy": "Spread"});
        if let Some(m) = s.min {
            dynamic["minClusters"] = json!(m);
        }
        if let Some(m) = s.max {
            dynamic["maxClusters"] = json!(m);
        }
        json!({"type": "Dynamic", "dynamicDividing": dynamic})
    } else {
        json!({"type": "Static"})
    };
    let spec = json!({
        "subscribers": [
            subscriber(json!({"matchLabels": {"group": "a"}}), s.weights[0]),
            subscriber(json!({"matchLabels": {"group": "b"}}), s.weights[1]),
            subscriber(json!({}), s.weights[2]),
        ],
        "feeds": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "demo"}],
        "schedulingStrategy": "Dividing",
        "dividingScheduling": dividing,
    });
    let spec: SubscriptionSpec = serde_json::from_value(spec).unwrap_or_else(|e| panic!("{e}"));
    let key = spec.feeds[0].key();
    let request = s
        .request_cpu
        .map(|cpu| Resources::from([("cpu".to_owned(), i64::from(cpu))]));
    let feeds = [FeedReplicas {
        feed_key: key.clone(),
        desired: Some(s.desired),
        per_replica_request: request.clone(),
    }];

    let result = schedule(&spec, &clusters, &feeds);
    // Same input, same output; and the order of the clusters does not matter.
    let mut reversed = clusters.clone();
    reversed.reverse();
    assert_eq!(
        format!("{result:?}"),
        format!("{:?}", schedule(&spec, &reversed, &feeds)),
        "the placement depends on the order of the clusters"
    );
    let placement = match result {
        Ok(p) => p,
        Err(e) => {
            let allowed = [
                "validate_weight",
                "divide_static",
                "validate_cluster_bounds",
                "select_clusters",
            ];
            assert!(allowed.contains(&e.label()), "unexpected error {e}");
            return;
        }
    };
    let r = &placement.replicas[&key];
    assert_eq!(r.len(), placement.binding_clusters.len());
    let desired = s.desired.max(0);
    let placed: i64 = r.iter().map(|x| i64::from(*x)).sum();
    let unplaced = i64::from(placement.unplaced.get(&key).copied().unwrap_or(0));
    assert!(r.iter().all(|x| *x >= 0), "{r:?}");
    assert_eq!(placed + unplaced, i64::from(desired), "{placement:?}");
    let by_key = |k: &str| clusters.iter().find(|c| c.key() == k);
    if s.dynamic {
        if let Some(max) = s.max {
            assert!(placement.binding_clusters.len() <= usize::try_from(max).unwrap_or(0));
        }
        if let Some(min) = s.min {
            assert!(placement.binding_clusters.len() >= usize::try_from(min).unwrap_or(0));
        }
        for (k, ri) in placement.binding_clusters.iter().zip(r) {
            let Some(c) = by_key(k) else {
                panic!("bound an unknown cluster {k}")
            };
            let cap = max_replicas(&c.allocatable, request.as_ref());
            assert!(
                i64::from(*ri) <= cap,
                "{k} got {ri} over its capacity {cap}"
            );
            assert!(cap > 0, "{k} bound without capacity");
        }
    } else {
        // Each cluster's weight is the sum of the weights of the subscribers it matches.
        let weight = |c: &ClusterInfo| -> i128 {
            let w = |x: i16| i128::from(x.max(0));
            let group = c.labels.get("group").map(String::as_str);
            w(s.weights[2])
                + match group {
                    Some("a") => w(s.weights[0]),
                    Some("b") => w(s.weights[1]),
                    _ => 0,
                }
        };
        let weights: Vec<i128> = placement
            .binding_clusters
            .iter()
            .map(|k| by_key(k).map_or(0, weight))
            .collect();
        let sum: i128 = weights.iter().sum();
        if sum > 0 {
            assert_eq!(unplaced, 0, "static dividing left replicas unplaced");
            for ((k, ri), wi) in placement.binding_clusters.iter().zip(r).zip(&weights) {
                // within one replica, inclusive (see check_static)
                let off = (i128::from(*ri) * sum - wi * i128::from(desired)).abs();
                assert!(off <= sum, "{k} got {ri}, share {wi}*{desired}/{sum}");
            }
        }
    }
}

fuzz_target!(|input: Input| {
    match input {
        Input::Static {
            desired,
            weights,
            bump,
        } => check_static(desired, &weights, bump),
        Input::Dynamic { desired, weights } => check_dynamic(desired, &weights),
        Input::Schedule(s) => check_schedule(&s),
    }
});
