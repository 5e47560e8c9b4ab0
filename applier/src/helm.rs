//! Helm releases: the HelmCharts of a Description installed, upgraded and uninstalled in the
//! child cluster by a pinned `helm` v3 binary, as Clusternet's agent does with Helm's library.
//!
//! Each chart is a release named after its HelmChart, in the chart's `targetNamespace`. A
//! release is installed when Helm does not know it, upgraded when what the Description asks for
//! (the chart's options and the values) changed since the agent last installed it (a digest kept
//! in the Description's inventory) or when Helm does not report it `deployed`, and left alone
//! otherwise, so that re-applying a Description does not make a new Helm revision.

use crate::Error;
use crate::inventory::ReleaseEntry;
pub use crate::model::ReleaseStatus;
use crate::model::{ChartRelease, PullAuth, PullCredentials, ReleaseReport};
use atoll_crds::helm::{HelmChart, HelmOptions};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Helm's default timeout of an install, upgrade or uninstall (HelmChart `timeoutSeconds`).
const DEFAULT_TIMEOUT_SECONDS: u64 = 300;
/// The longest a helm run may take, whatever `timeoutSeconds` says (an hour): a release holds
/// its Description's apply, and a helm process its memory, for that long.
pub const MAX_TIMEOUT_SECONDS: u64 = 3600;
/// How many helm processes one applier runs at once by default; the others wait their turn.
pub const DEFAULT_CONCURRENT_RUNS: usize = 4;
/// How much longer than Helm's own timeout the agent waits for the helm process.
const PROCESS_GRACE: Duration = Duration::from_secs(30);
/// Why a chart is not installed where the applier has no helm.
const NO_HELM: &str = "no helm to install HelmChart feeds with: the agent (for a Push-mode \
     cluster, the hub) needs --helm pointing at a helm v3 binary";
/// Timeout of `helm status` and other reads.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How the agent runs Helm against the child cluster.
#[derive(Clone, Debug)]
pub struct Helm {
    binary: PathBuf,
    kubeconfig: Option<PathBuf>,
    context: Option<String>,
    home: PathBuf,
    left_pending: LeftPending,
    /// When this driver was made (the agent's start): a release that went pending before it
    /// was left by an earlier agent process, whose helm runs ended with its pod.
    started: k8s_openapi::jiff::Timestamp,
    /// The helm processes that may run at once (shared by every clone).
    runs: RunLimit,
    /// The ServiceAccount, in each release's own namespace, that helm acts as for that release
    /// (`None`: helm acts as the applier's own identity).
    release_account: Option<String>,
}

/// How many helm changes may run at once, shared by every [`Helm`] given the same limit (the
/// hub's Push clusters share one).
#[derive(Clone, Debug)]
pub struct RunLimit(std::sync::Arc<tokio::sync::Semaphore>);

impl RunLimit {
    /// At most `runs` at once (at least one).
    pub fn new(runs: usize) -> Self {
        Self(std::sync::Arc::new(tokio::sync::Semaphore::new(
            runs.max(1),
        )))
    }
}

impl Default for RunLimit {
    fn default() -> Self {
        Self::new(DEFAULT_CONCURRENT_RUNS)
    }
}

/// The pending revisions (namespace, release, revision) that this process's own helm runs left
/// when they failed: those runs ended, so nothing will finish them, and they are freed without
/// waiting for Helm's timeout.
#[derive(Clone, Debug, Default)]
struct LeftPending(
    std::sync::Arc<std::sync::Mutex<std::collections::HashSet<(String, String, i64)>>>,
);

impl LeftPending {
    fn key(release: &Release, revision: i64) -> (String, String, i64) {
        (release.namespace.clone(), release.name.clone(), revision)
    }

    fn set(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<(String, String, i64)>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn insert(&self, release: &Release, revision: i64) {
        self.set().insert(Self::key(release, revision));
    }

    fn contains(&self, release: &Release, revision: i64) -> bool {
        self.set().contains(&Self::key(release, revision))
    }

    fn remove(&self, release: &Release, revision: i64) {
        self.set().remove(&Self::key(release, revision));
    }
}

impl Helm {
    /// Helm from `binary` (a path, or a name looked up on `PATH`), talking to the child cluster
    /// of `kubeconfig` and `context` (both unset: in-cluster, as the agent). Helm's cache,
    /// configuration and data go under `home` (the agent's image has a read-only root).
    pub fn new(
        binary: impl Into<PathBuf>,
        kubeconfig: Option<PathBuf>,
        context: Option<String>,
        home: impl Into<PathBuf>,
    ) -> Self {
        Self {
            binary: binary.into(),
            kubeconfig,
            context,
            home: home.into(),
            left_pending: LeftPending::default(),
            started: k8s_openapi::jiff::Timestamp::now(),
            runs: RunLimit::default(),
            release_account: None,
        }
    }

    /// Acts, for each release, as the ServiceAccount `account` of the release's namespace
    /// (helm's `--kube-as-user system:serviceaccount:NAMESPACE:ACCOUNT`), so that the child's
    /// RBAC, not the applier's own rights, decides what a chart may create. The applier makes
    /// that ServiceAccount, bound to the ClusterRole `admin` in that namespace only
    /// ([`crate::release_identity`]). `None` (or empty): helm acts as the applier.
    pub fn with_release_account(mut self, account: Option<String>) -> Self {
        self.release_account = account.filter(|a| !a.is_empty());
        self
    }

    /// The ServiceAccount helm acts as in each release's namespace, if any.
    pub fn release_account(&self) -> Option<&str> {
        self.release_account.as_deref()
    }

    /// The flags that make helm act as the release identity of `namespace`, if there is one.
    fn acting_in(&self, namespace: &str) -> Vec<String> {
        match &self.release_account {
            Some(account) => vec![
                "--kube-as-user".to_owned(),
                crate::release_identity::user_name(namespace, account),
            ],
            None => Vec::new(),
        }
    }

    /// At most `runs` helm processes at once (at least one); the default is
    /// [`DEFAULT_CONCURRENT_RUNS`].
    pub fn with_concurrent_runs(self, runs: usize) -> Self {
        self.with_run_limit(RunLimit::new(runs))
    }

    /// Runs within `limit`, shared with the other drivers given it.
    pub fn with_run_limit(mut self, limit: RunLimit) -> Self {
        self.runs = limit;
        self
    }

