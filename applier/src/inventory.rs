//! The inventory: what each Description applied, kept in the child cluster as one labelled
//! ConfigMap per Description in `clusternet-system`, so that pruning works across agent
//! restarts and missed deletions.

use crate::Error;
use crate::model::{LABEL_MANAGED_BY, MANAGED_BY_AGENT, ObjectRef};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Default namespace holding the inventories (and the agent's other state).
pub const NAMESPACE: &str = atoll_crds::known::NAMESPACE_SYSTEM;
/// Label marking an inventory ConfigMap (value `"true"`).
pub const LABEL_INVENTORY: &str = "apps.clusternet.io/inventory";
/// Label selector of every inventory ConfigMap.
pub const INVENTORY_SELECTOR: &str = "apps.clusternet.io/inventory=true";

/// Data key of an inventory ConfigMap listing its Helm releases (absent when there are none).
const DATA_RELEASES: &str = "releases";
/// Data key of an inventory ConfigMap recording an `Orphan` deletion policy.
const DATA_DELETION_POLICY: &str = "deletionPolicy";
/// Data key of an inventory ConfigMap listing the objects its Description deleted lately
/// (absent when there are none).
const DATA_DELETED: &str = "deleted";
/// Data key of an inventory ConfigMap whose Description is gone (`"true"`; absent otherwise).
const DATA_REMOVED: &str = "removed";

/// One object a Description applied.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The object.
    #[serde(flatten)]
    pub object: ObjectRef,
    /// Fields the agent left to another field manager (server-side-apply conflict paths).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub yielded: Vec<String>,
}

/// An object a Description deleted lately, and when: an applier started since still deletes it
/// again when a write sent before the deletion lands late and brings it back.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeletedEntry {
    /// The object.
    #[serde(flatten)]
    pub object: ObjectRef,
    /// When it was deleted (RFC 3339).
    pub at: String,
}

/// One Helm release a Description installed (or is about to: an empty digest records the
/// intent, before Helm runs).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReleaseEntry {
    /// The release name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// [`crate::helm::Release::digest`] of what was last installed; empty before the first
    /// install completed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub digest: String,
}

impl ReleaseEntry {
    /// Whether this is the release `name` in `namespace`.
    pub fn is(&self, namespace: &str, name: &str) -> bool {
        self.namespace == namespace && self.name == name
    }
}

/// What one Description applied.
#[derive(Clone, Debug, PartialEq)]
pub struct Inventory {
    /// The owner key `<description-namespace>.<description-name>`.
    pub description: String,
    /// The Description's uid.
    pub uid: String,
    /// The objects.
    pub objects: Vec<Entry>,
    /// The Helm releases.
    pub releases: Vec<ReleaseEntry>,
    /// The Description's objects are orphaned, not deleted, when they leave the cluster (kept
    /// here so that a Description that vanished while the agent was away is still orphaned).
    pub orphan: bool,
    /// The objects it deleted lately.
    pub deleted: Vec<DeletedEntry>,
    /// The Description is gone with all its objects: the inventory is kept only for `deleted`,
    /// until those deletions are no longer remembered, so that an applier started meanwhile
    /// still deletes an object a late write brings back.
    pub removed: bool,
}

/// The ConfigMap name of a Description's inventory: stable, short and valid whatever the
/// Description name.
pub fn config_map_name(description: &str) -> String {
    let digest = Sha256::digest(description.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("atoll-inventory-{hex}")
}

/// Encodes an inventory as a ConfigMap in `namespace`.
pub fn to_config_map(inventory: &Inventory, namespace: &str) -> ConfigMap {
    let objects = serde_json::to_string(&inventory.objects).unwrap_or_else(|_| "[]".to_owned());
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(config_map_name(&inventory.description)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([
                (LABEL_MANAGED_BY.to_owned(), MANAGED_BY_AGENT.to_owned()),
                (LABEL_INVENTORY.to_owned(), "true".to_owned()),
            ])),
            annotations: Some(BTreeMap::from([(
                atoll_crds::known::ANNOTATION_OWNED_BY_DESCRIPTION.to_owned(),
                inventory.description.clone(),
            )])),
            ..ObjectMeta::default()
        },
        data: Some({
            let mut data = BTreeMap::from([
                ("description".to_owned(), inventory.description.clone()),
                ("uid".to_owned(), inventory.uid.clone()),
                ("objects".to_owned(), objects),
            ]);
            if !inventory.releases.is_empty() {
                data.insert(
                    DATA_RELEASES.to_owned(),
                    serde_json::to_string(&inventory.releases).unwrap_or_else(|_| "[]".to_owned()),
                );
            }
            if !inventory.deleted.is_empty() {
                data.insert(
                    DATA_DELETED.to_owned(),
                    serde_json::to_string(&inventory.deleted).unwrap_or_else(|_| "[]".to_owned()),
                );
            }
            if inventory.removed {
                data.insert(DATA_REMOVED.to_owned(), "true".to_owned());
            }
            if inventory.orphan {
                data.insert(
                    DATA_DELETION_POLICY.to_owned(),
                    atoll_crds::known::DELETION_POLICY_ORPHAN.to_owned(),
                );
            }
            data
        }),
        ..ConfigMap::default()
    }
}

