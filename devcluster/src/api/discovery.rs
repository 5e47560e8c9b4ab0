//! Discovery documents: legacy (`APIVersions`, `APIGroupList`, `APIGroup`, `APIResourceList`)
//! and aggregated (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`), all derived from the
//! resource registry.
//!
//! Groups are listed in kube-apiserver's priority order ([`GROUP_PRIORITY`], then the rest by
//! name); versions of a group in Kubernetes version order (`v2`, `v1`, `v1beta2`, `v1beta1`,
//! `v1alpha1`, then others by name), so the first is the preferred one; resources by name.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use base64::Engine;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::builtin::GROUP_PRIORITY;
use super::resource::ResourceInfo;

/// The `Content-Type` of an aggregated discovery response (client-go decides the format by it).
pub const AGGREGATED_CONTENT_TYPE: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Verbs of the `status` and `scale` subresources.
pub const SUBRESOURCE_VERBS: &[&str] = &["get", "patch", "update"];

/// Whether an `Accept` header asks for aggregated discovery v2: true if a
/// `g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList` entry comes before any plain JSON
/// (or wildcard) entry. `v2beta1` is not served.
pub fn wants_aggregated(accept: &str) -> bool {
    for entry in accept.split(',') {
        let mut parts = entry.split(';').map(str::trim);
        let media = parts.next().unwrap_or_default().to_ascii_lowercase();
        let params: BTreeMap<String, String> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        let g = params.get("g").map(String::as_str);
        let v = params.get("v").map(String::as_str);
        let as_ = params.get("as").map(String::as_str);
        match (media.as_str(), g, v, as_) {
            (
                "application/json",
                Some("apidiscovery.k8s.io"),
                Some("v2"),
                Some("APIGroupDiscoveryList"),
            ) => {
                return true;
            }
            ("application/json" | "*/*" | "application/*", None, _, None) => return false,
            _ => {}
        }
    }
    false
}

