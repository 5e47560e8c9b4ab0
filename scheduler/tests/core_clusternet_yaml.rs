//! Clusternet-style YAML, applied unchanged, through the pure core: ManagedClusters and a
//! Subscription become a placement; a Deployment and a ConfigMap are rendered through
//! Globalizations and Localizations.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_crds::apps::{Globalization, Localization, Subscription};
use atoll_crds::clusters::ManagedCluster;
use atoll_scheduler::overrides::{DividedReplicas, render, select_overrides};
use atoll_scheduler::placement::{ClusterInfo, FeedReplicas, schedule, spec_hash};
use serde_json::{Value, json};

const CLUSTERS: &str = r#"
apiVersion: clusters.clusternet.io/v1beta1
kind: ManagedCluster
metadata:
  name: child1
  namespace: clusternet-5l82l
  labels:
    clusters.clusternet.io/cluster-id: 5f9da921-0437-4da6-a2d6-9ba4f5b2e1fb
    clusters.clusternet.io/cluster-name: child1
    region: eu
spec:
  clusterId: 5f9da921-0437-4da6-a2d6-9ba4f5b2e1fb
  syncMode: Pull
status:
  allocatable: {cpu: "4", memory: 8Gi, pods: "110"}
  conditions:
  - {type: Ready, status: "True", reason: ManagedClusterReady, message: ok, lastTransitionTime: "2024-01-01T00:00:00Z"}
---
apiVersion: clusters.clusternet.io/v1beta1
kind: ManagedCluster
metadata:
  name: child2
  namespace: clusternet-7xq3v
  labels:
    clusters.clusternet.io/cluster-id: 6c085c18-3baf-443c-abff-459751f5e3d3
    clusters.clusternet.io/cluster-name: child2
    region: us
spec:
  clusterId: 6c085c18-3baf-443c-abff-459751f5e3d3
  syncMode: Dual
status:
  allocatable: {cpu: "8", memory: 16Gi, pods: "110"}
  conditions:
  - {type: Ready, status: "True", reason: ManagedClusterReady, message: ok, lastTransitionTime: "2024-01-01T00:00:00Z"}
---
apiVersion: clusters.clusternet.io/v1beta1
kind: ManagedCluster
metadata:
  name: child3
  namespace: clusternet-abcde
  labels:
    clusters.clusternet.io/cluster-id: 0e3f0e4c-0000-4000-8000-000000000003
    region: eu
spec:
  clusterId: 0e3f0e4c-0000-4000-8000-000000000003
  syncMode: Pull
  taints:
  - {key: clusters.clusternet.io/unschedulable, value: ClusterStatusUnknown, effect: NoSchedule}
status:
  allocatable: {cpu: "16", memory: 32Gi, pods: "110"}
  conditions:
  - {type: Ready, status: "Unknown", reason: ClusterStatusUnknown, message: lost, lastTransitionTime: "2024-01-01T00:00:00Z"}
"#;

const STATIC: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata:
  name: static-dividing-scheduling-demo
  namespace: default
spec:
  subscribers:
    - clusterAffinity:
        matchExpressions:
          - key: clusters.clusternet.io/cluster-id
            operator: In
            values:
              - 5f9da921-0437-4da6-a2d6-9ba4f5b2e1fb
      weight: 1
    - clusterAffinity:
        matchExpressions:
          - key: clusters.clusternet.io/cluster-id
            operator: In
            values:
              - 6c085c18-3baf-443c-abff-459751f5e3d3
      weight: 2
  schedulingStrategy: Dividing
  dividingScheduling:
    type: Static
  feeds:
    - apiVersion: v1
      kind: Namespace
      name: qux
    - apiVersion: v1
      kind: Service
      name: my-nginx-svc
      namespace: qux
    - apiVersion: apps/v1
      kind: Deployment
      name: my-nginx
      namespace: qux
"#;

const DYNAMIC: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata:
  name: dynamic-dividing-scheduling-demo
  namespace: default
