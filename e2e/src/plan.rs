//! What a local fleet consists of, decided without touching anything: child names and labels,
//! file layout, binaries and bootstrap tokens.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::Rng;

use crate::Error;

/// What the fleet's clusters are made of.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    clap::ValueEnum,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// devcluster, atoll's single-process stand-in for kube-apiserver: starts in a fraction of
    /// a second.
    #[default]
    Devcluster,
    /// A real control plane per cluster (etcd, kube-apiserver, kube-controller-manager,
    /// kube-scheduler, kwok), built by `make k8s`; atoll is installed with `kubectl apply -k`
    /// and its components authenticate as their ServiceAccounts.
    Kube,
}

/// Regions the children are spread over, in order (`child-1` is in `eu`, `child-2` in `us`...).
pub const REGIONS: [&str; 3] = ["eu", "us", "ap"];

/// One child cluster of the fleet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildSpec {
    /// 1-based index.
    pub index: usize,
    /// The ManagedCluster name the agent registers, `child-<index>`.
    pub name: String,
    /// The labels the agent asks for: `env=prod`, `region=eu|us|ap` (round robin) and
    /// `tier=large` for odd indexes, `tier=small` for even ones.
    pub labels: BTreeMap<String, String>,
}

impl ChildSpec {
    /// The labels as the agent's `--cluster-labels` value, `k=v,k2=v2` in key order.
    pub fn labels_arg(&self) -> String {
        labels_arg(&self.labels)
    }
}

/// The children of a fleet of `count` clusters.
pub fn child_specs(count: usize) -> Vec<ChildSpec> {
    (1..=count)
        .map(|index| {
            let region = REGIONS[(index - 1) % REGIONS.len()];
            let tier = if index % 2 == 1 { "large" } else { "small" };
            let labels = BTreeMap::from([
                ("env".to_string(), "prod".to_string()),
                ("region".to_string(), region.to_string()),
                ("tier".to_string(), tier.to_string()),
            ]);
            ChildSpec {
                index,
                name: format!("child-{index}"),
                labels,
            }
        })
        .collect()
}

/// `k=v,k2=v2` in key order.
pub fn labels_arg(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Where the fleet keeps its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The fleet directory.
    pub dir: PathBuf,
}

impl Layout {
    /// The layout of `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Layout {
        Layout { dir: dir.into() }
    }
    /// `D/parent.kubeconfig`.
    pub fn parent_kubeconfig(&self) -> PathBuf {
        self.dir.join("parent.kubeconfig")
    }
    /// `D/child-<index>.kubeconfig`.
    pub fn child_kubeconfig(&self, index: usize) -> PathBuf {
        self.dir.join(format!("child-{index}.kubeconfig"))
    }
    /// `D/logs`.
    pub fn logs(&self) -> PathBuf {
        self.dir.join("logs")
    }
    /// `D/logs/<name>.log`.
    pub fn log(&self, name: &str) -> PathBuf {
        self.logs().join(format!("{name}.log"))
    }
    /// `D/fleet.json`: what `fleet down` and `fleet status` read.
    pub fn state(&self) -> PathBuf {
        self.dir.join("fleet.json")
    }
    /// `D/bootstrap-token` (mode 0600): the token agents register with.
    pub fn bootstrap_token(&self) -> PathBuf {
        self.dir.join("bootstrap-token")
    }
    /// `D/kube-cache`: kubectl's discovery cache for this fleet.
    pub fn kube_cache(&self) -> PathBuf {
        self.dir.join("kube-cache")
    }
}

/// A binary the fleet runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// `devcluster`: parent and children.
    Devcluster,
    /// `atoll-scheduler`.
    Scheduler,
    /// `atoll-hub`.
    Hub,
    /// `atoll-agent`.
    Agent,
}

impl Component {
    /// Every component, in start order.
    pub const ALL: [Component; 4] = [
        Component::Devcluster,
        Component::Scheduler,
        Component::Hub,
        Component::Agent,
    ];

    /// The executable's file name.
    pub fn binary(self) -> &'static str {
        match self {
            Component::Devcluster => "devcluster",
            Component::Scheduler => "atoll-scheduler",
            Component::Hub => "atoll-hub",
            Component::Agent => "atoll-agent",
        }
    }

    /// The Cargo package that builds it.
    pub fn package(self) -> &'static str {
        match self {
            Component::Devcluster => "devcluster",
            Component::Scheduler => "atoll-scheduler",
            Component::Hub => "atoll-hub",
            Component::Agent => "atoll-agent",
        }
    }
}

/// The paths of every binary the fleet runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binaries {
    /// `devcluster`.
    pub devcluster: PathBuf,
    /// `atoll-scheduler`.
    pub scheduler: PathBuf,
    /// `atoll-hub`.
    pub hub: PathBuf,
    /// `atoll-agent`.
    pub agent: PathBuf,
}

