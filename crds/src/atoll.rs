//! `apps.atoll.dev/v1alpha1`: atoll's own kinds, kept apart from Clusternet's groups so that
//! Clusternet YAML never collides with them.
//!
//! - [`FeedGrant`]: lets Subscriptions of other namespaces use feeds of the grant's namespace,
//!   in the spirit of Gateway API's ReferenceGrant.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of every kind in this module.
pub const GROUP: &str = "apps.atoll.dev";
/// API version of every kind in this module.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every kind in this module.
pub const API_VERSION: &str = "apps.atoll.dev/v1alpha1";

/// FeedGrantSpec says which Subscription namespaces (`from`) may use which feeds of the
/// FeedGrant's own namespace (`to`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "apps.atoll.dev",
    version = "v1alpha1",
    kind = "FeedGrant",
    namespaced,
    shortname = "fg",
    category = "atoll",
    derive = "PartialEq",
    doc = "FeedGrant lets Subscriptions in the namespaces listed in `spec.from` use, as feeds, the objects of this FeedGrant's namespace listed in `spec.to`. Without one, a Subscription may only use feeds of its own namespace (and the Namespace object of its own namespace). A Namespace object counts as part of itself (a FeedGrant in `foo` can grant the Namespace `foo`); other cluster-scoped feeds (ClusterRole, CustomResourceDefinition, ...) need a FeedGrant in `clusternet-system`, the administrator's namespace. Deleting a FeedGrant refuses the feeds again; clusters keep what they received before.",
    printcolumn(
        name = "AGE",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct FeedGrantSpec {
    /// The Subscriptions this FeedGrant trusts, by namespace: a Subscription in any namespace
    /// listed here may use the feeds listed in `to`.
    #[schemars(length(min = 1, max = 16))]
    pub from: Vec<FeedGrantFrom>,

    /// The feeds, in this FeedGrant's namespace (or cluster-scoped, for a FeedGrant in
    /// `clusternet-system`), that the Subscriptions in `from` may use.
    #[schemars(length(min = 1, max = 16))]
    pub to: Vec<FeedGrantTo>,
}

/// Subscriptions trusted by a FeedGrant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedGrantFrom {
    /// The namespace of the trusted Subscriptions, for example `default`.
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
}

/// Feeds granted by a FeedGrant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FeedGrantTo {
    /// The API group of the granted kind: `""` for the core group (Secret, ConfigMap,
    /// Namespace, ...), `apps` for Deployments. Any version of the group is granted.
    #[serde(default)]
    #[schemars(length(max = 253))]
    pub group: String,

    /// The granted kind, in CamelCase, for example `Secret` or `Deployment`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,

    /// The name of the one granted object. When unset, every object of the kind is granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub name: Option<String>,
}
