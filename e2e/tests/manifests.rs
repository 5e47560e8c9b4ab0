#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The install manifests and examples, rendered with the real `kubectl kustomize` and applied
//! with the real `kubectl apply -k` (and `--dry-run=server`) against a devcluster.
//!
//! Skipped, with a notice, when kubectl is not installed.

use std::path::{Path, PathBuf};

use atoll_e2e::kubectl::Kubectl;
use serde_yaml::Value;

fn manifests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

async fn kubectl_or_skip(test: &str) -> bool {
    if Kubectl::available().await {
        return true;
    }
    eprintln!("NOTICE: {test} skipped: kubectl is not on PATH");
    false
}

/// A devcluster in-process and kubectl pointed at it, with a private HOME and cache.
struct Env {
    _cluster: devcluster::DevCluster,
    _dir: tempfile::TempDir,
    kubectl: Kubectl,
}

async fn env() -> Env {
    let cluster = devcluster::DevCluster::start(devcluster::Config::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).unwrap();
    let kubectl =
        Kubectl::new(&kubeconfig, dir.path().join("cache")).with_home(dir.path().join("home"));
    Env {
        _cluster: cluster,
        _dir: dir,
        kubectl,
    }
}

async fn render(dir: &str) -> Vec<Value> {
    let tmp = tempfile::tempdir().unwrap();
    let kubectl = Kubectl::new(tmp.path().join("none"), tmp.path().join("cache"))
        .with_home(tmp.path().join("home"));
    // A name under manifests/, or an absolute path.
    let path = manifests().join(dir);
    let text = kubectl
        .run(&["kustomize", path.to_str().unwrap()])
        .await
        .unwrap_or_else(|e| panic!("kubectl kustomize {dir}: {e}"));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

use serde::Deserialize;

/// `manifests/parent` rendered through an overlay, as a user writes it, that adds the
/// component `manifests/parent/<component>`.
async fn render_parent_with(component: &str) -> Vec<Value> {
    let overlay = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let parent = manifests().join("parent").canonicalize().unwrap();
    let base = relative(overlay.path(), &parent);
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {}\ncomponents:\n  - {}\n",
            base.display(),
            base.join(component).display()
        ),
    )
    .unwrap();
    render(overlay.path().to_str().unwrap()).await
}

