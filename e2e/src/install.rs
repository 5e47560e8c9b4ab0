//! atoll installed on the real tier as a user installs it: `kubectl apply -k` of a kustomize
//! overlay of `manifests/parent` in the parent and of `manifests/agent` in each child. The
//! overlays only scale the Deployments to zero (the fleet runs the same components as local
//! processes in their place) and, for the agent, replace the generated connection Secret, as
//! `manifests/agent/README.md` tells users to.
//!
//! Each local process then authenticates as its ServiceAccount with a token from TokenRequest
//! (`kubectl create token`), so the RBAC in `manifests/` is what it is allowed to do.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use atoll_crds::known;

use crate::Error;
use crate::control_plane::{self, Credential, b64};
use crate::kubectl::Kubectl;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

/// Server-side apply field manager of the fleet launcher.
pub const FIELD_MANAGER: &str = "atoll-fleet";

/// How long the components' tokens are valid: longer than any test or demo fleet lives.
pub const TOKEN_DURATION: &str = "720h";

/// The ServiceAccounts of the parent's components.
pub const SCHEDULER_ACCOUNT: &str = "atoll-scheduler";
/// The hub's ServiceAccount.
pub const HUB_ACCOUNT: &str = "atoll-hub";
/// The agent's ServiceAccount (in each child).
pub const AGENT_ACCOUNT: &str = "atoll-agent";

/// `target` relative to directory `base` (both absolute), as kustomize wants its resources.
pub fn relative_path(base: &Path, target: &Path) -> PathBuf {
    let base: Vec<Component<'_>> = base.components().collect();
    let target: Vec<Component<'_>> = target.components().collect();
    let common = base.iter().zip(&target).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..base.len() {
        out.push("..");
    }
    for c in target.iter().skip(common) {
        out.push(c.as_os_str());
    }
    out
}

/// How the fleet runs atoll's components, which decides what its overlays change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Run {
    /// As local processes with the Deployments' ServiceAccounts: the Deployments scaled to zero.
    LocalProcesses,
    /// As the Deployments' pods, on the fleet's real nodes: a node selector and a toleration
    /// for them (as for dedicated system nodes), the hub exposed by `hub-nodeport`, the agents
    /// given the hub's CA.
    Pods,
}

const SCALE_TO_ZERO: &str = "patches:
  # The fleet runs this component as a local process with the same ServiceAccount.
  - target:
      kind: Deployment
    patch: |-
      - op: replace
        path: /spec/replicas
        value: 0
";

/// The patch that puts every Deployment's pods on the real nodes (label and taint
/// `atoll.dev/realnode`); kwok's fake nodes keep the example workloads.
fn on_real_nodes() -> String {
    let key = crate::real_node::configs::REAL_NODE_LABEL;
    format!(
        "patches:
  # atoll's pods on the real nodes; kwok's fake nodes take the workloads atoll distributes.
  - target:
      kind: Deployment
    patch: |-
      - op: add
        path: /spec/template/spec/nodeSelector
        value: {{{key}: \"true\"}}
      - op: add
        path: /spec/template/spec/tolerations
        value: [{{key: {key}, operator: Exists, effect: NoSchedule}}]
"
    )
}

fn patches(run: Run) -> String {
    match run {
        Run::LocalProcesses => SCALE_TO_ZERO.to_string(),
        Run::Pods => on_real_nodes(),
    }
}

/// The overlay of `manifests/parent` (at `base`, relative to the overlay's directory).
pub fn parent_overlay(base: &Path, run: Run) -> String {
    let components = match run {
        Run::LocalProcesses => String::new(),
        Run::Pods => format!("components:\n  - {}/hub-nodeport\n", base.display()),
    };
    format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\n{components}{}",
        base.display(),
        patches(run)
    )
}

/// What an agent's overlay puts in its connection Secret.
#[derive(Clone, Debug)]
pub struct AgentSettings<'a> {
    /// The hub's URL.
    pub hub_url: &'a str,
    /// `<id>.<secret>`.
    pub bootstrap_token: &'a str,
    /// The ManagedCluster name.
    pub cluster_name: &'a str,
    /// The labels it registers with.
    pub labels: &'a BTreeMap<String, String>,
}