    /// The release's status as Helm reports it; `None` when Helm does not know the release.
    pub async fn status(
        &self,
        name: &str,
        namespace: &str,
    ) -> Result<Option<ReleaseStatus>, Error> {
        let mut args = vec![
            "status".to_owned(),
            name.to_owned(),
            "--namespace".to_owned(),
            namespace.to_owned(),
            "--output".to_owned(),
            "json".to_owned(),
        ];
        args.extend(self.acting_in(namespace));
        match self.run(args, None, READ_TIMEOUT).await {
            Ok(stdout) => {
                let status: HelmStatusJson =
                    serde_json::from_slice(&stdout).map_err(|e| Error::DecodeHelmStatus {
                        release: format!("{namespace}/{name}"),
                        reason: e.to_string(),
                    })?;
                Ok(Some(status.into()))
            }
            Err(Error::HelmFailed { message, .. }) if message.contains("release: not found") => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Installs the release (`upgrade` false) or upgrades it, with its values on stdin.
    pub async fn install(&self, release: &Release, upgrade: bool) -> Result<(), Error> {
        let values = serde_json::to_vec(&release.values).map_err(|e| Error::DecodeHelmStatus {
            release: release.to_string(),
            reason: e.to_string(),
        })?;
        let timeout = release.timeout();
        let private = match &release.credentials {
            Some(credentials) => Some(self.log_in(release, credentials).await?),
            None => None,
        };
        // Acting as a namespace's identity, helm may not create namespaces: the applier has.
        let create_namespace = self.release_account.is_none();
        let mut args = release.install_args(upgrade, timeout, private.is_some(), create_namespace);
        args.extend(self.acting_in(&release.namespace));
        let env = private.as_ref().map(PrivateConfig::env).unwrap_or_default();
        self.run_with(args, Some(values), timeout + PROCESS_GRACE, &env)
            .await
            .map(|_| ())
        // `private` is dropped here, and the credentials written for Helm with it.
    }

    /// Gives Helm the release's repository credentials in a Helm configuration of its own (a
    /// `helm repo add`, or a `helm registry login` for OCI), the password on stdin so that no
    /// process listing shows it.
    async fn log_in(
        &self,
        release: &Release,
        credentials: &PullCredentials,
    ) -> Result<PrivateConfig, Error> {
        let private = PrivateConfig::create(&self.home, release)?;
        let repo = release.options.repo.trim_end_matches('/');
        let mut args = match repo.strip_prefix("oci://") {
            Some(reference) => {
                let host = reference.split('/').next().unwrap_or_default();
                let mut args = vec!["registry".to_owned(), "login".to_owned(), host.to_owned()];
                if release.options.plain_http == Some(true) {
                    args.push("--plain-http".to_owned());
                }
                args
            }
            None => vec![
                "repo".to_owned(),
                "add".to_owned(),
                PRIVATE_REPO.to_owned(),
                repo.to_owned(),
            ],
        };
        args.extend([
            "--username".to_owned(),
            credentials.username.clone(),
            "--password-stdin".to_owned(),
        ]);
        let password = credentials.password.as_bytes().to_vec();
        self.run_with(args, Some(password), READ_TIMEOUT, &private.env())
            .await?;
        Ok(private)
    }

    /// The objects of the release as Helm rendered them (`helm get manifest`).
    pub async fn manifest(&self, name: &str, namespace: &str) -> Result<Vec<Value>, Error> {
        let mut args = vec![
            "get".to_owned(),
            "manifest".to_owned(),
            name.to_owned(),
            "--namespace".to_owned(),
            namespace.to_owned(),
        ];
        args.extend(self.acting_in(namespace));
        let stdout = self.run(args, None, READ_TIMEOUT).await?;
        parse_manifest(&stdout).map_err(|reason| Error::DecodeHelmStatus {
            release: format!("{namespace}/{name}"),
            reason,
        })
    }

    /// Uninstalls the release; one Helm does not know is already gone.
    pub async fn uninstall(&self, name: &str, namespace: &str) -> Result<(), Error> {
        let timeout = Duration::from_secs(DEFAULT_TIMEOUT_SECONDS);
        let mut args = vec![
            "uninstall".to_owned(),
            name.to_owned(),
            "--namespace".to_owned(),
            namespace.to_owned(),
            "--timeout".to_owned(),
            format!("{}s", timeout.as_secs()),
        ];
        args.extend(self.acting_in(namespace));
        match self.run(args, None, timeout + PROCESS_GRACE).await {
            Ok(_) => Ok(()),
            Err(Error::HelmFailed { message, .. }) if message.contains("not found") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Frees a release an operation left pending ([`pending_remedy`]): a first install is
    /// uninstalled, an upgrade or a rollback rolled back to the revision before it.
    pub async fn release_pending(
        &self,
        name: &str,
        namespace: &str,
        remedy: PendingRemedy,
    ) -> Result<(), Error> {
        match remedy {
            PendingRemedy::Uninstall => self.uninstall(name, namespace).await,
            PendingRemedy::Rollback => {
                let timeout = Duration::from_secs(DEFAULT_TIMEOUT_SECONDS);
                let mut args = vec![
                    "rollback".to_owned(),
                    name.to_owned(),
                    "--namespace".to_owned(),
                    namespace.to_owned(),
                    "--timeout".to_owned(),
                    format!("{}s", timeout.as_secs()),
                ];
                args.extend(self.acting_in(namespace));
                self.run(args, None, timeout + PROCESS_GRACE)
                    .await
                    .map(|_| ())
            }
        }
    }

    /// Runs helm with `args` (plus the cluster flags), feeding `stdin`; returns its stdout.
    async fn run(
        &self,
        args: Vec<String>,
        stdin: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<Vec<u8>, Error> {
        self.run_with(args, stdin, timeout, &[]).await
    }

    /// [`Helm::run`] with more environment variables.
    async fn run_with(
        &self,
        mut args: Vec<String>,
        stdin: Option<Vec<u8>>,
        timeout: Duration,
        env: &[(&str, PathBuf)],
    ) -> Result<Vec<u8>, Error> {
        if let Some(kubeconfig) = &self.kubeconfig {
            args.push("--kubeconfig".to_owned());
            args.push(kubeconfig.display().to_string());
        }
        if let Some(context) = &self.context {
            args.push("--kube-context".to_owned());
            args.push(context.clone());
        }
        let command = format!("helm {}", args.first().map_or("", String::as_str));
        // A change to a release waits its turn, held until its process has ended (or is
        // killed with this future); reads never wait behind long installs.
        let changes = ["install", "upgrade", "uninstall", "rollback"];
        let _turn = match args.first() {
            Some(verb) if changes.contains(&verb.as_str()) => {
                Some(self.runs.0.acquire().await.map_err(|_| Error::RunHelm {
                    binary: self.binary.display().to_string(),
                    source: std::io::Error::other("the applier is shutting down"),
                })?)
            }
            _ => None,
        };
        let mut child = tokio::process::Command::new(&self.binary)
            .args(&args)
            .env("HELM_CACHE_HOME", self.home.join("cache"))
            .env("HELM_CONFIG_HOME", self.home.join("config"))
            .env("HELM_DATA_HOME", self.home.join("data"))
            .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|source| Error::RunHelm {
                binary: self.binary.display().to_string(),
                source,
            })?;
        if let (Some(bytes), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(&bytes)
                .await
                .map_err(|source| Error::RunHelm {
                    binary: self.binary.display().to_string(),
                    source,
                })?;
        }
        let output = match tokio::time::timeout(timeout, child.wait_with_output()).await {
            Ok(Ok(output)) => output,
            Ok(Err(source)) => {
                return Err(Error::RunHelm {
                    binary: self.binary.display().to_string(),
                    source,
                });
            }
            Err(_) => {
                return Err(Error::HelmTimedOut {
                    command,
                    seconds: timeout.as_secs(),
                });
            }
        };
        if output.status.success() {
            return Ok(output.stdout);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let message = stderr.trim().trim_start_matches("Error: ").to_owned();
        // The agent's report edge caps error messages; this is Helm's last line or two.
        Err(Error::HelmFailed { command, message })
    }
}

/// The name of the repository that `helm repo add` gives a chart's credentials under, in the
/// release's own Helm configuration.
const PRIVATE_REPO: &str = "atoll-pull";

/// A Helm repository configuration and registry login of one install, in a directory only the
/// agent can read, removed when dropped (the credentials do not outlive the install).
struct PrivateConfig {
    dir: PathBuf,
}

impl PrivateConfig {
    /// A fresh, empty configuration for `release` under `home`.
    fn create(home: &std::path::Path, release: &Release) -> Result<PrivateConfig, Error> {
        use std::os::unix::fs::DirBuilderExt;
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = home
            .join("pull")
            .join(format!("{}.{}.{n}", release.namespace, release.name));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(|source| Error::RunHelm {
                binary: format!("helm (creating {})", dir.display()),
                source,
            })?;
        Ok(PrivateConfig { dir })
    }

    /// Helm's environment for it.
    fn env(&self) -> Vec<(&'static str, PathBuf)> {
        vec![
            ("HELM_REPOSITORY_CONFIG", self.dir.join("repositories.yaml")),
            ("HELM_REPOSITORY_CACHE", self.dir.join("cache")),
            ("HELM_REGISTRY_CONFIG", self.dir.join("registry.json")),
        ]
    }
}

impl Drop for PrivateConfig {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "removing a release's Helm credentials failed");
        }
    }
}

/// The releases a Description's charts ask for, before Helm runs.
#[derive(Clone, Debug, Default)]
pub struct ReleasePlan {
    /// Per chart, in order: the release, or the report of a chart that cannot be installed.
    pub charts: Vec<Result<Release, Box<ReleaseReport>>>,
    /// What to record in the inventory before Helm runs: the recorded releases plus the new
    /// ones, so that a crash half-way cannot leak a release, with an empty digest for each
    /// release Helm may change, so that one whose new digest fails to be recorded after Helm
    /// ran is not taken for the recorded one (and is installed again).
    pub intent: Vec<ReleaseEntry>,
}

/// The namespaces of the child that may be written to, for plain objects and releases alike:
/// never the agent's own namespace (its state and credentials), and only the listed ones for an
/// agent restricted with `--namespaces` (which then writes nothing cluster-scoped).
#[derive(Clone, Copy, Debug, Default)]
pub struct NamespaceRules<'a> {
    /// The agent's own namespace.
    pub own: &'a str,
    /// The namespaces the agent may write, when restricted.
    pub allowed: Option<&'a BTreeSet<String>>,
}

/// Where a write lands, as [`NamespaceRules`] judge it.
#[derive(Clone, Copy, Debug)]
pub enum WriteTarget<'a> {
    /// A namespaced object (or a release) in this namespace.
    In(&'a str),
    /// The Namespace object of this name.
    Namespace(&'a str),
    /// Another cluster-scoped object.
    Cluster,
}

impl NamespaceRules<'_> {
    /// Why `object` (its `kind namespace/name` text) may not be written to `target`, if so.
    pub fn refusal(&self, object: &str, target: WriteTarget<'_>) -> Option<Error> {
        let namespace = match target {
            WriteTarget::In(ns) | WriteTarget::Namespace(ns) => Some(ns),
            WriteTarget::Cluster => None,
        };
        if !self.own.is_empty() && namespace == Some(self.own) {
            return Some(Error::ReservedNamespace {
                object: object.to_owned(),
                namespace: self.own.to_owned(),
            });
        }
        let allowed = self.allowed?;
        let permitted = matches!(target, WriteTarget::In(ns) if allowed.contains(ns));
        (!permitted).then(|| Error::NamespaceNotAllowed {
            object: object.to_owned(),
            allowed: allowed.iter().cloned().collect::<Vec<_>>().join(", "),
        })
    }
}

/// Plans the releases of `charts`, given the releases the Description recorded before; a
/// chart whose target namespace `namespaces` refuses is reported, never installed.
pub fn plan_releases(
    charts: &[ChartRelease],
    recorded: &[ReleaseEntry],
    namespaces: NamespaceRules<'_>,
) -> ReleasePlan {
    let mut intent = recorded.to_vec();
    let charts: Vec<Result<Release, Box<ReleaseReport>>> = charts
        .iter()
        .map(|c| {
            Release::from_description(&c.chart, &c.values, &c.pull)
                .and_then(|release| {
                    let target = WriteTarget::In(&release.namespace);
                    match namespaces.refusal(&release.to_string(), target) {
                        Some(refusal) => Err(refusal.to_string()),
                        None => Ok(release),
                    }
                })
                .map_err(|error| {
                    Box::new(ReleaseReport::failed(
                        &text_at(&c.chart, "/metadata/name"),
                        &text_at(&c.chart, "/spec/targetNamespace"),
                        error,
                    ))
                })
        })
        .collect();
    for release in charts.iter().flatten() {
        match intent
            .iter_mut()
            .find(|e| e.is(&release.namespace, &release.name))
        {
            Some(entry) if entry.digest != release.digest => entry.digest.clear(),
            Some(_) => {}
            None => intent.push(ReleaseEntry {
                name: release.name.clone(),
                namespace: release.namespace.clone(),
                digest: String::new(),
            }),
        }
    }
    ReleasePlan { charts, intent }
}

/// The reports of `plan`'s charts when Helm did not run for them, each with `error`.
pub fn not_run(plan: &ReleasePlan, error: &str) -> Vec<ReleaseReport> {
    plan.charts
        .iter()
        .map(|chart| match chart {
            Ok(release) => ReleaseReport::failed(&release.name, &release.namespace, error),
            Err(refused) => refused.as_ref().clone(),
        })
        .collect()
}

/// The objects of a multi-document YAML manifest (empty documents skipped).
pub fn parse_manifest(text: &[u8]) -> Result<Vec<Value>, String> {
    use serde::Deserialize;
    let mut objects = Vec::new();
    for document in serde_yaml::Deserializer::from_slice(text) {
        let value = Value::deserialize(document).map_err(|e| e.to_string())?;
        if value.is_object() {
            objects.push(value);
        }
    }
    Ok(objects)
}

/// What [`sync_releases`] did.
#[derive(Debug, Default)]
pub struct Synced {
    /// The report of each chart, in order (and of recorded releases it failed to uninstall).
    pub reports: Vec<ReleaseReport>,
    /// The releases to record in the inventory.
    pub entries: Vec<ReleaseEntry>,
    /// The objects of each deployed release: its namespace, whether Helm just installed or
    /// upgraded it, and its objects as Helm rendered them (for drift repair and status).
    pub objects: Vec<ReleaseObjects>,
}

/// The objects of one deployed release.
#[derive(Debug, Default)]
pub struct ReleaseObjects {
    /// The release's namespace (the default of its namespaced objects).
    pub namespace: String,
    /// Helm installed or upgraded it in this pass.
    pub changed: bool,
    /// Its objects, from `helm get manifest`.
    pub objects: Vec<Value>,
}

/// Brings the child's releases to `plan`: installs or upgrades each planned release as needed,
/// and uninstalls the recorded releases no chart names any more (an `orphan` Description lets
/// go of them instead). A release Helm knows but the Description never recorded belongs to
/// someone else and is taken over only with `adopt`.
pub async fn sync_releases(
    helm: Option<&Helm>,
    plan: ReleasePlan,
    recorded: &[ReleaseEntry],
    orphan: bool,
    adopt: bool,
) -> Synced {
    let mut entries = plan.intent;
    let mut reports = Vec::with_capacity(plan.charts.len());
    let mut objects = Vec::new();
    let named = |ns: &str, name: &str| {
        plan.charts.iter().any(|c| match c {
            Ok(r) => r.namespace == ns && r.name == name,
            Err(r) => r.namespace == ns && r.name == name,
        })
    };
    let dropped: Vec<ReleaseEntry> = entries
        .iter()
        .filter(|e| !named(&e.namespace, &e.name))
        .cloned()
        .collect();
    for chart in &plan.charts {
        let release = match chart {
            Ok(release) => release,
            Err(refused) => {
                reports.push(refused.as_ref().clone());
                continue;
            }
        };
        let recorded_digest = recorded
            .iter()
            .find(|e| e.is(&release.namespace, &release.name))
            .map(|e| e.digest.as_str());
        let (report, changed) = match helm {
            Some(helm) => install_if_needed(helm, release, recorded_digest, adopt).await,
            None => (
                ReleaseReport::failed(&release.name, &release.namespace, NO_HELM),
                false,
            ),
        };
        let installed = report.error.is_none()
            && report
                .status
                .as_ref()
                .is_some_and(|s| s.phase == "deployed");
        if installed
            && let Some(entry) = entries
                .iter_mut()
                .find(|e| e.is(&release.namespace, &release.name))
        {
            entry.digest = release.digest.clone();
        }
        if installed && let Some(helm) = helm {
            match helm.manifest(&release.name, &release.namespace).await {
                Ok(manifest) => objects.push(ReleaseObjects {
                    namespace: release.namespace.clone(),
                    changed,
                    objects: manifest,
                }),
                Err(e) => {
                    tracing::warn!(release = %release, error = %e, "reading the release's objects failed; their drift is not repaired until the next apply");
                }
            }
        }
        reports.push(report);
    }
    for entry in dropped {
        if orphan {
            tracing::info!(release = %format!("{}/{}", entry.namespace, entry.name), "orphaning a Helm release the Description no longer has");
            entries.retain(|e| !e.is(&entry.namespace, &entry.name));
            continue;
        }
        let result = match helm {
            Some(helm) => helm.uninstall(&entry.name, &entry.namespace).await,
            None => Err(Error::RunHelm {
                binary: "helm".to_owned(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, NO_HELM),
            }),
        };
        match result {
            Ok(()) => {
                tracing::info!(release = %format!("{}/{}", entry.namespace, entry.name), "uninstalled a Helm release the Description no longer has");
                entries.retain(|e| !e.is(&entry.namespace, &entry.name));
            }
            Err(e) => {
                tracing::warn!(release = %format!("{}/{}", entry.namespace, entry.name), error = %e, "uninstalling a Helm release failed; it stays recorded, to be uninstalled again");
                reports.push(ReleaseReport::failed(
                    &entry.name,
                    &entry.namespace,
                    format!("uninstalling it failed: {e}"),
                ));
            }
        }
    }
    Synced {
        reports,
        entries,
        objects,
    }
}

/// How a release left pending is freed ([`pending_remedy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PendingRemedy {
    /// A first install that never finished: uninstall what it made, and install again.
    Uninstall,
    /// An upgrade or a rollback: roll back to the revision before it, then upgrade again.
    Rollback,
}

/// What to do about `status` when Helm says an operation holds the release (`pending-install`,
/// `pending-upgrade`, `pending-rollback`), in which state Helm refuses every other operation
/// ("another operation (install/upgrade/rollback) is in progress") forever: it has no lock that
/// expires. `None` for a release not pending, and for one whose operation may still run: it
/// began after `driver_started` and less than `may_run` (Helm's timeout and the process grace)
/// before `now`, and is not `ours`. Stale: `ours`, the pending revision is one the caller's
/// own helm run left when it failed (say after an answer of the API server was lost); begun
/// before the driver started, by an earlier agent process, whose helm ended with its pod (one
/// agent a cluster, `Recreate`); or older than any helm run may last.
pub fn pending_remedy(
    status: &ReleaseStatus,
    ours: bool,
    driver_started: k8s_openapi::jiff::Timestamp,
    now: k8s_openapi::jiff::Timestamp,
    may_run: Duration,
) -> Option<PendingRemedy> {
    let remedy = match status.phase.as_str() {
        "pending-install" => PendingRemedy::Uninstall,
        "pending-upgrade" | "pending-rollback" => PendingRemedy::Rollback,
        _ => return None,
    };
    if ours {
        return Some(remedy);
    }
    // Unreadable: taken as just begun, so that a running operation is never cut short.
    let began = status
        .last_deployed
        .parse::<k8s_openapi::jiff::Timestamp>()
        .unwrap_or(now);
    let running = now.duration_since(began);
    let overdue =
        running > k8s_openapi::jiff::SignedDuration::try_from(may_run).unwrap_or_default();
    (began < driver_started || overdue).then_some(remedy)
}

fn is_pending(status: &ReleaseStatus) -> bool {
    status.phase.starts_with("pending-")
}

/// After a helm run of ours on `release` failed, `now` its status: when the release is pending
/// at a revision after `before`, that revision is the run's, and nothing will finish it.
fn mark_if_left_by_us(helm: &Helm, release: &Release, now: &ReleaseStatus, before: i64) {
    if is_pending(now) && now.revision > before {
        helm.left_pending.insert(release, now.revision);
    }
}

/// Frees `release` when an operation left it pending ([`pending_remedy`]); `true` when it did.
async fn free_if_pending(
    helm: &Helm,
    release: &Release,
    status: Option<&ReleaseStatus>,
) -> Result<bool, Error> {
    let Some(status) = status else {
        return Ok(false);
    };
    let ours = helm.left_pending.contains(release, status.revision);
    let may_run = release.timeout() + PROCESS_GRACE;
    let now = k8s_openapi::jiff::Timestamp::now();
    let Some(remedy) = pending_remedy(status, ours, helm.started, now, may_run) else {
        return Ok(false);
    };
    tracing::warn!(release = %release, phase = %status.phase, revision = status.revision, ?remedy, "an operation left the Helm release pending, which blocks every other; freeing it");
    match helm
        .release_pending(&release.name, &release.namespace, remedy)
        .await
    {
        Ok(()) => {
            helm.left_pending.remove(release, status.revision);
            Ok(true)
        }
        Err(e) => {
            // A rollback that failed half-way leaves a pending revision of its own.
            if let Ok(Some(now)) = helm.status(&release.name, &release.namespace).await {
                mark_if_left_by_us(helm, release, &now, status.revision);
            }
            Err(e)
        }
    }
}

/// Installs or upgrades `release` unless Helm already runs what the Description recorded; the
/// report, and whether Helm installed or upgraded it.
async fn install_if_needed(
    helm: &Helm,
    release: &Release,
    recorded_digest: Option<&str>,
    adopt: bool,
) -> (ReleaseReport, bool) {
    let report = |status: Option<ReleaseStatus>, error: Option<String>| ReleaseReport {
        name: release.name.clone(),
        namespace: release.namespace.clone(),
        status,
        error,
    };
    let mut current = match helm.status(&release.name, &release.namespace).await {
        Ok(current) => current,
        Err(e) => return (report(None, Some(e.to_string())), false),
    };
    if let Some(status) = &current
        && recorded_digest.is_none()
        && !adopt
    {
        let refused = report(
            Some(status.clone()),
            Some(format!(
                "Helm already has a release {} in {} that atoll did not install; uninstall it, \
                 rename the HelmChart, or run the agent with --adopt-existing to take it over",
                release.name, release.namespace
            )),
        );
        return (refused, false);
    }
    // Ours, and left pending by an operation that will not finish (an agent killed during it,
    // or a run of ours that failed).
    match free_if_pending(helm, release, current.as_ref()).await {
        Ok(false) => {}
        Ok(true) => match helm.status(&release.name, &release.namespace).await {
            Ok(now) => current = now,
            Err(e) => return (report(None, Some(e.to_string())), false),
        },
        Err(e) => return (report(current, Some(e.to_string())), false),
    }
    if let Some(status) = &current
        && status.phase == "deployed"
        && recorded_digest == Some(release.digest.as_str())
    {
        return (report(current, None), false);
    }
    let before = current.as_ref().map_or(0, |s| s.revision);
    let installed = helm.install(release, current.is_some()).await;
    let mut after = helm.status(&release.name, &release.namespace).await;
    // Ours failed and left the release pending: free it now, or every retry fails too. (One
    // pending because of someone else's run, which is why ours failed, waits for its timeout.)
    if installed.is_err()
        && let Ok(status) = &after
    {
        if let Some(status) = status {
            mark_if_left_by_us(helm, release, status, before);
        }
        match free_if_pending(helm, release, status.as_ref()).await {
            Ok(true) => after = helm.status(&release.name, &release.namespace).await,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(release = %release, error = %e, "freeing a pending Helm release failed; the next apply tries again");
            }
        }
    }
    let report = match (installed, after) {
        (Ok(()), Ok(status)) => {
            tracing::info!(release = %release, "Helm release installed");
            report(status, None)
        }
        (Ok(()), Err(e)) => report(None, Some(e.to_string())),
        (Err(e), after) => report(after.ok().flatten(), Some(e.to_string())),
    };
    (report, true)
}

