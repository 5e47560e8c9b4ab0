//! `kubectl atoll apply`, `delete -f` and `get manifests`: objects read from files, and the
//! Manifests Clusternet's shadow API stores them as (`apps.clusternet.io/v1alpha1` Manifest in
//! `clusternet-reserved`, named `<resource-plural>.<namespace>.<name>`, labelled with the
//! object's group, version, kind, name and namespace).

use std::collections::BTreeMap;

use atoll_crds::apps::Manifest;
use atoll_crds::known;
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::Error;
use crate::table::{Table, age, cell};

/// Headers of the `get manifests` table: the Manifest's name, then the kind, namespace and
/// name of the object it holds.
pub const MANIFEST_HEADERS: [&str; 5] = ["NAME", "KIND", "NAMESPACE", "TEMPLATE NAME", "AGE"];

/// The file name extensions read from a directory.
pub const EXTENSIONS: [&str; 3] = ["yaml", "yml", "json"];

/// One object read from the input.
#[derive(Clone, Debug, PartialEq)]
pub struct Object {
    /// Where it was read from: a file name, `-` for stdin, or `kustomize DIR`.
    pub input: String,
    /// The object: a mapping with `apiVersion`, `kind` and `metadata.name`.
    pub value: Value,
}

impl Object {
    /// The object's `apiVersion`.
    pub fn api_version(&self) -> &str {
        self.value["apiVersion"].as_str().unwrap_or_default()
    }

    /// The object's `kind`.
    pub fn kind(&self) -> &str {
        self.value["kind"].as_str().unwrap_or_default()
    }

    /// The object's `metadata.name`.
    pub fn name(&self) -> &str {
        self.value["metadata"]["name"].as_str().unwrap_or_default()
    }

    /// The object's `metadata.namespace`, if it names one.
    pub fn namespace(&self) -> Option<&str> {
        self.value["metadata"]["namespace"]
            .as_str()
            .filter(|ns| !ns.is_empty())
    }

    /// The API group and version of `apiVersion`: `("apps", "v1")`, or `("", "v1")` for the
    /// core group.
    pub fn group_version(&self) -> (&str, &str) {
        atoll_scheduler::controller::plan::split_api_version(self.api_version())
    }
}

/// What API discovery says about a kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kind {
    /// The resource's plural name, `deployments`.
    pub plural: String,
    /// Whether its objects live in a namespace.
    pub namespaced: bool,
}

/// Every object in `text`, read from `input`: YAML documents separated by `---`, or (when the
/// text starts with `{` or `[`) one or more JSON values. Empty documents are skipped; a `List`
/// gives its items. Each object must have an `apiVersion`, a `kind` and a `metadata.name`.
pub fn parse(text: &str, input: &str) -> Result<Vec<Object>, Error> {
    let values = if text.trim_start().starts_with(['{', '[']) {
        parse_json(text, input)?
    } else {
        parse_yaml(text, input)?
    };
    let mut objects = Vec::new();
    for (i, value) in values.into_iter().enumerate() {
        let items = match value {
            Value::Null => Vec::new(),
            Value::Object(ref m) if m.get("kind").and_then(Value::as_str) == Some("List") => m
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            Value::Array(items) => items,
            other => vec![other],
        };
        for value in items {
            check(&value).map_err(|problem| Error::InvalidObject {
                input: input.to_owned(),
                document: i + 1,
                problem,
            })?;
            objects.push(Object {
                input: input.to_owned(),
                value,
            });
        }
    }
    Ok(objects)
}

fn parse_yaml(text: &str, input: &str) -> Result<Vec<Value>, Error> {
    atoll_yaml::documents(text).map_err(|source| Error::ParseYaml {
        input: input.to_owned(),
        position: source
            .location()
            .map(|(line, column)| format!(":{line}:{column}"))
            .unwrap_or_default(),
        source,
    })
}

