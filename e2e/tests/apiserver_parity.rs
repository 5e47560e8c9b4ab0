#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! devcluster's own kubectl and kube-rs scenarios, written once and run against both a
//! devcluster and a real kube-apiserver (v1.33, the real tier). Where the two legitimately
//! differ, each tier's behaviour is asserted explicitly, pointing at the entry of
//! "Known differences from kube-apiserver" in devcluster/README.md.

mod support;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use atoll_e2e::state::Role;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// Which server a case runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    Dev,
    Real,
}

/// One server to run the cases against: its admin kubeconfig and a scratch directory.
struct Target {
    tier: Tier,
    kubeconfig: PathBuf,
    /// HOME of kubectl (its discovery cache lives under it too) and scratch files.
    dir: PathBuf,
    client: Client,
}

/// What one kubectl run gave.
struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl Target {
    async fn new(tier: Tier, kubeconfig: PathBuf, dir: PathBuf) -> Target {
        let client = atoll_e2e::fleet::client_for(&kubeconfig).await.unwrap();
        Target {
            tier,
            kubeconfig,
            dir,
            client,
        }
    }

    /// Runs the real kubectl (the dispatcher picks 1.32 for devcluster, 1.33 for the real
    /// server) with `stdin`; fails the test after 120 s.
    async fn run(&self, args: &[&str], stdin: Option<&str>) -> Out {
        let mut child = Command::new("kubectl")
            .env("HOME", &self.dir)
            .env_remove("KUBECONFIG")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).await.unwrap();
        }
        drop(input);
        let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("kubectl {args:?} timed out"))
            .unwrap();
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// kubectl that must succeed: its stdout.
    async fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let o = self.run(args, stdin).await;
        assert!(
            o.ok,
            "{:?}: kubectl {args:?} failed:\nstdout: {}\nstderr: {}",
            self.tier, o.stdout, o.stderr
        );
        o.stdout
    }

    /// kubectl that must fail: its stderr.
    async fn fails(&self, args: &[&str], stdin: Option<&str>) -> String {
        let o = self.run(args, stdin).await;
        assert!(
            !o.ok,
            "{:?}: kubectl {args:?} should have failed:\n{}",
            self.tier, o.stdout
        );
        o.stderr
    }

    /// Writes `content` to `<dir>/<name>` and returns the path.
    fn write(&self, name: &str, content: &str) -> String {
        let p = self.dir.join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, content).unwrap();
        p.to_string_lossy().into_owned()
    }
}

// ---------------------------------------------------------------------------------------------
// Harness: every case runs against each tier, one after the other, in its own namespace.

type CaseFn = fn(Arc<Target>, String) -> Pin<Box<dyn Future<Output = ()> + Send>>;

macro_rules! case {
    ($f:ident) => {
        (stringify!($f), (|t, ns| Box::pin($f(t, ns))) as CaseFn)
    };
}

fn cases() -> Vec<(&'static str, CaseFn)> {
    vec![
        case!(custom_resource_definition_and_printer_columns),
        case!(description_cluster_column),
        case!(clusternet_helm_examples),
        case!(server_side_apply_field_removal_and_conflicts),
        case!(apply_kustomize_directory),
        case!(finalizers_linger_until_removed),
        case!(wait_for_condition_and_rollout),
        case!(bad_input_messages),
        case!(create_token),
        case!(node_field_selectors),
        case!(apiregistration_group),
        case!(events_about_cluster_scoped_objects),
        case!(kube_watcher_and_reflector),
        case!(kube_patch_apply_merge_json),
        case!(kube_status_subresource),
        case!(kube_finalizers),
    ]
}