fn text_at(value: &Value, pointer: &str) -> String {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// One chart of a Description, as a release to install.
#[derive(Clone, Debug, PartialEq)]
pub struct Release {
    /// The release name: the HelmChart's name.
    pub name: String,
    /// The namespace it is installed in: the chart's `targetNamespace`.
    pub namespace: String,
    /// The chart's options (repository, chart, version, Helm flags).
    pub options: HelmOptions,
    /// The values after overrides.
    pub values: Value,
    /// Digest of what is installed: the options and the values.
    pub digest: String,
    /// The credentials of the chart's `chartPullSecret` (not in the digest: new credentials
    /// for the same chart make no new revision).
    pub credentials: Option<PullCredentials>,
}

impl std::fmt::Display for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "release {}/{}", self.namespace, self.name)
    }
}

impl Release {
    /// The release a Description asks for: `chart` is its HelmChart object after chart-level
    /// overrides, `values` its values after overrides, `pull` the credentials the hub sent
    /// for its `chartPullSecret`.
    pub fn from_description(
        chart: &Value,
        values: &Value,
        pull: &PullAuth,
    ) -> Result<Release, String> {
        let chart: HelmChart = serde_json::from_value(chart.clone())
            .map_err(|e| format!("the chart is not a valid HelmChart: {e}"))?;
        let name = chart.metadata.name.clone().unwrap_or_default();
        if name.is_empty() {
            return Err("the HelmChart has no name".to_owned());
        }
        let namespace = chart.spec.target_namespace.clone();
        if namespace.is_empty() {
            return Err(format!("HelmChart {name} has no targetNamespace"));
        }
        let secret = &chart.spec.options.chart_pull_secret;
        let credentials = match pull {
            _ if secret.is_empty() => None,
            PullAuth::Credentials(credentials) => Some(credentials.clone()),
            PullAuth::Unavailable(reason) => {
                return Err(format!(
                    "the credentials of HelmChart {name}'s chartPullSecret: {reason}"
                ));
            }
            PullAuth::Anonymous => {
                return Err(format!(
                    "HelmChart {name} names chartPullSecret {}, but the hub sent no credentials \
                     for it (a hub older than this agent?)",
                    secret.name
                ));
            }
        };
        if !values.is_object() {
            return Err(format!("the values of HelmChart {name} are not a map"));
        }
        let mut hasher = Sha256::new();
        hasher.update(serde_json::to_vec(&chart.spec).unwrap_or_default());
        hasher.update(serde_json::to_vec(values).unwrap_or_default());
        let digest: String = hasher
            .finalize()
            .iter()
            .take(16)
            .map(|b| format!("{b:02x}"))
            .collect();
        Ok(Release {
            name,
            namespace,
            options: chart.spec.options,
            values: values.clone(),
            digest,
            credentials,
        })
    }