impl Binaries {
    /// Finds every binary in `dir`; the error names each missing binary and the package to
    /// build.
    pub fn locate(dir: &Path) -> Result<Binaries, Error> {
        let missing: Vec<Component> = Component::ALL
            .into_iter()
            .filter(|c| !is_executable(&dir.join(c.binary())))
            .collect();
        if !missing.is_empty() {
            return Err(Error::LocateBinary {
                name: missing
                    .iter()
                    .map(|c| c.binary())
                    .collect::<Vec<_>>()
                    .join("`, `"),
                package: missing
                    .iter()
                    .map(|c| c.package())
                    .collect::<Vec<_>>()
                    .join(" -p "),
                dir: dir.to_path_buf(),
            });
        }
        Ok(Binaries {
            devcluster: dir.join(Component::Devcluster.binary()),
            scheduler: dir.join(Component::Scheduler.binary()),
            hub: dir.join(Component::Hub.binary()),
            agent: dir.join(Component::Agent.binary()),
        })
    }
}

/// The directory the binaries are taken from: `ATOLL_BIN_DIR` when given, else the directory of
/// the running executable (`target/<profile>/` for `fleet`; tests run from `deps/`, so its
/// parent is used when the executable sits in a `deps` directory).
pub fn bin_dir(env_value: Option<&str>, current_exe: &Path) -> Option<PathBuf> {
    if let Some(dir) = env_value.filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    let dir = current_exe.parent()?;
    if dir.file_name().is_some_and(|n| n == "deps") {
        return dir.parent().map(Path::to_path_buf);
    }
    Some(dir.to_path_buf())
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A fresh bootstrap token `(token-id, token-secret)`: 6 and 16 characters of `[a-z0-9]`.
pub fn new_bootstrap_token(rng: &mut impl Rng) -> (String, String) {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut pick = |len: usize| -> String {
        (0..len)
            .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
            .collect()
    };
    let id = pick(6);
    let secret = pick(16);
    (id, secret)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_get_distinct_names_and_round_robin_regions_and_alternating_tiers() {
        let cases = [
            (1, "child-1", "eu", "large"),
            (2, "child-2", "us", "small"),
            (3, "child-3", "ap", "large"),
            (4, "child-4", "eu", "small"),
        ];
        let specs = child_specs(4);
        assert_eq!(specs.len(), 4);
        for ((index, name, region, tier), spec) in cases.into_iter().zip(&specs) {
            assert_eq!(spec.index, index);
            assert_eq!(spec.name, name);
            assert_eq!(spec.labels.get("region").map(String::as_str), Some(region));
            assert_eq!(spec.labels.get("tier").map(String::as_str), Some(tier));
            assert_eq!(spec.labels.get("env").map(String::as_str), Some("prod"));
            assert_eq!(
                spec.labels_arg(),
                format!("env=prod,region={region},tier={tier}")
            );
        }
    }

    #[test]
    fn labels_arg_joins_pairs_in_key_order_and_is_empty_without_labels() {
        let cases: [(&[(&str, &str)], &str); 3] = [
            (&[], ""),
            (&[("a", "1")], "a=1"),
            (&[("z", "9"), ("a", "1")], "a=1,z=9"),
        ];
        for (pairs, want) in cases {
            let labels = pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(labels_arg(&labels), want);
        }
    }

    #[test]
    fn bin_dir_prefers_the_environment_then_the_executable_directory_skipping_deps() {
        let cases = [
            (Some("/opt/atoll"), "/x/target/debug/fleet", "/opt/atoll"),
            (Some(""), "/x/target/debug/fleet", "/x/target/debug"),
            (None, "/x/target/debug/fleet", "/x/target/debug"),
            (None, "/x/target/debug/deps/fleet-1234", "/x/target/debug"),
        ];
        for (env, exe, want) in cases {
            assert_eq!(
                bin_dir(env, Path::new(exe)),
                Some(PathBuf::from(want)),
                "{env:?} {exe}"
            );
        }
    }

    #[test]
    fn locate_names_every_missing_binary_and_its_package() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        for name in ["devcluster", "atoll-scheduler"] {
            let path = dir.path().join(name);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let err = Binaries::locate(dir.path()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("`atoll-hub`, `atoll-agent`"), "{msg}");
        assert!(
            msg.contains("cargo build -p atoll-hub -p atoll-agent"),
            "{msg}"
        );
        assert!(!msg.contains("`devcluster`"), "{msg}");

        for name in ["atoll-hub", "atoll-agent"] {
            let path = dir.path().join(name);
            std::fs::write(&path, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let found = Binaries::locate(dir.path()).unwrap();
        assert_eq!(found.hub, dir.path().join("atoll-hub"));
    }

    #[test]
    fn locate_rejects_a_file_that_is_not_executable() {
        let dir = tempfile::tempdir().unwrap();
        for c in Component::ALL {
            std::fs::write(dir.path().join(c.binary()), "").unwrap();
        }
        let msg = Binaries::locate(dir.path()).unwrap_err().to_string();
        assert!(msg.contains("`devcluster`"), "{msg}");
    }

    #[test]
    fn bootstrap_tokens_have_the_shape_the_hub_accepts_and_differ() {
        let mut rng = rand::rng();
        let (id, secret) = new_bootstrap_token(&mut rng);
        let (id2, secret2) = new_bootstrap_token(&mut rng);
        for (s, len) in [(&id, 6), (&secret, 16), (&id2, 6), (&secret2, 16)] {
            assert_eq!(s.len(), len);
            assert!(
                s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()),
                "{s}"
            );
        }
        assert_ne!((id, secret), (id2, secret2));
    }
}
