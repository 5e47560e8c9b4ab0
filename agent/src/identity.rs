//! The child cluster's identity (the uid of its `kube-system` namespace) and the cluster token,
//! kept in Secret `clusternet-system/parent-cluster` of the child so it survives restarts.

use crate::Error;
use atoll_crds::known;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams};
use std::collections::BTreeMap;

/// Name of the Secret holding the cluster token, in `clusternet-system`.
pub const PARENT_SECRET: &str = "parent-cluster";

/// The cluster id: the uid of the child's `kube-system` namespace.
pub async fn cluster_id(client: &kube::Client) -> Result<String, Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = api.get("kube-system").await.map_err(Error::ReadClusterId)?;
    Ok(ns.metadata.uid.unwrap_or_default())
}

/// What the agent keeps of its registration. `Debug` and `Display` never show the token.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// The cluster token minted by the hub.
    pub token: String,
    /// The hub it was minted by.
    pub hub_url: String,
    /// The cluster's dedicated namespace in the parent.
    pub namespace: String,
    /// The cluster id it was minted for.
    pub cluster_id: String,
    /// Dedicated namespaces of this cluster's earlier registrations with the same hub, oldest
    /// first: their Descriptions' objects may be taken over, never pruned unasked.
    pub previous_namespaces: Vec<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("token", &"<redacted>")
            .field("hub_url", &self.hub_url)
            .field("namespace", &self.namespace)
            .field("cluster_id", &self.cluster_id)
            .field("previous_namespaces", &self.previous_namespaces)
            .finish()
    }
}

impl std::fmt::Display for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        write!(
            f,
            "credentials for {} in {} at {}",
            self.cluster_id, self.namespace, self.hub_url
        )
    }
}

/// Encodes credentials as the Secret in `namespace`.
pub fn to_secret(creds: &Credentials, namespace: &str) -> Secret {
    let mut data = BTreeMap::from([
        (
            "token".to_owned(),
            ByteString(creds.token.as_bytes().to_vec()),
        ),
        (
            "hub-url".to_owned(),
            ByteString(creds.hub_url.as_bytes().to_vec()),
        ),
        (
            "namespace".to_owned(),
            ByteString(creds.namespace.as_bytes().to_vec()),
        ),
        (
            "cluster-id".to_owned(),
            ByteString(creds.cluster_id.as_bytes().to_vec()),
        ),
    ]);
    if !creds.previous_namespaces.is_empty() {
        data.insert(
            "previous-namespaces".to_owned(),
            ByteString(creds.previous_namespaces.join(",").into_bytes()),
        );
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(PARENT_SECRET.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([
                (
                    known::LABEL_CLUSTER_BOOTSTRAPPING.to_owned(),
                    known::BOOTSTRAPPING_CREDENTIALS_AUTO.to_owned(),
                ),
                (
                    known::LABEL_CREATED_BY.to_owned(),
                    known::CREATED_BY_AGENT.to_owned(),
                ),
            ])),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(data),
        ..Secret::default()
    }
}

/// Decodes the Secret; `None` when it holds no token.
pub fn from_secret(secret: &Secret) -> Option<Credentials> {
    let data = secret.data.as_ref()?;
    let get = |k: &str| {
        data.get(k)
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .unwrap_or_default()
    };
    let token = get("token");
    if token.is_empty() {
        return None;
    }
    Some(Credentials {
        token,
        hub_url: get("hub-url"),
        namespace: get("namespace"),
        cluster_id: get("cluster-id"),
        previous_namespaces: get("previous-namespaces")
            .split(',')
            .filter(|ns| !ns.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}

/// Reads the stored credentials from `namespace` (normally `clusternet-system`).
pub async fn load(client: &kube::Client, namespace: &str) -> Result<Option<Credentials>, Error> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(PARENT_SECRET).await {
        Ok(secret) => Ok(secret.as_ref().and_then(from_secret)),
        Err(e) => Err(Error::ParentSecret(e)),
    }
}

/// Stores the credentials in `namespace`, creating it when needed.
pub async fn store(
    client: &kube::Client,
    namespace: &str,
    creds: &Credentials,
    field_manager: &str,
) -> Result<(), Error> {
    let ns_api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(namespace.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let params = PatchParams::apply(field_manager).force();
    ns_api
        .patch(namespace, &params, &Patch::Apply(&ns))
        .await
        .map_err(Error::ParentSecret)?;
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    api.patch(
        PARENT_SECRET,
        &params,
        &Patch::Apply(&to_secret(creds, namespace)),
    )
    .await
    .map_err(Error::ParentSecret)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_round_trip_through_the_secret() {
        let cases = [
            Credentials {
                token: "s3cr3t-value".into(),
                hub_url: "https://hub:443".into(),
                namespace: "clusternet-abcde".into(),
                cluster_id: "uid-1".into(),
                previous_namespaces: vec!["clusternet-old1".into(), "clusternet-old2".into()],
            },
            Credentials {
                token: "s3cr3t-other".into(),
                ..Credentials::default()
            },
        ];
        for creds in cases {
            assert_eq!(
                from_secret(&to_secret(&creds, "clusternet-system")),
                Some(creds.clone())
            );
            assert!(!creds.to_string().contains("s3cr3t"));
            assert!(!format!("{creds:?}").contains("s3cr3t"));
        }
        assert_eq!(
            from_secret(&to_secret(&Credentials::default(), "clusternet-system")),
            None
        );
    }
}
