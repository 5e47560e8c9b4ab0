#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The real `helm` (built by `make k8s`) against a child cluster of each tier: a devcluster and
//! a real kube-apiserver (v1.33, `FLEET_BACKEND=kube`). Charts come from the `hello` fixture
//! (`e2e/charts/hello`) served by a local HTTP chart repository and pushed to a local OCI
//! registry ([`atoll_e2e::chart_repo`]). Where the two tiers answer helm differently,
//! devcluster is the one fixed (devcluster/README.md, "Helm").

mod support;

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use atoll_e2e::chart_repo::{
    ChartRepo, HELLO_CHART, Helm, HelmTools, OciRegistry, WORKLOADS_CHART,
};
use atoll_e2e::plan::Backend;
use atoll_e2e::state::Role;
use atoll_testkit::eventually;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

/// The chart servers of these tests: helm and the agents of this file run on this machine.
const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// How long an object may take to appear or go.
const CONVERGE: Duration = Duration::from_secs(30);

/// Which server the child cluster is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tier {
    Dev,
    Real,
}

/// A child cluster and a helm for it.
struct Target {
    tier: Tier,
    kubeconfig: PathBuf,
    helm: Helm,
    client: Client,
    tools: HelmTools,
    dir: PathBuf,
}

impl Target {
    async fn new(tier: Tier, kubeconfig: PathBuf, tools: HelmTools, dir: &Path) -> Target {
        let client = atoll_e2e::kubectl::client_for(&kubeconfig).await.unwrap();
        Target {
            tier,
            helm: Helm::new(&tools.helm, dir.join("helm-home")),
            kubeconfig,
            client,
            tools,
            dir: dir.to_path_buf(),
        }
    }

    /// `helm <args> --kubeconfig K`, which must succeed: its stdout.
    async fn helm(&self, args: &[&str]) -> String {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.push("--kubeconfig".into());
        all.push(self.kubeconfig.display().to_string());
        self.helm
            .run(&all)
            .await
            .unwrap_or_else(|e| panic!("{:?}: {e}", self.tier))
    }

    /// `helm <args> --kubeconfig K`, which must fail: its stderr.
    async fn helm_fails(&self, args: &[&str]) -> String {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.push("--kubeconfig".into());
        all.push(self.kubeconfig.display().to_string());
        match self.helm.run(&all).await {
            Err(atoll_e2e::Error::RunHelm { stderr, .. }) => stderr,
            other => panic!(
                "{:?}: helm {args:?} should have failed: {other:?}",
                self.tier
            ),
        }
    }

    /// `helm <args> -o json`, parsed.
    async fn helm_json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let out = self.helm(&all).await;
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("{:?}: helm {args:?} -o json: {e}: {out}", self.tier))
    }

    async fn config_map(&self, ns: &str, name: &str) -> Option<ConfigMap> {
        Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .unwrap()
    }

    async fn deployment(&self, ns: &str, name: &str) -> Option<Deployment> {
        Api::<Deployment>::namespaced(self.client.clone(), ns)
            .get_opt(name)
            .await
            .unwrap()
    }

    /// The release's storage Secrets (helm's `owner=helm,name=<release>` label selector):
    /// `(name, status label)`, by name.
    async fn release_secrets(&self, ns: &str, release: &str) -> Vec<(String, String)> {
        let list = Api::<Secret>::namespaced(self.client.clone(), ns)
            .list(&ListParams::default().labels(&format!("owner=helm,name={release}")))
            .await
            .unwrap();
        let mut out: Vec<(String, String)> = list
            .items
            .iter()
            .map(|s| {
                let status = s.labels().get("status").cloned().unwrap_or_default();
                (s.name_any(), status)
            })
            .collect();
        out.sort();
        out
    }

    /// The ConfigMap's `data.message` and `data.chartVersion`, once both are as expected.
    async fn expect_config(&self, ns: &str, name: &str, message: &str, version: &str) {
        eventually(
            &format!(
                "{:?}: ConfigMap {ns}/{name} says {message} from {version}",
                self.tier
            ),
            CONVERGE,
            || async {
                let cm = self
                    .config_map(ns, name)
                    .await
                    .ok_or("absent".to_string())?;
                let data = cm.data.clone().unwrap_or_default();
                let got = (data.get("message"), data.get("chartVersion"));
                if got == (Some(&message.to_string()), Some(&version.to_string())) {
                    Ok(cm)
                } else {
                    Err(format!("{got:?}"))
                }
            },
        )
        .await;
    }

    async fn expect_gone(&self, ns: &str, release: &str) {
        eventually(
            &format!(
                "{:?}: release {ns}/{release} and its objects gone",
                self.tier
            ),
            CONVERGE,
            || async {
                let cm = self.config_map(ns, &format!("{release}-config")).await;
                let dep = self.deployment(ns, release).await;
                let secrets = self.release_secrets(ns, release).await;
                if cm.is_none() && dep.is_none() && secrets.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "configmap {} deployment {} secrets {secrets:?}",
                        cm.is_some(),
                        dep.is_some()
                    ))
                }
            },
        )
        .await;
    }
}

