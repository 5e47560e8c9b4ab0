//! OpenAPI v3: the `/openapi/v3` index and one document per group-version.
//!
//! Built-in schemas are generated from k8s-openapi's `schemars` implementations with OpenAPI 3
//! settings (refs as `#/components/schemas/io.k8s…`, `$ref` siblings wrapped in `allOf` as the
//! real server does), then given the extensions Go struct tags carry and schemars cannot know:
//! `x-kubernetes-patch-merge-key`/`-patch-strategy` and `x-kubernetes-list-type`/`-list-map-keys`
//! for the keyed lists in [`PATCH_META`] (the common ones, not every list of every type), and
//! `x-kubernetes-group-version-kind` on kind schemas. CRD schemas embed the version's
//! `openAPIV3Schema` with `metadata` pointing at `ObjectMeta`.
//!
//! Every kind gets list/item (and status/scale) paths whose operations carry
//! `x-kubernetes-group-version-kind`; PATCH operations take a `fieldValidation` query
//! parameter, so kubectl 1.32 validates server-side, and built-in ones accept
//! `application/strategic-merge-patch+json`, so client-side apply computes strategic merge
//! patches from these schemas. Nothing is cached here: the caller caches per registry state.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::schemars::JsonSchema;
use k8s_openapi::schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use super::resource::ResourceInfo;

/// `$ref` of ObjectMeta in these documents.
pub const OBJECT_META_REF: &str =
    "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META_REF: &str = "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const PATCH_NAME: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const SCALE_NAME: &str = "io.k8s.api.autoscaling.v1.Scale";

const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const FIELD_VALIDATION_DESCRIPTION: &str = "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) containing unknown or duplicate fields. Valid values are: - Ignore: This will ignore any unknown fields that are silently dropped from the object, and will ignore all but the last duplicate field that the decoder encounters. This is the default behavior prior to v1.23. - Warn: This will send a warning via the standard warning response header for each unknown field that is dropped from the object, and for each duplicate field that is encountered. The request will still succeed if there are no other errors, and will only persist the last of any duplicate fields. This is the default in v1.23+ - Strict: This will fail the request with a BadRequest error if any unknown fields would be dropped from the object, or if any duplicate fields are present. The error returned from the server will contain all unknown and duplicate fields encountered.";

/// Patch extensions of a keyed list: (component, property, merge key, patch strategy,
/// list type, list map keys), from the Go struct tags of k8s.io/api.
pub type PatchMeta = (
    &'static str,
    &'static str,
    Option<&'static str>,
    Option<&'static str>,
    &'static str,
    &'static [&'static str],
);