fn parse_json(text: &str, input: &str) -> Result<Vec<Value>, Error> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .map(|value| {
            value.map_err(|source| Error::ParseJson {
                input: input.to_owned(),
                line: source.line(),
                column: source.column(),
                source,
            })
        })
        .collect()
}

/// What an object lacks to be applied, if anything.
fn check(value: &Value) -> Result<(), &'static str> {
    let text = |v: &Value| v.as_str().is_some_and(|s| !s.is_empty());
    if !value.is_object() {
        Err("not an object")
    } else if !text(&value["apiVersion"]) {
        Err("no apiVersion")
    } else if !text(&value["kind"]) {
        Err("no kind")
    } else if !text(&value["metadata"]["name"]) {
        Err("no metadata.name")
    } else {
        Ok(())
    }
}

/// The name Clusternet's shadow API gives the Manifest of an object:
/// `<resource-plural>.<namespace>.<name>`, or `<resource-plural>.<name>` for a cluster-scoped
/// one (`deployments.qux.my-nginx`, `namespaces.qux`).
pub fn manifest_name(plural: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{plural}.{ns}.{name}"),
        None => format!("{plural}.{name}"),
    }
}

/// The field manager `kubectl atoll apply` writes Manifests as: one per user, so that one user's
/// apply conflicts with, rather than silently replaces, another's; just `kubectl-atoll` when the
/// user is unknown. Field manager names are at most 128 characters.
pub fn field_manager(user: Option<&str>) -> String {
    let manager = match user {
        Some(user) if !user.is_empty() => format!("{}:{user}", crate::FIELD_MANAGER),
        _ => crate::FIELD_MANAGER.to_owned(),
    };
    manager.chars().take(128).collect()
}

/// The namespace the object goes to: its own, else `default_namespace`, for a namespaced kind;
/// none for a cluster-scoped one.
fn target_namespace<'a>(
    object: &'a Object,
    kind: &Kind,
    default_namespace: &'a str,
) -> Option<&'a str> {
    kind.namespaced
        .then(|| object.namespace().unwrap_or(default_namespace))
}