/// Runs every case against `target`; a failing case does not stop the others, and the test
/// fails at the end naming every failed case.
async fn run_all(target: Target) {
    let tier = target.tier;
    let target = Arc::new(target);
    let started = Instant::now();
    let mut failed = Vec::new();
    for (name, f) in cases() {
        let ns = format!(
            "{}-{}",
            name.replace('_', "-"),
            if tier == Tier::Dev { "dev" } else { "real" }
        );
        let case_started = Instant::now();
        let result = tokio::spawn(f(target.clone(), ns)).await;
        let took = case_started.elapsed().as_secs_f64();
        match result {
            Ok(()) => eprintln!("{tier:?}: {name} ok ({took:.1}s)"),
            Err(e) => {
                eprintln!("{tier:?}: {name} FAILED ({took:.1}s)");
                failed.push(format!("{name}: {e}"));
            }
        }
    }
    eprintln!(
        "FIGURE apiserver parity on {tier:?}: {} cases in {:.1}s",
        cases().len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "{tier:?}: failed cases: {failed:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parity_on_devcluster() {
    if !atoll_e2e::kubectl::Kubectl::available().await {
        eprintln!("NOTICE: parity_on_devcluster skipped: kubectl is not on PATH");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dev = devcluster::DevCluster::start(devcluster::Config {
        nodes: 2,
        simulate_workloads: true,
        workload_delay: Duration::from_millis(300),
        ..devcluster::Config::default()
    })
    .await
    .unwrap();
    let kubeconfig = tmp.path().join("kubeconfig");
    dev.write_kubeconfig(&kubeconfig).unwrap();
    run_all(Target::new(Tier::Dev, kubeconfig, tmp.path().to_path_buf()).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parity_on_kube_apiserver() {
    if support::backend() != atoll_e2e::plan::Backend::Kube {
        eprintln!(
            "NOTICE: parity_on_kube_apiserver (the same cases against a real kube-apiserver) skipped (FLEET_BACKEND=kube runs it)"
        );
        return;
    }
    assert!(
        atoll_e2e::kubectl::Kubectl::available().await,
        "FLEET_BACKEND=kube, but kubectl is not on PATH"
    );
    let tmp = tempfile::tempdir().unwrap();
    let (_cluster, kubeconfig) = support::start_real(tmp.path(), "parity", Role::Parent, 2).await;
    run_all(Target::new(Tier::Real, kubeconfig, tmp.path().to_path_buf()).await).await;
}

// ---------------------------------------------------------------------------------------------
// Helpers

async fn create_namespace(t: &Target, ns: &str) {
    t.ok(&["create", "namespace", ns], None).await;
}

/// The next item of a watch stream (the `Stream` trait is reached through `WatchStreamExt`).
async fn next_item<S>(s: &mut S) -> Option<S::Item>
where
    S: WatchStreamExt + Unpin,
{
    std::future::poll_fn(|cx| Pin::new(&mut *s).poll_next(cx)).await
}

/// The whitespace-separated cells of the table row whose `column`-th cell is `key`.
fn row<'a>(table: &'a str, column: usize, key: &str) -> Vec<&'a str> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.get(column) == Some(&key))
        .unwrap_or_else(|| panic!("no row {key} in\n{table}"))
}

const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names:
    kind: Widget
    plural: widgets
    singular: widget
    shortNames: [wd]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    additionalPrinterColumns:
    - name: Size
      type: integer
      jsonPath: .spec.size
    - name: Color
      type: string
      jsonPath: .spec.color
    - name: Team
      type: string
      jsonPath: .metadata.labels['example\.com/team']
    schema:
      openAPIV3Schema:
        type: object
        description: A widget for tests.
        properties:
          spec:
            type: object
            description: What the widget should be.
            properties:
              size:
                type: integer
                description: How big the widget is.
              color:
                type: string
          status:
            type: object
            properties:
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {type: string}
                    status: {type: string}
"#;

fn widget_yaml(name: &str, ns: &str, size: i64) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\n  namespace: {ns}\n  labels:\n    example.com/team: blue-team\nspec:\n  size: {size}\n  color: blue\n"
    )
}

/// Applies the Widget CRD (idempotent) and waits until it is Established.
async fn widget_crd(t: &Target) {
    t.ok(&["apply", "-f", "-"], Some(WIDGET_CRD)).await;
    t.ok(
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=30s",
        ],
        None,
    )
    .await;
}

fn cm_yaml(name: &str, ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\ndata:\n  k: v\n"
    )
}

fn cm(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":name},"data":data}),
    )
    .unwrap()
}

// ---------------------------------------------------------------------------------------------
// kubectl cases