/// The keyed lists of the built-in schemas, see [`PatchMeta`].
pub const PATCH_META: &[PatchMeta] = &[
    (
        "io.k8s.api.core.v1.PodSpec",
        "containers",
        Some("name"),
        Some("merge"),
        "map",
        &["name"],
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "initContainers",
        Some("name"),
        Some("merge"),
        "map",
        &["name"],
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "ephemeralContainers",
        Some("name"),
        Some("merge"),
        "map",
        &["name"],
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "volumes",
        Some("name"),
        Some("merge,retainKeys"),
        "map",
        &["name"],
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "imagePullSecrets",
        Some("name"),
        Some("merge"),
        "map",
        &["name"],
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "hostAliases",
        Some("ip"),
        Some("merge"),
        "map",
        &["ip"],
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "topologySpreadConstraints",
        Some("topologyKey"),
        Some("merge"),
        "map",
        &["topologyKey", "whenUnsatisfiable"],
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "resourceClaims",
        Some("name"),
        Some("merge,retainKeys"),
        "map",
        &["name"],
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "schedulingGates",
        Some("name"),
        Some("merge"),
        "map",
        &["name"],
    ),
    (
        "io.k8s.api.core.v1.PodSpec",
        "tolerations",
        None,
        None,
        "atomic",
        &[],
    ),
    (
        "io.k8s.api.core.v1.Container",
        "ports",
        Some("containerPort"),
        Some("merge"),
        "map",
        &["containerPort", "protocol"],
    ),
    (
        "io.k8s.api.core.v1.Container",
        "env",
        Some("name"),
        Some("merge"),
        "map",
        &["name"],
    ),
    (
        "io.k8s.api.core.v1.Container",
        "volumeMounts",
        Some("mountPath"),
        Some("merge"),
        "map",
        &["mountPath"],
    ),
    (
        "io.k8s.api.core.v1.Container",
        "volumeDevices",
        Some("devicePath"),
        Some("merge"),
        "map",
        &["devicePath"],
    ),
    (
        "io.k8s.api.core.v1.Container",
        "envFrom",
        None,
        None,
        "atomic",
        &[],
    ),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "ports",
        Some("containerPort"),
        Some("merge"),
        "map",
        &["containerPort", "protocol"],
    ),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "env",
        Some("name"),
        Some("merge"),
        "map",
        &["name"],
    ),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeMounts",
        Some("mountPath"),
        Some("merge"),
        "map",
        &["mountPath"],
    ),
    (
        "io.k8s.api.core.v1.EphemeralContainer",
        "volumeDevices",
        Some("devicePath"),
        Some("merge"),
        "map",
        &["devicePath"],
    ),
    (
        "io.k8s.api.core.v1.PodStatus",
        "conditions",
        Some("type"),
        Some("merge"),
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.core.v1.PodStatus",
        "podIPs",
        Some("ip"),
        Some("merge"),
        "map",
        &["ip"],
    ),
    (
        "io.k8s.api.core.v1.ServiceSpec",
        "ports",
        Some("port"),
        Some("merge"),
        "map",
        &["port", "protocol"],
    ),
    (
        "io.k8s.api.core.v1.ServiceStatus",
        "conditions",
        Some("type"),
        Some("merge"),
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.core.v1.ServiceAccount",
        "secrets",
        Some("name"),
        Some("merge"),
        "map",
        &["name"],
    ),
    (
        "io.k8s.api.core.v1.NodeStatus",
        "conditions",
        Some("type"),
        Some("merge"),
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.core.v1.NodeStatus",
        "addresses",
        Some("type"),
        Some("merge"),
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.core.v1.NamespaceStatus",
        "conditions",
        Some("type"),
        Some("merge"),
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.apps.v1.DeploymentStatus",
        "conditions",
        Some("type"),
        Some("merge"),
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.apps.v1.StatefulSetStatus",
        "conditions",
        Some("type"),
        Some("merge"),
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.apps.v1.DaemonSetStatus",
        "conditions",
        Some("type"),
        Some("merge"),
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.apps.v1.ReplicaSetStatus",
        "conditions",
        Some("type"),
        Some("merge"),
        "map",
        &["type"],
    ),
    (
        "io.k8s.api.batch.v1.JobStatus",
        "conditions",
        Some("type"),
        Some("merge"),
        "atomic",
        &[],
    ),
    (
        "io.k8s.api.rbac.v1.RoleBinding",
        "subjects",
        None,
        None,
        "atomic",
        &[],
    ),
    (
        "io.k8s.api.rbac.v1.ClusterRoleBinding",
        "subjects",
        None,
        None,
        "atomic",
        &[],
    ),
    (
        "io.k8s.api.rbac.v1.Role",
        "rules",
        None,
        None,
        "atomic",
        &[],
    ),
    (
        "io.k8s.api.rbac.v1.ClusterRole",
        "rules",
        None,
        None,
        "atomic",
        &[],
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "finalizers",
        None,
        Some("merge"),
        "set",
        &[],
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "ownerReferences",
        Some("uid"),
        Some("merge"),
        "map",
        &["uid"],
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
        "managedFields",
        None,
        None,
        "atomic",
        &[],
    ),
    (
        "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector",
        "matchExpressions",
        None,
        None,
        "atomic",
        &[],
    ),
];

/// `(group, version)` of an index key (`api/v1`, `apis/{group}/{version}`).
pub fn parse_key(key: &str) -> Option<(String, String)> {
    let key = key.trim_matches('/');
    let parts: Vec<&str> = key.split('/').collect();
    match parts.as_slice() {
        ["api", v] if !v.is_empty() => Some((String::new(), (*v).to_string())),
        ["apis", g, v] if !g.is_empty() && !v.is_empty() => {
            Some(((*g).to_string(), (*v).to_string()))
        }
        _ => None,
    }
}