/// The one release of `helm list -n ns -o json`, checked for name, chart and status.
fn listed<'a>(list: &'a Value, release: &str, chart: &str, revision: &str) -> &'a Value {
    let items = list
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"));
    assert_eq!(items.len(), 1, "{list}");
    let r = &items[0];
    assert_eq!(r["name"], release, "{list}");
    assert_eq!(r["chart"], chart, "{list}");
    assert_eq!(r["status"], "deployed", "{list}");
    assert_eq!(r["revision"], revision, "{list}");
    r
}

/// From an HTTP chart repository: install 0.1.0, upgrade to 0.2.0 (published while the repository
/// serves), status, manifest, history, rollback, uninstall.
async fn from_http_repository(t: &Target) {
    let (ns, release) = ("demo", "hello");
    let started = Instant::now();
    let repo = ChartRepo::start(
        LOOPBACK,
        t.helm.clone(),
        HELLO_CHART,
        t.dir.join("repo"),
        &["0.1.0"],
    )
    .await
    .unwrap();
    let url = repo.url().to_string();
    eprintln!(
        "FIGURE {:?}: chart repository packaged and indexed in {:.1}s",
        t.tier,
        started.elapsed().as_secs_f64()
    );

    // Install.
    let started = Instant::now();
    t.helm(&[
        "upgrade",
        "--install",
        release,
        "hello",
        "--repo",
        &url,
        "--version",
        "0.1.0",
        "-n",
        ns,
        "--create-namespace",
        "--set",
        "message=hi",
    ])
    .await;
    eprintln!(
        "FIGURE {:?}: helm upgrade --install from the HTTP repository in {:.1}s",
        t.tier,
        started.elapsed().as_secs_f64()
    );
    t.expect_config(ns, "hello-config", "hi", "0.1.0").await;
    let cm = t.config_map(ns, "hello-config").await.unwrap();
    assert_eq!(cm.labels()["app.kubernetes.io/managed-by"], "Helm");
    assert_eq!(cm.annotations()["meta.helm.sh/release-name"], release);
    assert_eq!(cm.annotations()["meta.helm.sh/release-namespace"], ns);
    let dep = t.deployment(ns, release).await.expect("the Deployment");
    let spec = dep.spec.clone().unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(dep.labels()["app.kubernetes.io/instance"], release);
    let image = spec.template.spec.unwrap().containers[0].image.clone();
    assert_eq!(image.as_deref(), Some("nginx:1.27"));
    listed(
        &t.helm_json(&["list", "-n", ns]).await,
        release,
        "hello-0.1.0",
        "1",
    );
    assert_eq!(
        t.release_secrets(ns, release).await,
        [("sh.helm.release.v1.hello.v1".into(), "deployed".into())]
    );

    // A new version published while the repository serves; upgrade keeps the values given and
    // waits for the Deployment's new ReplicaSet to be ready (devcluster simulates it).
    repo.add_version("0.2.0").await.unwrap();
    let started = Instant::now();
    t.helm(&[
        "upgrade",
        release,
        "hello",
        "--repo",
        &url,
        "--version",
        "0.2.0",
        "-n",
        ns,
        "--reuse-values",
        "--set",
        "replicaCount=2",
        "--wait",
        "--timeout",
        "60s",
    ])
    .await;
    eprintln!(
        "FIGURE {:?}: helm upgrade --wait (2 replicas ready) in {:.1}s",
        t.tier,
        started.elapsed().as_secs_f64()
    );
    t.expect_config(ns, "hello-config", "hi", "0.2.0").await;
    let dep = t.deployment(ns, release).await.unwrap();
    assert_eq!(dep.spec.unwrap().replicas, Some(2));
    listed(
        &t.helm_json(&["list", "-n", ns]).await,
        release,
        "hello-0.2.0",
        "2",
    );

    // helm status: the fields a driver reads.
    let status = t.helm_json(&["status", release, "-n", ns]).await;
    assert_eq!(status["name"], release, "{status}");
    assert_eq!(status["namespace"], ns, "{status}");
    assert_eq!(status["version"], 2, "{status}");
    let info = &status["info"];
    assert_eq!(info["status"], "deployed", "{status}");
    assert_eq!(info["description"], "Upgrade complete", "{status}");
    let first = info["first_deployed"].as_str().unwrap();
    let last = info["last_deployed"].as_str().unwrap();
    assert!(!first.is_empty() && first < last, "{status}");
    assert_eq!(
        info["notes"].as_str().unwrap().trim(),
        "hello 0.2.0 says \"hi\" with 2 replica(s) in demo.",
        "{status}"
    );
    assert_eq!(status["config"]["message"], "hi", "{status}");
    assert_eq!(status["config"]["replicaCount"], 2, "{status}");

    // helm get manifest: the rendered objects of the current revision.
    let manifest = t.helm(&["get", "manifest", release, "-n", ns]).await;
    assert!(manifest.contains("kind: ConfigMap"), "{manifest}");
    assert!(manifest.contains("kind: Deployment"), "{manifest}");
    assert!(manifest.contains("replicas: 2"), "{manifest}");
    assert!(manifest.contains("chartVersion: \"0.2.0\""), "{manifest}");

    // History through the storage Secrets' labels; a rollback is revision 3.
    let history = t.helm_json(&["history", release, "-n", ns]).await;
    let statuses: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["superseded", "deployed"], "{history}");
    t.helm(&[
        "rollback",
        release,
        "1",
        "-n",
        ns,
        "--wait",
        "--timeout",
        "60s",
    ])
    .await;
    t.expect_config(ns, "hello-config", "hi", "0.1.0").await;
    assert_eq!(
        t.deployment(ns, release)
            .await
            .unwrap()
            .spec
            .unwrap()
            .replicas,
        Some(1)
    );
    listed(
        &t.helm_json(&["list", "-n", ns]).await,
        release,
        "hello-0.1.0",
        "3",
    );
    assert_eq!(
        t.release_secrets(ns, release).await,
        [
            ("sh.helm.release.v1.hello.v1".into(), "superseded".into()),
            ("sh.helm.release.v1.hello.v2".into(), "superseded".into()),
            ("sh.helm.release.v1.hello.v3".into(), "deployed".into()),
        ]
    );

    // Uninstall removes the objects and the release.
    let started = Instant::now();
    t.helm(&["uninstall", release, "-n", ns]).await;
    t.expect_gone(ns, release).await;
    eprintln!(
        "FIGURE {:?}: helm uninstall -> objects and release Secrets gone in {:.1}s",
        t.tier,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(t.helm_json(&["list", "-n", ns]).await, Value::Array(vec![]));
}

