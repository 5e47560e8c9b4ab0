//! Clusternet-style YAML for every kind deserializes into the atoll types and serializes back
//! without loss (compared as JSON values).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_crds::apps::{
    Description, DescriptionPhase, DividingType, FieldFormat, Globalization, Localization,
    Manifest, OverridePolicy, OverrideType, SchedulingStrategy, Subscription,
};
use atoll_crds::clusters::{ApprovedResult, ClusterRegistrationRequest, ManagedCluster, SyncMode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Parses `yaml` as `T`, serializes it back, and asserts nothing was lost or added.
fn round_trip<T: DeserializeOwned + Serialize>(yaml: &str) -> T {
    let original: Value = serde_yaml::from_str(yaml).expect("test YAML parses");
    let typed: T = serde_json::from_value(original.clone())
        .unwrap_or_else(|e| panic!("does not deserialize: {e}\n{yaml}"));
    let back = serde_json::to_value(&typed).unwrap();
    assert_eq!(
        back,
        original,
        "round trip changed the object:\n--- got\n{}\n--- want\n{}",
        serde_yaml::to_string(&back).unwrap(),
        serde_yaml::to_string(&original).unwrap()
    );
    typed
}

// examples/replication/subscription.yaml
const SUB_REPLICATION: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata:
  name: app-demo
  namespace: default
spec:
  schedulingStrategy: Replication
  subscribers:
    - clusterAffinity:
        matchLabels:
          clusters.clusternet.io/cluster-id: dc91021d-2361-4f6d-a404-7c33b9e01118
  feeds:
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

// examples/static-dividing-scheduling/subscription.yaml, with the status the scheduler writes.
const SUB_STATIC_DIVIDING: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata:
  name: static-dividing-scheduling-demo
  namespace: default
  generation: 3
  finalizers:
    - apps.clusternet.io/finalizer
spec:
  schedulerName: default
  priority: 10
  preemptionPolicy: PreemptNever
  schedulingStrategy: Dividing
  dividingScheduling:
    type: Static
  subscribers:
    - clusterAffinity:
        matchLabels:
          clusters.clusternet.io/cluster-id: dc91021d-2361-4f6d-a404-7c33b9e01118
      weight: 1
    - clusterAffinity:
        matchExpressions:
          - key: clusters.clusternet.io/cluster-id
            operator: In
            values:
              - 5f9da921-a437-4d0f-8a1b-0f5c4e1b2c3d
      weight: 2
  clusterTolerations:
    - key: clusters.clusternet.io/unschedulable
      operator: Exists
      effect: NoSchedule
  feeds:
    - apiVersion: v1
      kind: Namespace
      name: qux
    - apiVersion: apps/v1
      kind: Deployment
      name: my-nginx
      namespace: qux
status:
  bindingClusters:
    - clusternet-5l82l/child1
    - clusternet-qm42m/child2
  replicas:
    v1/Namespace/qux: []
    apps/v1/Deployment/qux/my-nginx: [2, 4]
  specHash: 2316934375
  desiredReleases: 2
  completedReleases: 1
  observedGeneration: 3
  conditions:
    - type: Scheduled
      status: "True"
      reason: Bound
      message: bound to 2 clusters
      lastTransitionTime: "2026-05-01T10:00:00Z"
      observedGeneration: 3
  aggregatedStatuses:
    - apiVersion: apps/v1
      kind: Deployment
      namespace: qux
      name: my-nginx
      feedStatusSummary:
        available: true
        replicaStatus:
          observedGeneration: 2
          replicas: 6
          updatedReplicas: 6
          readyReplicas: 5
          availableReplicas: 5
          unavailableReplicas: 1
      feedStatusDetails:
        - clusterId: dc91021d-2361-4f6d-a404-7c33b9e01118
          clusterName: child1
          available: true
          replicaStatus:
            observedGeneration: 2
            replicas: 2
            readyReplicas: 2
        - clusterId: 5f9da921-a437-4d0f-8a1b-0f5c4e1b2c3d
          clusterName: child2
          available: false
          replicaStatus: {}
"#;

// examples/dynamic-dividing-scheduling/subscription.yaml plus subgroup scheduling.
const SUB_DYNAMIC_SUBGROUP: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Subscription
metadata:
  name: dynamic-dividing-scheduling-demo
  namespace: default
spec:
  schedulingBySubGroup: true
  schedulingStrategy: Dividing
  dividingScheduling:
    type: Dynamic
    dynamicDividing:
      strategy: Spread
      minClusters: 1
      maxClusters: 3
      preferredClusters:
        - weight: 20
          preference:
            matchExpressions:
              - key: clusters.clusternet.io/cluster-name
                operator: In
                values: [child1]
  subscribers:
    - clusterAffinity:
        matchLabels:
          region: east
      subGroupStrategy:
        minClusters: 1
    - clusterAffinity:
        matchLabels:
          region: west
      subGroupStrategy:
        minClusters: 2
  feeds:
    - apiVersion: apps/v1
      kind: Deployment
      name: my-nginx
      namespace: qux
"#;

// examples/replication/localization.yaml (JSONPatch and MergePatch overrides).
const LOCALIZATION: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Localization
metadata:
  name: nginx-local-overrides-demo
  namespace: clusternet-5l82l
spec:
  overridePolicy: ApplyLater
  priority: 300
  feed:
    apiVersion: apps/v1
    kind: Deployment
    name: my-nginx
    namespace: foo
  overrides:
    - name: add-update-labels
      type: MergePatch
      value: '{"metadata":{"labels":{"deployed-in-cluster":"clusternet-5l82l"}}}'
    - name: scale-and-update-image
      type: MergePatch
      value: |
        spec:
          replicas: 1
          template:
            spec:
              containers:
                - image: nginx:1.14.0-alpine
                  name: nginx
    - name: add-annotations
      type: JSONPatch
      value: '[{"path":"/metadata/annotations","value":{"foo":"bar"},"op":"add"}]'
"#;

// examples/fieldpatch/globalization.yaml (FieldMergePatch) plus clusterAffinity and a Helm
// chart override.
const GLOBALIZATION: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Globalization
metadata:
  name: fieldpatch-configmap-demo
spec:
  overridePolicy: ApplyNow
  priority: 100
  clusterAffinity:
    matchLabels:
      clusters.clusternet.io/cluster-id: dc91021d-2361-4f6d-a404-7c33b9e01118
  feed:
    apiVersion: v1
    kind: ConfigMap
    name: nginx-config
    namespace: qux
  overrides:
    - name: update-nginx-conf
      type: FieldMergePatch
      fieldPath: /data/config.yaml
      fieldFormat: YAML
      value: |
        server:
          port: 8080
    - name: patch-json-field
      type: FieldJSONPatch
      fieldPath: /data/settings.json
      fieldFormat: JSON
      value: '[{"op":"replace","path":"/debug","value":true}]'
    - name: chart-version
      type: Helm
      overrideChart: true
      value: '{"spec":{"version":"1.2.3"}}'
"#;

const DESCRIPTION_GENERIC: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Description
metadata:
  name: default.app-demo
  namespace: clusternet-5l82l
  generation: 2
  labels:
    clusters.clusternet.io/cluster-id: dc91021d-2361-4f6d-a404-7c33b9e01118
    clusters.clusternet.io/cluster-name: child1
    apps.clusternet.io/subs.name: app-demo
    apps.clusternet.io/subs.namespace: default
  finalizers:
    - apps.clusternet.io/finalizer
spec:
  deployer: Generic
  raw:
    - '{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"foo"}}'
    - '{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"labels":{"app":"nginx"},"name":"my-nginx","namespace":"foo"},"spec":{"replicas":2,"selector":{"matchLabels":{"app":"nginx"}},"template":{"metadata":{"labels":{"app":"nginx"}},"spec":{"containers":[{"image":"nginx:1.25","name":"nginx"}]}}}}'
status:
  phase: Success
  observedGeneration: 2
  conditions:
    - type: Applied
      status: "True"
      reason: Applied
      message: ""
      lastTransitionTime: "2026-05-01T10:00:00Z"
  manifestStatuses:
    - apiVersion: apps/v1
      kind: Deployment
      namespace: foo
      name: my-nginx
      observedStatus:
        observedGeneration: 1
        replicas: 2
        readyReplicas: 2
        conditions:
          - type: Available
            status: "True"
"#;

const DESCRIPTION_HELM: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Description
metadata:
  name: default.helm-demo
  namespace: clusternet-5l82l
spec:
  deployer: Helm
  charts:
    - name: mysql
      namespace: default
  raw:
    - '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"values"}}'
  chartRaw:
    - '{"apiVersion":"apps.clusternet.io/v1alpha1","kind":"HelmChart","metadata":{"name":"mysql","namespace":"default"},"spec":{"chart":"mysql","repo":"https://charts.bitnami.com/bitnami","targetNamespace":"abc","version":"8.6.2"}}'
status:
  phase: Failure
  reason: 'helm install failed: timed out'
"#;

const MANIFEST: &str = r#"
apiVersion: apps.clusternet.io/v1alpha1
kind: Manifest
metadata:
  name: deployments.qux.my-nginx
  namespace: clusternet-reserved
  labels:
    apps.clusternet.io/config.group: apps
    apps.clusternet.io/config.version: v1
    apps.clusternet.io/config.kind: Deployment
    apps.clusternet.io/config.name: my-nginx
    apps.clusternet.io/config.namespace: qux
template:
  apiVersion: apps/v1
  kind: Deployment
  metadata:
    name: my-nginx
    namespace: qux
  spec:
    replicas: 6
"#;

const MANAGED_CLUSTER: &str = r#"
apiVersion: clusters.clusternet.io/v1beta1
kind: ManagedCluster
metadata:
  name: child1
  namespace: clusternet-5l82l
  labels:
    clusternet.io/created-by: clusternet-agent
    clusters.clusternet.io/cluster-id: dc91021d-2361-4f6d-a404-7c33b9e01118
    clusters.clusternet.io/cluster-name: child1
spec:
  clusterId: dc91021d-2361-4f6d-a404-7c33b9e01118
  clusterType: EdgeCluster
  syncMode: Dual
  taints:
    - key: clusters.clusternet.io/unschedulable
      value: ManagedClusterNotReady
      effect: NoSchedule
status:
  lastObservedTime: "2026-05-01T10:00:00Z"
  k8sVersion: v1.33.1
  agentVersion: v0.18.0
  platform: linux/amd64
  apiserverURL: https://10.0.0.1:6443
  healthz: true
  livez: true
  readyz: false
  appPusher: true
  useSocket: true
  kubeQPS: 5.5
  kubeBurst: 10
  allocatable:
    cpu: "7800m"
    memory: 30Gi
  capacity:
    cpu: "8"
    memory: 32Gi
    nvidia.com/gpu: "1"
  clusterCIDR: 10.244.0.0/16
  serviceCIDR: 10.96.0.0/12
  nodeStatistics:
    readyNodes: 3
    notReadyNodes: 1
  podStatistics:
    runningPods: 12
    totalPods: 14
  resourceUsage:
    cpuUsage: 1200m
    memoryUsage: 4Gi
  heartbeatFrequencySeconds: 180
  predictorEnabled: true
  predictorAddress: http://10.0.0.2:8080
  predictorDirectAccess: false
  conditions:
    - type: Ready
      status: "True"
      reason: ManagedClusterReady
      message: managed cluster is ready
      lastTransitionTime: "2026-05-01T09:00:00Z"
"#;

const CRR: &str = r#"
apiVersion: clusters.clusternet.io/v1beta1
kind: ClusterRegistrationRequest
metadata:
  name: clusternet-dc91021d-2361-4f6d-a404-7c33b9e01118
  labels:
    clusters.clusternet.io/registered-by: clusternet-agent
    clusters.clusternet.io/cluster-id: dc91021d-2361-4f6d-a404-7c33b9e01118
    clusters.clusternet.io/cluster-name: child1
spec:
  clusterId: dc91021d-2361-4f6d-a404-7c33b9e01118
  clusterType: StandardCluster
  clusterName: child1
  clusterNamespace: clusternet-child1
  clusterLabels:
    region: east
  syncMode: Pull
status:
  dedicatedNamespace: clusternet-child1
  token: ZXlKaGJHY2lPaUpTVXpJMU5pSjk=
  caCertificate: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t
  result: Approved
  managedClusterName: child1
"#;

#[test]
fn subscription_replication_round_trips() {
    let sub: Subscription = round_trip(SUB_REPLICATION);
    assert_eq!(
        sub.spec.scheduling_strategy,
        SchedulingStrategy::Replication
    );
    assert_eq!(sub.spec.feeds.len(), 3);
    assert_eq!(sub.spec.feeds[2].key(), "apps/v1/Deployment/foo/my-nginx");
}

#[test]
fn subscription_static_dividing_with_weights_and_status_round_trips() {
    let sub: Subscription = round_trip(SUB_STATIC_DIVIDING);
    assert_eq!(sub.spec.scheduling_strategy, SchedulingStrategy::Dividing);
    let dividing = sub.spec.dividing_scheduling.as_ref().unwrap();
    assert_eq!(dividing.type_, DividingType::Static);
    let weights: Vec<i32> = sub.spec.subscribers.iter().map(|s| s.weight).collect();
    assert_eq!(weights, [1, 2]);
    let status = sub.status.as_ref().unwrap();
    assert_eq!(status.replicas["apps/v1/Deployment/qux/my-nginx"], [2, 4]);
    assert_eq!(status.replicas["v1/Namespace/qux"], Vec::<i32>::new());
    assert_eq!(status.aggregated_statuses[0].feed.name, "my-nginx");
}

#[test]
fn subscription_dynamic_dividing_with_subgroups_round_trips() {
    let sub: Subscription = round_trip(SUB_DYNAMIC_SUBGROUP);
    let dividing = sub.spec.dividing_scheduling.as_ref().unwrap();
    assert_eq!(dividing.type_, DividingType::Dynamic);
    let mins: Vec<i32> = sub
        .spec
        .subscribers
        .iter()
        .map(|s| s.sub_group_strategy.as_ref().unwrap().min_clusters)
        .collect();
    assert_eq!(mins, [1, 2]);
}

#[test]
fn localization_with_json_and_merge_patches_round_trips() {
    let loc: Localization = round_trip(LOCALIZATION);
    let types: Vec<OverrideType> = loc.spec.overrides.iter().map(|o| o.type_).collect();
    assert_eq!(
        types,
        [
            OverrideType::MergePatch,
            OverrideType::MergePatch,
            OverrideType::JSONPatch
        ]
    );
    assert_eq!(loc.spec.override_policy, OverridePolicy::ApplyLater);
    assert_eq!(loc.spec.priority, 300);
}

#[test]
fn globalization_with_cluster_affinity_and_field_patches_round_trips() {
    let glob: Globalization = round_trip(GLOBALIZATION);
    assert!(glob.spec.cluster_affinity.is_some());
    let formats: Vec<Option<FieldFormat>> =
        glob.spec.overrides.iter().map(|o| o.field_format).collect();
    assert_eq!(
        formats,
        [Some(FieldFormat::YAML), Some(FieldFormat::JSON), None]
    );
    assert_eq!(glob.spec.overrides[2].override_chart, Some(true));
}

#[test]
fn description_generic_with_objects_as_json_text_and_status_round_trips() {
    let desc: Description = round_trip(DESCRIPTION_GENERIC);
    assert_eq!(desc.spec.raw[1]["spec"]["replicas"], 2);
    let status = desc.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(DescriptionPhase::Success));
    assert_eq!(
        status.manifest_statuses[0]
            .observed_status
            .as_ref()
            .unwrap()["readyReplicas"],
        2
    );
}