/// The index key of a group-version.
pub fn key_of(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `GET /openapi/v3`: every served group-version with its `serverRelativeURL`
/// (`/openapi/v3/<key>?hash=<upper-hex SHA-512 of the document>`).
pub fn openapi_v3_index(resources: &[ResourceInfo]) -> Value {
    index_of(&openapi_v3_documents(resources))
}

/// Every group-version document with its hash, by index key: one pass for a caller that
/// caches the index and all documents together (see [`index_of`]).
pub fn openapi_v3_documents(resources: &[ResourceInfo]) -> BTreeMap<String, (Value, String)> {
    let keys: BTreeSet<String> = resources
        .iter()
        .map(|r| key_of(&r.group, &r.version))
        .collect();
    keys.into_iter()
        .filter_map(|key| openapi_v3_document(resources, &key).map(|d| (key, d)))
        .collect()
}

/// The index for documents computed by [`openapi_v3_documents`].
pub fn index_of(documents: &BTreeMap<String, (Value, String)>) -> Value {
    let paths: Map<String, Value> = documents
        .iter()
        .map(|(key, (_, hash))| {
            (
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
            )
        })
        .collect();
    json!({"paths": paths})
}

/// `GET /openapi/v3/<key>`: the document of one group-version and its hash, the upper-hex
/// SHA-512 of `serde_json::to_vec(&document)` (serve exactly those bytes). `None` if the
/// key is malformed or nothing is served in that group-version.
pub fn openapi_v3_document(resources: &[ResourceInfo], key: &str) -> Option<(Value, String)> {
    let (group, version) = parse_key(key)?;
    let mut rs: Vec<&ResourceInfo> = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if rs.is_empty() {
        return None;
    }
    rs.sort_by(|a, b| a.plural.cmp(&b.plural));

    let mut generator = SchemaSettings::openapi3().into_generator();
    use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
    generator.subschema_for::<meta::ObjectMeta>();
    generator.subschema_for::<meta::ListMeta>();
    generator.subschema_for::<meta::Status>();
    generator.subschema_for::<meta::DeleteOptions>();
    if rs.iter().any(|r| r.scale.is_some()) {
        generator.subschema_for::<k8s_openapi::api::autoscaling::v1::Scale>();
    }

    let mut extra = Map::new();
    let mut kinds: Vec<(&ResourceInfo, String)> = Vec::new();
    for r in &rs {
        let name = match r
            .builtin
            .then(|| builtin_schema(&mut generator, r))
            .flatten()
        {
            Some(name) => name,
            None => {
                let name = component_name(r);
                extra.insert(name.clone(), custom_schema(r));
                name
            }
        };
        kinds.push((r, name));
    }
    let mut schemas = generator.take_definitions(true);
    schemas.extend(extra);
    schemas.insert(
        PATCH_NAME.to_string(),
        json!({"description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body.", "type": "object"}),
    );
    if let Some(Value::Object(scale)) = schemas.get_mut(SCALE_NAME) {
        scale.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([{"group": "autoscaling", "kind": "Scale", "version": "v1"}]),
        );
    }
    for (r, name) in &kinds {
        if let Some(Value::Object(s)) = schemas.get_mut(name) {
            // k8s-openapi marks `metadata` required (a Rust field); the real schemas do not.
            if let Some(Value::Array(required)) = s.get_mut("required") {
                required.retain(|f| f != "metadata");
                if required.is_empty() {
                    s.remove("required");
                }
            }
            s.insert(
                "x-kubernetes-group-version-kind".into(),
                json!([{"group": r.group, "kind": r.kind, "version": r.version}]),
            );
        }
        schemas.insert(format!("{name}List"), list_schema(r, name));
    }
    apply_patch_meta(&mut schemas);

    let mut paths = Map::new();
    for (r, name) in &kinds {
        add_paths(&mut paths, r, name);
    }

    let all_custom = rs.iter().all(|r| !r.builtin);
    let info = if all_custom {
        json!({"title": "Kubernetes CRD Swagger", "version": "v0.1.0"})
    } else {
        json!({"title": "Kubernetes", "version": "v1.32.0"})
    };
    let doc = json!({
        "openapi": "3.0.0",
        "info": info,
        "paths": paths,
        "components": {"schemas": schemas},
    });
    let bytes = serde_json::to_vec(&doc).unwrap_or_default();
    Some((doc, upper_hex_sha512(&bytes)))
}

