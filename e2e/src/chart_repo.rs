//! Helm test infrastructure: the real `helm` (built by `make k8s`), a local HTTP chart
//! repository and a local OCI registry, so that end-to-end tests install charts into child
//! clusters of either tier without reaching the network.
//!
//! - [`HelmTools`]: where `helm` and `registry` are (the `make k8s` cache, like the control plane).
//! - [`Helm`]: `helm` with its own cache/config/data directories, never the user's.
//! - [`ChartRepo`]: packages a chart at one or more versions, writes `index.yaml` and serves the
//!   directory over HTTP on `<host>:<free port>` until dropped; [`ChartRepo::add_version`]
//!   publishes a new version while it serves. The host is loopback, or with atoll on pods the
//!   host's address on the real nodes' network (`state::FleetState::serving_host`).
//! - [`OciRegistry`]: the in-memory `registry` of go-containerregistry on a free port, charts
//!   pushed with `helm push --plain-http`; stopped when dropped.
//!
//! ```no_run
//! # async fn demo(dir: &std::path::Path) -> Result<(), atoll_e2e::Error> {
//! use atoll_e2e::chart_repo::{ChartRepo, Helm, HelmTools, OciRegistry, HELLO_CHART};
//! let tools = HelmTools::locate()?;
//! let helm = Helm::new(&tools.helm, dir.join("helm-home"));
//! let host = std::net::Ipv4Addr::LOCALHOST.into();
//! let repo = ChartRepo::start(host, helm.clone(), HELLO_CHART, dir.join("repo"), &["0.1.0"]).await?;
//! // helm upgrade --install hello hello --repo <repo.url()> --version 0.1.0 ...
//! repo.add_version("0.2.0").await?;
//! let oci = OciRegistry::start(host, &tools.registry, helm.clone(), dir.join("registry.log")).await?;
//! oci.push(&repo.archive("0.1.0")).await?;
//! // helm upgrade --install hello <oci.chart_url("hello")> --version 0.1.0 --plain-http ...
//! # Ok(()) }
//! ```

use std::net::{IpAddr, SocketAddr};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::Error;
use crate::control_plane;

/// The chart fixture `e2e/charts/hello`: a ConfigMap `<release>-config` whose `data.message` is
/// `.Values.message`, a Deployment `<release>` with `.Values.replicaCount` replicas, NOTES.txt,
/// and with `.Values.clusterRoleBinding` a ClusterRoleBinding `<release>-everyone-admin`.
pub const HELLO_CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/hello");

/// The chart fixture `e2e/charts/workloads`: one of each kind `helm --wait` checks (Service,
/// StatefulSet with 2 replicas, DaemonSet, Job), a CRD (`widgets.e2e.atoll.invalid`) and a
/// Widget, and a post-install/post-upgrade hook Job deleted once it succeeded.
pub const WORKLOADS_CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/charts/workloads");

/// How long `registry` may take to listen.
const REGISTRY_START: Duration = Duration::from_secs(10);

/// The Helm test binaries, built by `make k8s` beside the control plane's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HelmTools {
    /// `helm` (`HELM_VERSION` of `e2e/k8s/versions.env`).
    pub helm: PathBuf,
    /// `registry`, go-containerregistry's in-memory OCI registry (`REGISTRY_VERSION`).
    pub registry: PathBuf,
}

impl HelmTools {
    /// Both binaries from `ATOLL_K8S_BIN_DIR` or the `make k8s` cache; the error says to run
    /// `make k8s`.
    pub fn locate() -> Result<HelmTools, Error> {
        let dir = control_plane::bin_dir_from_env().ok_or_else(|| Error::LocateK8sBinaries {
            missing: "the cache directory (neither ATOLL_K8S_BIN_DIR nor HOME is set)".into(),
            dir: PathBuf::new(),
        })?;
        HelmTools::locate_in(&dir)
    }

    /// Both binaries in `dir`.
    pub fn locate_in(dir: &Path) -> Result<HelmTools, Error> {
        let tools = HelmTools {
            helm: dir.join("helm"),
            registry: dir.join("registry"),
        };
        let missing: Vec<&str> = [("helm", &tools.helm), ("registry", &tools.registry)]
            .into_iter()
            .filter(|(_, p)| !p.is_file())
            .map(|(name, _)| name)
            .collect();
        if !missing.is_empty() {
            return Err(Error::LocateK8sBinaries {
                missing: missing.join(", "),
                dir: dir.to_path_buf(),
            });
        }
        Ok(tools)
    }
}