/// The Manifest that holds `object` in the reserved namespace, as Clusternet's shadow API
/// writes it: the template is the object without `status`, in its namespace (or none when
/// cluster-scoped), labelled `clusternet.io/created-by: clusternet-hub`; the Manifest carries
/// the object's labels plus that one and the `apps.clusternet.io/config.*` labels.
pub fn manifest(object: &Object, kind: &Kind, default_namespace: &str) -> Manifest {
    let namespace = target_namespace(object, kind, default_namespace);
    let (group, version) = object.group_version();
    let mut template = object.value.clone();
    if let Some(m) = template.as_object_mut() {
        m.remove("status");
    }
    let mut labels: BTreeMap<String, String> = object.value["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect();
    labels.insert(known::LABEL_CREATED_BY.into(), known::CREATED_BY_HUB.into());
    if let Some(meta) = template.get_mut("metadata").and_then(Value::as_object_mut) {
        match namespace {
            Some(ns) => meta.insert("namespace".into(), ns.into()),
            None => meta.remove("namespace"),
        };
        meta.insert(
            "labels".into(),
            serde_json::to_value(&labels).unwrap_or_default(),
        );
    }
    for (key, value) in [
        (known::LABEL_CONFIG_GROUP, group),
        (known::LABEL_CONFIG_VERSION, version),
        (known::LABEL_CONFIG_KIND, object.kind()),
        (known::LABEL_CONFIG_NAME, object.name()),
        (known::LABEL_CONFIG_NAMESPACE, namespace.unwrap_or_default()),
    ] {
        labels.insert(key.into(), value.into());
    }
    let mut m = Manifest::new(
        &manifest_name(&kind.plural, namespace, object.name()),
        template,
    );
    m.metadata.namespace = Some(known::NAMESPACE_RESERVED.into());
    m.metadata.labels = Some(labels);
    m
}

/// The `get manifests` table: one row per Manifest, sorted by name: its name, and the kind,
/// namespace and name of the object it holds.
pub fn manifest_table(manifests: &[Manifest], now: Timestamp) -> Table {
    let mut sorted: Vec<&Manifest> = manifests.iter().collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut table = Table::new(&MANIFEST_HEADERS);
    table.rows.extend(sorted.into_iter().map(|m| {
        let t = &m.template;
        vec![
            cell(m.metadata.name.as_deref()),
            cell(t["kind"].as_str()),
            cell(t["metadata"]["namespace"].as_str()),
            cell(t["metadata"]["name"].as_str()),
            age(m.metadata.creation_timestamp.as_ref(), now),
        ]
    }));
    table
}

/// The `get manifests` page: the table, or a line saying there is none.
pub fn render(manifests: &[Manifest], now: Timestamp) -> String {
    if manifests.is_empty() {
        format!("No Manifests in namespace {}.\n", known::NAMESPACE_RESERVED)
    } else {
        manifest_table(manifests, now).render()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_user_applies_as_a_field_manager_of_their_own() {
        assert_eq!(field_manager(Some("alice")), "kubectl-atoll:alice");
        assert_eq!(
            field_manager(Some("system:serviceaccount:team:ci")),
            "kubectl-atoll:system:serviceaccount:team:ci"
        );
        assert_eq!(field_manager(None), "kubectl-atoll");
        assert_eq!(field_manager(Some("")), "kubectl-atoll");
        assert_eq!(field_manager(Some(&"u".repeat(300))).chars().count(), 128);
    }
    use crate::app::report;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    const TWO: &str = "\
apiVersion: v1
kind: Namespace
metadata:
  name: qux
---
# a comment, then the Deployment
apiVersion: apps/v1
kind: Deployment
metadata:
  name: my-nginx
  namespace: qux
  labels:
    app: nginx
spec:
  replicas: 2
status:
  readyReplicas: 1
---
";

    fn deployments() -> Kind {
        Kind {
            plural: "deployments".into(),
            namespaced: true,
        }
    }

    fn namespaces() -> Kind {
        Kind {
            plural: "namespaces".into(),
            namespaced: false,
        }
    }

    #[test]
    fn yaml_documents_are_read_in_order_and_empty_ones_skipped() {
        let objects = parse(TWO, "two.yaml").unwrap();
        let names: Vec<(&str, &str, Option<&str>)> = objects
            .iter()
            .map(|o| (o.kind(), o.name(), o.namespace()))
            .collect();
        assert_eq!(
            names,
            [
                ("Namespace", "qux", None),
                ("Deployment", "my-nginx", Some("qux"))
            ]
        );
        assert_eq!(objects[1].group_version(), ("apps", "v1"));
        assert_eq!(objects[0].group_version(), ("", "v1"));
        assert!(objects.iter().all(|o| o.input == "two.yaml"));
    }

    #[test]
    fn json_values_and_lists_give_their_objects() {
        let text = r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}]}
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}}"#;
        let objects = parse(text, "all.json").unwrap();
        let names: Vec<&str> = objects.iter().map(Object::name).collect();
        assert_eq!(names, ["a", "b", "c"]);
    }

    #[test]
    fn a_syntax_error_names_the_input_and_position() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n";
        let e = parse(text, "bad.yaml").unwrap_err();
        let line = report(&e);
        assert!(line.starts_with("error: bad.yaml:"), "{line}");
        assert!(
            matches!(e, Error::ParseYaml { ref position, .. } if !position.is_empty()),
            "{line}"
        );
        let e = parse("{\"kind\": ", "bad.json").unwrap_err();
        assert!(
            report(&e).starts_with("error: bad.json:1:"),
            "{}",
            report(&e)
        );
    }

    #[test]
    fn an_object_without_kind_or_name_is_refused() {
        let e = parse("apiVersion: v1\nmetadata: {name: x}\n", "a.yaml").unwrap_err();
        assert_eq!(report(&e), "error: a.yaml: document 1: no kind");
        let e = parse("apiVersion: v1\nkind: X\n---\n- 1\n", "b.yaml").unwrap_err();
        assert_eq!(report(&e), "error: b.yaml: document 1: no metadata.name");
    }

    #[test]
    fn names_follow_clusternets_shadow_api() {
        assert_eq!(
            manifest_name("deployments", Some("qux"), "my-nginx"),
            "deployments.qux.my-nginx"
        );
        assert_eq!(manifest_name("namespaces", None, "qux"), "namespaces.qux");
    }

    #[test]
    fn a_namespaced_object_is_labelled_with_its_group_version_kind_and_place() {
        let objects = parse(TWO, "two.yaml").unwrap();
        let m = manifest(&objects[1], &deployments(), "default");
        assert_eq!(m.metadata.name.as_deref(), Some("deployments.qux.my-nginx"));
        assert_eq!(m.metadata.namespace.as_deref(), Some("clusternet-reserved"));
        let labels = m.metadata.labels.clone().unwrap();
        let want = [
            ("app", "nginx"),
            ("apps.clusternet.io/config.group", "apps"),
            ("apps.clusternet.io/config.kind", "Deployment"),
            ("apps.clusternet.io/config.name", "my-nginx"),
            ("apps.clusternet.io/config.namespace", "qux"),
            ("apps.clusternet.io/config.version", "v1"),
            ("clusternet.io/created-by", "clusternet-hub"),
        ];
        assert_eq!(
            labels,
            want.map(|(k, v)| (k.to_owned(), v.to_owned()))
                .into_iter()
                .collect::<BTreeMap<_, _>>()
        );
        assert!(m.template.get("status").is_none(), "{}", m.template);
        assert_eq!(m.template["spec"]["replicas"], 2);
        assert_eq!(
            m.template["metadata"]["labels"],
            json!({"app": "nginx", "clusternet.io/created-by": "clusternet-hub"})
        );
    }

    #[test]
    fn a_cluster_scoped_object_has_no_namespace_and_a_missing_one_is_the_default() {
        let objects = parse(TWO, "two.yaml").unwrap();
        let m = manifest(&objects[0], &namespaces(), "default");
        assert_eq!(m.metadata.name.as_deref(), Some("namespaces.qux"));
        let labels = m.metadata.labels.unwrap();
        assert_eq!(labels["apps.clusternet.io/config.group"], "");
        assert_eq!(labels["apps.clusternet.io/config.namespace"], "");
        assert!(m.template["metadata"].get("namespace").is_none());

        let cm = parse(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: conf}\n",
            "cm.yaml",
        )
        .unwrap();
        let kind = Kind {
            plural: "configmaps".into(),
            namespaced: true,
        };
        let m = manifest(&cm[0], &kind, "shop");
        assert_eq!(m.metadata.name.as_deref(), Some("configmaps.shop.conf"));
        assert_eq!(m.template["metadata"]["namespace"], "shop");
    }

    #[test]
    fn the_table_shows_each_manifest_and_its_object() {
        let objects = parse(TWO, "two.yaml").unwrap();
        let mut a = manifest(&objects[1], &deployments(), "default");
        a.metadata.creation_timestamp = Some(Time("2026-01-01T00:55:00Z".parse().unwrap()));
        let b = manifest(&objects[0], &namespaces(), "default");
        let now: Timestamp = "2026-01-01T01:00:00Z".parse().unwrap();
        let table = manifest_table(&[a, b], now);
        assert_eq!(
            table.rows,
            [
                [
                    "deployments.qux.my-nginx",
                    "Deployment",
                    "qux",
                    "my-nginx",
                    "5m"
                ],
                ["namespaces.qux", "Namespace", "<none>", "qux", "<none>"],
            ]
        );
        assert_eq!(
            render(&[], now),
            "No Manifests in namespace clusternet-reserved.\n"
        );
    }
}