/// Upper-case hex SHA-512, the `hash` of OpenAPI v3 URLs.
pub fn upper_hex_sha512(bytes: &[u8]) -> String {
    Sha512::digest(bytes)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// The component name of a CRD kind: reversed group, version, kind (`com.example.v1.Widget`).
pub fn component_name(r: &ResourceInfo) -> String {
    let mut parts: Vec<&str> = r.group.split('.').filter(|p| !p.is_empty()).collect();
    parts.reverse();
    parts.push(&r.version);
    parts.push(&r.kind);
    parts.join(".")
}

fn schema_ref(name: &str) -> String {
    format!("#/components/schemas/{name}")
}

/// Registers the k8s-openapi schema of a built-in kind and returns its component name.
fn builtin_schema(generator: &mut SchemaGenerator, r: &ResourceInfo) -> Option<String> {
    use k8s_openapi::api::{admissionregistration, apps, batch, coordination, core, events, rbac};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    fn sub<T: JsonSchema>(generator: &mut SchemaGenerator) -> Option<String> {
        generator.subschema_for::<T>();
        Some(T::schema_name().into_owned())
    }
    match (r.group.as_str(), r.version.as_str(), r.kind.as_str()) {
        ("", "v1", "Namespace") => sub::<core::v1::Namespace>(generator),
        ("", "v1", "ConfigMap") => sub::<core::v1::ConfigMap>(generator),
        ("", "v1", "Secret") => sub::<core::v1::Secret>(generator),
        ("", "v1", "ServiceAccount") => sub::<core::v1::ServiceAccount>(generator),
        ("", "v1", "Service") => sub::<core::v1::Service>(generator),
        ("", "v1", "Event") => sub::<core::v1::Event>(generator),
        ("", "v1", "Node") => sub::<core::v1::Node>(generator),
        ("", "v1", "Pod") => sub::<core::v1::Pod>(generator),
        ("", "v1", "Endpoints") => sub::<core::v1::Endpoints>(generator),
        ("", "v1", "PersistentVolumeClaim") => sub::<core::v1::PersistentVolumeClaim>(generator),
        ("events.k8s.io", "v1", "Event") => sub::<events::v1::Event>(generator),
        ("coordination.k8s.io", "v1", "Lease") => sub::<coordination::v1::Lease>(generator),
        ("apps", "v1", "Deployment") => sub::<apps::v1::Deployment>(generator),
        ("apps", "v1", "StatefulSet") => sub::<apps::v1::StatefulSet>(generator),
        ("apps", "v1", "DaemonSet") => sub::<apps::v1::DaemonSet>(generator),
        ("apps", "v1", "ReplicaSet") => sub::<apps::v1::ReplicaSet>(generator),
        ("batch", "v1", "Job") => sub::<batch::v1::Job>(generator),
        ("batch", "v1", "CronJob") => sub::<batch::v1::CronJob>(generator),
        ("rbac.authorization.k8s.io", "v1", "Role") => sub::<rbac::v1::Role>(generator),
        ("rbac.authorization.k8s.io", "v1", "RoleBinding") => {
            sub::<rbac::v1::RoleBinding>(generator)
        }
        ("rbac.authorization.k8s.io", "v1", "ClusterRole") => {
            sub::<rbac::v1::ClusterRole>(generator)
        }
        ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding") => {
            sub::<rbac::v1::ClusterRoleBinding>(generator)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy") => {
            sub::<admissionregistration::v1::ValidatingAdmissionPolicy>(generator)
        }
        ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding") => {
            sub::<admissionregistration::v1::ValidatingAdmissionPolicyBinding>(generator)
        }
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition") => {
            sub::<apiextensions::v1::CustomResourceDefinition>(generator)
        }
        _ => None,
    }
}

/// The schema of a CRD kind: its `openAPIV3Schema` (or an open object) with `apiVersion`,
/// `kind` and `metadata` (→ ObjectMeta) properties.
fn custom_schema(r: &ResourceInfo) -> Value {
    let mut schema = match &r.schema {
        Some(Value::Object(m)) => m.clone(),
        _ => {
            let mut m = Map::new();
            m.insert("type".into(), json!("object"));
            m.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
            m
        }
    };
    let props = schema
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(props) = props {
        props
            .entry("apiVersion")
            .or_insert_with(|| json!({"description": API_VERSION_DESCRIPTION, "type": "string"}));
        props
            .entry("kind")
            .or_insert_with(|| json!({"description": KIND_DESCRIPTION, "type": "string"}));
        props.insert(
            "metadata".into(),
            json!({"allOf": [{"$ref": OBJECT_META_REF}], "description": METADATA_DESCRIPTION}),
        );
    }
    Value::Object(schema)
}

fn list_schema(r: &ResourceInfo, item: &str) -> Value {
    json!({
        "description": format!("{}List is a list of {}", r.kind, r.kind),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"description": API_VERSION_DESCRIPTION, "type": "string"},
            "items": {"description": format!("List of {}.", r.plural), "type": "array",
                      "items": {"allOf": [{"$ref": schema_ref(item)}], "default": {}}},
            "kind": {"description": KIND_DESCRIPTION, "type": "string"},
            "metadata": {"allOf": [{"$ref": LIST_META_REF}], "description": METADATA_DESCRIPTION},
        },
        "x-kubernetes-group-version-kind": [{"group": r.group, "kind": format!("{}List", r.kind), "version": r.version}],
    })
}

fn apply_patch_meta(schemas: &mut Map<String, Value>) {
    for (component, property, merge_key, strategy, list_type, map_keys) in PATCH_META {
        let Some(prop) = schemas
            .get_mut(*component)
            .and_then(|s| s.get_mut("properties"))
            .and_then(|p| p.get_mut(*property))
            .and_then(Value::as_object_mut)
        else {
            continue;
        };
        if let Some(k) = merge_key {
            prop.insert("x-kubernetes-patch-merge-key".into(), json!(k));
        }
        if let Some(s) = strategy {
            prop.insert("x-kubernetes-patch-strategy".into(), json!(s));
        }
        prop.insert("x-kubernetes-list-type".into(), json!(list_type));
        if !map_keys.is_empty() {
            prop.insert("x-kubernetes-list-map-keys".into(), json!(map_keys));
        }
    }
}

fn query_param(name: &str, description: &str, type_: &str) -> Value {
    json!({"name": name, "in": "query", "description": description,
           "schema": {"type": type_, "uniqueItems": true}})
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "description": description, "required": true,
           "schema": {"type": "string", "uniqueItems": true}})
}

