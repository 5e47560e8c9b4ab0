//! Descriptions written by hand, as the scheduler would write them, for tests of the hub and
//! the agent.

use atoll_crds::apps::{Description, DescriptionSpec};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

/// Creates Description `namespace/name` with `raw` as its objects, or sets `raw` on the one
/// there is.
pub async fn put_description(client: &Client, namespace: &str, name: &str, raw: Vec<Value>) {
    let api: Api<Description> = Api::namespaced(client.clone(), namespace);
    if api.get_opt(name).await.unwrap().is_some() {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"raw": atoll_crds::json_text::encode_all(&raw)}})),
        )
        .await
        .unwrap();
        return;
    }
    let mut d = Description::new(name, DescriptionSpec::default());
    d.metadata.namespace = Some(namespace.into());
    d.spec.raw = raw;
    api.create(&PostParams::default(), &d).await.unwrap();
}