/// The file name, in the agent overlay's directory, of the hub's CA ([`Run::Pods`]).
pub const HUB_CA_FILE: &str = "hub-ca.crt";

/// The overlay of `manifests/agent` (at `base`, relative to the overlay's directory) for one
/// child, with its connection Secret replaced as `manifests/agent/README.md` shows. With
/// [`Run::LocalProcesses`] the hub speaks plain gRPC, so `ca.crt` holds a note instead of a
/// certificate; with [`Run::Pods`] it is the file [`HUB_CA_FILE`] beside the overlay.
pub fn agent_overlay(base: &Path, settings: &AgentSettings<'_>, run: Run) -> String {
    let ca = match run {
        Run::LocalProcesses => {
            "      - ca.crt=none (the local fleet's hub runs with --insecure)\n".to_string()
        }
        Run::Pods => format!("    files:\n      - ca.crt={HUB_CA_FILE}\n"),
    };
    format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {base}\n{patches}secretGenerator:\n  - name: atoll-agent-hub\n    namespace: {namespace}\n    behavior: replace\n    literals:\n      - hub-url={hub}\n      - bootstrap-token={token}\n      - cluster-name={name}\n      - cluster-labels={labels}\n{ca}",
        base = base.display(),
        patches = patches(run),
        namespace = known::NAMESPACE_SYSTEM,
        hub = settings.hub_url,
        token = settings.bootstrap_token,
        name = settings.cluster_name,
        labels = crate::plan::labels_arg(settings.labels),
    )
}

/// Writes `overlay` as `dir/kustomization.yaml` and applies it with `kubectl`.
pub async fn apply_overlay(kubectl: &Kubectl, dir: &Path, overlay: &str) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::CreateFile {
        path: dir.to_path_buf(),
        source,
    })?;
    let file = dir.join("kustomization.yaml");
    std::fs::write(&file, overlay).map_err(|source| Error::CreateFile { path: file, source })?;
    kubectl.apply_kustomization(dir, &[]).await?;
    Ok(())
}

/// Asks the cluster for a token of ServiceAccount `account` (TokenRequest, through
/// `kubectl create token`) and writes a kubeconfig with it to `out`.
pub async fn service_account_kubeconfig(
    admin: &Kubectl,
    account: &str,
    port: u16,
    ca_pem: &str,
    out: &Path,
) -> Result<(), Error> {
    let token = admin
        .run(&[
            "create",
            "token",
            account,
            "-n",
            known::NAMESPACE_SYSTEM,
            "--duration",
            TOKEN_DURATION,
        ])
        .await?;
    let text = control_plane::kubeconfig(account, port, ca_pem, &Credential::Token(token.trim()));
    control_plane::write_private(out, &text)
}

/// The bootstrap-token Secret `bootstrap-token-<id>` in `clusternet-system`.
pub fn bootstrap_token_secret(id: &str, secret: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": format!("bootstrap-token-{id}"),
            "namespace": known::NAMESPACE_SYSTEM,
            "labels": {"app.kubernetes.io/managed-by": FIELD_MANAGER},
        },
        "type": "bootstrap.kubernetes.io/token",
        // `data` rather than `stringData`: the hub reads `data`, and early devcluster builds
        // did not fold `stringData` into it.
        "data": {
            "description": b64("Bootstrap token of the local atoll fleet"),
            "token-id": b64(id),
            "token-secret": b64(secret),
            "usage-bootstrap-authentication": b64("true"),
        },
    })
}