fn kind_name(v: &Value) -> (String, String) {
    (
        v["kind"].as_str().unwrap_or_default().to_string(),
        v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[tokio::test]
async fn every_kustomization_renders_the_objects_it_promises() {
    if !kubectl_or_skip("every_kustomization_renders_the_objects_it_promises").await {
        return;
    }
    let cases: [(&str, &[(&str, &str)]); 9] = [
        (
            "parent",
            &[
                ("Namespace", "clusternet-system"),
                ("Namespace", "clusternet-reserved"),
                (
                    "CustomResourceDefinition",
                    "subscriptions.apps.clusternet.io",
                ),
                (
                    "CustomResourceDefinition",
                    "managedclusters.clusters.clusternet.io",
                ),
                ("CustomResourceDefinition", "feedgrants.apps.atoll.dev"),
                ("ServiceAccount", "atoll-scheduler"),
                ("ServiceAccount", "atoll-hub"),
                ("ClusterRole", "atoll-scheduler"),
                ("ClusterRole", "atoll-hub"),
                ("ValidatingAdmissionPolicy", "atoll-hub-secrets"),
                ("ValidatingAdmissionPolicyBinding", "atoll-hub-secrets"),
                ("ValidatingAdmissionPolicy", "atoll-hub-namespaces"),
                ("ValidatingAdmissionPolicyBinding", "atoll-hub-namespaces"),
                ("ValidatingAdmissionPolicy", "atoll-hub-descriptions"),
                ("ValidatingAdmissionPolicyBinding", "atoll-hub-descriptions"),
                ("Deployment", "atoll-scheduler"),
                ("Deployment", "atoll-hub"),
                ("Service", "atoll-hub"),
            ],
        ),
        (
            "agent",
            &[
                ("Namespace", "clusternet-system"),
                ("ServiceAccount", "atoll-agent"),
                ("ClusterRole", "atoll-agent"),
                ("ClusterRoleBinding", "atoll-agent"),
                ("Deployment", "atoll-agent"),
            ],
        ),
        (
            "agent-namespaced",
            &[
                ("Namespace", "clusternet-system"),
                ("ServiceAccount", "atoll-agent"),
                ("ClusterRole", "atoll-agent"),
                ("ClusterRoleBinding", "atoll-agent"),
                ("Role", "atoll-agent"),
                ("RoleBinding", "atoll-agent"),
                ("ClusterRole", "atoll-agent-namespace-writer"),
                ("Deployment", "atoll-agent"),
            ],
        ),
        (
            "examples",
            &[
                ("Subscription", "web-everywhere"),
                ("Subscription", "api-divided"),
                ("Globalization", "web-config-large-clusters"),
                ("Deployment", "web"),
                ("Deployment", "api"),
            ],
        ),
        (
            "examples/replication",
            &[
                ("Subscription", "web-everywhere"),
                ("ConfigMap", "web-config"),
            ],
        ),
        (
            "examples/dividing",
            &[("Subscription", "api-divided"), ("Deployment", "api")],
        ),
        (
            "examples/localization",
            &[("Localization", "web-three-replicas")],
        ),
        (
            "examples/globalization",
            &[("Globalization", "web-config-large-clusters")],
        ),
        (
            "crds",
            &[(
                "CustomResourceDefinition",
                "descriptions.apps.clusternet.io",
            )],
        ),
    ];
    for (dir, want) in cases {
        let objects = render(dir).await;
        let have: Vec<(String, String)> = objects.iter().map(kind_name).collect();
        for (kind, name) in want {
            assert!(
                have.contains(&(kind.to_string(), name.to_string())),
                "{dir}: {kind} {name} missing from {have:?}"
            );
        }
    }
}

#[tokio::test]
async fn the_agent_secret_is_generated_with_a_hash_suffix_and_referenced_by_the_deployment() {
    if !kubectl_or_skip("agent secret").await {
        return;
    }
    let objects = render("agent").await;
    let secret = objects
        .iter()
        .find(|o| o["kind"] == "Secret")
        .expect("a generated Secret");
    let name = secret["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("atoll-agent-hub-"), "{name}");
    for key in [
        "hub-url",
        "bootstrap-token",
        "cluster-name",
        "cluster-labels",
        "ca.crt",
    ] {
        assert!(!secret["data"][key].is_null(), "Secret lacks {key}");
    }
    let deploy = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let text = serde_yaml::to_string(deploy).unwrap();
    assert!(text.contains(name), "the Deployment must reference {name}");
    assert!(
        !text.contains("name: atoll-agent-hub\n"),
        "unhashed reference left"
    );
}

/// Every container of every Deployment runs hardened, with probes on the admin port.
#[tokio::test]
async fn every_deployment_runs_non_root_read_only_without_capabilities_and_with_probes() {
    if !kubectl_or_skip("deployment hardening").await {
        return;
    }
    for dir in ["parent", "agent"] {
        let objects = render(dir).await;
        let deployments: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "Deployment")
            .collect();
        assert!(!deployments.is_empty(), "{dir} has no Deployment");
        for d in deployments {
            let name = d["metadata"]["name"].as_str().unwrap();
            let pod = &d["spec"]["template"]["spec"];
            assert_eq!(
                pod["securityContext"]["runAsNonRoot"],
                Value::Bool(true),
                "{name}"
            );
            assert_eq!(
                pod["securityContext"]["seccompProfile"]["type"].as_str(),
                Some("RuntimeDefault"),
                "{name}"
            );
            assert!(pod["serviceAccountName"].as_str().is_some(), "{name}");
            for c in pod["containers"].as_sequence().unwrap() {
                let sc = &c["securityContext"];
                assert_eq!(sc["readOnlyRootFilesystem"], Value::Bool(true), "{name}");
                assert_eq!(sc["allowPrivilegeEscalation"], Value::Bool(false), "{name}");
                assert_eq!(
                    sc["capabilities"]["drop"][0].as_str(),
                    Some("ALL"),
                    "{name}"
                );
                assert_eq!(
                    c["livenessProbe"]["httpGet"]["path"].as_str(),
                    Some("/healthz"),
                    "{name}"
                );
                assert_eq!(
                    c["readinessProbe"]["httpGet"]["path"].as_str(),
                    Some("/readyz"),
                    "{name}"
                );
                assert_eq!(
                    c["livenessProbe"]["httpGet"]["port"].as_str(),
                    Some("admin"),
                    "{name}"
                );
                assert!(!c["resources"]["requests"]["cpu"].is_null(), "{name}");
                assert!(!c["resources"]["limits"]["memory"].is_null(), "{name}");
            }
        }
    }
}

/// Wildcard resources are granted for reads only, except to the agent in the child, whose
/// ClusterRole is documented as cluster-admin-equivalent.
#[tokio::test]
async fn only_the_agent_gets_wildcard_writes() {
    if !kubectl_or_skip("rbac wildcards").await {
        return;
    }
    let reads = ["get", "list", "watch"];
    for (dir, role, wildcard_writes_allowed) in [
        ("parent", "atoll-scheduler", false),
        ("parent", "atoll-hub", false),
        ("agent", "atoll-agent", true),
    ] {
        let objects = render(dir).await;
        let cr = objects
            .iter()
            .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == role)
            .unwrap_or_else(|| panic!("{dir}: ClusterRole {role}"));
        let mut wildcard_write = false;
        for rule in cr["rules"].as_sequence().unwrap() {
            let resources: Vec<&str> = rule["resources"]
                .as_sequence()
                .map(|s| s.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let verbs: Vec<&str> = rule["verbs"]
                .as_sequence()
                .unwrap()
                .iter()
                .filter_map(Value::as_str)
                .collect();
            if resources.contains(&"*") && verbs.iter().any(|v| !reads.contains(v)) {
                wildcard_write = true;
            }
        }
        assert_eq!(wildcard_write, wildcard_writes_allowed, "{dir} {role}");
    }
}

/// The narrower agent role writes nothing cluster-wide: its ClusterRole `atoll-agent` only reads
/// (and patches its own namespace, by name), and the ClusterRole that grants writes is bound by
/// no ClusterRoleBinding (only by the RoleBindings an administrator adds per namespace); the
/// Deployment reads the namespaces from the connection Secret.
#[tokio::test]
async fn the_narrower_agent_role_grants_no_cluster_wide_writes() {
    if !kubectl_or_skip("narrower agent role").await {
        return;
    }
    let objects = render("agent-namespaced").await;
    let cr = objects
        .iter()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "atoll-agent")
        .unwrap();
    let strings = |v: &Value| -> Vec<String> {
        v.as_sequence()
            .map(|s| {
                s.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    for rule in cr["rules"].as_sequence().unwrap() {
        let verbs = strings(&rule["verbs"]);
        let names = strings(&rule["resourceNames"]);
        let writes: Vec<&String> = verbs
            .iter()
            .filter(|v| !["get", "list", "watch"].contains(&v.as_str()))
            .collect();
        assert!(
            writes.is_empty() || (writes == ["patch"] && names == ["clusternet-system"]),
            "cluster-wide write in {rule:?}"
        );
        assert!(
            !strings(&rule["resources"]).contains(&"*".to_string()),
            "{rule:?}"
        );
    }
    for binding in objects.iter().filter(|o| o["kind"] == "ClusterRoleBinding") {
        assert_ne!(
            binding["roleRef"]["name"], "atoll-agent-namespace-writer",
            "{binding:?}"
        );
    }
    let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let env =
        serde_yaml::to_string(&deployment["spec"]["template"]["spec"]["containers"][0]["env"])
            .unwrap();
    assert!(env.contains("ATOLL_NAMESPACES"), "{env}");
    let secret = objects.iter().find(|o| o["kind"] == "Secret").unwrap();
    assert!(secret["data"]["namespaces"].is_string(), "{secret:?}");
    assert!(secret["data"]["hub-url"].is_string(), "{secret:?}");
}

#[tokio::test]
async fn the_parent_install_applies_and_server_dry_runs_against_devcluster() {
    if !kubectl_or_skip("parent install").await {
        return;
    }
    let env = env().await;
    let dir = manifests().join("parent");
    let out = env.kubectl.apply_kustomization(&dir, &[]).await.unwrap();
    assert!(out.contains("deployment.apps/atoll-hub created"), "{out}");
    // Server-side dry run needs the namespaces to exist, as with a real kube-apiserver.
    let out = env
        .kubectl
        .apply_kustomization(&dir, &["--dry-run=server"])
        .await
        .unwrap();
    assert!(out.contains("(server dry run)"), "{out}");
    let got = env
        .kubectl
        .run(&["get", "deploy", "-n", "clusternet-system", "-o", "name"])
        .await
        .unwrap();
    for want in [
        "deployment.apps/atoll-hub",
        "deployment.apps/atoll-scheduler",
    ] {
        assert!(got.contains(want), "{got}");
    }
    let crds = env
        .kubectl
        .run(&["get", "crd", "-o", "name"])
        .await
        .unwrap();
    assert_eq!(
        crds.lines().count(),
        atoll_crds::crdgen::crds().len(),
        "every CRD of the types, no other: {crds}"
    );
    assert!(crds.contains("feedgrants.apps.atoll.dev"), "{crds}");
}

#[tokio::test]
async fn the_agent_install_applies_and_server_dry_runs_against_devcluster() {
    if !kubectl_or_skip("agent install").await {
        return;
    }
    let env = env().await;
    let dir = manifests().join("agent");
    env.kubectl.apply_kustomization(&dir, &[]).await.unwrap();
    let out = env
        .kubectl
        .apply_kustomization(&dir, &["--dry-run=server"])
        .await
        .unwrap();
    assert!(
        out.contains("deployment.apps/atoll-agent unchanged (server dry run)"),
        "{out}"
    );
    let sa = env
        .kubectl
        .run(&[
            "get",
            "sa",
            "atoll-agent",
            "-n",
            "clusternet-system",
            "-o",
            "jsonpath={.metadata.name}",
        ])
        .await
        .unwrap();
    assert_eq!(sa, "atoll-agent");
}

#[tokio::test]
async fn the_examples_apply_and_server_dry_run_once_the_crds_are_installed() {
    if !kubectl_or_skip("examples").await {
        return;
    }
    let env = env().await;
    env.kubectl
        .apply_kustomization(&manifests().join("crds"), &[])
        .await
        .unwrap();
    let examples = manifests().join("examples");
    env.kubectl
        .apply_kustomization(&examples, &[])
        .await
        .unwrap();
    env.kubectl
        .apply_kustomization(&examples, &["--dry-run=server"])
        .await
        .unwrap();
    // The Localization goes to a cluster's dedicated namespace, given with -n.
    env.kubectl
        .run(&["create", "namespace", "clusternet-abcde"])
        .await
        .unwrap();
    let loc = manifests().join("examples/localization");
    env.kubectl
        .apply_kustomization(&loc, &["-n", "clusternet-abcde"])
        .await
        .unwrap();
    env.kubectl
        .apply_kustomization(&loc, &["-n", "clusternet-abcde", "--dry-run=server"])
        .await
        .unwrap();

    let jsonpath =
        |ns: &'static str, kind: &'static str, name: &'static str, path: &'static str| {
            let kubectl = env.kubectl.clone();
            async move {
                let p = format!("jsonpath={path}");
                let mut args = vec!["get", kind, name, "-o", p.as_str()];
                if !ns.is_empty() {
                    args.extend(["-n", ns]);
                }
                kubectl.run(&args).await.unwrap()
            }
        };
    let cases = [
        (
            "demo",
            "subscription",
            "web-everywhere",
            "{.spec.schedulingStrategy}",
            "Replication",
        ),
        (
            "demo-divided",
            "subscription",
            "api-divided",
            "{.spec.schedulingStrategy}",
            "Dividing",
        ),
        (
            "demo-divided",
            "subscription",
            "api-divided",
            "{.spec.dividingScheduling.type}",
            "Static",
        ),
        (
            "demo-divided",
            "subscription",
            "api-divided",
            "{.spec.subscribers[*].weight}",
            "1 2",
        ),
        ("demo-divided", "deployment", "api", "{.spec.replicas}", "6"),
        (
            "",
            "globalization",
            "web-config-large-clusters",
            "{.spec.clusterAffinity.matchLabels.tier}",
            "large",
        ),
        (
            "clusternet-abcde",
            "localization",
            "web-three-replicas",
            "{.spec.overrides[0].type}",
            "JSONPatch",
        ),
    ];
    for (ns, kind, name, path, want) in cases {
        assert_eq!(
            jsonpath(ns, kind, name, path).await,
            want,
            "{kind} {name} {path}"
        );
    }
}

#[tokio::test]
async fn the_parent_install_ships_no_bootstrap_token() {
    if !kubectl_or_skip("parent install secrets").await {
        return;
    }
    // A token in the install would be known to everyone who can read the repository.
    let secrets: Vec<String> = render("parent")
        .await
        .iter()
        .filter(|o| o["kind"] == "Secret")
        .map(|o| kind_name(o).1)
        .collect();
    assert!(
        secrets.is_empty(),
        "the parent install ships Secrets: {secrets:?}"
    );
    let hub = render("parent")
        .await
        .into_iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "atoll-hub")
        .unwrap();
    let text = serde_yaml::to_string(&hub).unwrap();
    assert!(
        !text.contains("--auto-approve") && !text.contains("ATOLL_HUB_AUTO_APPROVE"),
        "the installed hub must wait for an administrator's approval:\n{text}"
    );
}

/// `path` relative to `from` (both absolute): kustomize takes no absolute paths.
fn relative(from: &Path, path: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let path: Vec<_> = path.components().collect();
    let common = from.iter().zip(&path).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &path[common..] {
        out.push(c);
    }
    out
}

#[tokio::test]
async fn the_kube_system_bootstrap_tokens_component_grants_get_only_and_turns_the_flag_on() {
    if !kubectl_or_skip("kube-system bootstrap tokens component").await {
        return;
    }
    let objects = render_parent_with("kube-system-bootstrap-tokens").await;
    let role = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["namespace"] == "kube-system")
        .unwrap();
    let rules: Vec<(Vec<String>, Vec<String>)> = role["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| {
            let list = |k: &str| -> Vec<String> {
                r[k].as_sequence()
                    .unwrap()
                    .iter()
                    .map(|v| v.as_str().unwrap().to_owned())
                    .collect()
            };
            (list("resources"), list("verbs"))
        })
        .collect();
    assert_eq!(
        rules,
        vec![(vec!["secrets".to_owned()], vec!["get".to_owned()])],
        "get on Secrets in kube-system, nothing else"
    );
    let binding = objects
        .iter()
        .find(|o| o["kind"] == "RoleBinding" && o["metadata"]["namespace"] == "kube-system")
        .unwrap();
    assert_eq!(binding["subjects"][0]["name"], "atoll-hub");
    let hub = objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "atoll-hub")
        .unwrap();
    let args =
        serde_yaml::to_string(&hub["spec"]["template"]["spec"]["containers"][0]["args"]).unwrap();
    assert!(args.contains("--kube-system-bootstrap-tokens"), "{args}");
}