spec:
  subscribers:
    - clusterAffinity:
        matchLabels:
          region: eu
    - clusterAffinity:
        matchLabels:
          region: us
  clusterTolerations:
    - key: clusters.clusternet.io/unschedulable
      operator: Exists
  schedulingStrategy: Dividing
  dividingScheduling:
    type: Dynamic
    dynamicDividing:
      strategy: Spread
  feeds:
    - apiVersion: apps/v1
      kind: Deployment
      name: my-nginx
      namespace: qux
"#;

const REPLICATION: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata:
  name: app-demo
  namespace: default
spec:
  subscribers:
    - clusterAffinity:
        matchLabels:
          region: eu
  feeds:
    - apiVersion: v1
      kind: Namespace
      name: qux
"#;

const OVERRIDES: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Globalization
metadata:
  name: nginx-global-overrides
spec:
  overridePolicy: ApplyLater
  priority: 300
  feed:
    apiVersion: apps/v1
    kind: Deployment
    name: my-nginx
    namespace: qux
  overrides:
    - name: add-labels
      type: MergePatch
      value: '{"metadata":{"labels":{"deployed-in-cluster":"true"}}}'
    - name: scale
      type: JSONPatch
      value: |-
        - op: replace
          path: /spec/replicas
          value: 10
---
apiVersion: apps.clusternet.io/v1alpha1
kind: Localization
metadata:
  name: nginx-local-overrides
  namespace: clusternet-5l82l
spec:
  overridePolicy: ApplyNow
  priority: 100
  feed:
    apiVersion: apps/v1
    kind: Deployment
    name: my-nginx
    namespace: qux
  overrides:
    - name: update-image
      type: JSONPatch
      value: |-
        [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "nginx:1.25"}]
    - name: embedded-config
      type: FieldMergePatch
      fieldPath: /metadata/annotations/example.com~1config
      fieldFormat: YAML
      value: |-
        server:
          port: 8443
"#;

fn docs<T: serde::de::DeserializeOwned>(text: &str) -> Vec<T> {
    text.split("\n---\n")
        .map(|doc| serde_yaml::from_str(doc).unwrap())
        .collect()
}

fn clusters() -> Vec<ClusterInfo> {
    docs::<ManagedCluster>(CLUSTERS)
        .iter()
        .map(ClusterInfo::from)
        .collect()
}

fn nginx() -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {
            "name": "my-nginx", "namespace": "qux", "uid": "3f3b", "resourceVersion": "99",
            "annotations": {"example.com/config": "server:\n  port: 80\n  name: web\n"}
        },
        "spec": {"replicas": 6, "template": {"spec": {"containers": [
            {"name": "nginx", "image": "nginx:1.14", "resources": {"requests": {"cpu": "1"}}}
        ]}}},
        "status": {"replicas": 6}
    })
}

fn facts(sub: &Subscription) -> Vec<FeedReplicas> {
    sub.spec
        .feeds
        .iter()
        .map(|f| {
            let object = if f.kind == "Deployment" {
                nginx()
            } else {
                json!({})
            };
            FeedReplicas::from_object(f, &object).unwrap()
        })
        .collect()
}

#[test]
fn clusternet_static_dividing_example_splits_six_replicas_one_to_two() {
    let sub: Subscription = serde_yaml::from_str(STATIC).unwrap();
    let p = schedule(&sub.spec, &clusters(), &facts(&sub)).unwrap();
    assert_eq!(
        p.binding_clusters,
        vec!["clusternet-5l82l/child1", "clusternet-7xq3v/child2"]
    );
    assert_eq!(p.replicas["apps/v1/Deployment/qux/my-nginx"], vec![2, 4]);
    assert_eq!(p.replicas["v1/Namespace/qux"], Vec::<i32>::new());
    assert_eq!(p.replicas["v1/Service/qux/my-nginx-svc"], Vec::<i32>::new());
}

