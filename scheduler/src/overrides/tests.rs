//! Unit tests of rendering.

use super::*;
use atoll_crds::apps::{FieldFormat, GlobalizationSpec, LocalizationSpec, OverrideType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::json;

fn config(type_: OverrideType, value: &str) -> OverrideConfig {
    OverrideConfig {
        name: Some("o".to_owned()),
        value: value.to_owned(),
        type_,
        override_chart: None,
        field_path: None,
        field_format: None,
    }
}

fn field(
    type_: OverrideType,
    path: &str,
    format: Option<FieldFormat>,
    value: &str,
) -> OverrideConfig {
    OverrideConfig {
        field_path: Some(path.to_owned()),
        field_format: format,
        ..config(type_, value)
    }
}

fn set(
    kind: OverrideKind,
    name: &str,
    priority: i32,
    created_secs: Option<i64>,
    overrides: Vec<OverrideConfig>,
) -> OverrideSet {
    OverrideSet {
        kind,
        namespace: match kind {
            OverrideKind::Localization => Some("clusternet-abcde".to_owned()),
            OverrideKind::Globalization => None,
        },
        name: name.to_owned(),
        priority,
        created: created_secs.map(|s| {
            Time(
                k8s_openapi::jiff::Timestamp::from_second(s)
                    .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            )
        }),
        overrides,
    }
}

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "web", "namespace": "default",
            "uid": "u", "resourceVersion": "7", "generation": 3,
            "creationTimestamp": "2024-01-01T00:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "selfLink": "/x", "ownerReferences": [{"name": "o"}],
            "labels": {"app": "web"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}
        },
        "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}},
        "status": {"readyReplicas": 3}
    })
}

fn render_one(doc: &Value, c: OverrideConfig) -> Result<Value, Error> {
    render(
        doc,
        &[set(OverrideKind::Localization, "loc", 500, None, vec![c])],
        None,
    )
}

#[test]
fn replica_path_knows_the_divisible_kinds() {
    let cases = [
        ("apps/v1", "Deployment", Some("/spec/replicas")),
        ("apps/v1", "StatefulSet", Some("/spec/replicas")),
        ("apps/v1", "ReplicaSet", Some("/spec/replicas")),
        ("apps/v1", "DaemonSet", None),
        ("v1", "ConfigMap", None),
        ("batch/v1", "Job", None),
        ("extensions/v1beta1", "Deployment", None),
    ];
    for (api_version, kind, want) in cases {
        assert_eq!(
            replica_path(api_version, kind),
            want,
            "{api_version} {kind}"
        );
    }
}

#[test]
fn overrides_are_ordered_globalizations_first_then_priority_time_name() {
    let g = |name: &str, priority: i32, secs: i64| {
        set(
            OverrideKind::Globalization,
            name,
            priority,
            Some(secs),
            vec![],
        )
    };
    let l = |name: &str, priority: i32, secs: i64| {
        set(
            OverrideKind::Localization,
            name,
            priority,
            Some(secs),
            vec![],
        )
    };
    let mut sets = [
        l("loc-low", 0, 10),
        g("glob-high", 1000, 1),
        l("loc-b", 500, 5),
        g("glob-old", 500, 1),
        l("loc-a", 500, 5),
        g("glob-new", 500, 9),
        g("glob-low", 1, 99),
    ];
    sets.sort_by(OverrideSet::order_key);
    let names: Vec<&str> = sets.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        vec![
            "glob-low",
            "glob-old",
            "glob-new",
            "glob-high",
            "loc-low",
            "loc-a",
            "loc-b"
        ]
    );
}

#[test]
fn order_overrides_reads_globalization_and_localization_objects() {
    let mut g = Globalization::new(
        "g",
        GlobalizationSpec {
            priority: 1,
            overrides: vec![config(OverrideType::MergePatch, "{}")],
            ..Default::default()
        },
    );
    g.metadata.creation_timestamp = None;
    let mut l = Localization::new(
        "l",
        LocalizationSpec {
            priority: 0,
            ..Default::default()
        },
    );
    l.metadata.namespace = Some("clusternet-abcde".to_owned());
    let sets = order_overrides([&g], [&l]);
    assert_eq!(sets.len(), 2);
    assert_eq!(
        sets[0].describe(),
        "Globalization g",
        "globalization first despite priority"
    );
    assert_eq!(sets[1].describe(), "Localization clusternet-abcde/l");
    assert_eq!(sets[0].origin(0), "Globalization g override \"o\" (#0)");
}