    /// Helm's timeout for this release.
    fn timeout(&self) -> Duration {
        let seconds = self
            .options
            .timeout_seconds
            .and_then(|s| u64::try_from(s).ok())
            .filter(|s| *s > 0)
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
            .min(MAX_TIMEOUT_SECONDS);
        Duration::from_secs(seconds)
    }

    /// The chart argument and the flags that locate it: `--repo` for an HTTP(S) repository
    /// (or, with credentials, the chart in the repository `helm repo add` gave them), the
    /// chart's full reference for an OCI registry.
    fn chart_args(&self, private: bool) -> Vec<String> {
        let repo = self.options.repo.trim_end_matches('/');
        let mut args = if repo.starts_with("oci://") {
            vec![format!("{repo}/{}", self.options.chart)]
        } else if private {
            vec![format!("{PRIVATE_REPO}/{}", self.options.chart)]
        } else {
            vec![
                self.options.chart.clone(),
                "--repo".to_owned(),
                repo.to_owned(),
            ]
        };
        if let Some(version) = self.options.version.as_deref().filter(|v| !v.is_empty()) {
            args.push("--version".to_owned());
            args.push(version.to_owned());
        }
        if self.options.plain_http == Some(true) {
            args.push("--plain-http".to_owned());
        }
        args
    }

