//! Property tests of override ordering and of the embedded-document formats.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_crds::apps::{FieldFormat, OverrideConfig, OverrideType};
use atoll_scheduler::overrides::{OverrideKind, OverrideSet, render};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use serde_json::{Value, json};

fn label_override(value: &str) -> OverrideConfig {
    OverrideConfig {
        name: Some(value.to_owned()),
        value: format!("{{\"metadata\": {{\"labels\": {{\"winner\": \"{value}\"}}}}}}"),
        type_: OverrideType::MergePatch,
        override_chart: None,
        field_path: None,
        field_format: None,
    }
}

fn arb_set() -> impl Strategy<Value = OverrideSet> {
    (any::<bool>(), 0i32..4, 0i64..4, "[a-d]{1,2}").prop_map(|(glob, priority, secs, name)| {
        let kind = if glob {
            OverrideKind::Globalization
        } else {
            OverrideKind::Localization
        };
        let id = format!("{kind}-{priority}-{secs}-{name}");
        OverrideSet {
            kind,
            namespace: (!glob).then(|| "clusternet-x".to_owned()),
            name,
            priority,
            created: Some(Time(Timestamp::from_second(secs).unwrap())),
            overrides: vec![label_override(&id)],
        }
    })
}

/// A JSON document of nested maps, lists, strings, integers and booleans.
fn arb_doc() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::from),
        any::<i32>().prop_map(Value::from),
        "[a-zA-Z0-9 :#-]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map("[a-z][a-z0-9_]{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn configmap(text: String) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"doc": text}})
}

fn field_merge(format: Option<FieldFormat>, patch: &str) -> OverrideSet {
    field_override(OverrideType::FieldMergePatch, format, patch)
}

fn field_override(type_: OverrideType, format: Option<FieldFormat>, patch: &str) -> OverrideSet {
    OverrideSet {
        kind: OverrideKind::Localization,
        namespace: Some("clusternet-x".to_owned()),
        name: "fmt".to_owned(),
        priority: 500,
        created: None,
        overrides: vec![OverrideConfig {
            name: Some("field".to_owned()),
            value: patch.to_owned(),
            type_,
            override_chart: None,
            field_path: Some("/data/doc".to_owned()),
            field_format: format,
        }],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_override_applied_last_is_the_highest_in_order_whatever_the_input_order(
        sets in prop::collection::vec(arb_set(), 1..12),
        rotate in any::<prop::sample::Index>(),
    ) {
        let ordered = atoll_scheduler::overrides::sort_override_sets(sets.clone());
        // every Globalization before every Localization; within a kind priority, time, name ascending
        for pair in ordered.windows(2) {
            let key = |s: &OverrideSet| (s.kind, s.priority, s.created.as_ref().map(|t| t.0), s.name.clone());
            prop_assert!(key(&pair[0]) <= key(&pair[1]));
        }
        let mut rotated = sets.clone();
        let k = rotate.index(rotated.len());
        rotated.rotate_left(k);
        let reordered = atoll_scheduler::overrides::sort_override_sets(rotated);
        let keys = |v: &[OverrideSet]| v.iter().map(|s| (s.kind, s.priority, s.name.clone())).collect::<Vec<_>>();
        prop_assert_eq!(keys(&ordered), keys(&reordered));

        // rendering applies them in that order: the last one's label wins
        let out = render(&json!({"metadata": {"name": "x"}}), &ordered, None).unwrap();
        let last = ordered.last().unwrap().overrides[0].name.clone().unwrap();
        prop_assert_eq!(out["metadata"]["labels"]["winner"].as_str(), Some(last.as_str()));
    }

    #[test]
    fn json_fields_round_trip_through_an_empty_json_patch(doc in arb_doc()) {
        // objects and lists; a bare scalar would be detected as YAML, which it also is
        prop_assume!(doc.is_object() || doc.is_array());
        let text = serde_json::to_string(&doc).unwrap();
        for format in [Some(FieldFormat::JSON), None] {
            let set = field_override(OverrideType::FieldJSONPatch, format, "[]");
            let out = render(&configmap(text.clone()), &[set], None).unwrap();
            let written = out["data"]["doc"].as_str().unwrap();
            let back: Value = serde_json::from_str(written).unwrap();
            prop_assert_eq!(&back, &doc);
        }
    }

    #[test]
    fn yaml_fields_round_trip_through_an_empty_merge_patch(doc in arb_doc()) {
        prop_assume!(doc.is_object());
        let text = serde_yaml::to_string(&doc).unwrap();
        let out = render(&configmap(text), &[field_merge(Some(FieldFormat::YAML), "{}")], None).unwrap();
        let written = out["data"]["doc"].as_str().unwrap();
        let back: Value = serde_yaml::from_str(written).unwrap();
        prop_assert_eq!(&back, &doc);
    }

    #[test]
    fn a_field_merge_patch_changes_only_what_it_names(doc in arb_doc(), n in any::<i32>()) {
        prop_assume!(doc.is_object());
        let text = serde_yaml::to_string(&doc).unwrap();
        let out = render(&configmap(text), &[field_merge(Some(FieldFormat::YAML), &format!("zz_added: {n}"))], None).unwrap();
        let back: Value = serde_yaml::from_str(out["data"]["doc"].as_str().unwrap()).unwrap();
        let mut want = doc.clone();
        want["zz_added"] = json!(n);
        prop_assert_eq!(back, want);
    }
}