#[test]
fn description_helm_with_charts_round_trips() {
    let desc: Description = round_trip(DESCRIPTION_HELM);
    assert_eq!(desc.spec.charts[0].name, "mysql");
    assert_eq!(desc.spec.chart_raw[0]["spec"]["chart"], "mysql");
}

#[test]
fn manifest_with_top_level_template_round_trips() {
    let m: Manifest = round_trip(MANIFEST);
    assert_eq!(m.template["spec"]["replicas"], 6);
}

#[test]
fn managed_cluster_with_full_status_round_trips() {
    let mcls: ManagedCluster = round_trip(MANAGED_CLUSTER);
    assert_eq!(mcls.spec.sync_mode, SyncMode::Dual);
    let status = mcls.status.as_ref().unwrap();
    assert_eq!(
        status.apiserver_url.as_deref(),
        Some("https://10.0.0.1:6443")
    );
    assert_eq!(status.capacity["cpu"].0, "8");
    assert_eq!(
        status.node_statistics.as_ref().unwrap().ready_nodes,
        Some(3)
    );
    assert!(atoll_crds::conditions::is_true(&status.conditions, "Ready"));
}

#[test]
fn cluster_registration_request_round_trips() {
    let crr: ClusterRegistrationRequest = round_trip(CRR);
    assert_eq!(
        crr.metadata.name.as_deref(),
        Some(atoll_crds::known::cluster_registration_request_name(&crr.spec.cluster_id).as_str())
    );
    let status = crr.status.as_ref().unwrap();
    assert_eq!(status.result, Some(ApprovedResult::Approved));
    assert!(!status.token.as_ref().unwrap().0.is_empty());
}