/// The real `helm`, with its cache, configuration (repositories, registry logins) and data under
/// `home`, and `KUBECONFIG` removed from its environment: give `--kubeconfig` to commands that
/// reach a cluster.
#[derive(Clone, Debug)]
pub struct Helm {
    /// The binary.
    pub binary: PathBuf,
    /// `HELM_CACHE_HOME`, `HELM_CONFIG_HOME` and `HELM_DATA_HOME` are directories under it.
    pub home: PathBuf,
}

impl Helm {
    /// `helm` at `binary`, keeping its state under `home`.
    pub fn new(binary: impl Into<PathBuf>, home: impl Into<PathBuf>) -> Helm {
        Helm {
            binary: binary.into(),
            home: home.into(),
        }
    }

    /// Runs `helm <args>`; its stdout on success, else [`Error::RunHelm`] with its stderr.
    pub async fn run<S: AsRef<str>>(&self, args: &[S]) -> Result<String, Error> {
        let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
        let failed = |status: String, stderr: String| Error::RunHelm {
            args: args.join(" "),
            status,
            stderr,
        };
        let out = tokio::process::Command::new(&self.binary)
            .args(&args)
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .env_remove("KUBECONFIG")
            .env_remove("HELM_NAMESPACE")
            .env_remove("HELM_KUBECONTEXT")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| failed("not started".into(), e.to_string()))?;
        if !out.status.success() {
            return Err(failed(
                out.status.to_string(),
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `helm package <chart> --version <version> --destination <dir>`: the archive's path,
    /// `<dir>/<chart name>-<version>.tgz`.
    pub async fn package(&self, chart: &Path, version: &str, dir: &Path) -> Result<PathBuf, Error> {
        self.run(&[
            "package",
            &chart.display().to_string(),
            "--version",
            version,
            "--destination",
            &dir.display().to_string(),
        ])
        .await?;
        Ok(dir.join(archive_name(chart, version)))
    }
}

/// `<chart directory name>-<version>.tgz`: the archive `helm package` writes (the fixtures are
/// named after their directory).
fn archive_name(chart: &Path, version: &str) -> String {
    let name = chart
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    format!("{name}-{version}.tgz")
}

fn create_dir(path: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(path).map_err(|source| Error::CreateFile {
        path: path.to_path_buf(),
        source,
    })
}

/// An HTTP chart repository on `<host>:<free port>` (loopback, or the host's address on the
/// real nodes' network so that pods reach it): `index.yaml` and the packaged archives of one
/// chart. Dropping it stops the server (the files stay).
#[derive(Debug)]
pub struct ChartRepo {
    helm: Helm,
    chart: PathBuf,
    dir: PathBuf,
    url: String,
    server: JoinHandle<()>,
}

impl ChartRepo {
    /// Packages `chart` at each of `versions` into `dir` (created), indexes it and serves it
    /// on `host`.
    pub async fn start(
        host: IpAddr,
        helm: Helm,
        chart: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
        versions: &[&str],
    ) -> Result<ChartRepo, Error> {
        ChartRepo::start_with_auth(host, helm, chart, dir, versions, None).await
    }

    /// [`ChartRepo::start`] for a private repository: every request without HTTP basic
    /// authentication as `username` and `password` is answered 401, as a real private
    /// repository does.
    pub async fn start_private(
        host: IpAddr,
        helm: Helm,
        chart: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
        versions: &[&str],
        (username, password): (&str, &str),
    ) -> Result<ChartRepo, Error> {
        use base64::Engine;
        let token =
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
        ChartRepo::start_with_auth(
            host,
            helm,
            chart,
            dir,
            versions,
            Some(format!("Basic {token}")),
        )
        .await
    }

    async fn start_with_auth(
        host: IpAddr,
        helm: Helm,
        chart: impl Into<PathBuf>,
        dir: impl Into<PathBuf>,
        versions: &[&str],
        authorization: Option<String>,
    ) -> Result<ChartRepo, Error> {
        let (chart, dir) = (chart.into(), dir.into());
        create_dir(&dir)?;
        let listener = TcpListener::bind(SocketAddr::new(host, 0))
            .await
            .map_err(|source| Error::ServeChartRepo {
                dir: dir.clone(),
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::ServeChartRepo {
                dir: dir.clone(),
                source,
            })?;
        let repo = ChartRepo {
            helm,
            chart,
            url: format!("http://{addr}"),
            server: tokio::spawn(serve(listener, dir.clone(), authorization)),
            dir,
        };
        for version in versions {
            repo.helm.package(&repo.chart, version, &repo.dir).await?;
        }
        repo.reindex().await?;
        Ok(repo)
    }

    /// The repository's URL (`http://<host>:<port>`), for `helm install --repo` or
    /// `helm repo add`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The directory served.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the archive of `version` is (whether packaged or not).
    pub fn archive(&self, version: &str) -> PathBuf {
        self.dir.join(archive_name(&self.chart, version))
    }

    /// Packages the chart at `version` and rewrites `index.yaml`, while serving: the next
    /// `helm install --repo` or `helm repo update` sees it. The archive's path.
    pub async fn add_version(&self, version: &str) -> Result<PathBuf, Error> {
        let archive = self.helm.package(&self.chart, version, &self.dir).await?;
        self.reindex().await?;
        Ok(archive)
    }

    async fn reindex(&self) -> Result<(), Error> {
        self.helm
            .run(&[
                "repo",
                "index",
                &self.dir.display().to_string(),
                "--url",
                &self.url,
            ])
            .await
            .map(drop)
    }
}

impl Drop for ChartRepo {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts the open connections.
        self.server.abort();
    }
}

/// Accepts connections until aborted; each is answered by [`respond`]. With `authorization`,
/// only requests whose `Authorization` header is exactly that are served.
async fn serve(listener: TcpListener, dir: PathBuf, authorization: Option<String>) {
    let mut connections = JoinSet::new();
    loop {
        while connections.try_join_next().is_some() {}
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors, say: try again a little later rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        connections.spawn(respond(stream, dir.clone(), authorization.clone()));
    }
}

/// Answers one request (then closes): `GET`/`HEAD` of a file directly in `dir`, else 404 (or
/// 405 for another method). A request is a few hundred bytes; more than 16 KiB is refused.
async fn respond(mut stream: TcpStream, dir: PathBuf, authorization: Option<String>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > 16 * 1024 {
            return;
        }
    }
    let line = String::from_utf8_lossy(&head);
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let authorized = authorization.as_deref().is_none_or(|want| {
        line.lines().any(|header| {
            header.split_once(':').is_some_and(|(name, value)| {
                name.trim().eq_ignore_ascii_case("authorization") && value.trim() == want
            })
        })
    });
    let (status, body) = match (method, file_in(&dir, target)) {
        _ if !authorized => ("401 Unauthorized", b"unauthorized\n".to_vec()),
        ("GET" | "HEAD", Some(path)) => match tokio::fs::read(&path).await {
            Ok(bytes) => ("200 OK", bytes),
            Err(_) => ("404 Not Found", b"not found\n".to_vec()),
        },
        ("GET" | "HEAD", None) => ("404 Not Found", b"not found\n".to_vec()),
        _ => ("405 Method Not Allowed", b"method not allowed\n".to_vec()),
    };
    let content_type = if target.ends_with(".yaml") {
        "application/yaml"
    } else if target.ends_with(".tgz") {
        "application/gzip"
    } else {
        "text/plain"
    };
    let challenge = if authorized {
        ""
    } else {
        "WWW-Authenticate: Basic realm=\"charts\"\r\n"
    };
    let header = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n{challenge}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(header.as_bytes()).await;
    if method != "HEAD" {
        let _ = stream.write_all(&body).await;
    }
    let _ = stream.shutdown().await;
}

/// The file a request target names directly in `dir` (query dropped): one normal path
/// component, nothing else.
fn file_in(dir: &Path, target: &str) -> Option<PathBuf> {
    let path = target.split(['?', '#']).next()?.trim_start_matches('/');
    let mut components = Path::new(path).components();
    match (components.next(), components.next()) {
        (Some(Component::Normal(name)), None) => Some(dir.join(name)),
        _ => None,
    }
}

/// go-containerregistry's in-memory OCI registry (plain HTTP) on a free loopback port, reached
/// at `host`: for another host than loopback through a relay listening there (the registry
/// itself listens on `localhost` only). Dropping it kills the process (and everything pushed is
/// gone) and stops the relay.
#[derive(Debug)]
pub struct OciRegistry {
    helm: Helm,
    host: IpAddr,
    port: u16,
    log: PathBuf,
    _process: tokio::process::Child,
    relay: Option<JoinHandle<()>>,
}

impl OciRegistry {
    /// Starts `registry -port 0` with its output in `log`, and waits until it listens; its
    /// URLs name `host`.
    pub async fn start(
        host: IpAddr,
        binary: &Path,
        helm: Helm,
        log: impl Into<PathBuf>,
    ) -> Result<OciRegistry, Error> {
        let log = log.into();
        if let Some(parent) = log.parent() {
            create_dir(parent)?;
        }
        let file = std::fs::File::create(&log).map_err(|source| Error::CreateFile {
            path: log.clone(),
            source,
        })?;
        let stderr = file.try_clone().map_err(|source| Error::CreateFile {
            path: log.clone(),
            source,
        })?;
        let mut process = tokio::process::Command::new(binary)
            .args(["-port", "0"])
            .stdin(std::process::Stdio::null())
            .stdout(file)
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| Error::Spawn {
                name: "registry".into(),
                binary: binary.to_path_buf(),
                source,
            })?;
        let failed = |message: String| Error::StartRegistry {
            log: log.clone(),
            message,
        };
        let started = Instant::now();
        let port = loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(port) = listening_port(&text) {
                break port;
            }
            if let Ok(Some(status)) = process.try_wait() {
                return Err(failed(format!("it exited ({status}): {}", text.trim())));
            }
            if started.elapsed() > REGISTRY_START {
                return Err(failed(format!(
                    "it did not report its port within {}s",
                    REGISTRY_START.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let (port, relay) = if host.is_loopback() {
            (port, None)
        } else {
            let (relayed, relay) = relay_to(host, port, &log).await?;
            (relayed, Some(relay))
        };
        Ok(OciRegistry {
            helm,
            host,
            port,
            log,
            _process: process,
            relay,
        })
    }

    /// `<host>:<port>`.
    pub fn host(&self) -> String {
        SocketAddr::new(self.host, self.port).to_string()
    }

    /// Where charts are pushed: `oci://<host>:<port>/charts`.
    pub fn url(&self) -> String {
        format!("oci://{}/charts", self.host())
    }

    /// The reference of chart `name` for `helm install`/`pull`/`show`:
    /// `oci://<host>:<port>/charts/<name>` (add `--version` and `--plain-http`).
    pub fn chart_url(&self, name: &str) -> String {
        format!("{}/{name}", self.url())
    }

    /// The registry's log.
    pub fn log(&self) -> &Path {
        &self.log
    }

    /// `helm push <archive> oci://<host>:<port>/charts --plain-http`.
    pub async fn push(&self, archive: &Path) -> Result<(), Error> {
        self.helm
            .run(&[
                "push",
                &archive.display().to_string(),
                &self.url(),
                "--plain-http",
            ])
            .await
            .map(drop)
    }
}

/// A private front for a registry (which has no authentication of its own): HTTP basic
/// authentication on `<host>:<free port>`, each authenticated request passed on to the
/// registry on a connection of its own (`Connection: close`, so that every request is checked).
/// Dropping it stops it.
#[derive(Debug)]
pub struct AuthProxy {
    host: String,
    server: JoinHandle<()>,
}

impl AuthProxy {
    /// Fronts `upstream` (`host:port`), letting through requests authenticated as `username`
    /// and `password`.
    pub async fn start(
        host: IpAddr,
        upstream: &str,
        (username, password): (&str, &str),
    ) -> Result<AuthProxy, Error> {
        use base64::Engine;
        let listener = TcpListener::bind(SocketAddr::new(host, 0))
            .await
            .map_err(|source| Error::ServeChartRepo {
                dir: PathBuf::from(upstream),
                source,
            })?;
        let addr = listener
            .local_addr()
            .map_err(|source| Error::ServeChartRepo {
                dir: PathBuf::from(upstream),
                source,
            })?;
        let token =
            base64::engine::general_purpose::STANDARD.encode(format!("{username}:{password}"));
        let want = format!("Basic {token}");
        let upstream = upstream.to_owned();
        let server = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            loop {
                while connections.try_join_next().is_some() {}
                let Ok((stream, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                connections.spawn(pass_on(stream, upstream.clone(), want.clone()));
            }
        });
        Ok(AuthProxy {
            host: addr.to_string(),
            server,
        })
    }

    /// `<host>:<port>`.
    pub fn host(&self) -> &str {
        &self.host
    }
}

impl Drop for OciRegistry {
    fn drop(&mut self) {
        if let Some(relay) = &self.relay {
            relay.abort();
        }
    }
}

/// A TCP relay on `host:<free port>` to `127.0.0.1:port`: the port and the relay's task.
async fn relay_to(host: IpAddr, port: u16, log: &Path) -> Result<(u16, JoinHandle<()>), Error> {
    let failed = |message: String| Error::StartRegistry {
        log: log.to_path_buf(),
        message,
    };
    let listener = TcpListener::bind(SocketAddr::new(host, 0))
        .await
        .map_err(|e| failed(format!("binding its relay on {host}: {e}")))?;
    let relayed = listener
        .local_addr()
        .map_err(|e| failed(e.to_string()))?
        .port();
    let relay = tokio::spawn(async move {
        let mut connections = JoinSet::new();
        loop {
            while connections.try_join_next().is_some() {}
            let Ok((mut client, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            connections.spawn(async move {
                if let Ok(mut upstream) = TcpStream::connect(("127.0.0.1", port)).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    Ok((relayed, relay))
}

impl Drop for AuthProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Answers 401 to a request without the `authorization` wanted; passes one with it on to
/// `upstream` (its head rewritten to `Connection: close`) and the answer back.
async fn pass_on(mut client: TcpStream, upstream: String, authorization: String) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match client.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > 64 * 1024 {
            return;
        }
    };
    let text = String::from_utf8_lossy(&head[..end]).into_owned();
    let mut lines = text.split("\r\n").filter(|l| !l.is_empty());
    let request_line = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<&str> = lines.collect();
    let authorized = headers.iter().any(|h| {
        h.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("authorization") && value.trim() == authorization
        })
    });
    if !authorized {
        let body =
            "{\"errors\":[{\"code\":\"UNAUTHORIZED\",\"message\":\"authentication required\"}]}";
        let answer = format!(
            "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"registry\"\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = client.write_all(answer.as_bytes()).await;
        let _ = client.shutdown().await;
        return;
    }
    let Ok(mut server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let mut forwarded = format!("{request_line}\r\n");
    for header in headers {
        if !header.to_ascii_lowercase().starts_with("connection:") {
            forwarded.push_str(header);
            forwarded.push_str("\r\n");
        }
    }
    forwarded.push_str("Connection: close\r\n\r\n");
    if server.write_all(forwarded.as_bytes()).await.is_err()
        || server.write_all(&head[end..]).await.is_err()
    {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}

/// The port of registry's `serving on port N` line.
fn listening_port(log: &str) -> Option<u16> {
    log.lines()
        .find_map(|l| l.split("serving on port ").nth(1))
        .and_then(|p| p.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_request_reaches_only_files_directly_in_the_repository() {
        let dir = Path::new("/srv/repo");
        let table = [
            ("/index.yaml", Some("/srv/repo/index.yaml")),
            ("/hello-0.1.0.tgz?x=1", Some("/srv/repo/hello-0.1.0.tgz")),
            ("index.yaml", Some("/srv/repo/index.yaml")),
            ("/", None),
            ("", None),
            ("/../etc/passwd", None),
            ("/..", None),
            ("/a/b.tgz", None),
            ("/./index.yaml", None),
        ];
        for (target, want) in table {
            assert_eq!(
                file_in(dir, target),
                want.map(PathBuf::from),
                "target {target:?}"
            );
        }
    }

    #[test]
    fn the_registry_port_is_read_from_its_log() {
        assert_eq!(
            listening_port("2026/12/02 16:50:00 serving on port 41235\n"),
            Some(41235)
        );
        assert_eq!(listening_port("starting\n"), None);
    }

    #[test]
    fn archives_are_named_after_the_chart_directory_and_version() {
        assert_eq!(
            archive_name(Path::new(HELLO_CHART), "0.2.0"),
            "hello-0.2.0.tgz"
        );
    }

    #[tokio::test]
    async fn the_server_answers_files_and_404_and_stops_when_dropped() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("index.yaml"), "apiVersion: v1\n").unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve(listener, tmp.path().to_path_buf(), None));
        let get = |target: &'static str| async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let ok = get("/index.yaml").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.ends_with("\r\n\r\napiVersion: v1\n"), "{ok}");
        assert!(get("/missing.tgz").await.starts_with("HTTP/1.1 404"));
        assert!(get("/../index.yaml").await.starts_with("HTTP/1.1 404"));
        server.abort();
        let _ = server.await;
        assert!(TcpStream::connect(addr).await.is_err());
    }

    #[tokio::test]
    async fn a_private_repository_answers_only_its_credentials() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("index.yaml"), "apiVersion: v1\n").unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // robot:hunter2
        let want = "Basic cm9ib3Q6aHVudGVyMg==".to_owned();
        let server = tokio::spawn(serve(listener, tmp.path().to_path_buf(), Some(want)));
        let get = |authorization: &'static str| async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(
                format!("GET /index.yaml HTTP/1.1\r\nHost: x\r\n{authorization}\r\n").as_bytes(),
            )
            .await
            .unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        };
        let refused = get("").await;
        assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
        assert!(refused.contains("WWW-Authenticate: Basic"), "{refused}");
        let wrong = get("Authorization: Basic cm9ib3Q6d3Jvbmc=\r\n").await;
        assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
        let ok = get("authorization: Basic cm9ib3Q6aHVudGVyMg==\r\n").await;
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        server.abort();
    }
}
