//! The generated CRDs are structural, documented, and carry Clusternet's names, enums, defaults
//! and printer columns; the committed YAML is what the types generate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use atoll_crds::crdgen;
use serde_json::Value;

/// Every CRD as JSON, by plural.
fn crd(plural: &str) -> Value {
    let found = crdgen::crds()
        .into_iter()
        .find(|c| c.spec.names.plural == plural)
        .unwrap_or_else(|| panic!("no CRD with plural {plural}"));
    serde_json::to_value(found).unwrap()
}

fn root_schema(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

/// Walks `path` (dot-separated property names; `[]` after a name steps into array items).
fn at<'a>(schema: &'a Value, path: &str) -> &'a Value {
    let mut cur = schema;
    for part in path.split('.') {
        let (name, items) = match part.strip_suffix("[]") {
            Some(n) => (n, true),
            None => (part, false),
        };
        cur = &cur["properties"][name];
        assert!(!cur.is_null(), "no property {part} in {path}");
        if items {
            cur = &cur["items"];
        }
    }
    cur
}

/// Calls `f(path, schema)` for every schema node below `schema` that describes a field.
fn walk<'a>(path: &str, schema: &'a Value, f: &mut dyn FnMut(&str, &'a Value)) {
    f(path, schema);
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            walk(&format!("{path}.{name}"), sub, f);
        }
    }
    if let Some(items) = schema.get("items") {
        walk(&format!("{path}[]"), items, f);
    }
    if let Some(ap) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        walk(&format!("{path}{{}}"), ap, f);
    }
}

/// plural, group, kind, short names, scope, has a status subresource.
type NamesCase = (
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static str,
    bool,
);