    /// The arguments of `helm install` or `helm upgrade`, with the HelmChart's flags.
    fn install_args(
        &self,
        upgrade: bool,
        timeout: Duration,
        private: bool,
        may_create_namespace: bool,
    ) -> Vec<String> {
        let o = &self.options;
        let mut args = vec![
            if upgrade { "upgrade" } else { "install" }.to_owned(),
            self.name.clone(),
        ];
        args.extend(self.chart_args(private));
        args.extend([
            "--namespace".to_owned(),
            self.namespace.clone(),
            "--values".to_owned(),
            "-".to_owned(),
            "--timeout".to_owned(),
            format!("{}s", timeout.as_secs()),
        ]);
        let flag = |on: Option<bool>, name: &str| on.unwrap_or(false).then(|| name.to_owned());
        let flags = [
            // Helm creates the namespace on install; the HelmChart default is true.
            (!upgrade && may_create_namespace && o.create_namespace.unwrap_or(true))
                .then(|| "--create-namespace".into()),
            flag(o.wait, "--wait"),
            flag(o.wait_for_job, "--wait-for-jobs"),
            flag(o.skip_crds, "--skip-crds"),
            flag(o.disable_hooks, "--no-hooks"),
            if upgrade {
                flag(o.upgrade_atomic, "--atomic")
            } else {
                flag(o.atomic, "--atomic")
            },
            if upgrade {
                flag(o.force, "--force")
            } else {
                flag(o.replace, "--replace")
            },
        ];
        args.extend(flags.into_iter().flatten());
        args
    }
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct HelmStatusJson {
    info: HelmInfoJson,
    version: i64,
    chart: HelmChartJson,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct HelmInfoJson {
    first_deployed: String,
    last_deployed: String,
    description: String,
    status: String,
    notes: String,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct HelmChartJson {
    metadata: HelmChartMetadataJson,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct HelmChartMetadataJson {
    version: String,
}

impl From<HelmStatusJson> for ReleaseStatus {
    fn from(s: HelmStatusJson) -> Self {
        ReleaseStatus {
            phase: s.info.status,
            revision: s.version,
            chart_version: s.chart.metadata.version,
            first_deployed: s.info.first_deployed,
            last_deployed: s.info.last_deployed,
            description: s.info.description,
            notes: s.info.notes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn chart(spec: Value) -> Value {
        json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
               "metadata": {"name": "hello", "namespace": "apps"}, "spec": spec})
    }

    #[test]
    fn a_timeout_is_bounded_by_an_hour() {
        let release = |seconds: i64| {
            Release::from_description(
                &chart(json!({"repo": "http://127.0.0.1:8080/", "chart": "hello",
                              "targetNamespace": "demo", "timeoutSeconds": seconds})),
                &json!({}),
                &PullAuth::Anonymous,
            )
            .unwrap()
        };
        assert_eq!(release(60).timeout(), Duration::from_secs(60));
        assert_eq!(release(86_400).timeout(), Duration::from_secs(3600));
        assert_eq!(release(0).timeout(), Duration::from_secs(300));
    }

    /// Changes to releases wait their turn (here 2 at once), reads do not.
    #[tokio::test]
    async fn only_so_many_helm_changes_run_at_once() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let script = dir.path().join("helm");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"+$1\" >> {log}\nsleep 0.3\necho \"-$1\" >> {log}\n",
                log = log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let helm = Helm::new(&script, None, None, dir.path().join("home")).with_concurrent_runs(2);
        let runs: Vec<_> = (0..6)
            .map(|i| {
                let helm = helm.clone();
                let verb = if i < 4 { "install" } else { "status" };
                tokio::spawn(async move {
                    helm.run(vec![verb.to_owned()], None, Duration::from_secs(10))
                        .await
                })
            })
            .collect();
        for run in runs {
            run.await.unwrap().unwrap();
        }
        let text = std::fs::read_to_string(&log).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let (mut changes, mut most) = (0, 0);
        for line in &lines {
            match *line {
                "+install" => {
                    changes += 1;
                    most = most.max(changes);
                }
                "-install" => changes -= 1,
                _ => {}
            }
        }
        assert_eq!(most, 2, "{text}");
        // The third install waits for a turn (0.3 s); the reads start at once.
        let third_install = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| **l == "+install")
            .nth(2)
            .map(|(i, _)| i)
            .unwrap();
        let reads: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, l)| **l == "+status")
            .map(|(i, _)| i)
            .collect();
        assert_eq!(reads.len(), 2, "{text}");
        assert!(reads.iter().all(|&i| i < third_install), "{text}");
    }