pub(crate) async fn apply_bootstrap_token(
    client: &Client,
    id: &str,
    secret: &str,
) -> Result<(), Error> {
    let value = bootstrap_token_secret(id, secret);
    let obj: Secret = serde_json::from_value(value).map_err(|e| Error::InvalidArgument {
        what: "bootstrap token".into(),
        message: e.to_string(),
    })?;
    Api::<Secret>::namespaced(client.clone(), known::NAMESPACE_SYSTEM)
        .patch(
            &format!("bootstrap-token-{id}"),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&obj),
        )
        .await
        .map_err(|source| Error::Api {
            action: "creating the bootstrap-token Secret in the parent".into(),
            source,
        })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bootstrap_token_secret_has_the_type_name_and_keys_the_hub_reads() {
        let s = bootstrap_token_secret("abc123", "0123456789abcdef");
        assert_eq!(s["metadata"]["name"], "bootstrap-token-abc123");
        assert_eq!(s["metadata"]["namespace"], "clusternet-system");
        assert_eq!(s["type"], "bootstrap.kubernetes.io/token");
        assert_eq!(s["data"]["token-id"], "YWJjMTIz");
        assert_eq!(s["data"]["token-secret"], "MDEyMzQ1Njc4OWFiY2RlZg==");
    }

    #[test]
    fn kustomize_resources_are_relative_to_the_overlay() {
        let cases = [
            (
                "/r/target/fleet/install/parent",
                "/r/manifests/parent",
                "../../../../manifests/parent",
            ),
            ("/a/b", "/a/b/c", "c"),
            ("/a", "/b", "../b"),
        ];
        for (base, target, want) in cases {
            assert_eq!(
                relative_path(Path::new(base), Path::new(target)),
                PathBuf::from(want)
            );
        }
    }

    #[test]
    fn the_agent_overlay_replaces_the_connection_secret_and_scales_to_zero() {
        let labels = BTreeMap::from([("env".to_string(), "prod".to_string())]);
        let text = agent_overlay(
            Path::new("../m/agent"),
            &AgentSettings {
                hub_url: "http://127.0.0.1:9",
                bootstrap_token: "abcdef.0123456789abcdef",
                cluster_name: "child-1",
                labels: &labels,
            },
            Run::LocalProcesses,
        );
        let parsed: serde_yaml::Value = serde_yaml::from_str(&text).unwrap();
        assert_eq!(parsed["resources"][0], "../m/agent");
        assert_eq!(parsed["secretGenerator"][0]["behavior"], "replace");
        let literals = parsed["secretGenerator"][0]["literals"]
            .as_sequence()
            .unwrap()
            .iter()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        for want in [
            "hub-url=http://127.0.0.1:9",
            "cluster-name=child-1",
            "cluster-labels=env=prod",
            "bootstrap-token=abcdef.0123456789abcdef",
        ] {
            assert!(literals.contains(want), "{want} in {literals}");
        }
        assert!(text.contains("value: 0"));
        let parent: serde_yaml::Value = serde_yaml::from_str(&parent_overlay(
            Path::new("../m/parent"),
            Run::LocalProcesses,
        ))
        .unwrap();
        assert_eq!(parent["patches"][0]["target"]["kind"], "Deployment");
    }

    #[test]
    fn the_pod_overlays_place_atoll_on_the_real_nodes_and_expose_the_hub() {
        let labels = BTreeMap::from([("env".to_string(), "prod".to_string())]);
        let settings = AgentSettings {
            hub_url: "https://10.250.0.2:30443",
            bootstrap_token: "abcdef.0123456789abcdef",
            cluster_name: "child-1",
            labels: &labels,
        };
        let agent: serde_yaml::Value = serde_yaml::from_str(&agent_overlay(
            Path::new("../m/agent"),
            &settings,
            Run::Pods,
        ))
        .unwrap();
        let generator = &agent["secretGenerator"][0];
        assert_eq!(generator["files"][0], "ca.crt=hub-ca.crt");
        assert_eq!(generator["literals"].as_sequence().unwrap().len(), 4);
        let parent: serde_yaml::Value =
            serde_yaml::from_str(&parent_overlay(Path::new("../m/parent"), Run::Pods)).unwrap();
        assert_eq!(parent["components"][0], "../m/parent/hub-nodeport");
        for overlay in [&agent, &parent] {
            let patch: serde_yaml::Value =
                serde_yaml::from_str(overlay["patches"][0]["patch"].as_str().unwrap()).unwrap();
            assert_eq!(
                patch[0]["value"]["atoll.dev/realnode"], "true",
                "a node selector for the real nodes"
            );
            assert_eq!(patch[1]["value"][0]["effect"], "NoSchedule");
        }
    }
}
