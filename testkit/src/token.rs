//! The test bootstrap token and its Secret.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use std::collections::BTreeMap;

/// The bootstrap token the tests' agents present: token id `07401b`, secret
/// `f395accd246ae52d`. [`bootstrap_secret`] installs it.
pub const BOOTSTRAP_TOKEN: &str = "07401b.f395accd246ae52d";

/// Creates the `bootstrap.kubernetes.io/token` Secret `bootstrap-token-<id>` in
/// `clusternet-system` for `token` (`<id>.<secret>`), usable for authentication, expiring at
/// `expiration` (RFC 3339) if given. Panics if `token` has no `.` or the Secret exists.
pub async fn bootstrap_secret(client: &Client, token: &str, expiration: Option<&str>) {
    let (id, secret) = token
        .split_once('.')
        .unwrap_or_else(|| panic!("{token:?} is not <id>.<secret>"));
    let mut data = BTreeMap::new();
    data.insert("token-id".to_string(), ByteString(id.as_bytes().to_vec()));
    data.insert(
        "token-secret".to_string(),
        ByteString(secret.as_bytes().to_vec()),
    );
    data.insert(
        "usage-bootstrap-authentication".to_string(),
        ByteString(b"true".to_vec()),
    );
    if let Some(e) = expiration {
        data.insert("expiration".to_string(), ByteString(e.as_bytes().to_vec()));
    }
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(format!("bootstrap-token-{id}")),
            namespace: Some("clusternet-system".into()),
            ..Default::default()
        },
        type_: Some("bootstrap.kubernetes.io/token".into()),
        data: Some(data),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), "clusternet-system")
        .create(&PostParams::default(), &s)
        .await
        .unwrap();
}