fn write_params(with_force: bool) -> Vec<Value> {
    let mut p = vec![
        query_param(
            "dryRun",
            "When present, indicates that modifications should not be persisted. An invalid or unrecognized dryRun directive will result in an error response and no further processing of the request. Valid values are: - All: all dry run stages will be processed",
            "string",
        ),
        query_param(
            "fieldManager",
            "fieldManager is a name associated with the actor or entity that is making these changes. The value must be less than or 128 characters long, and only contain printable characters, as defined by https://golang.org/pkg/unicode/#IsPrint.",
            "string",
        ),
        query_param("fieldValidation", FIELD_VALIDATION_DESCRIPTION, "string"),
    ];
    if with_force {
        p.push(query_param("force", "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people. Force flag must be unset for non-apply patch requests.", "boolean"));
    }
    p
}

fn list_params() -> Vec<Value> {
    [
        ("allowWatchBookmarks", "boolean"),
        ("continue", "string"),
        ("fieldSelector", "string"),
        ("labelSelector", "string"),
        ("limit", "integer"),
        ("resourceVersion", "string"),
        ("resourceVersionMatch", "string"),
        ("sendInitialEvents", "boolean"),
        ("timeoutSeconds", "integer"),
        ("watch", "boolean"),
    ]
    .iter()
    .map(|(n, t)| query_param(n, n, t))
    .collect()
}

fn json_response(schema_name: &str) -> Value {
    json!({
        "200": {"description": "OK", "content": {
            "application/json": {"schema": {"$ref": schema_ref(schema_name)}},
            "application/yaml": {"schema": {"$ref": schema_ref(schema_name)}}}},
        "401": {"description": "Unauthorized"},
    })
}