async fn custom_resource_definition_and_printer_columns(t: Arc<Target>, ns: String) {
    create_namespace(&t, &ns).await;
    // A custom resource whose CRD is not installed (validation on, no --validate=false):
    // devcluster/README.md "Known differences": kubectl falls back to /openapi/v2 for a
    // group-version missing from the v3 index; devcluster now serves it, so both say the same.
    let err = t
        .fails(&["apply", "-f", "-"], Some(&widget_yaml("early", &ns, 1)))
        .await;
    assert!(
        err.contains(r#"no matches for kind "Widget" in version "example.com/v1""#)
            && err.contains("ensure CRDs are installed first"),
        "{:?}: {err}",
        t.tier
    );
    let out = t.ok(&["apply", "-f", "-"], Some(WIDGET_CRD)).await;
    assert!(
        out.contains("customresourcedefinition.apiextensions.k8s.io/widgets.example.com"),
        "{out}"
    );
    widget_crd(&t).await;
    let out = t
        .ok(&["apply", "-f", "-"], Some(&widget_yaml("w1", &ns, 3)))
        .await;
    assert!(out.contains("widget.example.com/w1 created"), "{out}");
    let out = t.ok(&["get", "widgets", "-n", &ns], None).await;
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    // Printer columns only: no implicit AGE.
    assert_eq!(header, ["NAME", "SIZE", "COLOR", "TEAM"], "{out}");
    // The label column's JSONPath escapes the dots of the key, as the server evaluates it.
    assert_eq!(
        row(&out, 0, "w1"),
        ["w1", "3", "blue", "blue-team"],
        "{out}"
    );
    let out = t
        .ok(
            &["get", "wd", "w1", "-n", &ns, "-o", "jsonpath={.spec.size}"],
            None,
        )
        .await;
    assert_eq!(out, "3");
    // Client-side apply again with a change (a merge patch for custom resources).
    let out = t
        .ok(&["apply", "-f", "-"], Some(&widget_yaml("w1", &ns, 4)))
        .await;
    assert!(out.contains("widget.example.com/w1 configured"), "{out}");
    let out = t
        .ok(
            &["get", "wd", "w1", "-n", &ns, "-o", "jsonpath={.spec.size}"],
            None,
        )
        .await;
    assert_eq!(out, "4");
    // An unknown field is refused: kubectl asks for strict field validation by default.
    let err = t
        .fails(
            &["apply", "-f", "-"],
            Some(&widget_yaml("w2", &ns, 1).replace("color: blue", "color: blue\n  shape: round")),
        )
        .await;
    assert!(
        err.contains(r#"Widget in version "v1" cannot be handled as a Widget: strict decoding error: unknown field "spec.shape""#),
        "{err}"
    );
    // With --validate=warn it is dropped with a warning.
    let o = t
        .run(
            &["apply", "--validate=warn", "-f", "-"],
            Some(&widget_yaml("w2", &ns, 1).replace("color: blue", "color: blue\n  shape: round")),
        )
        .await;
    assert!(o.ok, "{}", o.stderr);
    assert!(
        o.stderr.contains(r#"unknown field "spec.shape""#),
        "{}",
        o.stderr
    );
    // A value of the wrong type is refused.
    let err = t
        .fails(
            &["apply", "-f", "-"],
            Some(&widget_yaml("w3", &ns, 1).replace("size: 1", "size: big")),
        )
        .await;
    assert!(err.contains("spec.size"), "{err}");
    // explain reads the CRD's schema from the server's OpenAPI.
    let out = t.ok(&["explain", "widgets.spec"], None).await;
    assert!(
        out.contains("How big the widget is")
            && out
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["KIND:", "Widget"]),
        "{out}"
    );
    // Built-in table columns.
    let out = t.ok(&["get", "ns", &ns], None).await;
    assert_eq!(row(&out, 0, &ns)[1], "Active", "{out}");
}

async fn description_cluster_column(t: Arc<Target>, ns: String) {
    create_namespace(&t, &ns).await;
    let crd = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../manifests/crds/apps.clusternet.io_descriptions.yaml");
    t.ok(&["apply", "-f", crd.to_str().unwrap()], None).await;
    t.ok(
        &[
            "wait",
            "--for=condition=Established",
            "crd/descriptions.apps.clusternet.io",
            "--timeout=30s",
        ],
        None,
    )
    .await;
    let desc = format!(
        "apiVersion: apps.clusternet.io/v1alpha1\nkind: Description\nmetadata:\n  name: default.web\n  namespace: {ns}\n  labels:\n    clusters.clusternet.io/cluster-name: child-1\nspec:\n  deployer: Generic\n"
    );
    t.ok(&["apply", "-f", "-"], Some(&desc)).await;
    // The CLUSTER column shows the cluster-name label on both tiers (devcluster used to read
    // `['a\.b']` as a key with backslashes and printed nothing).
    let out = t.ok(&["get", "desc", "-A"], None).await;
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAMESPACE", "NAME", "CLUSTER", "DEPLOYER", "STATUS", "AGE"],
        "{out}"
    );
    let cells = row(&out, 0, &ns);
    assert_eq!(
        &cells[..4],
        [ns.as_str(), "default.web", "child-1", "Generic"],
        "{out}"
    );
}

/// Clusternet's own examples with HelmChart feeds (`tests/clusternet-examples`, unchanged) are
/// accepted by atoll's CRDs, as written, on both tiers (a server-side dry run).
async fn clusternet_helm_examples(t: Arc<Target>, _ns: String) {
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests/crds");
    t.ok(&["apply", "-k", crds.to_str().unwrap()], None).await;
    for crd in [
        "helmcharts.apps.clusternet.io",
        "subscriptions.apps.clusternet.io",
        "globalizations.apps.clusternet.io",
    ] {
        let crd = format!("crd/{crd}");
        t.ok(
            &["wait", "--for=condition=Established", &crd, "--timeout=30s"],
            None,
        )
        .await;
    }
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clusternet-examples");
    let mut applied = 0;
    for entry in std::fs::read_dir(&examples).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let out = t
                .ok(
                    &["apply", "--dry-run=server", "-f", path.to_str().unwrap()],
                    None,
                )
                .await;
            assert!(
                out.contains("(server dry run)"),
                "{}: {out}",
                path.display()
            );
            applied += 1;
        }
    }
    assert_eq!(applied, 7, "every example file");
}