/// Decodes an inventory ConfigMap; `None` when it is not one.
pub fn from_config_map(cm: &ConfigMap) -> Option<Inventory> {
    let data = cm.data.as_ref()?;
    let description = data.get("description")?.clone();
    let objects = serde_json::from_str(data.get("objects").map_or("[]", String::as_str)).ok()?;
    Some(Inventory {
        description,
        uid: data.get("uid").cloned().unwrap_or_default(),
        objects,
        releases: serde_json::from_str(data.get(DATA_RELEASES).map_or("[]", String::as_str))
            .ok()?,
        orphan: crate::model::orphans(data.get(DATA_DELETION_POLICY)),
        // Only a safeguard: an unreadable list does not make the inventory unreadable.
        deleted: data
            .get(DATA_DELETED)
            .and_then(|d| serde_json::from_str(d).ok())
            .unwrap_or_default(),
        removed: data.get(DATA_REMOVED).is_some_and(|v| v == "true"),
    })
}

/// Reads and writes the inventories of one child cluster.
#[derive(Clone)]
pub struct Store {
    client: kube::Client,
    api: Api<ConfigMap>,
    field_manager: String,
    namespace: String,
}

impl Store {
    /// A store in `namespace`, writing with `field_manager`.
    pub fn new(client: kube::Client, field_manager: &str, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client.clone(), namespace),
            client,
            field_manager: field_manager.to_owned(),
            namespace: namespace.to_owned(),
        }
    }

    /// The namespace of the inventories.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Every inventory in the cluster.
    pub async fn list(&self) -> Result<Vec<Inventory>, Error> {
        let list = match self
            .api
            .list(&ListParams::default().labels(INVENTORY_SELECTOR))
            .await
        {
            Ok(list) => list,
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Vec::new()),
            Err(e) => return Err(Error::ListInventory(e)),
        };
        Ok(list.items.iter().filter_map(from_config_map).collect())
    }

    /// Writes (creates or replaces) an inventory.
    pub async fn write(&self, inventory: &Inventory) -> Result<(), Error> {
        let cm = to_config_map(inventory, &self.namespace);
        let name = config_map_name(&inventory.description);
        let params = PatchParams::apply(&self.field_manager).force();
        let err = |source| Error::WriteInventory {
            description: inventory.description.clone(),
            source,
        };
        match self.api.patch(&name, &params, &Patch::Apply(&cm)).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => {
                self.ensure_namespace().await.map_err(err)?;
                self.api
                    .patch(&name, &params, &Patch::Apply(&cm))
                    .await
                    .map(|_| ())
                    .map_err(err)
            }
            Err(e) => Err(err(e)),
        }
    }

    /// Deletes a Description's inventory (a missing one is fine).
    pub async fn delete(&self, description: &str) -> Result<(), Error> {
        match self
            .api
            .delete(&config_map_name(description), &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(source) => Err(Error::WriteInventory {
                description: description.to_owned(),
                source,
            }),
        }
    }

    /// Creates the namespace when it is missing.
    pub async fn ensure_namespace(&self) -> Result<(), kube::Error> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        api.patch(
            &self.namespace,
            &PatchParams::apply(&self.field_manager),
            &Patch::Apply(&ns),
        )
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inventory_round_trips_through_its_config_map() {
        let cases = [
            Inventory {
                description: "clusternet-abcde.default.web".into(),
                uid: "u-1".into(),
                objects: vec![],
                releases: vec![],
                orphan: false,
                deleted: vec![],
                removed: false,
            },
            Inventory {
                description: "clusternet-abcde.default.web".into(),
                uid: "u-2".into(),
                orphan: true,
                deleted: vec![DeletedEntry {
                    object: ObjectRef {
                        api_version: "v1".into(),
                        kind: "ConfigMap".into(),
                        namespace: "default".into(),
                        name: "gone".into(),
                    },
                    at: "2026-12-05T20:00:00Z".into(),
                }],
                removed: true,
                releases: vec![ReleaseEntry {
                    name: "hello".into(),
                    namespace: "demo".into(),
                    digest: "abc".into(),
                }],
                objects: vec![
                    Entry {
                        object: ObjectRef {
                            api_version: "apps/v1".into(),
                            kind: "Deployment".into(),
                            namespace: "default".into(),
                            name: "web".into(),
                        },
                        yielded: vec![".spec.replicas".into()],
                    },
                    Entry {
                        object: ObjectRef {
                            api_version: "v1".into(),
                            kind: "Namespace".into(),
                            namespace: String::new(),
                            name: "web".into(),
                        },
                        yielded: vec![],
                    },
                ],
            },
        ];
        for inv in cases {
            let cm = to_config_map(&inv, NAMESPACE);
            assert_eq!(from_config_map(&cm), Some(inv.clone()));
            assert_eq!(cm.metadata.name, Some(config_map_name(&inv.description)));
        }
    }

    #[test]
    fn config_map_names_are_valid_and_distinct() {
        let a = config_map_name("clusternet-abcde.default.web");
        let b = config_map_name("clusternet-abcde.default.web2");
        assert_ne!(a, b);
        for n in [a, b] {
            assert!(n.len() <= 63);
            assert!(
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            );
        }
    }
}