#[test]
fn clusternet_dynamic_dividing_example_spreads_by_cpu_and_skips_the_lost_cluster() {
    let sub: Subscription = serde_yaml::from_str(DYNAMIC).unwrap();
    let p = schedule(&sub.spec, &clusters(), &facts(&sub)).unwrap();
    // child3 tolerates the unschedulable taint here, but it is not Ready: filtered anyway
    assert_eq!(
        p.binding_clusters,
        vec!["clusternet-5l82l/child1", "clusternet-7xq3v/child2"]
    );
    // capacity 4 and 8 cpus at 1 cpu per replica: 6 split 2:4
    assert_eq!(p.replicas["apps/v1/Deployment/qux/my-nginx"], vec![2, 4]);
    assert_eq!(p.unschedulable.len(), 1);
    assert!(p.unschedulable[0].1.contains("not Ready"));
}

#[test]
fn clusternet_replication_example_binds_matching_ready_clusters() {
    let sub: Subscription = serde_yaml::from_str(REPLICATION).unwrap();
    let p = schedule(&sub.spec, &clusters(), &[]).unwrap();
    assert_eq!(p.binding_clusters, vec!["clusternet-5l82l/child1"]);
    assert!(p.replicas.is_empty());
    assert_ne!(spec_hash(&sub.spec), 0);
}

#[test]
fn clusternet_overrides_render_globalization_then_localization_then_divided_replicas() {
    let mut globs: Vec<Globalization> = Vec::new();
    let mut locs: Vec<Localization> = Vec::new();
    for doc in OVERRIDES.split("\n---\n") {
        let v: Value = serde_yaml::from_str(doc).unwrap();
        match v["kind"].as_str() {
            Some("Globalization") => globs.push(serde_json::from_value(v).unwrap()),
            Some("Localization") => locs.push(serde_json::from_value(v).unwrap()),
            other => panic!("unexpected kind {other:?}"),
        }
    }
    let sub: Subscription = serde_yaml::from_str(STATIC).unwrap();
    let feed = &sub.spec.feeds[2];
    let infos = clusters();
    let cases = [
        (
            &infos[0],
            Some(2),
            "nginx:1.25",
            Some("server:\n  port: 8443\n  name: web\n"),
        ),
        (&infos[1], Some(4), "nginx:1.14", None),
    ];
    for (cluster, divided, image, config) in cases {
        let sets =
            select_overrides(feed, &cluster.namespace, &cluster.labels, &globs, &locs).unwrap();
        let out = render(
            &nginx(),
            &sets,
            divided.map(|replicas| DividedReplicas { replicas }),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["replicas"],
            json!(divided.unwrap()),
            "{}",
            cluster.name
        );
        assert_eq!(out["metadata"]["labels"]["deployed-in-cluster"], "true");
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"][0]["image"],
            image
        );
        let annotation = out["metadata"]["annotations"]["example.com/config"]
            .as_str()
            .unwrap();
        let want_config = config.unwrap_or("server:\n  port: 80\n  name: web\n");
        let got: Value = serde_yaml::from_str(annotation).unwrap();
        let want: Value = serde_yaml::from_str(want_config).unwrap();
        assert_eq!(got, want, "{}", cluster.name);
        assert!(out["metadata"].get("uid").is_none());
        assert!(out.get("status").is_none());
    }
}

// Clusternet's examples/replication-scheduling (helm-chart-mysql.yaml, subscription.yaml and
// the HelmChart Globalization of globalization.yaml), unchanged but for their comments.
const HELM_CHART_MYSQL: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: HelmChart
metadata:
  name: mysql
  namespace: default
spec:
  repo: https://charts.bitnami.com/bitnami
  chart: mysql
  version: 9.2.0
  targetNamespace: abc
"#;

const HELM_SUBSCRIPTION: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata:
  name: app-demo
  namespace: default