async fn server_side_apply_field_removal_and_conflicts(t: Arc<Target>, ns: String) {
    create_namespace(&t, &ns).await;
    let v1 = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: {ns}\ndata:\n  a: \"1\"\n  b: \"2\"\n"
    );
    let v2 = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\n  namespace: {ns}\ndata:\n  a: \"1\"\n"
    );
    t.ok(&["apply", "--server-side", "-f", "-"], Some(&v1))
        .await;
    t.ok(&["apply", "--server-side", "-f", "-"], Some(&v2))
        .await;
    let out = t
        .ok(&["get", "cm", "ssa", "-n", &ns, "-o", "json"], None)
        .await;
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["data"], json!({"a": "1"}), "{out}");
    // Another manager changing an owned field conflicts; --force-conflicts takes it over.
    let other = v2.replace("a: \"1\"", "a: \"9\"");
    let err = t
        .fails(
            &[
                "apply",
                "--server-side",
                "--field-manager",
                "other",
                "-f",
                "-",
            ],
            Some(&other),
        )
        .await;
    assert!(
        err.contains("Apply failed with 1 conflict")
            && err.contains(r#"conflict with "kubectl"#)
            && err.contains(".data.a"),
        "{err}"
    );
    t.ok(
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(&other),
    )
    .await;
    let out = t
        .ok(
            &["get", "cm", "ssa", "-n", &ns, "-o", "jsonpath={.data.a}"],
            None,
        )
        .await;
    assert_eq!(out, "9");
}

async fn apply_kustomize_directory(t: Arc<Target>, ns: String) {
    let dir = format!("kustomize-{ns}");
    t.write(
        &format!("{dir}/kustomization.yaml"),
        &format!("namespace: {ns}\nresources:\n- ns.yaml\n- cm.yaml\nlabels:\n- pairs:\n    app: kz\n  includeSelectors: true\n"),
    );
    t.write(
        &format!("{dir}/ns.yaml"),
        &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"),
    );
    t.write(
        &format!("{dir}/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  x: y\n",
    );
    let path = t.dir.join(&dir);
    let out = t.ok(&["apply", "-k", path.to_str().unwrap()], None).await;
    assert!(
        out.contains(&format!("namespace/{ns} created"))
            && out.contains("configmap/settings created"),
        "{out}"
    );
    let out = t
        .ok(
            &["get", "cm", "-n", &ns, "-l", "app=kz", "-o", "name"],
            None,
        )
        .await;
    assert_eq!(out.trim(), "configmap/settings");
    // Deleting the namespace with its contents in one go (kubectl waits for the namespace).
    let out = t
        .ok(
            &["delete", "-k", path.to_str().unwrap(), "--timeout=60s"],
            None,
        )
        .await;
    assert!(
        out.contains(&format!("namespace \"{ns}\" deleted")),
        "{out}"
    );
    let err = t.fails(&["get", "ns", &ns], None).await;
    assert!(err.contains("NotFound"), "{err}");
}

async fn finalizers_linger_until_removed(t: Arc<Target>, ns: String) {
    create_namespace(&t, &ns).await;
    let held = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  namespace: {ns}\n  finalizers: [example.com/hold]\n"
    );
    t.ok(&["create", "-f", "-"], Some(&held)).await;
    t.ok(&["delete", "cm", "held", "-n", &ns, "--wait=false"], None)
        .await;
    let out = t
        .ok(
            &[
                "get",
                "cm",
                "held",
                "-n",
                &ns,
                "-o",
                "jsonpath={.metadata.deletionTimestamp}",
            ],
            None,
        )
        .await;
    assert!(!out.is_empty(), "deletionTimestamp not set");
    t.ok(
        &[
            "patch",
            "cm",
            "held",
            "-n",
            &ns,
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
        None,
    )
    .await;
    let err = t.fails(&["get", "cm", "held", "-n", &ns], None).await;
    assert!(err.contains("NotFound"), "{err}");
    // Namespace deletion with contents finishes (kubectl waits for it).
    t.ok(&["apply", "-f", "-"], Some(&cm_yaml("x", &ns))).await;
    t.ok(&["delete", "namespace", &ns, "--timeout=60s"], None)
        .await;
    let err = t.fails(&["get", "ns", &ns], None).await;
    assert!(err.contains("NotFound"), "{err}");
}

async fn wait_for_condition_and_rollout(t: Arc<Target>, ns: String) {
    create_namespace(&t, &ns).await;
    let deployment = format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: {ns}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: web}}
  template:
    metadata:
      labels: {{app: web}}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        ports:
        - containerPort: 80