/// A printer column: name, type, jsonPath, priority.
type Column = (&'static str, &'static str, &'static str, i64);

const PLURALS: [&str; 10] = [
    "subscriptions",
    "localizations",
    "globalizations",
    "descriptions",
    "manifests",
    "helmcharts",
    "helmreleases",
    "managedclusters",
    "clusterregistrationrequests",
    "feedgrants",
];

#[test]
fn every_schema_node_is_structural() {
    for plural in PLURALS {
        let crd = crd(plural);
        let mut problems = Vec::new();
        walk(plural, root_schema(&crd), &mut |path, node| {
            let typed = node.get("type").and_then(Value::as_str).is_some()
                || node.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
                || node.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
            if !typed {
                problems.push(format!("{path}: no type"));
            }
            for banned in [
                "$ref",
                "anyOf",
                "oneOf",
                "allOf",
                "not",
                "nullable",
                "definitions",
                "$defs",
            ] {
                if node.get(banned).is_some() {
                    problems.push(format!("{path}: has {banned}"));
                }
            }
            if node.get("type").and_then(Value::as_str) == Some("array")
                && node.get("items").is_none()
            {
                problems.push(format!("{path}: array without items"));
            }
            if let Some(format) = node.get("format").and_then(Value::as_str) {
                let standard = ["int32", "int64", "double", "float", "date-time", "byte"];
                if !standard.contains(&format) {
                    problems.push(format!("{path}: non-standard format {format}"));
                }
            }
        });
        assert!(problems.is_empty(), "{plural}: {problems:#?}");
    }
}

#[test]
fn every_field_has_a_description() {
    for plural in PLURALS {
        let crd = crd(plural);
        let mut missing = Vec::new();
        walk(plural, root_schema(&crd), &mut |path, node| {
            // Array items and map values are not fields; everything else is `kubectl explain`ed.
            if path.ends_with("[]") || path.ends_with('}') {
                return;
            }
            let described = node
                .get("description")
                .and_then(Value::as_str)
                .is_some_and(|d| !d.trim().is_empty());
            if !described {
                missing.push(path.to_string());
            }
        });
        assert!(
            missing.is_empty(),
            "{plural}: fields without description: {missing:#?}"
        );
    }
}

#[test]
fn enums_are_string_enums_with_clusternet_values() {
    let cases: [(&str, &str, &[&str]); 16] = [
        ("helmcharts", "status.phase", &["Found", "NotFound"]),
        (
            "subscriptions",
            "spec.schedulingStrategy",
            &["Replication", "Dividing"],
        ),
        (
            "subscriptions",
            "spec.dividingScheduling.type",
            &["Static", "Dynamic"],
        ),
        (
            "subscriptions",
            "spec.dividingScheduling.dynamicDividing.strategy",
            &["Spread", "Binpack"],
        ),
        (
            "subscriptions",
            "spec.preemptionPolicy",
            &["PreemptLowerPriority", "PreemptNever"],
        ),
        (
            "localizations",
            "spec.overridePolicy",
            &["ApplyNow", "ApplyLater"],
        ),
        (
            "localizations",
            "spec.overrides[].type",
            &[
                "Helm",
                "JSONPatch",
                "MergePatch",
                "FieldJSONPatch",
                "FieldMergePatch",
            ],
        ),
        (
            "localizations",
            "spec.overrides[].fieldFormat",
            &["YAML", "JSON"],
        ),
        (
            "globalizations",
            "spec.overridePolicy",
            &["ApplyNow", "ApplyLater"],
        ),
        (
            "globalizations",
            "spec.overrides[].type",
            &[
                "Helm",
                "JSONPatch",
                "MergePatch",
                "FieldJSONPatch",
                "FieldMergePatch",
            ],
        ),
        (
            "globalizations",
            "spec.overrides[].fieldFormat",
            &["YAML", "JSON"],
        ),
        ("descriptions", "spec.deployer", &["Helm", "Generic"]),
        (
            "descriptions",
            "status.phase",
            &[
                "Pending",
                "Success",
                "Failure",
                "Installing",
                "Upgrading",
                "Uninstalling",
                "Superseded",
                "Unknown",
            ],
        ),
        (
            "managedclusters",
            "spec.syncMode",
            &["Push", "Pull", "Dual"],
        ),
        (
            "clusterregistrationrequests",
            "spec.syncMode",
            &["Push", "Pull", "Dual"],
        ),
        (
            "clusterregistrationrequests",
            "status.result",
            &["Approved", "Denied", "Failed"],
        ),
    ];
    for (plural, path, want) in cases {
        let crd = crd(plural);
        let node = at(root_schema(&crd), path);
        let values: Vec<&str> = node
            .get("enum")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(values, want, "{plural} {path}");
        assert_eq!(node["type"], "string", "{plural} {path}");
    }
}

#[test]
fn defaults_match_clusternet() {
    let cases = [
        ("helmcharts", "spec.createNamespace", Value::from(true)),
        ("helmcharts", "spec.timeoutSeconds", Value::from(300)),
        ("helmreleases", "spec.createNamespace", Value::from(true)),
        ("helmreleases", "spec.timeoutSeconds", Value::from(300)),
        (
            "subscriptions",
            "spec.schedulingStrategy",
            Value::from("Replication"),
        ),
        (
            "subscriptions",
            "spec.schedulerName",
            Value::from("default"),
        ),
        (
            "subscriptions",
            "spec.dividingScheduling.type",
            Value::from("Static"),
        ),
        (
            "subscriptions",
            "spec.dividingScheduling.dynamicDividing.strategy",
            Value::from("Spread"),
        ),
        (
            "subscriptions",
            "spec.preemptionPolicy",
            Value::from("PreemptLowerPriority"),
        ),
        ("subscriptions", "spec.subscribers[].weight", Value::from(0)),
        ("localizations", "spec.priority", Value::from(500)),
        (
            "localizations",
            "spec.overridePolicy",
            Value::from("ApplyLater"),
        ),
        ("globalizations", "spec.priority", Value::from(500)),
        (
            "globalizations",
            "spec.overridePolicy",
            Value::from("ApplyLater"),
        ),
        (
            "clusterregistrationrequests",
            "spec.syncMode",
            Value::from("Pull"),
        ),
    ];
    for (plural, path, want) in cases {
        let crd = crd(plural);
        assert_eq!(
            at(root_schema(&crd), path)["default"],
            want,
            "{plural} {path}"
        );
    }
}

#[test]
fn status_fields_have_no_invented_defaults() {
    for plural in PLURALS {
        let crd = crd(plural);
        if let Some(status) = root_schema(&crd)["properties"].get("status") {
            walk(&format!("{plural}.status"), status, &mut |path, node| {
                assert!(node.get("default").is_none(), "{path} has a default");
            });
        }
    }
}

#[test]
fn validation_bounds_and_required_fields_match_clusternet() {
    let bounds = [
        ("localizations", "spec.priority", Some(0), Some(1000)),
        ("globalizations", "spec.priority", Some(0), Some(1000)),
        ("subscriptions", "spec.subscribers[].weight", Some(0), None),
        (
            "subscriptions",
            "spec.subscribers[].subGroupStrategy.minClusters",
            Some(0),
            None,
        ),
    ];
    for (plural, path, min, max) in bounds {
        let crd = crd(plural);
        let node = at(root_schema(&crd), path);
        // The typed CRD holds bounds as f64; the YAML writes them as integers.
        let bound = |key: &str| node.get(key).and_then(Value::as_f64).map(|f| f as i64);
        assert_eq!(bound("minimum"), min, "{plural} {path}");
        assert_eq!(bound("maximum"), max, "{plural} {path}");
    }
    let required: [(&str, &str, &[&str]); 6] = [
        ("subscriptions", "spec", &["feeds", "subscribers"]),
        ("localizations", "spec", &["feed"]),
        ("descriptions", "spec", &["deployer"]),
        ("managedclusters", "spec", &["clusterId", "syncMode"]),
        ("clusterregistrationrequests", "spec", &["clusterId"]),
        (
            "subscriptions",
            "spec.feeds[]",
            &["apiVersion", "kind", "name"],
        ),
    ];
    for (plural, path, want) in required {
        let crd = crd(plural);
        let mut got: Vec<&str> = at(root_schema(&crd), path)["required"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        got.sort_unstable();
        assert_eq!(got, want, "{plural} {path}");
    }
    let crd = crd("manifests");
    assert_eq!(
        root_schema(&crd)["required"],
        serde_json::json!(["template"])
    );
}

#[test]
fn names_scope_and_subresources_match_clusternet() {
    // plural, group, kind, short names, scope, has status subresource
    let cases: [NamesCase; 7] = [
        (
            "subscriptions",
            "apps.clusternet.io",
            "Subscription",
            &["sub", "subs"],
            "Namespaced",
            true,
        ),
        (
            "localizations",
            "apps.clusternet.io",
            "Localization",
            &["loc", "local"],
            "Namespaced",
            false,
        ),
        (
            "globalizations",
            "apps.clusternet.io",
            "Globalization",
            &["glob", "global"],
            "Cluster",
            false,
        ),
        (
            "descriptions",
            "apps.clusternet.io",
            "Description",
            &["desc"],
            "Namespaced",
            true,
        ),
        (
            "manifests",
            "apps.clusternet.io",
            "Manifest",
            &[],
            "Namespaced",
            false,
        ),
        (
            "managedclusters",
            "clusters.clusternet.io",
            "ManagedCluster",
            &["mcls"],
            "Namespaced",
            true,
        ),
        (
            "clusterregistrationrequests",
            "clusters.clusternet.io",
            "ClusterRegistrationRequest",
            &["clsrr"],
            "Cluster",
            true,
        ),
    ];
    for (plural, group, kind, short, scope, status) in cases {
        let crd = crd(plural);
        assert_eq!(crd["metadata"]["name"], format!("{plural}.{group}"));
        assert_eq!(crd["spec"]["group"], group);
        assert_eq!(crd["spec"]["names"]["kind"], kind);
        let shorts: Vec<&str> = crd["spec"]["names"]["shortNames"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert_eq!(shorts, short, "{plural}");
        assert_eq!(
            crd["spec"]["names"]["categories"],
            serde_json::json!(["clusternet"]),
            "{plural}"
        );
        assert_eq!(crd["spec"]["scope"], scope, "{plural}");
        let version = &crd["spec"]["versions"][0];
        let want_version = if group.starts_with("apps") {
            "v1alpha1"
        } else {
            "v1beta1"
        };
        assert_eq!(version["name"], want_version);
        assert_eq!(version["served"], true);
        assert_eq!(version["storage"], true);
        assert_eq!(
            version["subresources"].get("status").is_some(),
            status,
            "{plural}"
        );
    }
}

#[test]
fn printer_columns_answer_the_first_question() {
    // plural -> [(name, type, jsonPath, priority)]
    let cases: [(&str, &[Column]); 7] = [
        (
            "subscriptions",
            &[
                ("STRATEGY", "string", ".spec.schedulingStrategy", 0),
                ("CLUSTERS", "integer", ".status.desiredReleases", 0),
                ("READY", "integer", ".status.completedReleases", 0),
                ("AGE", "date", ".metadata.creationTimestamp", 0),
            ],
        ),
        (
            "managedclusters",
            &[
                ("CLUSTER ID", "string", ".spec.clusterId", 0),
                ("CLUSTER TYPE", "string", ".spec.clusterType", 1),
                ("SYNC MODE", "string", ".spec.syncMode", 0),
                ("KUBERNETES", "string", ".status.k8sVersion", 0),
                (
                    "READY",
                    "string",
                    ".status.conditions[?(@.type==\"Ready\")].status",
                    0,
                ),
                ("NODES", "integer", ".status.nodeStatistics.readyNodes", 0),
                ("LAST HEARTBEAT", "date", ".status.lastObservedTime", 0),
                ("AGE", "date", ".metadata.creationTimestamp", 0),
                ("AGENT VERSION", "string", ".status.agentVersion", 1),
            ],
        ),
        (
            "descriptions",
            &[
                (
                    "CLUSTER",
                    "string",
                    ".metadata.labels['clusters\\.clusternet\\.io/cluster-name']",
                    0,
                ),
                ("DEPLOYER", "string", ".spec.deployer", 0),
                ("STATUS", "string", ".status.phase", 0),
                ("AGE", "date", ".metadata.creationTimestamp", 0),
            ],
        ),
        (
            "clusterregistrationrequests",
            &[
                ("CLUSTER ID", "string", ".spec.clusterId", 0),
                ("STATUS", "string", ".status.result", 0),
                ("AGE", "date", ".metadata.creationTimestamp", 0),
            ],
        ),
        (
            "localizations",
            &[("AGE", "date", ".metadata.creationTimestamp", 0)],
        ),
        (
            "globalizations",
            &[("AGE", "date", ".metadata.creationTimestamp", 0)],
        ),
        (
            "manifests",
            &[("AGE", "date", ".metadata.creationTimestamp", 0)],
        ),
    ];
    for (plural, want) in cases {
        let crd = crd(plural);
        let got: Vec<(String, String, String, i64)> =
            crd["spec"]["versions"][0]["additionalPrinterColumns"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap().to_string(),
                        c["type"].as_str().unwrap().to_string(),
                        c["jsonPath"].as_str().unwrap().to_string(),
                        c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    )
                })
                .collect();
        let want: Vec<(String, String, String, i64)> = want
            .iter()
            .map(|(n, t, p, pr)| (n.to_string(), t.to_string(), p.to_string(), *pr))
            .collect();
        assert_eq!(got, want, "{plural}");
    }
}

#[test]
fn description_objects_are_untyped_items_holding_json_text_not_base64_or_trees() {
    // One string per object: the API server decodes, validates and encodes a string, not the
    // object's tree, on every write of the Description, its status included. Untyped, so that
    // objects stored in the earlier form read back whole instead of pruned to `{}`.
    let crd = crd("descriptions");
    for path in ["spec.raw[]", "spec.chartRaw[]", "spec.chartValues[]"] {
        let items = at(root_schema(&crd), path);
        assert!(items.get("type").is_none(), "{path}");
        assert_eq!(
            items["x-kubernetes-preserve-unknown-fields"], true,
            "{path}"
        );
        assert!(items.get("format").is_none(), "{path}");
    }
    let observed = at(
        root_schema(&crd),
        "status.manifestStatuses[].observedStatus",
    );
    assert_eq!(observed["x-kubernetes-preserve-unknown-fields"], true);
}

#[test]
fn committed_yaml_matches_the_types() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crds");
    if let Err(e) = crdgen::check(&dir) {
        panic!("{e}");
    }
}