/// `(group-version camel case, e.g. AppsV1 / CoreV1 / ExampleComV1)` for operation ids.
fn op_prefix(r: &ResourceInfo) -> String {
    let group = if r.group.is_empty() {
        "core"
    } else {
        r.group.strip_suffix(".k8s.io").unwrap_or(&r.group)
    };
    let mut s: String = group.split('.').map(capitalize).collect();
    s.push_str(&capitalize(&r.version));
    s
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

fn add_paths(paths: &mut Map<String, Value>, r: &ResourceInfo, schema_name: &str) {
    let prefix = if r.group.is_empty() {
        format!("/api/{}", r.version)
    } else {
        format!("/apis/{}/{}", r.group, r.version)
    };
    let has = |v: &str| r.verbs.iter().any(|x| x == v);
    let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
    let scope = if r.namespaced { "Namespaced" } else { "" };
    let id =
        |action: &str, suffix: &str| format!("{action}{}{scope}{}{suffix}", op_prefix(r), r.kind);
    let (collection, ns_param) = if r.namespaced {
        (
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural),
            vec![path_param(
                "namespace",
                "object name and auth scope, such as for teams and projects",
            )],
        )
    } else {
        (format!("{prefix}/{}", r.plural), Vec::new())
    };
    let patch_types: Vec<&str> = if r.builtin {
        vec![
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json",
            "application/apply-patch+yaml",
        ]
    } else {
        vec![
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ]
    };
    let patch_body = {
        let mut content = Map::new();
        for t in &patch_types {
            content.insert(
                (*t).to_string(),
                json!({"schema": {"$ref": schema_ref(PATCH_NAME)}}),
            );
        }
        json!({"content": content, "required": true})
    };
    let body_of = |name: &str| json!({"content": {"*/*": {"schema": {"$ref": schema_ref(name)}}}, "required": true});

    // Collection: list, create, deletecollection.
    let mut item = Map::new();
    if has("list") {
        item.insert(
            "get".into(),
            json!({
                "description": format!("list or watch objects of kind {}", r.kind),
                "operationId": id("list", ""),
                "parameters": list_params(),
                "responses": json_response(&format!("{schema_name}List")),
                "x-kubernetes-action": "list",
                "x-kubernetes-group-version-kind": gvk,
            }),
        );
    }
    if has("create") {
        item.insert(
            "post".into(),
            json!({
                "description": format!("create a {}", r.kind),
                "operationId": id("create", ""),
                "parameters": write_params(false),
                "requestBody": body_of(schema_name),
                "responses": json_response(schema_name),
                "x-kubernetes-action": "post",
                "x-kubernetes-group-version-kind": gvk,
            }),
        );
    }
    if has("deletecollection") {
        item.insert(
            "delete".into(),
            json!({
                "description": format!("delete collection of {}", r.kind),
                "operationId": id("deletecollection", ""),
                "parameters": list_params(),
                "responses": json_response("io.k8s.apimachinery.pkg.apis.meta.v1.Status"),
                "x-kubernetes-action": "deletecollection",
                "x-kubernetes-group-version-kind": gvk,
            }),
        );
    }
    if !item.is_empty() {
        item.insert("parameters".into(), Value::Array(ns_param.clone()));
        paths.insert(collection.clone(), Value::Object(item));
    }

    // All-namespaces list.
    if r.namespaced && has("list") {
        paths.insert(
            format!("{prefix}/{}", r.plural),
            json!({"get": {
                "description": format!("list or watch objects of kind {}", r.kind),
                "operationId": id("list", "ForAllNamespaces").replace("Namespaced", ""),
                "parameters": list_params(),
                "responses": json_response(&format!("{schema_name}List")),
                "x-kubernetes-action": "list",
                "x-kubernetes-group-version-kind": gvk,
            }}),
        );
    }

    // Item: get, replace, patch, delete.
    let mut item_params = vec![path_param("name", &format!("name of the {}", r.kind))];
    item_params.extend(ns_param.iter().cloned());
    let mut item = Map::new();
    if has("get") {
        item.insert(
            "get".into(),
            json!({
                "description": format!("read the specified {}", r.kind),
                "operationId": id("read", ""),
                "responses": json_response(schema_name),
                "x-kubernetes-action": "get",
                "x-kubernetes-group-version-kind": gvk,
            }),
        );
    }
    if has("update") {
        item.insert(
            "put".into(),
            json!({
                "description": format!("replace the specified {}", r.kind),
                "operationId": id("replace", ""),
                "parameters": write_params(false),
                "requestBody": body_of(schema_name),
                "responses": json_response(schema_name),
                "x-kubernetes-action": "put",
                "x-kubernetes-group-version-kind": gvk,
            }),
        );
    }
    if has("patch") {
        item.insert(
            "patch".into(),
            json!({
                "description": format!("partially update the specified {}", r.kind),
                "operationId": id("patch", ""),
                "parameters": write_params(true),
                "requestBody": patch_body,
                "responses": json_response(schema_name),
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
            }),
        );
    }
    if has("delete") {
        item.insert(
            "delete".into(),
            json!({
                "description": format!("delete a {}", r.kind),
                "operationId": id("delete", ""),
                "requestBody": body_of("io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"),
                "responses": json_response("io.k8s.apimachinery.pkg.apis.meta.v1.Status"),
                "x-kubernetes-action": "delete",
                "x-kubernetes-group-version-kind": gvk,
            }),
        );
    }
    if !item.is_empty() {
        item.insert("parameters".into(), Value::Array(item_params.clone()));
        paths.insert(format!("{collection}/{{name}}"), Value::Object(item));
    }

    // Subresources: get, put, patch.
    let mut subresource = |sub: &str, name: &str, sub_gvk: &Value, builtin_patch: bool| {
        let cap = capitalize(sub);
        let mut body = patch_body.clone();
        if !builtin_patch
            && let Some(content) = body.get_mut("content").and_then(Value::as_object_mut)
        {
            content.remove("application/strategic-merge-patch+json");
        }
        paths.insert(
            format!("{collection}/{{name}}/{sub}"),
            json!({
                "get": {
                    "description": format!("read {sub} of the specified {}", r.kind),
                    "operationId": id("read", &cap),
                    "responses": json_response(name),
                    "x-kubernetes-action": "get",
                    "x-kubernetes-group-version-kind": sub_gvk,
                },
                "put": {
                    "description": format!("replace {sub} of the specified {}", r.kind),
                    "operationId": id("replace", &cap),
                    "parameters": write_params(false),
                    "requestBody": body_of(name),
                    "responses": json_response(name),
                    "x-kubernetes-action": "put",
                    "x-kubernetes-group-version-kind": sub_gvk,
                },
                "patch": {
                    "description": format!("partially update {sub} of the specified {}", r.kind),
                    "operationId": id("patch", &cap),
                    "parameters": write_params(true),
                    "requestBody": body,
                    "responses": json_response(name),
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": sub_gvk,
                },
                "parameters": item_params.clone(),
            }),
        );
    };
    if r.status_subresource {
        subresource("status", schema_name, &gvk, r.builtin);
    }
    if r.scale.is_some() {
        subresource(
            "scale",
            SCALE_NAME,
            &json!({"group": "autoscaling", "version": "v1", "kind": "Scale"}),
            r.builtin,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::builtin::builtin_resources;
    use crate::api::crd::resources_from_crd;

    fn subscription_crd(feeds_description: &str) -> Value {
        json!({
            "metadata": {"name": "subscriptions.apps.atoll.dev"},
            "spec": {
                "group": "apps.atoll.dev", "scope": "Namespaced",
                "names": {"kind": "Subscription", "plural": "subscriptions", "shortNames": ["sub"]},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                    "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                    "schema": {"openAPIV3Schema": {"type": "object", "description": "A Subscription.", "properties": {
                        "spec": {"type": "object", "properties": {
                            "feeds": {"type": "array", "description": feeds_description,
                                      "items": {"type": "object", "properties": {"kind": {"type": "string"}, "name": {"type": "string"}}}},
                            "replicas": {"type": "integer"}}},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]
            }
        })
    }

    fn registry(feeds_description: &str) -> Vec<ResourceInfo> {
        let mut all = builtin_resources();
        all.extend(resources_from_crd(&subscription_crd(feeds_description)));
        all
    }

    fn doc(all: &[ResourceInfo], key: &str) -> (Value, String) {
        openapi_v3_document(all, key).unwrap_or_else(|| panic!("no document for {key}"))
    }

    #[test]
    fn keys_parse_and_unknown_group_versions_have_no_document() {
        assert_eq!(parse_key("api/v1"), Some((String::new(), "v1".into())));
        assert_eq!(
            parse_key("apis/apps/v1"),
            Some(("apps".into(), "v1".into()))
        );
        assert_eq!(parse_key("apis/apps"), None);
        assert_eq!(parse_key("version"), None);
        let all = registry("feeds");
        assert!(openapi_v3_document(&all, "apis/nope.io/v1").is_none());
        assert!(openapi_v3_document(&all, "garbage").is_none());
    }

    #[test]
    fn index_lists_every_group_version_with_its_hash() {
        let all = registry("feeds");
        let index = openapi_v3_index(&all);
        let paths = index["paths"].as_object().cloned().unwrap_or_default();
        let keys: Vec<&str> = paths.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "api/v1",
                "apis/admissionregistration.k8s.io/v1",
                "apis/apiextensions.k8s.io/v1",
                "apis/apps.atoll.dev/v1alpha1",
                "apis/apps/v1",
                "apis/batch/v1",
                "apis/coordination.k8s.io/v1",
                "apis/events.k8s.io/v1",
                "apis/rbac.authorization.k8s.io/v1"
            ]
        );
        let (d, hash) = doc(&all, "apis/apps/v1");
        assert_eq!(hash.len(), 128);
        assert!(
            hash.chars()
                .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
        );
        assert_eq!(
            hash,
            upper_hex_sha512(&serde_json::to_vec(&d).unwrap_or_default())
        );
        assert_eq!(
            paths["apis/apps/v1"]["serverRelativeURL"],
            format!("/openapi/v3/apis/apps/v1?hash={hash}")
        );
    }

    #[test]
    fn index_hash_changes_when_a_crd_schema_changes() {
        let before = openapi_v3_index(&registry("feeds"));
        let after = openapi_v3_index(&registry("the feeds to distribute"));
        let key = "apis/apps.atoll.dev/v1alpha1";
        assert_ne!(before["paths"][key], after["paths"][key]);
        assert_eq!(
            before["paths"]["apis/apps/v1"],
            after["paths"]["apis/apps/v1"]
        );
        assert_eq!(openapi_v3_index(&registry("feeds")), before);
        assert_eq!(index_of(&openapi_v3_documents(&registry("feeds"))), before);
    }

    /// kubectl 1.32's server-side validation check (§2.2): a PATCH operation whose
    /// x-kubernetes-group-version-kind object matches and which has a fieldValidation
    /// query parameter.
    fn patch_op<'a>(doc: &'a Value, group: &str, version: &str, kind: &str) -> Option<&'a Value> {
        doc["paths"].as_object()?.values().find_map(|p| {
            let op = p.get("patch")?;
            (op["x-kubernetes-group-version-kind"]
                == json!({"group": group, "version": version, "kind": kind}))
            .then_some(op)
        })
    }

    #[test]
    fn every_kind_has_a_patch_operation_with_field_validation() {
        let all = registry("feeds");
        for r in &all {
            let (d, _) = doc(&all, &key_of(&r.group, &r.version));
            let op = patch_op(&d, &r.group, &r.version, &r.kind)
                .unwrap_or_else(|| panic!("no PATCH for {}", r.kind));
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            assert!(
                params
                    .iter()
                    .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"),
                "{}",
                r.kind
            );
            let content = op["requestBody"]["content"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            assert_eq!(
                content.contains_key("application/strategic-merge-patch+json"),
                r.builtin,
                "{}",
                r.kind
            );
            assert!(content.contains_key("application/apply-patch+yaml"));
            // kubectl explain: a component whose GVK list contains the kind.
            let schemas = d["components"]["schemas"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            let gvk = json!({"group": r.group, "kind": r.kind, "version": r.version});
            assert!(
                schemas
                    .values()
                    .any(|s| s["x-kubernetes-group-version-kind"]
                        .as_array()
                        .is_some_and(|l| l.contains(&gvk))),
                "{}",
                r.kind
            );
        }
    }

    fn collect_refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    if k == "$ref" {
                        if let Some(s) = x.as_str() {
                            out.push(s.to_string());
                        }
                    } else {
                        collect_refs(x, out);
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn every_ref_resolves_to_a_component() {
        let all = registry("feeds");
        let index = openapi_v3_index(&all);
        for key in index["paths"]
            .as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            let (d, _) = doc(&all, &key);
            let mut refs = Vec::new();
            collect_refs(&d, &mut refs);
            assert!(!refs.is_empty());
            for r in refs {
                let name = r
                    .strip_prefix("#/components/schemas/")
                    .unwrap_or_else(|| panic!("{key}: foreign ref {r}"));
                assert!(d["components"]["schemas"].get(name).is_some(), "{key}: {r}");
            }
        }
    }

    #[test]
    fn builtin_schemas_carry_patch_strategies() {
        let all = registry("feeds");
        let (core, _) = doc(&all, "api/v1");
        let schemas = &core["components"]["schemas"];
        let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(containers["x-kubernetes-list-type"], "map");
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
        assert_eq!(
            schemas["io.k8s.api.core.v1.Container"]["properties"]["env"]["x-kubernetes-patch-merge-key"],
            "name"
        );
        assert_eq!(
            schemas["io.k8s.api.core.v1.ServiceSpec"]["properties"]["ports"]["x-kubernetes-list-map-keys"],
            json!(["port", "protocol"])
        );
        let cm = &schemas["io.k8s.api.core.v1.ConfigMap"];
        assert!(
            cm.get("required").is_none(),
            "metadata must not be required"
        );
        assert_eq!(
            cm["x-kubernetes-group-version-kind"],
            json!([{"group": "", "kind": "ConfigMap", "version": "v1"}])
        );
        assert_eq!(
            cm["properties"]["metadata"]["allOf"][0]["$ref"],
            OBJECT_META_REF
        );
        let (apps, _) = doc(&all, "apis/apps/v1");
        assert!(
            apps["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
                ["x-kubernetes-patch-merge-key"]
                == "name"
        );
        assert!(
            apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["patch"]
                .is_object()
        );
        assert_eq!(apps["info"]["title"], "Kubernetes");
    }

    #[test]
    fn crd_document_embeds_the_schema_for_explain() {
        let all = registry("the feeds to distribute");
        let (d, _) = doc(&all, "apis/apps.atoll.dev/v1alpha1");
        assert_eq!(d["info"]["title"], "Kubernetes CRD Swagger");
        let s = &d["components"]["schemas"]["dev.atoll.apps.v1alpha1.Subscription"];
        assert_eq!(
            s["x-kubernetes-group-version-kind"],
            json!([{"group": "apps.atoll.dev", "kind": "Subscription", "version": "v1alpha1"}])
        );
        assert_eq!(
            s["properties"]["spec"]["properties"]["feeds"]["description"],
            "the feeds to distribute"
        );
        assert_eq!(
            s["properties"]["metadata"]["allOf"][0]["$ref"],
            OBJECT_META_REF
        );
        assert_eq!(s["properties"]["kind"]["type"], "string");
        assert!(d["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["name"].is_object());
        let paths = d["paths"].as_object().cloned().unwrap_or_default();
        for p in [
            "/apis/apps.atoll.dev/v1alpha1/subscriptions",
            "/apis/apps.atoll.dev/v1alpha1/namespaces/{namespace}/subscriptions",
            "/apis/apps.atoll.dev/v1alpha1/namespaces/{namespace}/subscriptions/{name}",
            "/apis/apps.atoll.dev/v1alpha1/namespaces/{namespace}/subscriptions/{name}/status",
            "/apis/apps.atoll.dev/v1alpha1/namespaces/{namespace}/subscriptions/{name}/scale",
        ] {
            assert!(paths.contains_key(p), "{p}");
        }
        let scale_patch = &paths["/apis/apps.atoll.dev/v1alpha1/namespaces/{namespace}/subscriptions/{name}/scale"]
            ["patch"];
        assert!(
            scale_patch["requestBody"]["content"]
                .get("application/strategic-merge-patch+json")
                .is_none()
        );
    }

    #[test]
    fn cluster_scoped_kinds_have_no_namespace_paths() {
        let all = registry("feeds");
        let (d, _) = doc(&all, "api/v1");
        let paths = d["paths"].as_object().cloned().unwrap_or_default();
        assert!(paths.contains_key("/api/v1/namespaces/{name}"));
        assert!(paths.contains_key("/api/v1/namespaces/{namespace}/configmaps/{name}"));
        assert!(paths.contains_key("/api/v1/configmaps"));
        assert!(paths.contains_key("/api/v1/nodes/{name}/status"));
        // namespaces have no deletecollection verb
        assert!(paths["/api/v1/namespaces"].get("delete").is_none());
    }
}