#[tokio::test]
async fn the_hub_exposure_components_make_its_service_a_node_port_or_a_load_balancer() {
    if !kubectl_or_skip("hub exposure components").await {
        return;
    }
    for (component, service_type, node_port) in [
        ("hub-nodeport", "NodePort", Some(30443)),
        ("hub-loadbalancer", "LoadBalancer", None),
    ] {
        let objects = render_parent_with(component).await;
        let service = objects
            .iter()
            .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == "atoll-hub")
            .unwrap();
        assert_eq!(service["spec"]["type"], service_type, "{component}");
        let port = &service["spec"]["ports"][0];
        assert_eq!(port["port"], 8443, "{component}");
        assert_eq!(port["targetPort"], "grpc", "{component}");
        assert_eq!(port["nodePort"].as_u64(), node_port, "{component}");
    }
    // The base keeps the hub inside the cluster.
    let objects = render("parent").await;
    let service = objects
        .iter()
        .find(|o| o["kind"] == "Service" && o["metadata"]["name"] == "atoll-hub")
        .unwrap();
    assert_eq!(service["spec"]["type"], "ClusterIP");
}

#[tokio::test]
async fn the_installs_name_the_images_make_images_builds() {
    if !kubectl_or_skip("image names").await {
        return;
    }
    let version = env!("CARGO_PKG_VERSION");
    for (dir, deployment, image) in [
        ("parent", "atoll-scheduler", "atoll-scheduler"),
        ("parent", "atoll-hub", "atoll-hub"),
        ("agent", "atoll-agent", "atoll-agent"),
        ("agent-namespaced", "atoll-agent", "atoll-agent"),
    ] {
        let objects = render(dir).await;
        let d = objects
            .iter()
            .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == deployment)
            .unwrap();
        let want = format!("localhost/{image}:{version}");
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"].as_str(),
            Some(want.as_str()),
            "{dir}: the reference atoll-images gives the archive it writes"
        );
    }
    // atoll-images names its archives `<repository>/<binary>:<tag>` with these defaults.
    let images = std::fs::read_to_string(manifests().join("../images/src/main.rs")).unwrap();
    assert!(
        images.contains(r#"default_value = "localhost""#),
        "atoll-images' default repository is localhost"
    );
}