#[test]
fn check_names_each_drifted_missing_and_stale_file() {
    let dir = tempfile::tempdir().unwrap();
    let written = crdgen::write(dir.path()).unwrap();
    assert_eq!(written.len(), PLURALS.len() + 1);
    crdgen::check(dir.path()).unwrap();

    let changed = dir.path().join("apps.clusternet.io_subscriptions.yaml");
    let text = std::fs::read_to_string(&changed).unwrap();
    std::fs::write(&changed, text.replace("- subs\n", "")).unwrap();
    std::fs::remove_file(
        dir.path()
            .join("clusters.clusternet.io_managedclusters.yaml"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("apps.clusternet.io_bases.yaml"),
        "kind: Old\n",
    )
    .unwrap();

    let err = crdgen::check(dir.path()).unwrap_err();
    let atoll_crds::Error::CheckDrift { files } = &err else {
        panic!("unexpected error {err}");
    };
    assert_eq!(
        files,
        &[
            "apps.clusternet.io_subscriptions.yaml (differs)".to_string(),
            "clusters.clusternet.io_managedclusters.yaml (missing)".to_string(),
            "apps.clusternet.io_bases.yaml (not generated)".to_string(),
        ]
    );
    assert!(err.to_string().contains("make crds"), "{err}");
}

#[test]
fn kustomization_lists_every_crd_file() {
    let files = crdgen::render().unwrap();
    let kustomization: Value = serde_yaml::from_str(&files[crdgen::KUSTOMIZATION]).unwrap();
    let mut listed: Vec<&str> = kustomization["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    listed.sort_unstable();
    let mut crd_files: Vec<&str> = files
        .keys()
        .map(String::as_str)
        .filter(|f| *f != crdgen::KUSTOMIZATION)
        .collect();
    crd_files.sort_unstable();
    assert_eq!(listed, crd_files);
    for plural in PLURALS {
        assert!(
            crd_files
                .iter()
                .any(|f| f.ends_with(&format!("_{plural}.yaml"))),
            "{plural}"
        );
    }
}
