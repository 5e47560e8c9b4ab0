#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! End to end: the real `fleet` binary starts real devcluster, atoll-scheduler, atoll-hub and
//! atoll-agent processes; the examples are applied with the real kubectl; what lands in each
//! child is read back with kubectl.
//!
//! Needs kubectl and the four binaries next to `fleet` (`cargo build --workspace --bins`, which
//! `cargo test --workspace --all-targets` does); skipped with a notice otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use atoll_e2e::kubectl::Kubectl;
use atoll_e2e::plan::{Binaries, Component};

fn fleet_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fleet"))
}

fn bin_dir() -> PathBuf {
    std::env::var_os("ATOLL_BIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| fleet_exe().parent().unwrap().to_path_buf())
}

fn manifests() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests")
}

async fn prerequisites_or_skip(test: &str) -> bool {
    if !Kubectl::available().await {
        eprintln!("NOTICE: {test} skipped: kubectl is not on PATH");
        return false;
    }
    if let Err(e) = Binaries::locate(&bin_dir()) {
        eprintln!("NOTICE: {test} skipped: {e}");
        return false;
    }
    true
}

fn fleet(args: &[&str]) -> std::process::Output {
    Command::new(fleet_exe())
        .args(args)
        .env("ATOLL_BIN_DIR", bin_dir())
        .output()
        .unwrap()
}