/// From an OCI registry: push, show, install, uninstall.
async fn from_oci_registry(t: &Target) {
    let (ns, release) = ("demo-oci", "hello-oci");
    let packaged = t.dir.join("oci-charts");
    std::fs::create_dir_all(&packaged).unwrap();
    let archive = t
        .helm
        .package(Path::new(HELLO_CHART), "0.1.0", &packaged)
        .await
        .unwrap();
    let registry = OciRegistry::start(
        LOOPBACK,
        &t.tools.registry,
        t.helm.clone(),
        t.dir.join("registry.log"),
    )
    .await
    .unwrap();
    registry.push(&archive).await.unwrap();
    let chart = registry.chart_url("hello");
    let shown = t
        .helm(&[
            "show",
            "chart",
            &chart,
            "--version",
            "0.1.0",
            "--plain-http",
        ])
        .await;
    assert!(shown.contains("name: hello"), "{shown}");

    let started = Instant::now();
    t.helm(&[
        "upgrade",
        "--install",
        release,
        &chart,
        "--version",
        "0.1.0",
        "--plain-http",
        "-n",
        ns,
        "--create-namespace",
        "--set",
        "message=from-oci",
    ])
    .await;
    eprintln!(
        "FIGURE {:?}: helm upgrade --install from the OCI registry in {:.1}s",
        t.tier,
        started.elapsed().as_secs_f64()
    );
    t.expect_config(ns, "hello-oci-config", "from-oci", "0.1.0")
        .await;
    assert!(t.deployment(ns, release).await.is_some());
    listed(
        &t.helm_json(&["list", "-n", ns]).await,
        release,
        "hello-0.1.0",
        "1",
    );
    t.helm(&["uninstall", release, "-n", ns]).await;
    t.expect_gone(ns, release).await;
}