#[test]
fn later_overrides_win() {
    let sets = vec![
        set(
            OverrideKind::Globalization,
            "g",
            500,
            None,
            vec![config(
                OverrideType::MergePatch,
                "{spec: {replicas: 5}, metadata: {labels: {from: glob}}}",
            )],
        ),
        set(
            OverrideKind::Localization,
            "l",
            0,
            None,
            vec![
                config(
                    OverrideType::MergePatch,
                    r#"{"metadata": {"labels": {"from": "loc"}}}"#,
                ),
                config(
                    OverrideType::JSONPatch,
                    r#"[{"op": "replace", "path": "/spec/replicas", "value": 7}]"#,
                ),
            ],
        ),
    ];
    let out = render(&deployment(), &sets, None).unwrap();
    assert_eq!(out["metadata"]["labels"]["from"], "loc");
    assert_eq!(out["spec"]["replicas"], 7);
}

#[test]
fn select_overrides_filters_by_feed_namespace_and_affinity() {
    let feed = Feed {
        api_version: "apps/v1".to_owned(),
        kind: "Deployment".to_owned(),
        namespace: Some("default".to_owned()),
        name: "web".to_owned(),
    };
    let other_feed = Feed {
        name: "api".to_owned(),
        ..feed.clone()
    };
    let glob = |name: &str, feed: &Feed, affinity: Option<(&str, &str)>| {
        Globalization::new(
            name,
            GlobalizationSpec {
                feed: feed.clone(),
                cluster_affinity: affinity.map(|(k, v)| LabelSelector {
                    match_labels: Some([(k.to_owned(), v.to_owned())].into()),
                    match_expressions: None,
                }),
                ..Default::default()
            },
        )
    };
    let loc = |name: &str, ns: &str, feed: &Feed| {
        let mut l = Localization::new(
            name,
            LocalizationSpec {
                feed: feed.clone(),
                ..Default::default()
            },
        );
        l.metadata.namespace = Some(ns.to_owned());
        l
    };
    let globs = vec![
        glob("all", &feed, None),
        glob("prod-only", &feed, Some(("env", "prod"))),
        glob("dev-only", &feed, Some(("env", "dev"))),
        glob("other-feed", &other_feed, None),
    ];
    let mut deleting = loc("deleting", "clusternet-abcde", &feed);
    deleting.metadata.deletion_timestamp = deleting
        .metadata
        .creation_timestamp
        .clone()
        .or(Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH)));
    let locs = vec![
        loc("mine", "clusternet-abcde", &feed),
        loc("other-cluster", "clusternet-zzzzz", &feed),
        loc("other-feed", "clusternet-abcde", &other_feed),
        deleting,
    ];
    let labels: BTreeMap<String, String> = [("env".to_owned(), "prod".to_owned())].into();
    let sets = select_overrides(&feed, "clusternet-abcde", &labels, &globs, &locs).unwrap();
    let names: Vec<String> = sets.iter().map(OverrideSet::describe).collect();
    assert_eq!(
        names,
        vec![
            "Globalization all",
            "Globalization prod-only",
            "Localization clusternet-abcde/mine"
        ]
    );
}

#[test]
fn rendering_strips_server_fields_and_status() {
    let out = render(&deployment(), &[], None).unwrap();
    let meta = out["metadata"].as_object().unwrap();
    for gone in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
        "ownerReferences",
        "annotations",
    ] {
        assert!(!meta.contains_key(gone), "{gone} still present");
    }
    assert_eq!(meta["labels"]["app"], "web");
    assert_eq!(meta["name"], "web");
    assert!(out.get("status").is_none());

    let mut kept = deployment();
    kept["metadata"]["annotations"]["team"] = json!("a");
    let out = render(&kept, &[], None).unwrap();
    assert_eq!(out["metadata"]["annotations"], json!({"team": "a"}));
}