"#
    );
    let out = t.ok(&["get", "nodes"], None).await;
    assert_eq!(
        out.lines()
            .skip(1)
            .filter(|l| l.contains(" Ready "))
            .count(),
        2,
        "{out}"
    );
    t.ok(&["apply", "-f", "-"], Some(&deployment)).await;
    // devcluster simulates the controllers (--simulate-workloads); the real tier runs
    // kube-controller-manager, kube-scheduler and kwok.
    t.ok(
        &[
            "wait",
            "--for=condition=Available",
            "deployment/web",
            "-n",
            &ns,
            "--timeout=90s",
        ],
        None,
    )
    .await;
    let (out, _) = support::POLL
        .eventually_timed("2/2 ready", Duration::from_secs(60), || {
            let t = t.clone();
            let ns = ns.clone();
            async move {
                let out = t.ok(&["get", "deploy", "web", "-n", &ns], None).await;
                if row(&out, 0, "web")[1] == "2/2" {
                    Ok(out)
                } else {
                    Err(out)
                }
            }
        })
        .await;
    assert_eq!(
        out.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{out}"
    );
    // Client-side apply again (strategic merge patch): the container list merges by name.
    let changed = deployment
        .replace("replicas: 2", "replicas: 3")
        .replace("nginx:1.27", "nginx:1.28");
    let out = t.ok(&["apply", "-f", "-"], Some(&changed)).await;
    assert!(out.contains("deployment.apps/web configured"), "{out}");
    let out = t
        .ok(
            &[
                "get",
                "deploy",
                "web",
                "-n",
                &ns,
                "-o",
                "jsonpath={.spec.replicas} {.spec.template.spec.containers[*].image}",
            ],
            None,
        )
        .await;
    assert_eq!(out, "3 nginx:1.28");
    let out = t
        .ok(
            &[
                "rollout",
                "status",
                "deployment/web",
                "-n",
                &ns,
                "--timeout=90s",
            ],
            None,
        )
        .await;
    assert!(out.contains("successfully rolled out"), "{out}");
}