/// `--wait --wait-for-jobs` over one of each kind helm checks, with a CRD and a hook Job;
/// `--atomic`; `--force`, which kube-apiserver refuses for the Job (its selector and template
/// are immutable); `uninstall --wait`.
async fn waits_for_every_kind(t: &Target) {
    let (ns, release) = ("demo-kinds", "kinds");
    let started = Instant::now();
    t.helm(&[
        "upgrade",
        "--install",
        release,
        WORKLOADS_CHART,
        "-n",
        ns,
        "--create-namespace",
        "--wait",
        "--wait-for-jobs",
        "--timeout",
        "90s",
    ])
    .await;
    eprintln!(
        "FIGURE {:?}: helm upgrade --install --wait --wait-for-jobs (StatefulSet, DaemonSet, Job, hook, CRD) in {:.1}s",
        t.tier,
        started.elapsed().as_secs_f64()
    );
    let client = &t.client;
    let sts = Api::<StatefulSet>::namespaced(client.clone(), ns)
        .get(release)
        .await
        .unwrap();
    assert_eq!(sts.status.unwrap().ready_replicas, Some(2));
    let svc = Api::<Service>::namespaced(client.clone(), ns)
        .get(release)
        .await
        .unwrap();
    assert!(!svc.spec.unwrap().cluster_ip.unwrap_or_default().is_empty());
    let ds = Api::<DaemonSet>::namespaced(client.clone(), ns)
        .get("kinds-agent")
        .await
        .unwrap();
    assert!(ds.status.unwrap().number_ready >= 1);
    let jobs = Api::<Job>::namespaced(client.clone(), ns);
    let job = jobs.get("kinds-migrate").await.unwrap();
    assert_eq!(job.status.unwrap().succeeded, Some(1));
    assert!(
        jobs.get_opt("kinds-hook").await.unwrap().is_none(),
        "the succeeded hook Job is deleted"
    );
    let gvk = GroupVersionKind::gvk("e2e.atoll.invalid", "v1", "Widget");
    let widgets =
        Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ApiResource::from_gvk(&gvk));
    assert_eq!(widgets.get(release).await.unwrap().data["spec"]["size"], 3);

    t.helm(&[
        "upgrade",
        release,
        WORKLOADS_CHART,
        "-n",
        ns,
        "--atomic",
        "--timeout",
        "90s",
        "--set",
        "revision=2",
    ])
    .await;
    listed(
        &t.helm_json(&["list", "-n", ns]).await,
        release,
        "workloads-0.1.0",
        "2",
    );
    let refused = t
        .helm_fails(&[
            "upgrade",
            release,
            WORKLOADS_CHART,
            "-n",
            ns,
            "--force",
            "--timeout",
            "60s",
            "--set",
            "revision=3",
        ])
        .await;
    assert!(
        refused.contains("Job.batch \"kinds-migrate\" is invalid")
            && refused.contains("field is immutable"),
        "{:?}: {refused}",
        t.tier
    );

    t.helm(&["uninstall", release, "-n", ns, "--wait", "--timeout", "60s"])
        .await;
    eventually(
        &format!("{:?}: the workloads of {release} gone", t.tier),
        CONVERGE,
        || async {
            let sts = Api::<StatefulSet>::namespaced(client.clone(), ns)
                .get_opt(release)
                .await
                .unwrap();
            let job = jobs.get_opt("kinds-migrate").await.unwrap();
            let widget = widgets.get_opt(release).await.unwrap();
            sts.is_none() && job.is_none() && widget.is_none()
        },
    )
    .await;
}

