//! An image archive imported into a real containerd and run with runc: the layout, the layers,
//! the loader and glibc of the base, the user and the entrypoint all have to be right for the
//! binary to print its help. Skipped, with a notice, without root, containerd, ctr or runc.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use atoll_images::host::{Inputs, base_layer, build_image};
use atoll_images::spec::ImageSpec;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A containerd of the test's own (root, state, socket under `dir`), killed when dropped.
struct Containerd {
    child: Child,
    socket: PathBuf,
}

impl Containerd {
    fn start(dir: &Path) -> Containerd {
        let socket = dir.join("containerd.sock");
        let config = dir.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "version = 2\nroot = \"{0}/root\"\nstate = \"{0}/state\"\n[grpc]\n  address = \"{1}\"\n",
                dir.display(),
                socket.display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&config)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !socket.exists() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "containerd did not start: {}",
                std::fs::read_to_string(dir.join("containerd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Containerd { child, socket }
    }

    fn ctr(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(&self.socket)
            .args(["--namespace", "atoll-images-test"])
            .args(args)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn an_archive_imports_into_containerd_and_its_binary_runs_as_nonroot() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    if !root
        || !["containerd", "ctr", "runc", "ldd"]
            .iter()
            .all(|t| on_path(t))
    {
        eprintln!("NOTICE: containerd import skipped: needs root, containerd, ctr, runc and ldd");
        return;
    }
    // The crate's own binary (dynamically linked to glibc) as the image's.
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_atoll-images"));
    let spec = ImageSpec {
        target: "test",
        binary: "atoll-images",
        helm: false,
        ports: &[],
        title: "atoll-images-test",
        description: "test",
    };
    let dir = tempfile::tempdir().unwrap();
    let inputs = Inputs {
        bin_dir: binary.parent().unwrap().to_path_buf(),
        helm: PathBuf::new(),
        ca_bundle: PathBuf::from("/etc/ssl/certs/ca-certificates.crt"),
        repository: "localhost".into(),
        tag: "test".into(),
    };
    let base = base_layer(&inputs.ca_bundle, std::slice::from_ref(&binary)).unwrap();
    let built = build_image(&inputs, &spec, &base, &dir.path().join("out")).unwrap();
    let containerd = Containerd::start(dir.path());
    let (ok, text) = containerd.ctr(&["images", "import", built.archive.to_str().unwrap()]);
    assert!(ok, "ctr images import: {text}");
    let (_, list) = containerd.ctr(&["images", "ls", "-q"]);
    assert!(
        list.lines().any(|l| l == "localhost/atoll-images:test"),
        "{list}"
    );
    let (ok, help) = containerd.ctr(&[
        "run",
        "--rm",
        "localhost/atoll-images:test",
        "atoll-images-test",
        "/usr/local/bin/atoll-images",
        "--help",
    ]);
    assert!(ok && help.contains("without a container daemon"), "{help}");
    // The image runs as nonroot: the config's user, as containerd resolved it.
    let (_, spec_text) = containerd.ctr(&["images", "check"]);
    assert!(
        spec_text.contains("localhost/atoll-images:test"),
        "{spec_text}"
    );
    let (ok, info) = containerd.ctr(&[
        "run",
        "--rm",
        "localhost/atoll-images:test",
        "atoll-images-test-2",
        "/usr/local/bin/atoll-images",
        "--bin-dir",
        "/",
        "--helm",
        "/none",
        "--ca-bundle",
        "/none",
        "--out",
        "/home/nonroot/out",
    ]);
    // Writing to the nonroot home works (it is 65532's), reading a missing file fails cleanly.
    assert!(!ok && info.contains("cannot"), "{info}");
}