/// Stops the fleet in `dir` when dropped, also when the test panics.
struct Down(PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let out = fleet(&[
            "down",
            "--dir",
            self.0.to_str().unwrap(),
            "--grace-seconds",
            "5",
        ]);
        eprintln!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

#[tokio::test]
async fn a_fleet_with_two_children_receives_the_examples_and_stops_cleanly() {
    if !prerequisites_or_skip("fleet end to end").await {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let dir_s = dir.to_str().unwrap().to_string();
    let guard = Down(dir.clone());

    let started = Instant::now();
    let out = fleet(&[
        "up",
        "--children",
        "2",
        "--dir",
        &dir_s,
        "--manifests",
        manifests().to_str().unwrap(),
        "--timeout-seconds",
        "90",
    ]);
    assert!(
        out.status.success(),
        "fleet up failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "FIGURE fleet up (2 children, all Ready): {:?}",
        started.elapsed()
    );
    let again = fleet(&["up", "--children", "1", "--dir", &dir_s]);
    assert!(
        !again.status.success(),
        "a second fleet in the same directory"
    );
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("already has a running fleet"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    for file in [
        "parent.kubeconfig",
        "child-1.kubeconfig",
        "child-2.kubeconfig",
        "fleet.json",
    ] {
        assert!(dir.join(file).is_file(), "{file} missing");
    }

    let home = tmp.path().join("home");
    let cache = tmp.path().join("cache");
    let parent = Kubectl::new(dir.join("parent.kubeconfig"), &cache).with_home(&home);
    let applied = Instant::now();
    // The Localization first, so that the first rendering already includes it.
    let ns = fleet(&[
        "dedicated-namespace",
        "--dir",
        &dir_s,
        "--cluster",
        "child-1",
    ]);
    assert!(
        ns.status.success(),
        "{}",
        String::from_utf8_lossy(&ns.stderr)
    );
    let ns = String::from_utf8(ns.stdout).unwrap().trim().to_string();
    assert!(ns.starts_with("clusternet-"), "{ns}");
    parent
        .apply_kustomization(&manifests().join("examples/localization"), &["-n", &ns])
        .await
        .unwrap();
    parent
        .apply_kustomization(&manifests().join("examples"), &[])
        .await
        .unwrap();
    let out = fleet(&["wait", "--dir", &dir_s, "--timeout-seconds", "90"]);
    assert!(
        out.status.success(),
        "fleet wait failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "FIGURE examples applied -> every Subscription settled (2 children): {:?}",
        applied.elapsed()
    );

    // child-1: region=eu, tier=large, has the Localization; child-2: region=us, tier=small.
    let cases = [
        (
            "child-1",
            "deployment",
            "demo",
            "web",
            "{.spec.replicas}",
            "3",
        ),
        (
            "child-1",
            "deployment",
            "demo-divided",
            "api",
            "{.spec.replicas}",
            "2",
        ),
        (
            "child-2",
            "deployment",
            "demo",
            "web",
            "{.spec.replicas}",
            "2",
        ),
        (
            "child-2",
            "deployment",
            "demo-divided",
            "api",
            "{.spec.replicas}",
            "4",
        ),
        (
            "child-1",
            "deployment",
            "demo",
            "web",
            "{.status.readyReplicas}",
            "3",
        ),
        (
            "child-2",
            "deployment",
            "demo-divided",
            "api",
            "{.status.readyReplicas}",
            "4",
        ),
        (
            "child-1",
            "configmap",
            "demo",
            "web-config",
            "{.data.greeting}",
            "hello from a large atoll cluster",
        ),
        (
            "child-2",
            "configmap",
            "demo",
            "web-config",
            "{.data.greeting}",
            "hello from atoll",
        ),
    ];
    for (child, kind, ns, name, path, want) in cases {
        let kubectl =
            Kubectl::new(dir.join(format!("{child}.kubeconfig")), &cache).with_home(&home);
        let got = kubectl
            .run(&[
                "get",
                kind,
                name,
                "-n",
                ns,
                "-o",
                &format!("jsonpath={path}"),
            ])
            .await
            .unwrap();
        assert_eq!(got, want, "{child} {kind} {ns}/{name} {path}");
    }

    let status = fleet(&["status", "--dir", &dir_s]);
    assert!(status.status.success());
    let text = String::from_utf8(status.stdout).unwrap();
    // The first row starting with `prefix` after the `section` heading.
    let row = |section: &str, prefix: &str| {
        text.lines()
            .skip_while(|l| *l != section)
            .find(|l| l.starts_with(prefix))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_else(|| panic!("no row {prefix} in\n{text}"))
    };
    assert_eq!(row("Clusters", "child-1 ")[2], "True", "{text}");
    assert_eq!(row("Clusters", "child-1 ")[3], "3/3", "{text}");
    assert_eq!(
        row("Subscriptions", "demo-divided/api-divided ")[1],
        "Dividing/Static",
        "{text}"
    );
    assert_eq!(
        row("Subscriptions", "demo-divided/api-divided ")[3],
        "2/2",
        "{text}"
    );

    let state = atoll_e2e::state::FleetState::load(&dir.join("fleet.json")).unwrap();
    // Parent and 2 children (one devcluster each, or etcd, kube-apiserver,
    // kube-controller-manager, kube-scheduler and kwok each), scheduler, hub, 2 agents.
    let per_cluster = match std::env::var("FLEET_BACKEND").as_deref() {
        Ok("kube") => 5,
        _ => 1,
    };
    assert_eq!(state.processes.len(), 3 * per_cluster + 1 + 1 + 2);
    drop(guard);
    for p in &state.processes {
        assert!(
            !atoll_e2e::process::is_running(p),
            "{} still running",
            p.name
        );
    }
    assert!(!dir.join("fleet.json").exists(), "state file left behind");
}

#[tokio::test]
async fn fleet_up_names_missing_binaries_and_starts_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let bins = tmp.path().join("bin");
    std::fs::create_dir_all(&bins).unwrap();
    // Only devcluster and the scheduler, as before the hub and the agent existed.
    for c in [Component::Devcluster, Component::Scheduler] {
        let path = bins.join(c.binary());
        std::fs::write(&path, "#!/bin/sh\nexit 1\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let dir = tmp.path().join("fleet");
    let out = Command::new(fleet_exe())
        .args(["up", "--children", "1", "--dir", dir.to_str().unwrap()])
        .env("ATOLL_BIN_DIR", &bins)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for want in [
        "`atoll-hub`",
        "`atoll-agent`",
        "cargo build -p atoll-hub -p atoll-agent",
    ] {
        assert!(stderr.contains(want), "{want} not in: {stderr}");
    }
    assert!(!dir.join("fleet.json").exists(), "nothing may be started");
}

#[tokio::test]
async fn fleet_down_without_a_fleet_says_so_and_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(fleet_exe())
        .args(["down", "--dir", tmp.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("no fleet running"));
}

#[tokio::test]
async fn a_process_that_dies_during_start_up_is_named_with_its_log_and_nothing_is_left() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let bins = tmp.path().join("bin");
    std::fs::create_dir_all(&bins).unwrap();
    for c in Component::ALL {
        let path = bins.join(c.binary());
        std::fs::write(
            &path,
            "#!/bin/sh\necho \"boom: address already in use\" >&2\nexit 3\n",
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let dir = tmp.path().join("fleet");
    // The failing binaries stand in for devcluster: this is about the launcher, on either tier.
    let out = Command::new(fleet_exe())
        .args([
            "up",
            "--backend",
            "devcluster",
            "--children",
            "1",
            "--dir",
            dir.to_str().unwrap(),
            "--manifests",
            manifests().to_str().unwrap(),
            "--timeout-seconds",
            "10",
        ])
        .env("ATOLL_BIN_DIR", &bins)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    for want in [
        "parent exited during start-up",
        "logs/parent.log",
        "boom: address already in use",
    ] {
        assert!(stderr.contains(want), "{want} not in: {stderr}");
    }
    assert!(!dir.join("fleet.json").exists(), "state must be cleaned up");
    assert!(dir.join("logs/parent.log").is_file(), "logs must be kept");
}