    #[test]
    fn a_repository_chart_is_installed_from_its_repo_with_the_chart_flags() {
        let release = Release::from_description(
            &chart(json!({"repo": "http://127.0.0.1:8080/", "chart": "hello", "version": "0.1.0",
                          "targetNamespace": "demo", "wait": true, "atomic": true, "upgradeAtomic": false,
                          "timeoutSeconds": 60, "skipCRDs": true})),
            &json!({"message": "hi"}),
            &PullAuth::Anonymous,
        )
        .unwrap();
        assert_eq!(
            (release.name.as_str(), release.namespace.as_str()),
            ("hello", "demo")
        );
        let install = release.install_args(false, release.timeout(), false, true);
        assert_eq!(
            install.join(" "),
            "install hello hello --repo http://127.0.0.1:8080 --version 0.1.0 --namespace demo \
             --values - --timeout 60s --create-namespace --wait --skip-crds --atomic"
        );
        let upgrade = release.install_args(true, release.timeout(), false, true);
        assert_eq!(
            upgrade.join(" "),
            "upgrade hello hello --repo http://127.0.0.1:8080 --version 0.1.0 --namespace demo \
             --values - --timeout 60s --wait --skip-crds"
        );
    }

    #[test]
    fn with_a_release_account_helm_acts_as_that_account_of_the_releases_namespace() {
        let plain = Helm::new("helm", None, None, "/tmp/helm");
        assert!(plain.acting_in("demo").is_empty());
        assert_eq!(
            Helm::new("helm", None, None, "/tmp/helm")
                .with_release_account(Some(String::new()))
                .release_account(),
            None
        );
        let acting = plain.with_release_account(Some("atoll-helm".into()));
        assert_eq!(
            acting.acting_in("demo").join(" "),
            "--kube-as-user system:serviceaccount:demo:atoll-helm"
        );
        // The namespace is the applier's to make: such an identity may not create one.
        let release = Release::from_description(
            &chart(json!({"repo": "http://r", "chart": "hello", "targetNamespace": "demo"})),
            &json!({}),
            &PullAuth::Anonymous,
        )
        .unwrap();
        let install = release.install_args(false, release.timeout(), false, false);
        assert!(
            !install.contains(&"--create-namespace".to_owned()),
            "{install:?}"
        );
    }