#[test]
fn what_the_parents_controllers_annotate_on_a_feed_changes_nothing_rendered() {
    let before = render(&deployment(), &[], None).unwrap();
    let mut annotated = deployment();
    annotated["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = json!("2");
    annotated["metadata"]["annotations"]["deprecated.daemonset.template.generation"] = json!("1");
    assert_eq!(render(&annotated, &[], None).unwrap(), before);
}

#[test]
fn divided_replicas_are_placed_after_every_override() {
    let sets = vec![set(
        OverrideKind::Localization,
        "l",
        1000,
        None,
        vec![config(
            OverrideType::JSONPatch,
            r#"[{"op": "replace", "path": "/spec/replicas", "value": 99}]"#,
        )],
    )];
    let out = render(&deployment(), &sets, Some(DividedReplicas { replicas: 2 })).unwrap();
    assert_eq!(out["spec"]["replicas"], 2);

    let mut no_spec = deployment();
    if let Some(o) = no_spec.as_object_mut() {
        o.remove("spec");
    }
    let out = render(&no_spec, &[], Some(DividedReplicas { replicas: 4 })).unwrap();
    assert_eq!(out["spec"]["replicas"], 4);

    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
    let err = render(&cm, &[], Some(DividedReplicas { replicas: 1 })).unwrap_err();
    assert_eq!(err.label(), "place_replicas");
    assert!(err.to_string().contains("v1/ConfigMap"), "{err}");
}

#[test]
fn each_override_type_applies_as_documented() {
    let cases: Vec<(&str, OverrideConfig, &str, Value)> = vec![
        (
            "JSONPatch in JSON",
            config(
                OverrideType::JSONPatch,
                r#"[{"op":"add","path":"/metadata/labels/x","value":"1"}]"#,
            ),
            "/metadata/labels/x",
            json!("1"),
        ),
        (
            "JSONPatch in YAML",
            config(
                OverrideType::JSONPatch,
                "- op: replace\n  path: /spec/replicas\n  value: 9\n",
            ),
            "/spec/replicas",
            json!(9),
        ),
        (
            "MergePatch in YAML",
            config(
                OverrideType::MergePatch,
                "spec:\n  template:\n    spec:\n      containers: [{name: c, image: 'nginx:2'}]\n",
            ),
            "/spec/template/spec/containers/0/image",
            json!("nginx:2"),
        ),
        (
            "MergePatch null deletes",
            config(
                OverrideType::MergePatch,
                r#"{"metadata": {"labels": {"app": null}}}"#,
            ),
            "/metadata/labels",
            json!({}),
        ),
        (
            "blank value is skipped",
            config(OverrideType::JSONPatch, "  "),
            "/spec/replicas",
            json!(3),
        ),
    ];
    for (name, c, pointer, want) in cases {
        let out = render_one(&deployment(), c).unwrap();
        assert_eq!(out.pointer(pointer), Some(&want), "{name}");
    }
}

#[test]
fn bad_overrides_fail_naming_the_override_and_what_to_change() {
    let mut chart = config(OverrideType::MergePatch, "{}");
    chart.override_chart = Some(true);
    let cases: Vec<(&str, OverrideConfig, &str, &str)> = vec![
        (
            "missing path",
            config(
                OverrideType::JSONPatch,
                r#"[{"op":"replace","path":"/spec/nope/x","value":1}]"#,
            ),
            "apply_json_patch",
            "/spec/nope/x",
        ),
        (
            "remove missing",
            config(
                OverrideType::JSONPatch,
                r#"[{"op":"remove","path":"/metadata/labels/absent"}]"#,
            ),
            "apply_json_patch",
            "(remove)",
        ),
        (
            "failed test",
            config(
                OverrideType::JSONPatch,
                r#"[{"op":"test","path":"/spec/replicas","value":4}]"#,
            ),
            "apply_json_patch",
            "test operation",
        ),
        (
            "not a patch",
            config(OverrideType::JSONPatch, r#"{"op":"add"}"#),
            "parse_override_value",
            "list of operations",
        ),
        (
            "unknown op",
            config(
                OverrideType::JSONPatch,
                r#"[{"op":"frobnicate","path":"/a"}]"#,
            ),
            "parse_override_value",
            "not a JSON patch",
        ),
        (
            "invalid yaml",
            config(OverrideType::MergePatch, "a: [b"),
            "parse_override_value",
            "not valid YAML or JSON",
        ),
        (
            "scalar merge patch",
            config(OverrideType::MergePatch, "3"),
            "parse_override_value",
            "must be a map",
        ),
        (
            "helm",
            config(OverrideType::Helm, "a: 1"),
            "apply_helm_override",
            "HelmChart feeds",
        ),
        (
            "override chart",
            chart,
            "apply_helm_override",
            "apply to HelmChart feeds only",
        ),
        (
            "field path to a map",
            field(OverrideType::FieldMergePatch, "/spec", None, "{}"),
            "read_field_path",
            "not a string",
        ),
        (
            "field path missing",
            field(OverrideType::FieldMergePatch, "/data/none", None, "{}"),
            "read_field_path",
            "does not exist",
        ),
        (
            "field path absent",
            config(OverrideType::FieldJSONPatch, "[]"),
            "read_field_path",
            "is missing",
        ),
        (
            "field path not a pointer",
            field(OverrideType::FieldJSONPatch, "data.x", None, "[]"),
            "read_field_path",
            "start it with",
        ),
    ];
    for (name, c, label, needle) in cases {
        let err = render_one(&deployment(), c).unwrap_err();
        let msg = err.to_string();
        assert_eq!(err.label(), label, "{name}: {msg}");
        assert!(msg.contains(needle), "{name}: {msg}");
        assert!(
            msg.contains("Localization clusternet-abcde/loc override \"o\" (#0)"),
            "{name}: {msg}"
        );
    }
}

fn configmap(key: &str, text: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {key: text}})
}

