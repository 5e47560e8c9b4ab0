//! Clusternet-compatible API types for atoll, the well-known names they use, and the helpers the
//! `crdgen` binary needs to write `manifests/crds/`.
//!
//! - [`apps`]: `apps.clusternet.io/v1alpha1` (Subscription, Localization, Globalization,
//!   Description, Manifest).
//! - [`helm`]: `apps.clusternet.io/v1alpha1` Helm kinds (HelmChart, HelmRelease).
//! - [`clusters`]: `clusters.clusternet.io/v1beta1` (ManagedCluster, ClusterRegistrationRequest).
//! - [`atoll`]: `apps.atoll.dev/v1alpha1`, atoll's own kinds (FeedGrant).
//! - [`json_text`]: a Description's objects stored as strings of JSON text.
//! - [`known`]: label, annotation, finalizer, namespace and taint keys, and generated names.
//! - [`conditions`]: `metav1.Condition` lists keyed by `type`.
//! - [`quantity`]: resource quantities as milli-units, the one parser of the project.
//! - [`crdgen`]: the CRD set, rendered as YAML files, and drift detection.

pub mod apidoc;
pub mod apps;
pub mod atoll;
pub mod clusters;
pub mod conditions;
pub mod crdgen;
mod error;
pub mod helm;
pub mod json_text;
pub mod known;
pub mod quantity;
mod schema;

pub use error::Error;