    #[test]
    fn an_oci_chart_is_named_by_its_full_reference() {
        let release = Release::from_description(
            &chart(
                json!({"repo": "oci://127.0.0.1:5000/charts", "chart": "hello",
                          "targetNamespace": "demo", "plainHTTP": true, "createNamespace": false}),
            ),
            &json!({}),
            &PullAuth::Anonymous,
        )
        .unwrap();
        assert_eq!(
            release
                .install_args(false, release.timeout(), false, true)
                .join(" "),
            "install hello oci://127.0.0.1:5000/charts/hello --plain-http --namespace demo \
             --values - --timeout 300s"
        );
    }

    #[test]
    fn private_charts_are_pulled_with_the_credentials_the_hub_sent_or_fail_saying_why() {
        let private = |repo: &str| {
            chart(json!({"repo": repo, "chart": "hello", "version": "0.1.0",
                         "targetNamespace": "demo", "chartPullSecret": {"name": "creds"}}))
        };
        let credentials = PullCredentials {
            username: "robot".into(),
            password: "hunter2".into(),
        };
        let with = PullAuth::Credentials(credentials.clone());
        let release =
            Release::from_description(&private("https://charts.example.com"), &json!({}), &with)
                .unwrap();
        assert_eq!(release.credentials.as_ref(), Some(&credentials));
        // From the repository `helm repo add` named, not `--repo` (which would need the
        // password on the command line).
        assert_eq!(
            release
                .install_args(false, release.timeout(), true, true)
                .join(" "),
            "install hello atoll-pull/hello --version 0.1.0 --namespace demo --values - \
             --timeout 300s --create-namespace"
        );
        assert!(!format!("{release:?}").contains("hunter2"));
        // New credentials for the same chart are no reason for a new revision.
        let rotated = PullAuth::Credentials(PullCredentials {
            password: "other".into(),
            ..credentials
        });
        let again =
            Release::from_description(&private("https://charts.example.com"), &json!({}), &rotated)
                .unwrap();
        assert_eq!(release.digest, again.digest);

        let unreadable = PullAuth::Unavailable("Secret apps/creds not found".into());
        let err =
            Release::from_description(&private("https://r"), &json!({}), &unreadable).unwrap_err();
        assert!(err.contains("Secret apps/creds not found"), "{err}");
        let err =
            Release::from_description(&private("https://r"), &json!({}), &PullAuth::Anonymous)
                .unwrap_err();
        assert!(err.contains("the hub sent no credentials"), "{err}");
        // A chart that names no Secret ignores credentials sent anyway.
        let public =
            chart(json!({"repo": "https://r", "chart": "hello", "targetNamespace": "demo"}));
        let release = Release::from_description(&public, &json!({}), &with).unwrap();
        assert_eq!(release.credentials, None);
    }

    #[test]
    fn the_digest_follows_the_options_and_the_values() {
        let spec = json!({"repo": "http://r", "chart": "hello", "version": "0.1.0", "targetNamespace": "demo"});
        let a =
            Release::from_description(&chart(spec.clone()), &json!({"a": 1}), &PullAuth::Anonymous)
                .unwrap();
        let same =
            Release::from_description(&chart(spec.clone()), &json!({"a": 1}), &PullAuth::Anonymous)
                .unwrap();
        let values =
            Release::from_description(&chart(spec.clone()), &json!({"a": 2}), &PullAuth::Anonymous)
                .unwrap();
        let mut bumped = spec;
        bumped["version"] = json!("0.2.0");
        let version =
            Release::from_description(&chart(bumped), &json!({"a": 1}), &PullAuth::Anonymous)
                .unwrap();
        assert_eq!(a.digest, same.digest);
        assert_ne!(a.digest, values.digest);
        assert_ne!(a.digest, version.digest);
    }