/// `base64(sha256("group/version/Kind")[:8])`, the `storageVersionHash` of discovery.
pub fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    let digest = Sha256::digest(format!("{group}/{version}/{kind}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&digest[..8])
}

/// Orders Kubernetes versions by priority: GA before beta before alpha, higher numbers first,
/// versions that do not look like Kubernetes versions last, by name.
pub fn compare_kube_versions(a: &str, b: &str) -> Ordering {
    match (parse_kube_version(a), parse_kube_version(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// `(stability, major, minor)` with stability 2 = GA, 1 = beta, 0 = alpha; larger is preferred.
fn parse_kube_version(v: &str) -> Option<(u8, u64, u64)> {
    let rest = v.strip_prefix('v')?;
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (major, tail) = rest.split_at(digits_end);
    if major.is_empty() || major.starts_with('0') {
        return None;
    }
    let major: u64 = major.parse().ok()?;
    if tail.is_empty() {
        return Some((2, major, 0));
    }
    let (stability, num) = if let Some(n) = tail.strip_prefix("beta") {
        (1, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (0, n)
    } else {
        return None;
    };
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit()) || num.starts_with('0') {
        return None;
    }
    Some((stability, major, num.parse().ok()?))
}

/// The non-core groups with their versions, in discovery order (preferred version first).
pub fn groups(resources: &[ResourceInfo]) -> Vec<(String, Vec<String>)> {
    let mut by_group: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in resources.iter().filter(|r| !r.group.is_empty()) {
        let versions = by_group.entry(r.group.as_str()).or_default();
        if !versions.contains(&r.version.as_str()) {
            versions.push(r.version.as_str());
        }
    }
    let mut out: Vec<(String, Vec<String>)> = by_group
        .into_iter()
        .map(|(g, mut vs)| {
            vs.sort_by(|a, b| compare_kube_versions(a, b));
            (g.to_string(), vs.into_iter().map(str::to_string).collect())
        })
        .collect();
    let rank = |g: &str| {
        GROUP_PRIORITY
            .iter()
            .position(|p| *p == g)
            .unwrap_or(GROUP_PRIORITY.len())
    };
    out.sort_by(|(a, _), (b, _)| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
    out
}

/// The resources of one group-version, sorted by plural.
fn resources_of<'a>(
    resources: &'a [ResourceInfo],
    group: &str,
    version: &str,
) -> Vec<&'a ResourceInfo> {
    let mut rs: Vec<&ResourceInfo> = resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    rs.sort_by(|a, b| a.plural.cmp(&b.plural));
    rs
}

/// A subresource as discovery lists it; empty group/version = the parent's.
#[derive(Clone, Debug, PartialEq)]
pub struct Subresource {
    /// `status`, `scale`, `finalize`, `token`.
    pub name: &'static str,
    /// Group of the kind the subresource takes and returns.
    pub group: &'static str,
    /// Version of that kind.
    pub version: &'static str,
    /// That kind.
    pub kind: String,
    /// Served verbs.
    pub verbs: &'static [&'static str],
}

/// The subresources of `r`, by name: `finalize` (built-in Namespace, `update`), `scale`,
/// `status`, `token` (built-in ServiceAccount, `create` of an authentication.k8s.io/v1
/// TokenRequest).
pub fn subresources(r: &ResourceInfo) -> Vec<Subresource> {
    let core_kind = |k: &str| r.builtin && r.group.is_empty() && r.kind == k;
    let mut out = Vec::new();
    if core_kind("Namespace") {
        out.push(Subresource {
            name: "finalize",
            group: "",
            version: "",
            kind: r.kind.clone(),
            verbs: &["update"],
        });
    }
    if r.scale.is_some() {
        out.push(Subresource {
            name: "scale",
            group: "autoscaling",
            version: "v1",
            kind: "Scale".to_string(),
            verbs: SUBRESOURCE_VERBS,
        });
    }
    if r.status_subresource {
        out.push(Subresource {
            name: "status",
            group: "",
            version: "",
            kind: r.kind.clone(),
            verbs: SUBRESOURCE_VERBS,
        });
    }
    if core_kind("ServiceAccount") {
        out.push(Subresource {
            name: "token",
            group: "authentication.k8s.io",
            version: "v1",
            kind: "TokenRequest".to_string(),
            verbs: &["create"],
        });
    }
    out
}

fn strs(v: &[&str]) -> Value {
    json!(v)
}

/// `GET /apis` or `GET /api` in aggregated form (`APIGroupDiscoveryList`, apidiscovery v2).
/// `core` selects the core group (one item without a name) instead of the named groups.
pub fn aggregated_discovery(resources: &[ResourceInfo], core: bool) -> Value {
    let items: Vec<Value> = if core {
        let mut versions: Vec<&str> = Vec::new();
        for r in resources.iter().filter(|r| r.group.is_empty()) {
            if !versions.contains(&r.version.as_str()) {
                versions.push(r.version.as_str());
            }
        }
        versions.sort_by(|a, b| compare_kube_versions(a, b));
        if versions.is_empty() {
            Vec::new()
        } else {
            vec![json!({
                "metadata": {"creationTimestamp": null},
                "versions": versions.iter().map(|v| aggregated_version(resources, "", v)).collect::<Vec<_>>(),
            })]
        }
    } else {
        groups(resources)
            .iter()
            .map(|(g, vs)| {
                json!({
                    "metadata": {"name": g, "creationTimestamp": null},
                    "versions": vs.iter().map(|v| aggregated_version(resources, g, v)).collect::<Vec<_>>(),
                })
            })
            .collect()
    };
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

fn aggregated_version(resources: &[ResourceInfo], group: &str, version: &str) -> Value {
    let rs: Vec<Value> = resources_of(resources, group, version)
        .into_iter()
        .map(|r| {
            let mut m = Map::new();
            m.insert("resource".into(), json!(r.plural));
            m.insert(
                "responseKind".into(),
                json!({"group": "", "version": "", "kind": r.kind}),
            );
            m.insert(
                "scope".into(),
                json!(if r.namespaced {
                    "Namespaced"
                } else {
                    "Cluster"
                }),
            );
            m.insert("singularResource".into(), json!(r.singular));
            m.insert("verbs".into(), json!(r.verbs));
            if !r.short_names.is_empty() {
                m.insert("shortNames".into(), json!(r.short_names));
            }
            if !r.categories.is_empty() {
                m.insert("categories".into(), json!(r.categories));
            }
            let subs: Vec<Value> = subresources(r)
                .into_iter()
                .map(|sub| {
                    json!({
                        "subresource": sub.name,
                        "responseKind": {"group": sub.group, "version": sub.version, "kind": sub.kind},
                        "verbs": strs(sub.verbs),
                    })
                })
                .collect();
            if !subs.is_empty() {
                m.insert("subresources".into(), Value::Array(subs));
            }
            Value::Object(m)
        })
        .collect();
    json!({"version": version, "resources": rs, "freshness": "Current"})
}

/// `GET /api` in legacy form (`APIVersions`).
pub fn legacy_api_versions() -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}
        ],
    })
}