#[test]
fn field_patches_edit_embedded_documents_in_their_format() {
    let yaml_doc = "server:\n  port: 80\n  hosts:\n  - a\n";
    let json_doc = "{\"server\": {\"port\": 80, \"hosts\": [\"a\"]}}";
    let cases: Vec<(&str, &str, OverrideConfig, FieldFormat)> = vec![
        (
            "merge into YAML",
            yaml_doc,
            field(
                OverrideType::FieldMergePatch,
                "/data/app.yaml",
                Some(FieldFormat::YAML),
                "server: {port: 8080}",
            ),
            FieldFormat::YAML,
        ),
        (
            "json patch into YAML",
            yaml_doc,
            field(
                OverrideType::FieldJSONPatch,
                "/data/app.yaml",
                Some(FieldFormat::YAML),
                r#"[{"op":"replace","path":"/server/port","value":8080}]"#,
            ),
            FieldFormat::YAML,
        ),
        (
            "merge into JSON",
            json_doc,
            field(
                OverrideType::FieldMergePatch,
                "/data/app.yaml",
                Some(FieldFormat::JSON),
                r#"{"server": {"port": 8080}}"#,
            ),
            FieldFormat::JSON,
        ),
        (
            "detects JSON",
            json_doc,
            field(
                OverrideType::FieldMergePatch,
                "/data/app.yaml",
                None,
                "server: {port: 8080}",
            ),
            FieldFormat::JSON,
        ),
        (
            "detects YAML",
            yaml_doc,
            field(
                OverrideType::FieldJSONPatch,
                "/data/app.yaml",
                None,
                r#"[{"op":"replace","path":"/server/port","value":8080}]"#,
            ),
            FieldFormat::YAML,
        ),
    ];
    for (name, text, c, format) in cases {
        let out = render_one(&configmap("app.yaml", text), c).unwrap();
        let written = out["data"]["app.yaml"].as_str().unwrap();
        let parsed: Value = match format {
            FieldFormat::JSON => serde_json::from_str(written)
                .unwrap_or_else(|e| panic!("{name}: not JSON: {e}\n{written}")),
            FieldFormat::YAML => {
                assert!(
                    serde_json::from_str::<Value>(written).is_err(),
                    "{name}: YAML expected, got JSON\n{written}"
                );
                serde_yaml::from_str(written).unwrap()
            }
        };
        assert_eq!(
            parsed,
            json!({"server": {"port": 8080, "hosts": ["a"]}}),
            "{name}"
        );
    }
}

#[test]
fn field_patch_errors_name_the_format() {
    let cases: Vec<(&str, &str, Option<FieldFormat>)> = vec![
        ("declared JSON but YAML", "a: 1", Some(FieldFormat::JSON)),
        ("broken YAML", "a: [", Some(FieldFormat::YAML)),
        ("detected YAML broken", "a: [", None),
    ];
    for (name, text, format) in cases {
        let err = render_one(
            &configmap("k", text),
            field(OverrideType::FieldMergePatch, "/data/k", format, "{b: 2}"),
        )
        .unwrap_err();
        assert_eq!(err.label(), "parse_field", "{name}: {err}");
        assert!(err.to_string().contains("/data/k"), "{name}: {err}");
    }
    let untouched = render_one(
        &configmap("k", ""),
        field(OverrideType::FieldMergePatch, "/data/k", None, "{b: 2}"),
    )
    .unwrap();
    assert_eq!(untouched["data"]["k"], "", "empty field left alone");
}

#[test]
fn format_detection_distinguishes_json_from_yaml() {
    let cases = [
        ("{\"a\": 1}", FieldFormat::JSON),
        ("  [1, 2]", FieldFormat::JSON),
        ("a: 1", FieldFormat::YAML),
        ("{a: 1}", FieldFormat::YAML),
        ("- a\n- b", FieldFormat::YAML),
    ];
    for (text, want) in cases {
        assert_eq!(detect_format(text), want, "{text}");
    }
}

#[test]
fn rendering_leaves_the_template_untouched() {
    let template = deployment();
    let before = template.clone();
    let _ = render_one(
        &template,
        config(OverrideType::MergePatch, "{spec: {replicas: 1}}"),
    )
    .unwrap();
    assert_eq!(template, before);
}