    #[test]
    fn unusable_charts_are_refused_with_the_reason() {
        let cases = [
            (
                json!({"repo": "http://r", "chart": "c"}),
                json!({}),
                "missing field `targetNamespace`",
            ),
            (
                json!({"repo": "http://r", "chart": "c", "targetNamespace": "demo",
                       "chartPullSecret": {"name": "creds", "namespace": "apps"}}),
                json!({}),
                "chartPullSecret",
            ),
            (
                json!({"repo": "http://r", "chart": "c", "targetNamespace": "demo"}),
                json!([1]),
                "not a map",
            ),
        ];
        for (spec, values, needle) in cases {
            let err =
                Release::from_description(&chart(spec), &values, &PullAuth::Anonymous).unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
    }

    fn entry(name: &str, digest: &str) -> ReleaseEntry {
        ReleaseEntry {
            name: name.into(),
            namespace: "demo".into(),
            digest: digest.into(),
        }
    }

    #[test]
    fn the_plan_records_new_releases_before_helm_runs_and_names_unusable_charts() {
        let charts = [
            ChartRelease {
                chart: chart(
                    json!({"repo": "http://r", "chart": "hello", "targetNamespace": "demo"}),
                ),
                values: json!({}),
                pull: PullAuth::Anonymous,
            },
            ChartRelease {
                chart: json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart",
                              "metadata": {"name": "broken", "namespace": "apps"},
                              "spec": {"repo": "http://r", "targetNamespace": "demo"}}),
                values: json!({}),
                pull: PullAuth::Anonymous,
            },
        ];
        let plan = plan_releases(&charts, &[entry("old", "d1")], NamespaceRules::default());
        assert_eq!(plan.intent, [entry("old", "d1"), entry("hello", "")]);
        assert!(plan.charts[0].is_ok());
        let refused = plan.charts[1].as_ref().unwrap_err();
        assert_eq!(
            (refused.name.as_str(), refused.namespace.as_str()),
            ("broken", "demo")
        );
        assert!(
            refused.error.as_deref().unwrap().contains("chart"),
            "{refused:?}"
        );
    }

    #[test]
    fn releases_follow_the_namespace_rules_of_plain_objects() {
        let to = |namespace: &str| ChartRelease {
            chart: chart(
                json!({"repo": "http://r", "chart": "hello", "targetNamespace": namespace}),
            ),
            values: json!({}),
            pull: PullAuth::Anonymous,
        };
        let charts = [to("demo"), to("clusternet-system"), to("kube-system")];
        let errors = |plan: &ReleasePlan| -> Vec<Option<String>> {
            plan.charts
                .iter()
                .map(|c| c.as_ref().err().and_then(|r| r.error.clone()))
                .collect()
        };
        let unrestricted = NamespaceRules {
            own: "clusternet-system",
            allowed: None,
        };
        let got = errors(&plan_releases(&charts, &[], unrestricted));
        assert_eq!(got[0], None);
        assert!(
            got[1].as_deref().is_some_and(|e| e.contains(
                "release clusternet-system/hello is in clusternet-system, where the agent keeps"
            )),
            "{got:?}"
        );
        assert_eq!(got[2], None);
        let allowed: BTreeSet<String> = ["demo".to_owned()].into();
        let restricted = NamespaceRules {
            own: "clusternet-system",
            allowed: Some(&allowed),
        };
        let plan = plan_releases(&charts, &[], restricted);
        let got = errors(&plan);
        assert_eq!(got[0], None);
        assert!(
            got[2].as_deref().is_some_and(|e| e.contains(
                "release kube-system/hello is outside the namespaces this agent may write (demo)"
            )),
            "{got:?}"
        );
        // Refused releases are never recorded as to be installed.
        assert_eq!(plan.intent.len(), 1);
    }

    #[test]
    fn a_release_helm_may_change_is_recorded_without_its_digest_before_helm_runs() {
        // Found by chaos: an upgrade whose inventory write failed after Helm ran left the old
        // digest recorded, and a later Description asking for that old rendering again was
        // taken as deployed while Helm ran the other.
        let hello = [ChartRelease {
            chart: chart(json!({"repo": "http://r", "chart": "hello", "targetNamespace": "demo"})),
            values: json!({}),
            pull: PullAuth::Anonymous,
        }];
        let digest = plan_releases(&hello, &[], NamespaceRules::default()).charts[0]
            .as_ref()
            .unwrap()
            .digest
            .clone();
        let mut recorded = entry("hello", "older");
        let plan = plan_releases(
            &hello,
            std::slice::from_ref(&recorded),
            NamespaceRules::default(),
        );
        assert_eq!(plan.intent.len(), 1);
        assert_eq!(plan.intent[0].digest, "", "{:?}", plan.intent);
        // Unchanged: the recorded digest stays (and nothing is written).
        recorded.digest = digest;
        let plan = plan_releases(
            &hello,
            std::slice::from_ref(&recorded),
            NamespaceRules::default(),
        );
        assert_eq!(plan.intent, [recorded]);
        let reports = not_run(&plan, "no inventory");
        assert_eq!(reports[0].error.as_deref(), Some("no inventory"));
    }

    #[tokio::test]
    async fn without_helm_releases_fail_and_stay_recorded_unless_orphaned() {
        let charts = [ChartRelease {
            chart: chart(json!({"repo": "http://r", "chart": "hello", "targetNamespace": "demo"})),
            values: json!({}),
            pull: PullAuth::Anonymous,
        }];
        let recorded = [entry("gone", "d1")];
        let synced = sync_releases(
            None,
            plan_releases(&charts, &recorded, NamespaceRules::default()),
            &recorded,
            false,
            false,
        )
        .await;
        let errors: Vec<(&str, &str)> = synced
            .reports
            .iter()
            .map(|r| (r.name.as_str(), r.error.as_deref().unwrap_or("")))
            .collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].0 == "hello" && errors[0].1.contains("no helm"),
            "{errors:?}"
        );
        assert!(
            errors[1].0 == "gone" && errors[1].1.starts_with("uninstalling it failed"),
            "{errors:?}"
        );
        // Nothing was installed, and the release that could not be uninstalled stays recorded.
        assert_eq!(synced.entries, [entry("gone", "d1"), entry("hello", "")]);
        assert!(synced.objects.is_empty());

        let orphaned = sync_releases(
            None,
            plan_releases(&[], &recorded, NamespaceRules::default()),
            &recorded,
            true,
            false,
        )
        .await;
        assert!(orphaned.reports.is_empty());
        assert!(
            orphaned.entries.is_empty(),
            "an orphaning Description lets go of its releases"
        );
    }

    #[test]
    fn a_pending_release_is_freed_once_no_operation_can_still_run_on_it() {
        let now: k8s_openapi::jiff::Timestamp = "2026-12-04T12:00:00Z".parse().unwrap();
        let agent_started: k8s_openapi::jiff::Timestamp = "2026-12-04T11:58:00Z".parse().unwrap();
        let before_the_agent = "2026-12-04T11:57:00Z";
        let may_run = Duration::from_secs(330);
        let status = |phase: &str, last_deployed: &str| ReleaseStatus {
            phase: phase.into(),
            last_deployed: last_deployed.into(),
            ..ReleaseStatus::default()
        };
        let long_ago = "2026-12-04T11:50:00Z";
        let just_now = "2026-12-04T11:59:00Z";
        // (status, the pending revision is one the caller's own failed run left, remedy)
        let cases = [
            (status("deployed", long_ago), true, None),
            (status("failed", long_ago), true, None),
            (status("superseded", long_ago), false, None),
            (
                status("pending-install", long_ago),
                false,
                Some(PendingRemedy::Uninstall),
            ),
            (
                status("pending-upgrade", long_ago),
                false,
                Some(PendingRemedy::Rollback),
            ),
            (
                status("pending-rollback", long_ago),
                false,
                Some(PendingRemedy::Rollback),
            ),
            // Begun a minute ago: it may still be running, unless it was ours and ended.
            (status("pending-upgrade", just_now), false, None),
            // Begun before this agent started: by an earlier agent process, gone with its pod.
            (
                status("pending-upgrade", before_the_agent),
                false,
                Some(PendingRemedy::Rollback),
            ),
            (
                status("pending-upgrade", just_now),
                true,
                Some(PendingRemedy::Rollback),
            ),
            (
                status("pending-install", just_now),
                true,
                Some(PendingRemedy::Uninstall),
            ),
            // A time Helm did not give, or one unreadable: taken as just begun.
            (status("pending-upgrade", ""), false, None),
            (status("pending-upgrade", "yesterday"), false, None),
        ];
        for (status, ours, want) in cases {
            assert_eq!(
                pending_remedy(&status, ours, agent_started, now, may_run),
                want,
                "{status:?} ours={ours}"
            );
        }
    }

    #[test]
    fn a_manifest_is_split_into_its_objects() {
        let text = b"---\n# Source: hello/templates/configmap.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n# Source: empty.yaml\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: b\n";
        let objects = parse_manifest(text).unwrap();
        let names: Vec<&str> = objects
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert!(parse_manifest(b"a: [").is_err());
    }

    #[test]
    fn helm_status_json_is_read() {
        let json = br#"{"name":"hello","info":{"first_deployed":"2026-12-02T10:00:00Z",
            "last_deployed":"2026-12-02T10:05:00Z","deleted":"","description":"Upgrade complete",
            "status":"deployed","notes":"hi"},"chart":{"metadata":{"name":"hello","version":"0.2.0"}},
            "version":2,"namespace":"demo"}"#;
        let status: ReleaseStatus = serde_json::from_slice::<HelmStatusJson>(json)
            .unwrap()
            .into();
        assert_eq!(status.phase, "deployed");
        assert_eq!(status.revision, 2);
        assert_eq!(status.chart_version, "0.2.0");
        assert_eq!(status.description, "Upgrade complete");
        assert_eq!(status.notes, "hi");
    }
}
