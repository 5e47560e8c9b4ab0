#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! devcluster driven by the real `kubectl` (skipped with a notice when kubectl is missing).
//! Every test uses a fresh HOME and cache dir so discovery/OpenAPI caches never leak.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use devcluster::{Config, DevCluster};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

struct Env {
    cluster: DevCluster,
    dir: tempfile::TempDir,
}

struct Out {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn kubectl_path() -> Option<PathBuf> {
    let p = PathBuf::from(std::env::var("KUBECTL").unwrap_or_else(|_| "/usr/bin/kubectl".into()));
    p.exists().then_some(p)
}

async fn env_with(config: Config) -> Option<Env> {
    if kubectl_path().is_none() {
        eprintln!("NOTICE: kubectl not found; skipping kubectl test");
        return None;
    }
    let cluster = DevCluster::start(config).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    cluster
        .write_kubeconfig(&dir.path().join("kubeconfig"))
        .unwrap();
    Some(Env { cluster, dir })
}

async fn env() -> Option<Env> {
    env_with(Config::default()).await
}

impl Env {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(kubectl_path().unwrap());
        let home = self.dir.path();
        cmd.env("HOME", home)
            .env_remove("KUBECONFIG")
            .arg("--kubeconfig")
            .arg(home.join("kubeconfig"))
            .arg("--cache-dir")
            .arg(home.join("cache"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    async fn run(&self, args: &[&str], stdin: Option<&str>) -> Out {
        let mut child = self.command(args).spawn().unwrap();
        let mut input = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).await.unwrap();
        }
        drop(input);
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("kubectl timed out")
            .unwrap();
        Out {
            ok: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    async fn ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let o = self.run(args, stdin).await;
        assert!(
            o.ok,
            "kubectl {args:?} failed:\nstdout: {}\nstderr: {}",
            o.stdout, o.stderr
        );
        o.stdout
    }

    fn write(&self, name: &str, content: &str) -> String {
        let p = self.dir.path().join(name);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(&p, content).unwrap();
        p.to_string_lossy().into_owned()
    }
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
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

fn cm_yaml(name: &str, ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\ndata:\n  k: v\n"
    )
}

const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        ports:
        - containerPort: 80
"#;

const WIDGET: &str = r#"apiVersion: example.com/v1
kind: Widget
metadata:
  name: w1
  namespace: default
spec:
  size: 3
  color: blue
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_crd_then_cr_and_get_printer_columns() {
    let Some(e) = env().await else { return };
    let crd = e.write("crd.yaml", CRD);
    let out = e.ok(&["apply", "-f", &crd], None).await;
    assert!(out.contains("widgets.example.com created"), "{out}");
    e.ok(
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.example.com",
            "--timeout=20s",
        ],
        None,
    )
    .await;
    let w = e.write("w.yaml", WIDGET);
    let out = e.ok(&["apply", "-f", &w], None).await;
    assert!(out.contains("widget.example.com/w1 created"), "{out}");
    let out = e.ok(&["get", "widgets"], None).await;
    let header = out.lines().next().unwrap();
    assert!(
        header.contains("NAME") && header.contains("SIZE") && header.contains("COLOR"),
        "{out}"
    );
    assert!(out.contains("w1") && out.contains("blue"), "{out}");
    let out = e
        .ok(&["get", "wd", "w1", "-o", "jsonpath={.spec.size}"], None)
        .await;
    assert_eq!(out, "3");
    // Client-side apply again with a change (merge patch for CRs).
    let out = e
        .ok(
            &["apply", "-f", "-"],
            Some(&WIDGET.replace("size: 3", "size: 4")),
        )
        .await;
    assert!(out.contains("configured"), "{out}");
    let out = e
        .ok(&["get", "wd", "w1", "-o", "jsonpath={.spec.size}"], None)
        .await;
    assert_eq!(out, "4");
    // Built-in table columns.
    let out = e.ok(&["get", "ns"], None).await;
    assert!(
        out.contains("STATUS") && out.contains("kube-system") && out.contains("Active"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_watch_sees_a_later_change() {
    let Some(e) = env().await else { return };
    e.ok(&["apply", "-f", "-"], Some(&cm_yaml("first", "default")))
        .await;
    let mut child = e.command(&["get", "configmaps", "-w"]).spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut seen_first = false;
    let mut created = false;
    while let Ok(Ok(Some(line))) = tokio::time::timeout_at(deadline, lines.next_line()).await {
        if line.starts_with("first") && !created {
            seen_first = true;
            e.ok(&["apply", "-f", "-"], Some(&cm_yaml("second", "default")))
                .await;
            created = true;
        }
        if line.starts_with("second") {
            break;
        }
    }
    assert!(seen_first, "initial list not printed");
    assert!(tokio::time::Instant::now() < deadline, "change never seen");
    let _ = child.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_side_apply_removes_dropped_fields_and_reports_conflicts() {
    let Some(e) = env().await else { return };
    let v1 =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: \"1\"\n  b: \"2\"\n";
    let v2 = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: \"1\"\n";
    e.ok(&["apply", "--server-side", "-f", "-"], Some(v1)).await;
    e.ok(&["apply", "--server-side", "-f", "-"], Some(v2)).await;
    let out = e.ok(&["get", "cm", "ssa", "-o", "json"], None).await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["data"], serde_json::json!({"a": "1"}), "{out}");

    // Another manager changing an owned field conflicts; --force-conflicts takes it over.
    let other = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  a: \"9\"\n";
    let o = e
        .run(
            &[
                "apply",
                "--server-side",
                "--field-manager",
                "other",
                "-f",
                "-",
            ],
            Some(other),
        )
        .await;
    assert!(!o.ok, "expected a conflict");
    assert!(o.stderr.contains("conflict"), "{}", o.stderr);
    e.ok(
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(other),
    )
    .await;
    let out = e
        .ok(&["get", "cm", "ssa", "-o", "jsonpath={.data.a}"], None)
        .await;
    assert_eq!(out, "9");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_kustomize_directory() {
    let Some(e) = env().await else { return };
    e.write(
        "k/kustomization.yaml",
        "namespace: kz\nresources:\n- ns.yaml\n- cm.yaml\ncommonLabels:\n  app: kz\n",
    );
    e.write(
        "k/ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kz\n",
    );
    e.write(
        "k/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  x: y\n",
    );
    let dir = e.dir.path().join("k");
    let out = e.ok(&["apply", "-k", dir.to_str().unwrap()], None).await;
    assert!(out.contains("configmap/settings created"), "{out}");
    let out = e
        .ok(
            &["get", "cm", "-n", "kz", "-l", "app=kz", "-o", "name"],
            None,
        )
        .await;
    assert_eq!(out.trim(), "configmap/settings");
    // Deleting the namespace and its contents in one go works (and waits for the namespace).
    let out = e.ok(&["delete", "-k", dir.to_str().unwrap()], None).await;
    assert!(out.contains("namespace \"kz\" deleted"), "{out}");
    let o = e.run(&["get", "ns", "kz"], None).await;
    assert!(!o.ok && o.stderr.contains("NotFound"), "{}", o.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_with_finalizer_lingers_until_removed() {
    let Some(e) = env().await else { return };
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [example.com/hold]\n";
    e.ok(&["create", "-f", "-"], Some(cm)).await;
    e.ok(&["delete", "cm", "held", "--wait=false"], None).await;
    let out = e
        .ok(
            &[
                "get",
                "cm",
                "held",
                "-o",
                "jsonpath={.metadata.deletionTimestamp}",
            ],
            None,
        )
        .await;
    assert!(!out.is_empty(), "deletionTimestamp not set");
    e.ok(
        &[
            "patch",
            "cm",
            "held",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
        None,
    )
    .await;
    let o = e.run(&["get", "cm", "held"], None).await;
    assert!(!o.ok && o.stderr.contains("NotFound"), "{}", o.stderr);
    // Namespace deletion finishes (kubectl waits for it).
    e.ok(
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: gone\n"),
    )
    .await;
    e.ok(&["apply", "-f", "-"], Some(&cm_yaml("x", "gone")))
        .await;
    e.ok(&["delete", "namespace", "gone", "--timeout=20s"], None)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_for_condition_with_simulated_workloads() {
    let Some(e) = env_with(Config {
        nodes: 2,
        simulate_workloads: true,
        workload_delay: Duration::from_millis(300),
        ..Config::default()
    })
    .await
    else {
        return;
    };
    let out = e.ok(&["get", "nodes"], None).await;
    assert!(out.contains("node-1") && out.contains("Ready"), "{out}");
    e.ok(&["apply", "-f", "-"], Some(DEPLOYMENT)).await;
    e.ok(
        &[
            "wait",
            "--for=condition=Available",
            "deployment/web",
            "--timeout=20s",
        ],
        None,
    )
    .await;
    let out = e.ok(&["get", "deploy", "web"], None).await;
    assert!(out.contains("2/2"), "{out}");
    // Client-side apply again (strategic merge patch): replicas and image change, the
    // container list merges by name.
    let changed = DEPLOYMENT
        .replace("replicas: 2", "replicas: 3")
        .replace("nginx:1.27", "nginx:1.28");
    let out = e.ok(&["apply", "-f", "-"], Some(&changed)).await;
    assert!(out.contains("deployment.apps/web configured"), "{out}");
    let out = e
        .ok(
            &[
                "get",
                "deploy",
                "web",
                "-o",
                "jsonpath={.spec.replicas} {.spec.template.spec.containers[*].image}",
            ],
            None,
        )
        .await;
    assert_eq!(out, "3 nginx:1.28");
    e.ok(
        &["rollout", "status", "deployment/web", "--timeout=20s"],
        None,
    )
    .await;
    let _ = &e.cluster;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_custom_resource() {
    let Some(e) = env().await else { return };
    e.ok(&["apply", "-f", "-"], Some(CRD)).await;
    let out = e.ok(&["explain", "widgets.spec"], None).await;
    assert!(out.contains("How big the widget is"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_rejected_like_kube_apiserver() {
    let Some(e) = env().await else { return };
    let o = e
        .run(
            &["create", "-f", "-"],
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Bad_Name\n"),
        )
        .await;
    assert!(!o.ok && o.stderr.contains("is invalid"), "{}", o.stderr);
    let o = e.run(&["get", "nosuchthings"], None).await;
    assert!(
        !o.ok && o.stderr.contains("the server doesn't have a resource type"),
        "{}",
        o.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_subcommands_send_protobuf_and_work() {
    let Some(e) = env().await else { return };
    e.ok(&["create", "namespace", "pb"], None).await;
    e.ok(
        &[
            "create",
            "configmap",
            "c1",
            "-n",
            "pb",
            "--from-literal=a=1",
            "--from-literal=b=two",
        ],
        None,
    )
    .await;
    let out = e
        .ok(&["get", "cm", "c1", "-n", "pb", "-o", "json"], None)
        .await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["data"],
        serde_json::json!({"a": "1", "b": "two"}),
        "{out}"
    );
    e.ok(
        &[
            "create",
            "secret",
            "generic",
            "s1",
            "-n",
            "pb",
            "--from-literal=k=secret",
        ],
        None,
    )
    .await;
    let out = e
        .ok(
            &[
                "get",
                "secret",
                "s1",
                "-n",
                "pb",
                "-o",
                "jsonpath={.data.k}",
            ],
            None,
        )
        .await;
    assert_eq!(out, "c2VjcmV0");
    e.ok(
        &[
            "create",
            "deployment",
            "web",
            "-n",
            "pb",
            "--image=nginx:1.27",
            "--replicas=3",
            "--port=80",
        ],
        None,
    )
    .await;
    let out = e
        .ok(&["get", "deploy", "web", "-n", "pb", "-o", "json"], None)
        .await;
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["spec"]["replicas"], 3, "{out}");
    let c = &v["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "nginx:1.27", "{out}");
    assert_eq!(c["ports"][0]["containerPort"], 80, "{out}");
    assert_eq!(v["spec"]["selector"]["matchLabels"]["app"], "web", "{out}");
    e.ok(&["create", "serviceaccount", "bot", "-n", "pb"], None)
        .await;
    let token = e.ok(&["create", "token", "bot", "-n", "pb"], None).await;
    assert_eq!(token.trim().split('.').count(), 3, "{token}");
    e.ok(
        &["scale", "deployment", "web", "-n", "pb", "--replicas=1"],
        None,
    )
    .await;
    let out = e
        .ok(
            &[
                "get",
                "deploy",
                "web",
                "-n",
                "pb",
                "-o",
                "jsonpath={.spec.replicas}",
            ],
            None,
        )
        .await;
    assert_eq!(out, "1");
    e.ok(&["label", "cm", "c1", "-n", "pb", "team=x"], None)
        .await;
    let out = e
        .ok(
            &["get", "cm", "-n", "pb", "-l", "team=x", "-o", "name"],
            None,
        )
        .await;
    assert_eq!(out.trim(), "configmap/c1");
}