#[test]
fn omitted_fields_take_clusternet_defaults() {
    let sub: Subscription = serde_yaml::from_str(
        "apiVersion: apps.clusternet.io/v1alpha1\nkind: Subscription\nmetadata: {name: s}\nspec:\n  dividingScheduling: {dynamicDividing: {}}\n",
    )
    .unwrap();
    assert_eq!(
        sub.spec.scheduling_strategy,
        SchedulingStrategy::Replication
    );
    let dividing = sub.spec.dividing_scheduling.unwrap();
    assert_eq!(dividing.type_, DividingType::Static);
    assert_eq!(
        dividing.dynamic_dividing.unwrap().strategy,
        atoll_crds::apps::DynamicDividingStrategy::Spread
    );

    let loc: Localization = serde_yaml::from_str(
        "apiVersion: apps.clusternet.io/v1alpha1\nkind: Localization\nmetadata: {name: l}\nspec:\n  feed: {apiVersion: v1, kind: ConfigMap, name: c}\n",
    )
    .unwrap();
    assert_eq!(loc.spec.priority, 500);
    assert_eq!(loc.spec.override_policy, OverridePolicy::ApplyLater);

    let crr: ClusterRegistrationRequest = serde_yaml::from_str(
        "apiVersion: clusters.clusternet.io/v1beta1\nkind: ClusterRegistrationRequest\nmetadata: {name: c}\nspec: {clusterId: dc91021d-2361-4f6d-a404-7c33b9e01118}\n",
    )
    .unwrap();
    assert_eq!(crr.spec.sync_mode, SyncMode::Pull);
}

#[test]
fn none_and_empty_fields_are_never_serialized_as_null_or_empty() {
    let sub = Subscription::new("s", Default::default());
    let v = serde_json::to_value(&sub).unwrap();
    let spec = v["spec"].as_object().unwrap();
    let keys: Vec<&str> = spec.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["schedulingStrategy"],
        "only the defaulted enum is written"
    );
    assert!(v.get("status").is_none());
    let text = serde_json::to_string(&v).unwrap();
    assert!(!text.contains("null"), "{text}");
}

#[test]
fn round_trip_check_fails_when_a_field_is_lost() {
    // A field the types do not know is dropped on deserialization; the helper must notice.
    let yaml = SUB_REPLICATION.replace(
        "  schedulingStrategy: Replication\n",
        "  schedulingStrategy: Replication\n  notAClusternetField: 1\n",
    );
    let result = std::panic::catch_unwind(|| round_trip::<Subscription>(&yaml));
    assert!(
        result.is_err(),
        "an unknown field must make the round trip fail"
    );
}
