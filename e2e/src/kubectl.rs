//! The real `kubectl`, pointed at one kubeconfig with its own discovery cache, and a kube-rs
//! client for the same kubeconfig.

use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use crate::Error;

/// `kubectl` bound to a kubeconfig.
#[derive(Clone, Debug)]
pub struct Kubectl {
    /// The kubeconfig (`--kubeconfig`).
    pub kubeconfig: PathBuf,
    /// The discovery/HTTP cache (`--cache-dir`), so runs never touch `~/.kube/cache`.
    pub cache_dir: PathBuf,
    /// `HOME` for kubectl, when it must not be the user's.
    pub home: Option<PathBuf>,
}

impl Kubectl {
    /// kubectl for `kubeconfig`, caching under `cache_dir`.
    pub fn new(kubeconfig: impl Into<PathBuf>, cache_dir: impl Into<PathBuf>) -> Kubectl {
        Kubectl {
            kubeconfig: kubeconfig.into(),
            cache_dir: cache_dir.into(),
            home: None,
        }
    }

    /// The same, with `HOME` set to `home`.
    pub fn with_home(mut self, home: impl Into<PathBuf>) -> Kubectl {
        self.home = Some(home.into());
        self
    }

    /// Whether `kubectl` can be run at all.
    pub async fn available() -> bool {
        tokio::process::Command::new("kubectl")
            .args(["version", "--client"])
            .output()
            .await
            .is_ok_and(|o| o.status.success())
    }

    /// Runs `kubectl --kubeconfig K --cache-dir C <args>`; stdout on success.
    pub async fn run<S: AsRef<str>>(&self, args: &[S]) -> Result<String, Error> {
        let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache_dir)
            .args(&args)
            .env_remove("KUBECONFIG")
            .kill_on_drop(true);
        if let Some(home) = &self.home {
            cmd.env("HOME", home);
        }
        let out = cmd.output().await.map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::KubectlMissing
            } else {
                Error::Kubectl {
                    args: args.join(" "),
                    status: "not started".into(),
                    stderr: e.to_string(),
                }
            }
        })?;
        if !out.status.success() {
            return Err(Error::Kubectl {
                args: args.join(" "),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl apply -k <dir>` plus `extra` arguments.
    pub async fn apply_kustomization(&self, dir: &Path, extra: &[&str]) -> Result<String, Error> {
        let mut args = vec!["apply".to_string(), "-k".to_string()];
        args.push(dir.display().to_string());
        args.extend(extra.iter().map(|s| s.to_string()));
        self.run(&args).await
    }
}

/// A kube client for a kubeconfig file.
pub async fn client_for(path: &Path) -> Result<Client, Error> {
    let err = |message: String| Error::Kubeconfig {
        path: path.to_path_buf(),
        message,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| err(e.to_string()))?;
    Client::try_from(config).map_err(|e| err(e.to_string()))
}