spec:
  subscribers:
    - clusterAffinity:
        matchLabels:
          clusters.clusternet.io/cluster-id: dc91021d-2361-4f6d-a404-7c33b9e01118
  feeds:
    - apiVersion: apps.clusternet.io/v1alpha1
      kind: HelmChart
      name: mysql
      namespace: default
    - apiVersion: v1
      kind: Namespace
      name: foo
    - apiVersion: v1
      kind: Service
      name: my-nginx-svc
      namespace: foo
    - apiVersion: apps/v1
      kind: Deployment
      name: my-nginx
      namespace: foo
"#;

const HELM_GLOBALIZATION: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Globalization
metadata:
  name: mysql-global-overrides-demo
spec:
  priority: 600
  feed:
    apiVersion: apps.clusternet.io/v1alpha1
    kind: HelmChart
    name: mysql
    namespace: default
  overrides:
    - name: override-commonLabels
      type: Helm
      value: |-
        commonLabels:
          clusternet.io/override-by: clusternet-hub
          some-label: some-value
    - name: disable-pvc-usage
      type: Helm
      value: '{"primary":{"persistence":{"enabled":false}}}'
    - name: update-helm-chart-version
      overrideChart: true
      type: Helm
      value: |-
        spec:
          version: 9.1.0
    - name: add-helm-chart-labels
      type: Helm
      overrideChart: true
      value: |-
        metadata:
          labels:
            some-label: some-value
            another-label: another-value
"#;

#[test]
fn clusternet_helm_example_installs_the_chart_with_its_global_values_and_version() {
    use atoll_scheduler::controller::plan::{ResolvedFeed, plan};
    let chart: Value = serde_yaml::from_str(HELM_CHART_MYSQL).unwrap();
    let sub: Subscription = serde_yaml::from_str(HELM_SUBSCRIPTION).unwrap();
    let glob: Globalization = serde_yaml::from_str(HELM_GLOBALIZATION).unwrap();
    let mut cluster: ManagedCluster = docs::<ManagedCluster>(CLUSTERS).remove(0);
    cluster.metadata.labels.get_or_insert_default().insert(
        "clusters.clusternet.io/cluster-id".into(),
        "dc91021d-2361-4f6d-a404-7c33b9e01118".into(),
    );
    let object = |f: &atoll_crds::apps::Feed| match f.kind.as_str() {
        "HelmChart" => chart.clone(),
        kind => json!({"apiVersion": f.api_version, "kind": kind,
                       "metadata": {"name": f.name, "namespace": f.namespace}}),
    };
    let feeds: Vec<ResolvedFeed> = sub
        .spec
        .feeds
        .iter()
        .map(|f| ResolvedFeed {
            feed: f.clone(),
            object: Ok(object(f)),
        })
        .collect();
    let planned = plan(
        &sub.spec,
        &feeds,
        &[ClusterInfo::from(&cluster)],
        &[&glob],
        &[],
        &[],
    );
    assert_eq!(planned.clusters.len(), 1, "{:?}", planned.conditions);
    let spec = planned.clusters[0]
        .objects
        .as_ref()
        .unwrap()
        .description_spec();
    assert_eq!(spec.deployer, atoll_crds::apps::Deployer::Helm);
    assert_eq!(
        spec.raw.len(),
        3,
        "the Namespace, the Service and the Deployment"
    );
    assert_eq!(spec.charts.len(), 1);
    assert_eq!(
        (
            spec.charts[0].namespace.as_str(),
            spec.charts[0].name.as_str()
        ),
        ("default", "mysql")
    );
    assert_eq!(spec.chart_raw[0]["spec"]["version"], "9.1.0");
    assert_eq!(
        spec.chart_raw[0]["metadata"]["labels"]["another-label"],
        "another-value"
    );
    assert_eq!(
        spec.chart_values[0],
        json!({
            "commonLabels": {"clusternet.io/override-by": "clusternet-hub", "some-label": "some-value"},
            "primary": {"persistence": {"enabled": false}},
        })
    );
}