async fn run_all(t: Target) {
    let started = Instant::now();
    from_http_repository(&t).await;
    from_oci_registry(&t).await;
    waits_for_every_kind(&t).await;
    eprintln!(
        "FIGURE helm on {:?}: all three cases in {:.1}s",
        t.tier,
        started.elapsed().as_secs_f64()
    );
}

/// The Helm tools, or `None` after a NOTICE when they are not built (devcluster tier only).
fn tools_or_skip(test: &str) -> Option<HelmTools> {
    match HelmTools::locate() {
        Ok(tools) => Some(tools),
        Err(e) => {
            eprintln!("NOTICE: {test} skipped: {e}");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_upgrades_and_uninstalls_charts_on_devcluster() {
    let Some(tools) = tools_or_skip("helm_installs_upgrades_and_uninstalls_charts_on_devcluster")
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dev = devcluster::DevCluster::start(devcluster::Config {
        nodes: 1,
        simulate_workloads: true,
        // Ready a little later, so that helm --wait has something to wait for.
        workload_delay: Duration::from_millis(300),
        ..devcluster::Config::default()
    })
    .await
    .unwrap();
    let kubeconfig = tmp.path().join("kubeconfig");
    dev.write_kubeconfig(&kubeconfig).unwrap();
    run_all(Target::new(Tier::Dev, kubeconfig, tools, tmp.path()).await).await;
}

/// A release whose storage write was answered twice (its answer lost, the request sent again:
/// 409 AlreadyExists for a create that landed) is left pending by Helm, which then refuses every
/// later operation on it. The agent's remedy frees it: a first install is uninstalled, an
/// upgrade rolled back, and the next install or upgrade goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_left_pending_by_a_lost_answer_is_freed_for_the_next_operation() {
    use atoll_applier::helm::PendingRemedy;
    use atoll_e2e::chaos::requests::{RequestFault, RequestProxy, RequestSchedule};
    let Some(tools) =
        tools_or_skip("a_release_left_pending_by_a_lost_answer_is_freed_for_the_next_operation")
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dev = devcluster::DevCluster::start_default().await.unwrap();
    let direct = tmp.path().join("kubeconfig");
    dev.write_kubeconfig(&direct).unwrap();
    let mut proxy = RequestProxy::start(dev.addr(), None).await.unwrap();
    let through_proxy = tmp.path().join("proxy.kubeconfig");
    let yaml = dev
        .kubeconfig_yaml()
        .replace(&dev.addr().to_string(), &proxy.addr().to_string());
    std::fs::write(&through_proxy, yaml).unwrap();
    let helm = Helm::new(&tools.helm, tmp.path().join("helm-home"));
    let repo = ChartRepo::start(
        LOOPBACK,
        helm.clone(),
        HELLO_CHART,
        tmp.path().join("repo"),
        &["0.1.0"],
    )
    .await
    .unwrap();
    repo.add_version("0.2.0").await.unwrap();
    let url = repo.url().to_string();
    let run = async |kubeconfig: &Path, verb: &str, version: &str| {
        let mut args: Vec<String> = [verb, "hello", "hello", "--repo", &url, "--version", version]
            .iter()
            .map(|a| a.to_string())
            .collect();
        args.extend(["-n", "demo", "--create-namespace", "--kubeconfig"].map(String::from));
        args.push(kubeconfig.display().to_string());
        helm.run(&args).await
    };
    let phase = async || {
        let out = helm
            .run(&[
                "status".into(),
                "hello".into(),
                "-n".into(),
                "demo".into(),
                "-o".into(),
                "json".into(),
                "--kubeconfig".into(),
                direct.display().to_string(),
            ])
            .await
            .unwrap();
        let status: Value = serde_json::from_str(&out).unwrap();
        (
            status["info"]["status"].as_str().unwrap().to_string(),
            status["version"].as_i64().unwrap(),
        )
    };
    let agent_helm = atoll_applier::helm::Helm::new(
        &tools.helm,
        Some(direct.clone()),
        None,
        tmp.path().join("agent-helm-home"),
    );
    let repeating = || RequestSchedule::from_now(RequestFault::Repeat, Duration::from_secs(600));
    // `verb` at `version` through the proxy while writes are answered twice: Helm gives up on
    // its own create answered 409, leaving the release `pending` at `revision`, and refuses the
    // next operation.
    let left_pending = async |proxy: &mut RequestProxy,
                              verb: &str,
                              version: &str,
                              pending: &str,
                              revision: i64| {
        proxy.play(repeating());
        tokio::time::sleep(Duration::from_millis(50)).await;
        run(&through_proxy, verb, version).await.unwrap_err();
        proxy.heal();
        assert_eq!(phase().await, (pending.to_string(), revision));
        let refused = run(&direct, "upgrade", version).await.unwrap_err();
        assert!(
            refused.to_string().contains("another operation"),
            "{refused}"
        );
    };

    // A first install whose release record's create is answered twice.
    left_pending(&mut proxy, "install", "0.1.0", "pending-install", 1).await;
    agent_helm
        .release_pending("hello", "demo", PendingRemedy::Uninstall)
        .await
        .unwrap();
    run(&direct, "install", "0.1.0").await.unwrap();
    assert_eq!(phase().await, ("deployed".to_string(), 1));

    // An upgrade whose new revision's create is answered twice.
    left_pending(&mut proxy, "upgrade", "0.2.0", "pending-upgrade", 2).await;
    agent_helm
        .release_pending("hello", "demo", PendingRemedy::Rollback)
        .await
        .unwrap();
    assert_eq!(phase().await, ("deployed".to_string(), 3));
    run(&direct, "upgrade", "0.2.0").await.unwrap();
    assert_eq!(phase().await, ("deployed".to_string(), 4));

    // What the agent's apply does with a pending release: one atoll did not install is left
    // alone, even by an agent started after it went pending; its own, left pending by a run that
    // may still go on (begun after this agent started), waits; an agent started after it went
    // pending frees it and installs.
    helm.run(&[
        "uninstall".to_string(),
        "hello".into(),
        "-n".into(),
        "demo".into(),
        "--kubeconfig".into(),
        direct.display().to_string(),
    ])
    .await
    .unwrap();
    proxy.play(repeating());
    tokio::time::sleep(Duration::from_millis(50)).await;
    run(&through_proxy, "install", "0.1.0").await.unwrap_err();
    proxy.heal();
    assert_eq!(phase().await, ("pending-install".to_string(), 1));
    let charts = [atoll_applier::model::ChartRelease {
        chart: serde_json::json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
            "metadata": {"name": "hello", "namespace": "apps"},
            "spec": {"repo": url, "chart": "hello", "version": "0.1.0", "targetNamespace": "demo"}
        }),
        values: serde_json::json!({}),
        pull: atoll_applier::model::PullAuth::Anonymous,
    }];
    let ours = [atoll_applier::inventory::ReleaseEntry {
        name: "hello".into(),
        namespace: "demo".into(),
        digest: String::new(),
    }];
    let apply = async |driver: &atoll_applier::helm::Helm, recorded: &[_]| {
        let plan = atoll_applier::helm::plan_releases(&charts, recorded, Default::default());
        let synced =
            atoll_applier::helm::sync_releases(Some(driver), plan, recorded, false, false).await;
        synced.reports[0].error.clone().unwrap_or_default()
    };
    let restarted = atoll_applier::helm::Helm::new(
        &tools.helm,
        Some(direct.clone()),
        None,
        tmp.path().join("restarted-helm-home"),
    );
    let error = apply(&restarted, &[]).await;
    assert!(error.contains("atoll did not install"), "{error}");
    assert_eq!(phase().await, ("pending-install".to_string(), 1));
    let error = apply(&agent_helm, &ours).await;
    assert!(error.contains("another operation"), "{error}");
    assert_eq!(phase().await, ("pending-install".to_string(), 1));
    assert_eq!(apply(&restarted, &ours).await, "");
    assert_eq!(phase().await, ("deployed".to_string(), 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_upgrades_and_uninstalls_charts_on_kube_apiserver() {
    if support::backend() != Backend::Kube {
        eprintln!(
            "NOTICE: helm_installs_upgrades_and_uninstalls_charts_on_kube_apiserver skipped (FLEET_BACKEND=kube runs it)"
        );
        return;
    }
    // The real tier was asked for: its binaries missing is a failure, not a skip.
    let tools = HelmTools::locate().unwrap_or_else(|e| panic!("FLEET_BACKEND=kube, but {e}"));
    let tmp = tempfile::tempdir().unwrap();
    let (_cluster, kubeconfig) = support::start_real(tmp.path(), "helm", Role::Child, 1).await;
    run_all(Target::new(Tier::Real, kubeconfig, tools, tmp.path()).await).await;
}

/// With `--helm-service-account`, helm acts for each release as a ServiceAccount of the
/// release's namespace, an `admin` there only: the child's RBAC (a real kube-apiserver's; the
/// devcluster has none) refuses a chart's ClusterRoleBinding, reported as that release's error,
/// while a chart of namespaced objects installs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_acting_as_its_namespaces_identity_cannot_create_cluster_scoped_objects() {
    use atoll_applier::model::{ChartRelease, PullAuth};
    use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
    use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
    if support::backend() != Backend::Kube {
        eprintln!(
            "NOTICE: a_release_acting_as_its_namespaces_identity_cannot_create_cluster_scoped_objects skipped (FLEET_BACKEND=kube runs it: devcluster has no RBAC)"
        );
        return;
    }
    let tools = HelmTools::locate().unwrap_or_else(|e| panic!("FLEET_BACKEND=kube, but {e}"));
    let tmp = tempfile::tempdir().unwrap();
    let (_cluster, kubeconfig) =
        support::start_real(tmp.path(), "helm-identity", Role::Child, 1).await;
    let client = atoll_e2e::kubectl::client_for(&kubeconfig).await.unwrap();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let state: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "clusternet-system"}}))
            .unwrap();
    namespaces
        .create(&kube::api::PostParams::default(), &state)
        .await
        .unwrap();
    let helm = Helm::new(&tools.helm, tmp.path().join("helm-home"));
    let repo = ChartRepo::start(
        LOOPBACK,
        helm,
        HELLO_CHART,
        tmp.path().join("repo"),
        &["0.1.0"],
    )
    .await
    .unwrap();
    let url = repo.url().to_string();
    let agent_helm = atoll_applier::helm::Helm::new(
        &tools.helm,
        Some(kubeconfig.clone()),
        None,
        tmp.path().join("agent-helm-home"),
    )
    .with_release_account(Some("atoll-helm".into()));
    let applier = atoll_applier::Applier::new(client.clone(), "atoll-agent").with_helm(agent_helm);
    let chart = |name: &str, values: Value| ChartRelease {
        chart: serde_json::json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
            "metadata": {"name": name, "namespace": "apps"},
            "spec": {"repo": url, "chart": "hello", "version": "0.1.0", "targetNamespace": name}
        }),
        values,
        pull: PullAuth::Anonymous,
    };
    let description = atoll_applier::Description {
        namespace: "clusternet-abcde".into(),
        name: "apps.charts".into(),
        uid: "u-charts".into(),
        generation: 1,
        objects: Vec::new(),
        charts: vec![
            chart("tame", serde_json::json!({})),
            chart(
                "escalating",
                serde_json::json!({"clusterRoleBinding": true}),
            ),
        ],
        orphan: false,
    };
    let report = applier.apply(&description).await;
    let release = |name: &str| {
        report
            .releases
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no report of {name}: {report:?}"))
    };
    assert_eq!(release("tame").error, None, "{report:?}");
    assert_eq!(
        release("tame").status.as_ref().map(|s| s.phase.as_str()),
        Some("deployed")
    );
    let refused = release("escalating").error.clone().unwrap_or_default();
    for part in [
        "system:serviceaccount:escalating:atoll-helm",
        "clusterrolebindings",
        "forbidden",
    ] {
        assert!(refused.contains(part), "{part}: {refused}");
    }
    let t = Target::new(Tier::Real, kubeconfig.clone(), tools, tmp.path()).await;
    assert!(t.config_map("tame", "tame-config").await.is_some());
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    assert!(
        bindings
            .get_opt("escalating-everyone-admin")
            .await
            .unwrap()
            .is_none()
    );
    // The identity the applier made: a ServiceAccount of the release's namespace, atoll's own.
    let account = Api::<ServiceAccount>::namespaced(client.clone(), "tame")
        .get("atoll-helm")
        .await
        .unwrap();
    assert_eq!(
        account
            .labels()
            .get("app.kubernetes.io/part-of")
            .map(String::as_str),
        Some("atoll")
    );
}
