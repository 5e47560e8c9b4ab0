//! Property tests of the dividing arithmetic and of `schedule` as a whole.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;

use atoll_crds::apps::{
    DividingScheduling, DividingType, DynamicDividing, Feed, SchedulingStrategy, Subscriber,
    SubscriptionSpec,
};
use atoll_scheduler::placement::divide::{divide, divide_static};
use atoll_scheduler::placement::{ClusterInfo, FeedReplicas, schedule};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn static_divide_sums_to_desired_and_stays_within_one_of_the_share(
        desired in 0i32..100_000,
        weights in prop::collection::vec(0i64..1_000, 1..40),
    ) {
        let sum: i64 = weights.iter().sum();
        prop_assume!(sum > 0);
        let r = divide_static(desired, &weights);
        prop_assert_eq!(r.len(), weights.len());
        prop_assert_eq!(r.iter().map(|x| i64::from(*x)).sum::<i64>(), i64::from(desired));
        for (ri, wi) in r.iter().zip(&weights) {
            // exact share = wi*d/sum; |r - share| <= 1, i.e. floor <= r <= floor+1. (Clusternet
            // hands leftovers out by weight, not by fraction, so a cluster whose share is a whole
            // number can still get floor+1.)
            let exact_num = i128::from(*wi) * i128::from(desired);
            let floor = exact_num / i128::from(sum);
            prop_assert!(i128::from(*ri) >= floor && i128::from(*ri) <= floor + 1,
                "r={} share={}/{}", ri, exact_num, sum);
            prop_assert!((i128::from(*ri) * i128::from(sum) - exact_num).abs() <= i128::from(sum));
            if *wi == 0 {
                prop_assert_eq!(*ri, 0, "a weight-0 cluster gets no replica");
            }
        }
    }

    #[test]
    fn static_divide_is_deterministic(
        desired in 0i32..10_000,
        weights in prop::collection::vec(0i64..100, 1..30),
    ) {
        prop_assert_eq!(divide_static(desired, &weights), divide_static(desired, &weights));
    }

    #[test]
    fn raising_one_weight_never_lowers_that_clusters_replicas(
        desired in 0i32..10_000,
        weights in prop::collection::vec(0i64..100, 1..30),
        pick in any::<prop::sample::Index>(),
        raise in 1i64..200,
    ) {
        prop_assume!(weights.iter().sum::<i64>() > 0);
        let i = pick.index(weights.len());
        let before = divide_static(desired, &weights)[i];
        let mut heavier = weights.clone();
        heavier[i] += raise;
        let after = divide_static(desired, &heavier)[i];
        prop_assert!(after >= before, "cluster {} went from {} to {}", i, before, after);
    }

    #[test]
    fn dynamic_divide_fills_capacity_or_places_everything_within_capacity(
        desired in 0i64..5_000,
        capacity in prop::collection::vec(0i64..500, 1..40),
    ) {
        let total: i64 = capacity.iter().sum();
        let r = divide(desired, &capacity);
        prop_assert_eq!(r.len(), capacity.len());
        if total == 0 || desired > total {
            prop_assert_eq!(&r, &capacity);
        } else {
            prop_assert_eq!(r.iter().sum::<i64>(), desired);
            for (ri, ci) in r.iter().zip(&capacity) {
                prop_assert!(*ri >= 0 && ri <= ci, "r={} capacity={}", ri, ci);
                let num = i128::from(*ci) * i128::from(desired);
                let floor = num / i128::from(total);
                prop_assert!(i128::from(*ri) - floor <= 1 && i128::from(*ri) >= floor);
            }
        }
        prop_assert_eq!(divide(desired, &capacity), r);
    }

    #[test]
    fn schedule_aligns_replicas_to_sorted_bindings_and_accounts_for_every_replica(
        clusters in prop::collection::vec(("[a-c]{1,2}", "[a-z]{1,3}", 0u8..3, any::<bool>(), 0i64..8_000), 0..40),
        desired in 0i32..500,
        dynamic in any::<bool>(),
        input_order_seed in any::<u64>(),
    ) {
        let mut infos: Vec<ClusterInfo> = clusters
            .iter()
            .map(|(ns, name, zone, ready, cpu)| ClusterInfo {
                namespace: format!("ns-{ns}"),
                name: name.clone(),
                id: String::new(),
                labels: BTreeMap::from([("zone".to_owned(), zone.to_string())]),
                taints: vec![],
                ready: *ready,
                allocatable: BTreeMap::from([("cpu".to_owned(), *cpu), ("pods".to_owned(), 110_000)]),
            })
            .collect();
        // duplicates by key would be two clusters claiming one dedicated namespace: not realistic
        infos.sort_by_key(ClusterInfo::key);
        infos.dedup_by_key(|c| c.key());
        let web = Feed {
            api_version: "apps/v1".to_owned(),
            kind: "Deployment".to_owned(),
            namespace: Some("default".to_owned()),
            name: "web".to_owned(),
        };
        let subscriber = |zone: &str, weight: i32| Subscriber {
            cluster_affinity: LabelSelector {
                match_labels: Some(BTreeMap::from([("zone".to_owned(), zone.to_owned())])),
                match_expressions: None,
            },
            weight,
            sub_group_strategy: None,
        };
        let spec = SubscriptionSpec {
            scheduling_strategy: SchedulingStrategy::Dividing,
            dividing_scheduling: Some(DividingScheduling {
                type_: if dynamic { DividingType::Dynamic } else { DividingType::Static },
                dynamic_dividing: Some(DynamicDividing::default()),
            }),
            subscribers: vec![subscriber("0", 1), subscriber("1", 3)],
            feeds: vec![web.clone()],
            ..Default::default()
        };
        let facts = vec![FeedReplicas {
            feed_key: web.key(),
            desired: Some(desired),
            per_replica_request: Some(BTreeMap::from([("cpu".to_owned(), 500)])),
        }];
        let p = schedule(&spec, &infos, &facts).unwrap();
        let mut sorted = p.binding_clusters.clone();
        sorted.sort();
        prop_assert_eq!(&p.binding_clusters, &sorted);
        let r = &p.replicas[&web.key()];
        prop_assert_eq!(r.len(), p.binding_clusters.len());
        let placed: i64 = r.iter().map(|x| i64::from(*x)).sum();
        let unplaced = i64::from(p.unplaced.get(&web.key()).copied().unwrap_or(0));
        prop_assert_eq!(placed + unplaced, i64::from(desired));
        prop_assert!(r.iter().all(|x| *x >= 0));

        // the result does not depend on the order clusters are given in
        let mut shuffled = infos.clone();
        let n = shuffled.len();
        if n > 1 {
            let k = usize::try_from(input_order_seed % n as u64).unwrap();
            shuffled.rotate_left(k);
            shuffled.swap(0, n - 1);
        }
        let q = schedule(&spec, &shuffled, &facts).unwrap();
        prop_assert_eq!(&q.binding_clusters, &p.binding_clusters);
        prop_assert_eq!(&q.replicas, &p.replicas);
        prop_assert_eq!(&q.unschedulable, &p.unschedulable);
    }
}
