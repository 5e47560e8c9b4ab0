//! A Description as the hub's watch reads it: what the hub uses and nothing it would build only
//! to drop. At start the hub lists every Description of the fleet (100,000 in the cold-start
//! benchmark, 282 MB of JSON), so the decode is most of its start-up work:
//! - `spec.raw` stays the JSON text stored (each object is a string of it), which is what the
//!   hub sends on to agents, rather than a tree of values encoded again for every Description;
//! - `metadata.managedFields` (each field manager's field set, about a third of a Description's
//!   bytes) is skipped by the parser, never built.

use atoll_crds::apps::{ChartReference, Description, DescriptionStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// A Description as the hub's watch reads it (see the module).
#[derive(Clone, Debug, Deserialize)]
pub struct WatchedDescription {
    /// `metadata`, without `managedFields`.
    #[serde(deserialize_with = "metadata_without_managed_fields")]
    pub metadata: ObjectMeta,
    /// The parts of `spec` the hub delivers.
    #[serde(default)]
    pub spec: WatchedSpec,
    /// `status`.
    #[serde(default)]
    pub status: Option<DescriptionStatus>,
}

/// The parts of a Description's `spec` the hub delivers.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchedSpec {
    /// `spec.raw`: each object's JSON text as received.
    #[serde(default, deserialize_with = "atoll_crds::json_text::deserialize_text")]
    pub raw: Vec<Box<RawValue>>,
    /// `spec.charts`: the HelmCharts the Subscription's feeds named, in `chartRaw`'s order.
    #[serde(default)]
    pub charts: Vec<ChartReference>,
    /// `spec.chartRaw`.
    #[serde(default, deserialize_with = "atoll_crds::json_text::deserialize")]
    pub chart_raw: Vec<Value>,
    /// `spec.chartValues`.
    #[serde(default, deserialize_with = "atoll_crds::json_text::deserialize")]
    pub chart_values: Vec<Value>,
}

/// `ObjectMeta`'s fields but `managedFields`, which serde skips over without building.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetadataWithoutManagedFields {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

fn metadata_without_managed_fields<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<ObjectMeta, D::Error> {
    let m = MetadataWithoutManagedFields::deserialize(deserializer)?;
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
    })
}

impl Resource for WatchedDescription {
    type DynamicType = ();
    type Scope = <Description as Resource>::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Description::kind(dt)
    }

    fn group(dt: &()) -> Cow<'_, str> {
        Description::group(dt)
    }

    fn version(dt: &()) -> Cow<'_, str> {
        Description::version(dt)
    }

    fn plural(dt: &()) -> Cow<'_, str> {
        Description::plural(dt)
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl WatchedDescription {
    /// The watched form of a whole Description (for tests and tools; the watch decodes its
    /// form directly).
    pub fn from_description(d: &Description) -> Result<WatchedDescription, serde_json::Error> {
        serde_json::to_value(d).and_then(serde_json::from_value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watched_form_keeps_what_the_hub_uses_and_the_objects_as_received() {
        // Written as an API server writes it: the object's keys in its own order.
        let text = r#"{"apiVersion":"apps.clusternet.io/v1alpha1","kind":"Description",
            "metadata":{"name":"default.web","namespace":"clusternet-a","uid":"u1",
                "resourceVersion":"7","generation":2,"labels":{"l":"v"},
                "finalizers":["apps.clusternet.io/description-cleanup"],
                "deletionTimestamp":"2026-12-03T10:00:00Z",
                "managedFields":[{"manager":"atoll-scheduler","operation":"Apply",
                    "fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:raw":{}}}}]},
            "spec":{"deployer":"Generic","raw":["{\"kind\":\"ConfigMap\",\"data\":{\"b\":\"1\",\"a\":\"2\"}}",
                {"kind":"Secret"}, "not json"]},
            "status":{"phase":"Success"}}"#;
        let w: WatchedDescription = serde_json::from_str(text).unwrap();
        assert_eq!(w.metadata.name.as_deref(), Some("default.web"));
        assert_eq!(w.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(w.metadata.generation, Some(2));
        assert!(w.metadata.deletion_timestamp.is_some());
        assert_eq!(w.metadata.finalizers.as_ref().map(Vec::len), Some(1));
        assert!(w.metadata.managed_fields.is_none());
        // The object's text as stored (key order kept), and an object stored in the earlier
        // form as the API server wrote it.
        assert_eq!(
            w.spec.raw[0].get(),
            r#"{"kind":"ConfigMap","data":{"b":"1","a":"2"}}"#
        );
        assert_eq!(w.spec.raw[1].get(), r#"{"kind":"Secret"}"#);
        // A hand edit that is not JSON decodes (as the string, which no agent takes for an
        // object), so one Description cannot break the watch of all.
        assert_eq!(w.spec.raw[2].get(), r#""not json""#);
        assert!(w.status.is_some_and(|s| s.phase.is_some()));
    }
}
