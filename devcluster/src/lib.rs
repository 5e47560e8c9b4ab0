//! devcluster: an embedded, single-process stand-in for kube-apiserver.
//!
//! For local runs and tests only, never for production. It serves the Kubernetes REST API on
//! loopback so that the real `kubectl` and kube-rs work against it unchanged.
//!
//! ```no_run
//! # async fn demo() -> Result<(), devcluster::Error> {
//! let cluster = devcluster::DevCluster::start_default().await?;
//! let client = cluster.client().await?;
//! # let _ = client; Ok(()) }
//! ```

pub mod api;
pub mod app;
pub mod objects;
pub mod server;
pub mod simulate;
pub mod store;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Errors of devcluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding the listening socket failed.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Opening the data directory / database failed.
    #[error("opening the store: {0}")]
    OpenStore(String),
    /// A SQLite operation failed.
    #[error("sqlite: {0}")]
    Sqlite(String),
    /// Seeding the fresh-cluster objects failed.
    #[error("seeding the cluster: {0}")]
    Seed(String),
    /// Building the kubeconfig failed.
    #[error("building the kubeconfig: {0}")]
    Kubeconfig(String),
    /// Writing the kubeconfig file failed.
    #[error("writing kubeconfig {path}: {source}")]
    WriteKubeconfig {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Building a kube client failed.
    #[error("building a client: {0}")]
    Client(String),
    /// Listening for SIGTERM failed.
    #[error("listening for SIGTERM: {0}")]
    Signal(#[source] std::io::Error),
}

/// How to start a devcluster.
#[derive(Clone, Debug)]
pub struct Config {
    /// Persist to `<data_dir>/devcluster.db` (SQLite); `None` keeps everything in memory.
    pub data_dir: Option<PathBuf>,
    /// Require `Authorization: Bearer <token>` on every API request.
    pub token: Option<String>,
    /// Number of simulated Ready nodes (`node-1` … `node-N`).
    pub nodes: u32,
    /// Fill workload status (Deployments, StatefulSets, ...) as if all pods became ready.
    pub simulate_workloads: bool,
    /// Delay before simulated workloads report ready.
    pub workload_delay: Duration,
    /// TCP port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            data_dir: None,
            token: None,
            nodes: 0,
            simulate_workloads: false,
            workload_delay: Duration::from_millis(0),
            port: 0,
        }
    }
}

/// A running devcluster. Dropping the handle stops the server.
pub struct DevCluster {
    addr: SocketAddr,
    token: Option<String>,
    state: Arc<server::State>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl DevCluster {
    /// Starts a server on 127.0.0.1 (port `config.port`, 0 = free port). Returns once it is
    /// ready to serve.
    pub async fn start(config: Config) -> Result<DevCluster, Error> {
        let store = match &config.data_dir {
            Some(dir) => store::Store::open(dir)?,
            None => store::Store::memory(),
        };
        let state = Arc::new(server::State::new(store, config.token.clone()));
        state.bootstrap()?;
        let bind = format!("127.0.0.1:{}", config.port);
        // A fixed port may still be held for a moment by a server that was just dropped.
        let mut attempts = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(&bind).await {
                Ok(l) => break l,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && attempts < 40 => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(source) => {
                    return Err(Error::Bind {
                        addr: bind.clone(),
                        source,
                    });
                }
            }
        };
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: bind.clone(),
            source,
        })?;
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(server::serve(listener, state.clone())));
        tasks.push(tokio::spawn(server::controllers::run(state.clone())));
        if config.nodes > 0 {
            simulate::create_nodes(&state, config.nodes)?;
        }
        if config.simulate_workloads {
            tasks.push(tokio::spawn(simulate::run_workloads(
                state.clone(),
                config.workload_delay,
            )));
        }
        Ok(DevCluster {
            addr,
            token: config.token,
            state,
            tasks,
        })
    }

    /// Starts an in-memory server on a free port with default settings.
    pub async fn start_default() -> Result<DevCluster, Error> {
        DevCluster::start(Config::default()).await
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The shared server state (store and registry), for in-process inspection.
    pub fn state(&self) -> &Arc<server::State> {
        &self.state
    }

    /// A kubeconfig (cluster, user and context named `devcluster`) as YAML.
    pub fn kubeconfig_yaml(&self) -> String {
        let user = match &self.token {
            Some(t) => format!("    token: {}\n", serde_json::Value::String(t.clone())),
            None => "    {}\n".to_string(),
        };
        let user = if self.token.is_some() {
            format!("  user:\n{user}")
        } else {
            "  user: {}\n".to_string()
        };
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: devcluster\n  cluster:\n    server: {}\n\
             users:\n- name: devcluster\n{user}contexts:\n- name: devcluster\n  context:\n    cluster: devcluster\n    user: devcluster\n    namespace: default\n\
             current-context: devcluster\n",
            self.url()
        )
    }

    /// The kubeconfig as kube-rs's type.
    pub fn kubeconfig(&self) -> Result<kube::config::Kubeconfig, Error> {
        kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml())
            .map_err(|e| Error::Kubeconfig(e.to_string()))
    }

    /// Writes the kubeconfig to `path` (written to a temporary file, then renamed, so readers
    /// never see a partial file).
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        let tmp = path.with_extension("devcluster-tmp");
        std::fs::write(&tmp, self.kubeconfig_yaml()).map_err(|source| Error::WriteKubeconfig {
            path: tmp.clone(),
            source,
        })?;
        std::fs::rename(&tmp, path).map_err(|source| Error::WriteKubeconfig {
            path: path.to_path_buf(),
            source,
        })
    }

    /// A kube-rs client for this server (default namespace `default`).
    pub async fn client(&self) -> Result<kube::Client, Error> {
        let config = kube::Config::from_custom_kubeconfig(
            self.kubeconfig()?,
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .map_err(|e| Error::Client(e.to_string()))?;
        kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
    }

    /// Stops the server (also done on drop).
    pub fn shutdown(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
        self.state.shutdown();
        // Everything acknowledged so far is committed before the handle is gone.
        self.state.store.close();
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        self.shutdown();
    }
}