async fn bad_input_messages(t: Arc<Target>, ns: String) {
    create_namespace(&t, &ns).await;
    let err = t
        .fails(
            &["create", "-n", &ns, "-f", "-"],
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n"),
        )
        .await;
    assert!(
        err.contains(r#"The ConfigMap "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain"#),
        "{err}"
    );
    let err = t.fails(&["get", "nosuchthings"], None).await;
    assert!(
        err.contains(r#"the server doesn't have a resource type "nosuchthings""#),
        "{err}"
    );
    let err = t.fails(&["get", "cm", "absent", "-n", &ns], None).await;
    assert!(
        err.contains(r#"Error from server (NotFound): configmaps "absent" not found"#),
        "{err}"
    );
    t.ok(&["create", "-f", "-"], Some(&cm_yaml("twice", &ns)))
        .await;
    let err = t
        .fails(&["create", "-f", "-"], Some(&cm_yaml("twice", &ns)))
        .await;
    assert!(
        err.contains(r#"Error from server (AlreadyExists): error when creating "STDIN": configmaps "twice" already exists"#),
        "{err}"
    );
    let err = t.fails(&["get", "cm", "-n", &ns, "-l", "a b"], None).await;
    assert!(err.contains("unable to parse requirement"), "{err}");
}

async fn create_token(t: Arc<Target>, ns: String) {
    use base64::Engine;
    create_namespace(&t, &ns).await;
    t.ok(&["create", "serviceaccount", "bot", "-n", &ns], None)
        .await;
    let token = t
        .ok(
            &["create", "token", "bot", "-n", &ns, "--duration=20m"],
            None,
        )
        .await;
    let parts: Vec<&str> = token.trim().split('.').collect();
    assert_eq!(parts.len(), 3, "{token}");
    let decode = |s: &str| -> Value {
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(s)
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    };
    let header = decode(parts[0]);
    let claims = decode(parts[1]);
    assert_eq!(
        claims["sub"],
        json!(format!("system:serviceaccount:{ns}:bot")),
        "{claims}"
    );
    assert_eq!(claims["kubernetes.io"]["namespace"], json!(ns), "{claims}");
    assert_eq!(
        claims["kubernetes.io"]["serviceaccount"]["name"],
        json!("bot"),
        "{claims}"
    );
    assert_eq!(
        claims["aud"],
        json!(["https://kubernetes.default.svc.cluster.local"]),
        "{claims}"
    );
    for claim in ["exp", "iat", "nbf", "iss", "jti"] {
        assert!(!claims[claim].is_null(), "{claim} missing: {claims}");
    }
    let lifetime = claims["exp"].as_i64().unwrap() - claims["iat"].as_i64().unwrap();
    assert_eq!(lifetime, 1200, "{claims}");
    // devcluster/README.md "Known differences": devcluster's tokens are not signed.
    match t.tier {
        Tier::Dev => assert_eq!(header["alg"], json!("none"), "{header}"),
        Tier::Real => assert!(
            header["alg"]
                .as_str()
                .is_some_and(|a| a.starts_with("RS") || a.starts_with("ES")),
            "{header}"
        ),
    }
    let err = t
        .fails(
            &["create", "token", "bot", "-n", &ns, "--duration=1m"],
            None,
        )
        .await;
    assert!(
        err.contains(r#"error: failed to create token: TokenRequest.authentication.k8s.io "" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"#),
        "{err}"
    );
    let err = t
        .fails(&["create", "token", "nobody", "-n", &ns], None)
        .await;
    assert!(
        err.contains(r#"serviceaccounts "nobody" not found"#),
        "{err}"
    );
}

async fn node_field_selectors(t: Arc<Target>, _ns: String) {
    let out = t.ok(&["get", "nodes", "-o", "name"], None).await;
    let nodes: Vec<&str> = out.lines().collect();
    assert_eq!(nodes.len(), 2, "{out}");
    let names = |sel: &'static str| {
        let t = t.clone();
        async move {
            t.ok(
                &["get", "nodes", "--field-selector", sel, "-o", "name"],
                None,
            )
            .await
        }
    };
    // A Node without spec.unschedulable is schedulable (`false`), as kube-apiserver reads it.
    assert_eq!(names("spec.unschedulable=false").await.lines().count(), 2);
    assert_eq!(names("spec.unschedulable=true").await, "");
    t.ok(&["cordon", nodes[0]], None).await;
    assert_eq!(names("spec.unschedulable=true").await.trim(), nodes[0]);
    assert_eq!(names("spec.unschedulable!=true").await.trim(), nodes[1]);
    t.ok(&["uncordon", nodes[0]], None).await;
    assert_eq!(names("spec.unschedulable=false").await.lines().count(), 2);
    let one = format!("metadata.name={}", nodes[1].trim_start_matches("node/"));
    let out = t
        .ok(
            &["get", "nodes", "--field-selector", &one, "-o", "name"],
            None,
        )
        .await;
    assert_eq!(out.trim(), nodes[1]);
}

async fn apiregistration_group(t: Arc<Target>, _ns: String) {
    // devcluster/README.md "Known differences": devcluster has no aggregation layer and does
    // not serve apiregistration.k8s.io; kube-apiserver lists a Local APIService per group.
    let versions = t.ok(&["api-versions"], None).await;
    match t.tier {
        Tier::Dev => {
            assert!(!versions.contains("apiregistration.k8s.io"), "{versions}");
            let err = t.fails(&["get", "apiservices"], None).await;
            assert!(
                err.contains(r#"the server doesn't have a resource type "apiservices""#),
                "{err}"
            );
        }
        Tier::Real => {
            assert!(versions.contains("apiregistration.k8s.io/v1"), "{versions}");
            let out = t.ok(&["get", "apiservices", "v1.apps"], None).await;
            assert_eq!(row(&out, 0, "v1.apps")[1], "Local", "{out}");
        }
    }
}

async fn events_about_cluster_scoped_objects(t: Arc<Target>, ns: String) {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    create_namespace(&t, &ns).await;
    let target = Api::<Namespace>::all(t.client.clone())
        .get(&ns)
        .await
        .unwrap();
    let recorder = Recorder::new(
        t.client.clone(),
        Reporter {
            controller: "parity-tester".into(),
            instance: None,
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "Tested".into(),
        note: Some(format!("hello from {ns}")),
        action: "Test".into(),
        secondary: None,
    };
    // kube-rs publishes an Event about a cluster-scoped object in `default`; twice makes a
    // series.
    let reference = target.object_ref(&());
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(t.client.clone(), "default");
    let listed = core
        .list(&ListParams::default().fields(&format!(
            "involvedObject.kind=Namespace,involvedObject.name={ns}"
        )))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1, "{:?}", listed.items);
    let name = listed.items[0].name_any();
    let new_api: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(t.client.clone(), "default");
    let stored = new_api.get(&name).await.unwrap();
    assert!(stored.series.is_some(), "second publish made a series");
    // kubectl shows it with the object it is about.
    let out = t
        .ok(
            &[
                "get",
                "events",
                "-n",
                "default",
                "--field-selector",
                &format!("involvedObject.name={ns}"),
            ],
            None,
        )
        .await;
    assert!(
        out.contains("Tested")
            && out.contains(&format!("namespace/{ns}"))
            && out.contains(&format!("hello from {ns}")),
        "{out}"
    );
    // An Event about a cluster-scoped object anywhere but `default` is refused.
    let misplaced = format!(
        "apiVersion: v1\nkind: Event\nmetadata:\n  name: misplaced\n  namespace: {ns}\ninvolvedObject: {{apiVersion: v1, kind: Namespace, name: {ns}}}\nreason: Tested\nmessage: m\ntype: Normal\nsource: {{component: tester}}\n"
    );
    let err = t.fails(&["create", "-f", "-"], Some(&misplaced)).await;
    assert!(
        err.contains(r#"The Event "misplaced" is invalid: involvedObject.namespace: Invalid value: "": does not match event.namespace"#),
        "{err}"
    );
    // One about a namespaced object in another namespace too.
    let elsewhere = misplaced.replace(
        &format!("kind: Namespace, name: {ns}}}"),
        "kind: ConfigMap, name: x, namespace: default}",
    );
    let err = t.fails(&["create", "-f", "-"], Some(&elsewhere)).await;
    assert!(err.contains("does not match event.namespace"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// kube-rs cases

async fn kube_namespace(t: &Target, ns: &str) {
    let ns: Namespace = serde_json::from_value(
        json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":ns}}),
    )
    .unwrap();
    Api::<Namespace>::all(t.client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

async fn kube_watcher_and_reflector(t: Arc<Target>, ns: String) {
    kube_namespace(&t, &ns).await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    api.create(&PostParams::default(), &cm("before", json!({})))
        .await
        .unwrap();
    // devcluster/README.md "Known differences": devcluster serves streaming lists
    // (`sendInitialEvents`); kube-apiserver 1.33 with its default feature gates (WatchList
    // off) refuses them with 422. Newer servers serve them (seen on v1.37.2).
    let streaming = watcher::Config::default().streaming_lists();
    let real_minor: u32 = match t.tier {
        Tier::Dev => 0,
        Tier::Real => {
            let v = t.client.apiserver_version().await.unwrap();
            v.minor.trim_end_matches('+').parse().unwrap()
        }
    };
    let serves_streaming = t.tier == Tier::Dev || real_minor >= 34;
    if !serves_streaming {
        let mut stream = Box::pin(watcher(api.clone(), streaming.clone()));
        let err = tokio::time::timeout(Duration::from_secs(10), next_item(&mut stream))
            .await
            .unwrap()
            .unwrap()
            .unwrap_err();
        assert!(
            err.to_string().contains("sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"),
            "{err}"
        );
    }
    let configs = if serves_streaming {
        vec![watcher::Config::default(), streaming]
    } else {
        vec![watcher::Config::default(), watcher::Config::default()]
    };
    for (i, cfg) in configs.into_iter().enumerate() {
        let mut stream = Box::pin(watcher(api.clone(), cfg).applied_objects());
        let mut names = Vec::new();
        let after = format!("after-{i}");
        let mut created = false;
        while !names.contains(&after) {
            let o = tokio::time::timeout(Duration::from_secs(10), next_item(&mut stream))
                .await
                .unwrap_or_else(|_| panic!("{:?}: watch stalled; saw {names:?}", t.tier))
                .unwrap()
                .unwrap();
            names.push(o.name_any());
            if !created
                && names.contains(&"kube-root-ca.crt".to_string())
                && names.contains(&"before".to_string())
            {
                api.create(&PostParams::default(), &cm(&after, json!({})))
                    .await
                    .unwrap();
                created = true;
            }
        }
        assert!(names.contains(&"before".to_string()), "{names:?}");
    }
    // A reflector's store holds what exists and follows changes.
    let (reader, writer) = reflector::store::<ConfigMap>();
    let stream = reflector::reflector(writer, watcher(api.clone(), watcher::Config::default()));
    let driver = tokio::spawn(async move {
        let mut stream = Box::pin(stream);
        while next_item(&mut stream).await.is_some() {}
    });
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    let mut names: Vec<String> = reader.state().iter().map(|c| c.name_any()).collect();
    names.sort();
    assert_eq!(names, ["after-0", "after-1", "before", "kube-root-ca.crt"]);
    api.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    support::POLL
        .eventually_timed("the store loses `before`", Duration::from_secs(10), || {
            let names: Vec<String> = reader.state().iter().map(|c| c.name_any()).collect();
            async move {
                if names.contains(&"before".to_string()) {
                    Err(format!("{names:?}"))
                } else {
                    Ok(())
                }
            }
        })
        .await;
    driver.abort();
}

async fn kube_patch_apply_merge_json(t: Arc<Target>, ns: String) {
    kube_namespace(&t, &ns).await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let applied = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ssa"},"data":{"a":"1","b":"2"}});
    let first = api
        .patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(&applied))
        .await
        .unwrap();
    let mf = first.metadata.managed_fields.clone().unwrap();
    assert_eq!(mf.len(), 1, "{mf:?}");
    assert_eq!(mf[0].manager.as_deref(), Some("mgr-a"));
    assert_eq!(mf[0].operation.as_deref(), Some("Apply"));
    // The same apply again writes nothing.
    let again = api
        .patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(&applied))
        .await
        .unwrap();
    assert_eq!(again.resource_version(), first.resource_version());
    // Another manager changing an owned field conflicts; force takes it over.
    let other =
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ssa"},"data":{"a":"9"}});
    let err = api
        .patch("ssa", &PatchParams::apply("mgr-b"), &Patch::Apply(&other))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.reason == "Conflict"
            && s.message.contains("conflict with \"mgr-a\"") && s.message.contains(".data.a")),
        "{err:?}"
    );
    let forced = api
        .patch(
            "ssa",
            &PatchParams::apply("mgr-b").force(),
            &Patch::Apply(&other),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap().get("a").map(String::as_str), Some("9"));
    // mgr-a stops applying "b": it is removed; "a" now belongs to mgr-b and stays.
    let fewer = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"ssa"},"data":{}});
    let pruned = api
        .patch("ssa", &PatchParams::apply("mgr-a"), &Patch::Apply(&fewer))
        .await
        .unwrap();
    let data = pruned.data.unwrap_or_default();
    assert_eq!(data.len(), 1, "{data:?}");
    assert_eq!(data.get("a").map(String::as_str), Some("9"));
    // A merge patch by a named manager adds an Update entry.
    let merged = api
        .patch(
            "ssa",
            &PatchParams {
                field_manager: Some("merger".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"data":{"c":"3"},"metadata":{"labels":{"x":"y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.labels().get("x").map(String::as_str), Some("y"));
    let entry = merged
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|e| e.manager.as_deref() == Some("merger"))
        .expect("merger entry");
    assert_eq!(entry.operation.as_deref(), Some("Update"));
    // A JSON patch: test, replace, remove; a failing test op is 422.
    let patched = api
        .patch(
            "ssa",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "test", "path": "/data/a", "value": "9"},
                    {"op": "replace", "path": "/data/a", "value": "10"},
                    {"op": "remove", "path": "/data/c"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.data.unwrap(),
        [("a".to_string(), "10".to_string())].into()
    );
    let err = api
        .patch(
            "ssa",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([{"op": "test", "path": "/data/a", "value": "0"}]))
                    .unwrap(),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
    // Apply without a field manager is refused.
    let err = api
        .patch("ssa", &PatchParams::default(), &Patch::Apply(&applied))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
}

async fn kube_status_subresource(t: Arc<Target>, ns: String) {
    widget_crd(&t).await;
    kube_namespace(&t, &ns).await;
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("example.com", "v1", "Widget"));
    let api: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &ns, &ar);
    let w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "s"},
        "spec": {"size": 1}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status dropped on create"
    );
    // Through /status: the status changes, the spec and generation do not.
    let s = api
        .patch_status(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec":{"size":5},"status":{"conditions":[{"type":"Ready","status":"True"}]}})),
        )
        .await
        .unwrap();
    assert_eq!(s.metadata.generation, Some(1));
    assert_eq!(s.data["spec"]["size"], json!(1));
    assert_eq!(s.data["status"]["conditions"][0]["type"], json!("Ready"));
    // Through the main endpoint the status is ignored; a spec change bumps generation.
    let m = api
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec":{"size":3},"status":{"conditions":[]}})),
        )
        .await
        .unwrap();
    assert_eq!(m.metadata.generation, Some(2));
    assert_eq!(m.data["spec"]["size"], json!(3));
    assert_eq!(m.data["status"]["conditions"][0]["status"], json!("True"));
    // A metadata-only change does not.
    let l = api
        .patch(
            "s",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata":{"labels":{"x":"y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(l.metadata.generation, Some(2));
    // Status by server-side apply on /status, with its own manager.
    let applied = api
        .patch_status(
            "s",
            &PatchParams::apply("status-writer").force(),
            &Patch::Apply(
                json!({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"s"},
                "status":{"conditions":[{"type":"Ready","status":"False"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        applied.data["status"]["conditions"][0]["status"],
        json!("False")
    );
    let entry = applied
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .find(|e| e.manager.as_deref() == Some("status-writer"))
        .expect("status-writer entry");
    assert_eq!(entry.subresource.as_deref(), Some("status"));
    // The scale subresource of a Deployment (no replicas, so no controller touches it).
    let deployments: Api<Deployment> = Api::namespaced(t.client.clone(), &ns);
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},
        "spec":{"replicas":0,"selector":{"matchLabels":{"app":"web"}},
            "template":{"metadata":{"labels":{"app":"web"}},"spec":{"containers":[{"name":"c","image":"nginx"}]}}}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let scale = deployments.get_scale("web").await.unwrap();
    // autoscaling/v1 omits a zero replica count.
    assert_eq!(scale.spec.unwrap().replicas, None);
    assert_eq!(scale.status.unwrap().selector.as_deref(), Some("app=web"));
}

async fn kube_finalizers(t: Arc<Target>, ns: String) {
    kube_namespace(&t, &ns).await;
    let api: Api<ConfigMap> = Api::namespaced(t.client.clone(), &ns);
    let mut c = cm("fin", json!({}));
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &c).await.unwrap();
    let r = api.delete("fin", &DeleteParams::default()).await.unwrap();
    let obj = r.left().expect("object returned while finalizers pending");
    assert!(obj.metadata.deletion_timestamp.is_some());
    // No new finalizers during deletion.
    let err = api
        .patch(
            "fin",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata":{"finalizers":["example.com/hold","example.com/new"]}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 422),
        "{err:?}"
    );
    api.patch(
        "fin",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata":{"finalizers":null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("fin").await.unwrap().is_none());
}