fn group_entry(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": vs, "preferredVersion": preferred})
}

/// `GET /apis` in legacy form (`APIGroupList`).
pub fn legacy_group_list(resources: &[ResourceInfo]) -> Value {
    let gs: Vec<Value> = groups(resources)
        .iter()
        .map(|(g, vs)| group_entry(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": gs})
}

/// `GET /apis/{group}` (`APIGroup`), `None` if the group is not served.
pub fn legacy_group(resources: &[ResourceInfo], group: &str) -> Option<Value> {
    let (g, vs) = groups(resources).into_iter().find(|(g, _)| g == group)?;
    let mut v = group_entry(&g, &vs);
    if let Value::Object(m) = &mut v {
        m.insert("kind".into(), json!("APIGroup"));
        m.insert("apiVersion".into(), json!("v1"));
    }
    Some(v)
}

/// `GET /api/v1` (`group` = `""`) or `GET /apis/{group}/{version}` (`APIResourceList`), with
/// `…/status` and `…/scale` entries; `None` if the group-version is not served.
pub fn legacy_resource_list(
    resources: &[ResourceInfo],
    group: &str,
    version: &str,
) -> Option<Value> {
    let rs = resources_of(resources, group, version);
    if rs.is_empty() {
        return None;
    }
    let mut entries = Vec::new();
    for r in rs {
        let mut m = Map::new();
        m.insert("name".into(), json!(r.plural));
        m.insert("singularName".into(), json!(r.singular));
        m.insert("namespaced".into(), json!(r.namespaced));
        m.insert("kind".into(), json!(r.kind));
        m.insert("verbs".into(), json!(r.verbs));
        if !r.short_names.is_empty() {
            m.insert("shortNames".into(), json!(r.short_names));
        }
        if !r.categories.is_empty() {
            m.insert("categories".into(), json!(r.categories));
        }
        m.insert(
            "storageVersionHash".into(),
            json!(storage_version_hash(&r.group, &r.version, &r.kind)),
        );
        entries.push(Value::Object(m));
        for sub in subresources(r) {
            let mut m = Map::new();
            m.insert("name".into(), json!(format!("{}/{}", r.plural, sub.name)));
            m.insert("singularName".into(), json!(""));
            m.insert("namespaced".into(), json!(r.namespaced));
            if !sub.group.is_empty() || !sub.version.is_empty() {
                m.insert("group".into(), json!(sub.group));
                m.insert("version".into(), json!(sub.version));
            }
            m.insert("kind".into(), json!(sub.kind));
            m.insert("verbs".into(), strs(sub.verbs));
            entries.push(Value::Object(m));
        }
    }
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::builtin::builtin_resources;
    use crate::api::crd::resources_from_crd;

    const KUBECTL_ACCEPT: &str = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";

    fn widget_crd(versions: Value) -> Value {
        json!({
            "metadata": {"name": "widgets.example.com"},
            "spec": {
                "group": "example.com", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
                "versions": versions,
            }
        })
    }

    fn registry() -> Vec<ResourceInfo> {
        let mut all = builtin_resources();
        all.extend(resources_from_crd(&widget_crd(json!([
            {"name": "v1alpha1", "served": true, "storage": false},
            {"name": "v1", "served": true, "storage": true,
             "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}}},
            {"name": "v1beta1", "served": true, "storage": false}
        ]))));
        all
    }

    #[test]
    fn wants_aggregated_follows_accept_order() {
        let cases = [
            (KUBECTL_ACCEPT, true),
            ("application/json", false),
            ("", false),
            (
                "application/json, application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
                false,
            ),
            (
                "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json",
                false,
            ),
            (
                "application/json; g=apidiscovery.k8s.io; v=v2; as=APIGroupDiscoveryList",
                true,
            ),
        ];
        for (accept, want) in cases {
            assert_eq!(wants_aggregated(accept), want, "{accept}");
        }
    }

    #[test]
    fn storage_version_hash_matches_kube_apiserver() {
        assert_eq!(
            storage_version_hash("apps", "v1", "Deployment"),
            "8aSe+NMegvE="
        );
    }

    #[test]
    fn kube_versions_sort_by_priority() {
        let mut vs = vec![
            "v1alpha1", "foo", "v1", "v2beta1", "v1beta2", "v2", "v1beta1", "v10", "bar",
        ];
        vs.sort_by(|a, b| compare_kube_versions(a, b));
        assert_eq!(
            vs,
            [
                "v10", "v2", "v1", "v2beta1", "v1beta2", "v1beta1", "v1alpha1", "bar", "foo"
            ]
        );
    }

    fn every_resource_and_subresource(doc: &Value) -> Vec<Value> {
        let mut out = Vec::new();
        for item in doc["items"].as_array().cloned().unwrap_or_default() {
            for v in item["versions"].as_array().cloned().unwrap_or_default() {
                for r in v["resources"].as_array().cloned().unwrap_or_default() {
                    for s in r["subresources"].as_array().cloned().unwrap_or_default() {
                        out.push(s);
                    }
                    out.push(r);
                }
            }
        }
        out
    }

    #[test]
    fn aggregated_has_response_kind_on_every_resource_and_subresource() {
        let all = registry();
        for core in [true, false] {
            let doc = aggregated_discovery(&all, core);
            assert_eq!(doc["kind"], "APIGroupDiscoveryList");
            assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2");
            let entries = every_resource_and_subresource(&doc);
            assert!(entries.len() > 5);
            for e in entries {
                assert!(e["responseKind"]["kind"].is_string(), "{e}");
                assert!(e["responseKind"]["group"].is_string(), "{e}");
                assert!(e["responseKind"]["version"].is_string(), "{e}");
            }
        }
    }

    #[test]
    fn aggregated_core_is_one_unnamed_group() {
        let doc = aggregated_discovery(&registry(), true);
        let items = doc["items"].as_array().cloned().unwrap_or_default();
        assert_eq!(items.len(), 1);
        assert!(items[0]["metadata"].get("name").is_none());
        let v1 = &items[0]["versions"][0];
        assert_eq!(v1["version"], "v1");
        assert_eq!(v1["freshness"], "Current");
        let names: Vec<&str> = v1["resources"]
            .as_array()
            .map(|a| a.iter().filter_map(|r| r["resource"].as_str()).collect())
            .unwrap_or_default();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert!(names.contains(&"configmaps"));
    }

    #[test]
    fn aggregated_groups_in_priority_order_with_preferred_version_first() {
        let doc = aggregated_discovery(&registry(), false);
        let groups: Vec<String> = doc["items"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            groups,
            [
                "apps",
                "events.k8s.io",
                "batch",
                "rbac.authorization.k8s.io",
                "admissionregistration.k8s.io",
                "apiextensions.k8s.io",
                "coordination.k8s.io",
                "example.com"
            ]
        );
        let example = &doc["items"][7];
        let versions: Vec<&str> = example["versions"]
            .as_array()
            .map(|a| a.iter().filter_map(|v| v["version"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(versions, ["v1", "v1beta1", "v1alpha1"]);
    }

    #[test]
    fn crd_with_status_and_scale_shows_both_subresources() {
        let doc = aggregated_discovery(&registry(), false);
        let widgets = &doc["items"][7]["versions"][0]["resources"][0];
        assert_eq!(widgets["resource"], "widgets");
        assert_eq!(widgets["scope"], "Namespaced");
        assert_eq!(widgets["singularResource"], "widget");
        assert_eq!(widgets["shortNames"], json!(["wd"]));
        assert_eq!(
            widgets["subresources"],
            json!([
                {"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"}, "verbs": ["get", "patch", "update"]},
                {"subresource": "status", "responseKind": {"group": "", "version": "", "kind": "Widget"}, "verbs": ["get", "patch", "update"]}
            ])
        );
        let legacy = legacy_resource_list(&registry(), "example.com", "v1").unwrap_or_default();
        let names: Vec<&str> = legacy["resources"]
            .as_array()
            .map(|a| a.iter().filter_map(|r| r["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(names, ["widgets", "widgets/scale", "widgets/status"]);
    }

    #[test]
    fn legacy_resource_list_matches_real_deployment_entries() {
        let list = legacy_resource_list(&registry(), "apps", "v1").unwrap_or_default();
        assert_eq!(list["groupVersion"], "apps/v1");
        assert_eq!(list["kind"], "APIResourceList");
        let rs = list["resources"].as_array().cloned().unwrap_or_default();
        let at = |name: &str| {
            rs.iter()
                .find(|r| r["name"] == name)
                .cloned()
                .unwrap_or_default()
        };
        assert_eq!(
            at("deployments"),
            json!({"name":"deployments","singularName":"deployment","namespaced":true,"kind":"Deployment",
                   "verbs":["create","delete","deletecollection","get","list","patch","update","watch"],
                   "shortNames":["deploy"],"categories":["all"],"storageVersionHash":"8aSe+NMegvE="})
        );
        assert_eq!(
            at("deployments/scale"),
            json!({"name":"deployments/scale","singularName":"","namespaced":true,"group":"autoscaling","version":"v1",
                   "kind":"Scale","verbs":["get","patch","update"]})
        );
        assert_eq!(
            at("deployments/status"),
            json!({"name":"deployments/status","singularName":"","namespaced":true,"kind":"Deployment","verbs":["get","patch","update"]})
        );
        let core = legacy_resource_list(&registry(), "", "v1").unwrap_or_default();
        assert_eq!(core["groupVersion"], "v1");
        assert!(legacy_resource_list(&registry(), "apps", "v2").is_none());
    }

    #[test]
    fn namespaces_finalize_and_serviceaccounts_token_are_advertised() {
        let list = legacy_resource_list(&registry(), "", "v1").unwrap_or_default();
        let rs = list["resources"].as_array().cloned().unwrap_or_default();
        let at = |name: &str| {
            rs.iter()
                .find(|r| r["name"] == name)
                .cloned()
                .unwrap_or_default()
        };
        assert_eq!(
            at("namespaces/finalize"),
            json!({"name":"namespaces/finalize","singularName":"","namespaced":false,"kind":"Namespace","verbs":["update"]})
        );
        assert_eq!(
            at("serviceaccounts/token"),
            json!({"name":"serviceaccounts/token","singularName":"","namespaced":true,"group":"authentication.k8s.io",
                   "version":"v1","kind":"TokenRequest","verbs":["create"]})
        );
        let doc = aggregated_discovery(&registry(), true);
        let ns = doc["items"][0]["versions"][0]["resources"]
            .as_array()
            .and_then(|a| a.iter().find(|r| r["resource"] == "namespaces").cloned())
            .unwrap_or_default();
        let subs: Vec<&str> = ns["subresources"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s["subresource"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(subs, ["finalize", "status"]);
    }

    #[test]
    fn legacy_groups_list_preferred_version() {
        let all = registry();
        let list = legacy_group_list(&all);
        assert_eq!(list["kind"], "APIGroupList");
        assert_eq!(list["groups"][0]["name"], "apps");
        assert_eq!(
            list["groups"][0]["preferredVersion"],
            json!({"groupVersion": "apps/v1", "version": "v1"})
        );
        let g = legacy_group(&all, "example.com").unwrap_or_default();
        assert_eq!(g["kind"], "APIGroup");
        assert_eq!(g["preferredVersion"]["version"], "v1");
        assert_eq!(g["versions"].as_array().map(Vec::len), Some(3));
        assert!(legacy_group(&all, "nope.io").is_none());
        assert_eq!(legacy_api_versions()["versions"], json!(["v1"]));
    }
}
