//! HelmChart status: whether the chart exists at its version in its repository, written as
//! Clusternet's controller manager writes it (`status.phase` `Found` or `NotFound`, and a
//! `status.reason` saying what was looked up and what is wrong). The lookup runs from the
//! parent, for every HelmChart a Subscription names, again every [`RECHECK`] (a version may be
//! published later).
//!
//! Whoever may create a HelmChart picks the URL the scheduler fetches, so the lookup is bounded
//! ([`ChartPolicy`]): only hosts the administrator allows when a list is given
//! (`--chart-repository-hosts`), no redirects followed, one time limit for the whole request
//! and its body, a body limit, [`LOOKUP_CONCURRENCY`] lookups at a time, and no text of a
//! response copied into the status (the HTTP status and fixed words; versions only when they
//! look like versions).
//!
//! - An HTTP(S) chart repository: `<repo>/index.yaml` lists the chart's versions.
//! - An OCI registry: `GET /v2/<path>/<chart>/tags/list` (Helm stores a version `a+b` as the
//!   tag `a_b`), with the anonymous bearer token a registry asks for.
//!
//! Repositories that need credentials (`chartPullSecret`) are not looked up (the scheduler reads
//! no Secrets; only the hub does, for the agents): the status has no phase and says so.
//! An empty version means the newest, so any published version finds it.

use atoll_crds::apps::Subscription;
use atoll_crds::helm::{HelmChart, HelmChartPhase, HelmChartSpec, HelmChartStatus};
use atoll_crds::known;
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// How often a chart is looked up again.
pub const RECHECK: Duration = Duration::from_secs(300);
/// How long one repository request may take, its body included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// The default largest index or tag list read (a big public repository's index.yaml is a few
/// MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 16 * 1024 * 1024;
/// How many HelmCharts are looked up at once: each holds at most one body in memory.
pub const LOOKUP_CONCURRENCY: u16 = 2;
/// The longest version string copied into a status.
const MAX_VERSION_CHARS: usize = 64;

/// What the chart lookup may reach and read; the administrator's, from the scheduler's flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChartPolicy {
    /// Hosts a chart repository (and a registry's token service) may be on: `host`,
    /// `host:port` or `*.domain`; empty allows any.
    pub allowed_hosts: Vec<String>,
    /// The largest body read.
    pub max_body_bytes: usize,
    /// How long one request may take, its body included.
    pub request_timeout: Duration,
}

impl Default for ChartPolicy {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            request_timeout: REQUEST_TIMEOUT,
        }
    }
}

impl ChartPolicy {
    /// Whether `url`'s host may be fetched; the reason when not.
    pub fn check(&self, url: &str) -> Result<(), String> {
        let uri: http::Uri = url
            .parse()
            .map_err(|_| "the repository URL is not a valid URL".to_owned())?;
        let host = uri
            .host()
            .ok_or_else(|| "the repository URL names no host".to_owned())?
            .to_ascii_lowercase();
        if self.allowed_hosts.is_empty() {
            return Ok(());
        }
        let with_port = uri.port_u16().map(|p| format!("{host}:{p}"));
        let allowed = self.allowed_hosts.iter().any(|pattern| {
            let pattern = pattern.trim().to_ascii_lowercase();
            match pattern.strip_prefix("*.") {
                Some(domain) => host.ends_with(&format!(".{domain}")),
                None => pattern == host || Some(&pattern) == with_port.as_ref(),
            }
        });
        if allowed {
            Ok(())
        } else {
            Err(format!(
                "not looked up: {host} is not one of the chart repository hosts the scheduler \
                 may reach (--chart-repository-hosts)"
            ))
        }
    }
}

type Https = hyper_rustls::HttpsConnector<HttpConnector>;

/// Looks charts up in their repositories.
#[derive(Clone)]
pub struct ChartLookup {
    http: HttpClient<Https, Empty<Bytes>>,
    policy: ChartPolicy,
}

/// One HTTP answer: status code, `WWW-Authenticate`, body.
struct Answer {
    status: u16,
    challenge: Option<String>,
    body: Bytes,
}

impl ChartLookup {
    /// A lookup over HTTPS (the system's trusted roots) and plain HTTP, within `policy`.
    pub fn new(policy: ChartPolicy) -> Result<Self, std::io::Error> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            http: HttpClient::builder(TokioExecutor::new()).build(https),
            policy,
        })
    }

    /// Whether `spec`'s chart is found at its version, and why not.
    pub async fn lookup(&self, spec: &HelmChartSpec) -> HelmChartStatus {
        let o = &spec.options;
        if !o.chart_pull_secret.is_empty() {
            return HelmChartStatus {
                phase: None,
                reason: Some(format!(
                    "not looked up from the parent: {} needs the credentials of chartPullSecret \
                     {}, which only the hub reads, for the agents; each cluster's HelmRelease \
                     shows whether its release was installed",
                    o.repo, o.chart_pull_secret.name
                )),
            };
        }
        let checked = match o.repo.strip_prefix("oci://") {
            Some(rest) => self.policy.check(&format!("https://{rest}")),
            None => self.policy.check(&o.repo),
        };
        if let Err(reason) = checked {
            return HelmChartStatus {
                phase: None,
                reason: Some(reason),
            };
        }
        let result = if o.repo.starts_with("oci://") {
            self.lookup_oci(spec).await
        } else {
            self.lookup_repository(spec).await
        };
        match result {
            Ok(()) => HelmChartStatus {
                phase: Some(HelmChartPhase::Found),
                reason: None,
            },
            Err(reason) => HelmChartStatus {
                phase: Some(HelmChartPhase::NotFound),
                reason: Some(reason),
            },
        }
    }

    async fn lookup_repository(&self, spec: &HelmChartSpec) -> Result<(), String> {
        let o = &spec.options;
        let url = format!("{}/index.yaml", o.repo.trim_end_matches('/'));
        let answer = self.get(&url, None).await?;
        if answer.status != 200 {
            return Err(format!("{url} answered HTTP {}", answer.status));
        }
        index_has(&answer.body, &o.chart, o.version.as_deref())
            .map_err(|e| format!("{e} (in {url})"))
    }

    async fn lookup_oci(&self, spec: &HelmChartSpec) -> Result<(), String> {
        let o = &spec.options;
        let url = oci_tags_url(&o.repo, &o.chart, o.plain_http == Some(true))?;
        let mut answer = self.get(&url, None).await?;
        if answer.status == 401
            && let Some(challenge) = answer.challenge.as_deref().and_then(bearer_challenge)
        {
            let token_url = challenge.token_url();
            let token = self.get(&token_url, None).await?;
            if token.status != 200 {
                return Err(format!(
                    "the registry's token service answered HTTP {}",
                    token.status
                ));
            }
            let token: serde_json::Value = serde_json::from_slice(&token.body)
                .map_err(|_| "the registry's token service gave no token".to_owned())?;
            let token = token
                .get("token")
                .or_else(|| token.get("access_token"))
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| "the registry's token service gave no token".to_owned())?;
            answer = self.get(&url, Some(token)).await?;
        }
        match answer.status {
            200 => tags_have(&answer.body, &o.chart, o.version.as_deref())
                .map_err(|e| format!("{e} (in {url})")),
            404 => Err(format!(
                "no chart {} in {} ({url}: HTTP 404)",
                o.chart, o.repo
            )),
            status => Err(format!("{url} answered HTTP {status}")),
        }
    }

    async fn get(&self, url: &str, bearer: Option<&str>) -> Result<Answer, String> {
        self.policy.check(url)?;
        let timeout = self.policy.request_timeout;
        tokio::time::timeout(timeout, self.fetch(url, bearer))
            .await
            .map_err(|_| format!("{url} did not answer within {timeout:?}"))?
    }

    /// One GET, without redirects, its body read up to the policy's limit.
    async fn fetch(&self, url: &str, bearer: Option<&str>) -> Result<Answer, String> {
        let mut request = http::Request::get(url);
        if let Some(token) = bearer {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(Empty::new())
            .map_err(|_| format!("{url} is not a valid URL"))?;
        let response = self
            .http
            .request(request)
            .await
            .map_err(|e| format!("{url} cannot be reached: {}", connect_error(&e)))?;
        let status = response.status().as_u16();
        let challenge = response
            .headers()
            .get(http::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let limit = self.policy.max_body_bytes;
        let body = Limited::new(response.into_body(), limit)
            .collect()
            .await
            .map_err(|e| {
                if e.is::<http_body_util::LengthLimitError>() {
                    format!("{url} answered with more than {limit} bytes")
                } else {
                    format!("reading {url} failed")
                }
            })?
            .to_bytes();
        Ok(Answer {
            status,
            challenge,
            body,
        })
    }
}

/// Why a request could not be made, in words of our own: the connection's error kind, never a
/// server's text.
fn connect_error(e: &hyper_util::client::legacy::Error) -> &'static str {
    if e.is_connect() {
        "the connection failed"
    } else {
        "the request failed"
    }
}

/// Whether a repository's `index.yaml` lists `chart` at `version` (any version when `None`).
pub fn index_has(index_yaml: &[u8], chart: &str, version: Option<&str>) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    struct Index {
        #[serde(default)]
        entries: std::collections::BTreeMap<String, Vec<Entry>>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        #[serde(default)]
        version: String,
    }
    // Read into its few typed fields (a large repository's index has more values than
    // `atoll_yaml::MAX_VALUES`); the flow nesting is checked first, since the repository is
    // not ours to trust.
    // Only our own words: a parser's message quotes the text it could not read.
    atoll_yaml::check_flow_depth(index_yaml)
        .map_err(|e| format!("the repository's index.yaml cannot be read: {e}"))?;
    let index: Index = serde_yaml::from_slice(index_yaml)
        .map_err(|_| "the repository's index.yaml is not a chart repository index".to_owned())?;
    let versions: Vec<&str> = index
        .entries
        .get(chart)
        .map(|entries| entries.iter().map(|e| e.version.as_str()).collect())
        .unwrap_or_default();
    has_version(chart, &versions, version)
}

/// Whether an OCI registry's tag list (`{"tags": [...]}`) has `version` (any when `None`).
pub fn tags_have(tags_json: &[u8], chart: &str, version: Option<&str>) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    struct Tags {
        #[serde(default)]
        tags: Option<Vec<String>>,
    }
    let tags: Tags = serde_json::from_slice(tags_json)
        .map_err(|_| "the registry's tag list is not a tag list".to_owned())?;
    // Helm stores version `a+b` under the tag `a_b` (`+` is not allowed in tags).
    let versions: Vec<String> = tags
        .tags
        .unwrap_or_default()
        .iter()
        .map(|t| t.replace('_', "+"))
        .collect();
    let versions: Vec<&str> = versions.iter().map(String::as_str).collect();
    has_version(chart, &versions, version)
}

fn has_version(chart: &str, versions: &[&str], wanted: Option<&str>) -> Result<(), String> {
    let wanted = wanted.filter(|v| !v.is_empty());
    match (versions.is_empty(), wanted) {
        (true, _) => Err(format!("no chart {chart} in the repository")),
        (false, None) => Ok(()),
        (false, Some(v)) if versions.contains(&v) => Ok(()),
        (false, Some(v)) => {
            // The repository's words: only what looks like a version is repeated.
            let shown: Vec<&str> = versions
                .iter()
                .copied()
                .filter(|v| looks_like_version(v))
                .take(10)
                .collect();
            let more = if versions.len() > shown.len() {
                format!(" and {} more", versions.len() - shown.len())
            } else {
                String::new()
            };
            Err(format!(
                "chart {chart} has no version {v}; the repository has {}{more}",
                shown.join(", ")
            ))
        }
    }
}

/// Whether `v` could be a chart version (SemVer characters, at most [`MAX_VERSION_CHARS`]).
fn looks_like_version(v: &str) -> bool {
    !v.is_empty()
        && v.len() <= MAX_VERSION_CHARS
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_'))
}

/// The tag-list URL of `chart` in the OCI repository `repo` (`oci://host[:port]/path`).
pub fn oci_tags_url(repo: &str, chart: &str, plain_http: bool) -> Result<String, String> {
    let rest = repo
        .strip_prefix("oci://")
        .ok_or_else(|| format!("{repo} is not an oci:// reference"))?
        .trim_end_matches('/');
    let (host, path) = match rest.split_once('/') {
        Some((host, path)) => (host, format!("{path}/{chart}")),
        None => (rest, chart.to_owned()),
    };
    if host.is_empty() {
        return Err(format!("{repo} names no registry host"));
    }
    let scheme = if plain_http { "http" } else { "https" };
    Ok(format!("{scheme}://{host}/v2/{path}/tags/list"))
}

/// A registry's `WWW-Authenticate: Bearer realm=...,service=...,scope=...` challenge.
#[derive(Debug, PartialEq, Eq)]
pub struct BearerChallenge {
    /// Where to ask for a token.
    pub realm: String,
    /// The registry's service name.
    pub service: Option<String>,
    /// The access asked for.
    pub scope: Option<String>,
}

impl BearerChallenge {
    /// The URL an anonymous token is asked at.
    pub fn token_url(&self) -> String {
        let mut query = Vec::new();
        for (key, value) in [("service", &self.service), ("scope", &self.scope)] {
            if let Some(value) = value {
                query.push(format!("{key}={}", percent_encode(value)));
            }
        }
        if query.is_empty() {
            self.realm.clone()
        } else {
            let separator = if self.realm.contains('?') { '&' } else { '?' };
            format!("{}{separator}{}", self.realm, query.join("&"))
        }
    }
}

/// Reads a `Bearer` challenge; `None` for any other scheme.
pub fn bearer_challenge(header: &str) -> Option<BearerChallenge> {
    let params = header.trim().strip_prefix("Bearer ")?;
    let mut realm = None;
    let mut service = None;
    let mut scope = None;
    // Values are quoted and may hold commas (a scope such as "repository:a/b:pull,push").
    let mut rest = params.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=')?;
        let after = after.trim_start();
        let (value, next) = match after.strip_prefix('"') {
            Some(quoted) => {
                let end = quoted.find('"')?;
                (&quoted[..end], &quoted[end + 1..])
            }
            None => after.split_once(',').unwrap_or((after, "")),
        };
        match key.trim() {
            "realm" => realm = Some(value.to_owned()),
            "service" => service = Some(value.to_owned()),
            "scope" => scope = Some(value.to_owned()),
            _ => {}
        }
        rest = next.trim_start_matches([',', ' ']);
    }
    Some(BearerChallenge {
        realm: realm?,
        service,
        scope,
    })
}

fn percent_encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// What each HelmChart reconcile reads.
struct ChartContext {
    client: Client,
    lookup: ChartLookup,
    subscriptions: Store<Subscription>,
}

/// The HelmCharts `subscription` names as feeds (a feed without a namespace is in the
/// Subscription's own).
pub fn named_charts(subscription: &Subscription) -> Vec<ObjectRef<HelmChart>> {
    let own = subscription.namespace().unwrap_or_default();
    subscription
        .spec
        .feeds
        .iter()
        .filter(|f| f.kind == "HelmChart" && f.api_version == atoll_crds::apps::API_VERSION)
        .map(|f| {
            let namespace = f.namespace.as_deref().filter(|n| !n.is_empty());
            ObjectRef::new(&f.name).within(namespace.unwrap_or(&own))
        })
        .collect()
}

/// The status of a HelmChart no Subscription names: it is not looked up at all.
fn unnamed_status() -> HelmChartStatus {
    HelmChartStatus {
        phase: None,
        reason: Some("not looked up: no Subscription names this HelmChart as a feed".to_owned()),
    }
}

/// Keeps the status of every HelmChart a Subscription in `subscriptions` names current until
/// the watch ends (the scheduler runs it while it leads), within `policy`.
pub async fn run(client: Client, subscriptions: Store<Subscription>, policy: ChartPolicy) {
    let lookup = match ChartLookup::new(policy) {
        Ok(lookup) => lookup,
        Err(e) => {
            tracing::error!(error = %e, "no trusted roots for chart repositories; HelmChart status is not written");
            return;
        }
    };
    let api: Api<HelmChart> = Api::all(client.clone());
    let context = Arc::new(ChartContext {
        client: client.clone(),
        lookup,
        subscriptions,
    });
    Controller::new(api, watcher::Config::default())
        .watches(
            Api::<Subscription>::all(client),
            watcher::Config::default(),
            |subscription| named_charts(&subscription),
        )
        .with_config(controller::Config::default().concurrency(LOOKUP_CONCURRENCY))
        .run(reconcile, error_policy, context)
        .for_each(|_| async {})
        .await;
}

async fn reconcile(
    chart: Arc<HelmChart>,
    context: Arc<ChartContext>,
) -> Result<Action, kube::Error> {
    let this = ObjectRef::from_obj(chart.as_ref());
    let named = context
        .subscriptions
        .state()
        .iter()
        .any(|s| named_charts(s).contains(&this));
    let status = if named {
        context.lookup.lookup(&chart.spec).await
    } else {
        unnamed_status()
    };
    if chart.status.as_ref() != Some(&status) {
        if let (Some(HelmChartPhase::NotFound), Some(reason)) = (&status.phase, &status.reason) {
            tracing::info!(chart = %format!("{}/{}", chart.namespace().unwrap_or_default(), chart.name_any()), %reason, "HelmChart not found");
        }
        let api: Api<HelmChart> = Api::namespaced(
            context.client.clone(),
            &chart.namespace().unwrap_or_default(),
        );
        let patch = json!({
            "apiVersion": "apps.clusternet.io/v1alpha1",
            "kind": "HelmChart",
            "status": status,
        });
        api.patch_status(
            &chart.name_any(),
            &PatchParams::apply(known::FIELD_MANAGER_SCHEDULER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
    }
    Ok(Action::requeue(RECHECK))
}

fn error_policy(
    _chart: Arc<HelmChart>,
    error: &kube::Error,
    _context: Arc<ChartContext>,
) -> Action {
    tracing::warn!(%error, "writing a HelmChart status failed");
    Action::requeue(Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_private_chart_is_not_looked_up_and_says_why_without_a_phase() {
        let spec: HelmChartSpec = serde_json::from_value(json!({
            "repo": "https://charts.example.com", "chart": "hello", "targetNamespace": "demo",
            "chartPullSecret": {"name": "creds"}
        }))
        .unwrap_or_else(|e| unreachable!("{e}"));
        let lookup =
            ChartLookup::new(ChartPolicy::default()).unwrap_or_else(|e| unreachable!("{e}"));
        let status = lookup.lookup(&spec).await;
        assert_eq!(status.phase, None);
        let reason = status.reason.unwrap_or_default();
        assert!(
            reason.contains("not looked up") && reason.contains("chartPullSecret creds"),
            "{reason}"
        );
    }

    fn spec(repo: &str, version: &str) -> HelmChartSpec {
        serde_json::from_value(json!({
            "repo": repo, "chart": "hello", "version": version, "targetNamespace": "demo",
        }))
        .unwrap_or_else(|e| unreachable!("{e}"))
    }

    /// Serves `answer` (a whole HTTP response, sent in two halves `pause` apart) to every
    /// connection on a loopback port; the repository URL.
    async fn serve(answer: Vec<u8>, pause: Duration) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| unreachable!("{e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| unreachable!("{e}"));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    let _ = socket.read(&mut request).await;
                    let half = answer.len() / 2;
                    let _ = socket.write_all(&answer[..half]).await;
                    tokio::time::sleep(pause).await;
                    let _ = socket.write_all(&answer[half..]).await;
                });
            }
        });
        format!("http://{addr}")
    }

    fn response(body: &str) -> Vec<u8> {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    }

    #[tokio::test]
    async fn a_repository_is_read_within_the_body_limit_and_the_time_limit_and_its_text_is_not_echoed()
     {
        let policy = |max_body_bytes, millis| ChartPolicy {
            max_body_bytes,
            request_timeout: Duration::from_millis(millis),
            ..ChartPolicy::default()
        };
        let quick = Duration::ZERO;
        let url = serve(response(INDEX), quick).await;
        let found = ChartLookup::new(policy(1 << 20, 5_000))
            .unwrap_or_else(|e| unreachable!("{e}"))
            .lookup(&spec(&url, "0.2.0"))
            .await;
        assert_eq!(found.phase, Some(HelmChartPhase::Found), "{found:?}");

        let big = ChartLookup::new(policy(64, 5_000))
            .unwrap_or_else(|e| unreachable!("{e}"))
            .lookup(&spec(&url, "0.2.0"))
            .await;
        let reason = big.reason.unwrap_or_default();
        assert!(reason.contains("more than 64 bytes"), "{reason}");

        // Headers at once, the rest of the body late: the time limit covers the body too.
        let slow = serve(response(INDEX), Duration::from_secs(5)).await;
        let late = ChartLookup::new(policy(1 << 20, 300))
            .unwrap_or_else(|e| unreachable!("{e}"))
            .lookup(&spec(&slow, "0.2.0"))
            .await;
        let reason = late.reason.unwrap_or_default();
        assert!(reason.contains("did not answer within 300ms"), "{reason}");

        // A parser would quote the value it could not read ("invalid type: string ...").
        let secret = "entries: \"s3cr3t-from-10.0.0.5\"\n";
        let hostile = serve(response(secret), quick).await;
        let echoed = ChartLookup::new(policy(1 << 20, 5_000))
            .unwrap_or_else(|e| unreachable!("{e}"))
            .lookup(&spec(&hostile, "0.1.0"))
            .await;
        let reason = echoed.reason.unwrap_or_default();
        assert_eq!(echoed.phase, Some(HelmChartPhase::NotFound));
        assert!(
            !reason.contains("s3cr3t") && reason.contains("not a chart repository index"),
            "{reason}"
        );
    }

    #[tokio::test]
    async fn only_allowed_hosts_are_looked_up() {
        let policy = ChartPolicy {
            allowed_hosts: vec!["charts.example.com".into(), "*.corp.example".into()],
            ..ChartPolicy::default()
        };
        assert_eq!(policy.check("https://charts.example.com/stable"), Ok(()));
        assert_eq!(policy.check("https://a.b.corp.example/x"), Ok(()));
        assert!(policy.check("https://corp.example/x").is_err());
        assert!(policy.check("http://169.254.169.254/latest").is_err());
        let with_port = ChartPolicy {
            allowed_hosts: vec!["registry.local:5000".into()],
            ..ChartPolicy::default()
        };
        assert_eq!(with_port.check("https://registry.local:5000/v2/"), Ok(()));
        assert!(with_port.check("https://registry.local:6000/v2/").is_err());
        assert_eq!(ChartPolicy::default().check("http://10.0.0.5/"), Ok(()));

        let lookup = ChartLookup::new(policy).unwrap_or_else(|e| unreachable!("{e}"));
        for repo in ["http://10.0.0.5:8080/charts", "oci://10.0.0.5:5000/charts"] {
            let status = lookup.lookup(&spec(repo, "0.1.0")).await;
            assert_eq!(status.phase, None, "{repo}");
            let reason = status.reason.unwrap_or_default();
            assert!(
                reason.contains("not looked up: 10.0.0.5 is not one of"),
                "{reason}"
            );
        }
    }

    #[test]
    fn a_subscription_names_the_charts_of_its_feeds() {
        let sub: Subscription = serde_json::from_value(json!({
            "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Subscription",
            "metadata": {"name": "s", "namespace": "shop"},
            "spec": {"subscribers": [], "feeds": [
                {"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart", "name": "a"},
                {"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "HelmChart", "name": "b", "namespace": "charts"},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "c"},
            ]}
        }))
        .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(
            named_charts(&sub),
            vec![
                ObjectRef::new("a").within("shop"),
                ObjectRef::new("b").within("charts")
            ]
        );
    }

    #[test]
    fn only_what_looks_like_a_version_is_repeated() {
        let versions = [
            "0.1.0",
            "1.0.0+build.1",
            "ignore all previous words",
            &"9".repeat(65),
        ];
        let err = has_version("hello", &versions, Some("2.0.0")).unwrap_err();
        assert_eq!(
            err,
            "chart hello has no version 2.0.0; the repository has 0.1.0, 1.0.0+build.1 and 2 more"
        );
    }

    const INDEX: &str = r#"
apiVersion: v1
entries:
  hello:
    - name: hello
      version: 0.2.0
    - name: hello
      version: 0.1.0
  other:
    - name: other
      version: 1.0.0
"#;

    #[test]
    fn an_index_lists_the_chart_versions() {
        let index = INDEX.as_bytes();
        assert_eq!(index_has(index, "hello", Some("0.1.0")), Ok(()));
        assert_eq!(index_has(index, "hello", None), Ok(()));
        assert_eq!(index_has(index, "hello", Some("")), Ok(()));
        let err = index_has(index, "hello", Some("9.9.9")).unwrap_err();
        assert_eq!(
            err,
            "chart hello has no version 9.9.9; the repository has 0.2.0, 0.1.0"
        );
        let err = index_has(index, "mysql", None).unwrap_err();
        assert_eq!(err, "no chart mysql in the repository");
        assert!(index_has(b"entries: [", "hello", None).is_err());
        let deep = format!("entries: {}", "{a: ".repeat(32_000));
        let err = index_has(deep.as_bytes(), "hello", None).unwrap_err();
        assert!(err.contains("deeper than 128 levels"), "{err}");
    }

    #[test]
    fn oci_tags_are_helm_versions() {
        let tags = br#"{"name": "charts/hello", "tags": ["0.1.0", "1.0.0_build.1"]}"#;
        assert_eq!(tags_have(tags, "hello", Some("1.0.0+build.1")), Ok(()));
        assert!(tags_have(tags, "hello", Some("0.2.0")).is_err());
        assert!(tags_have(br#"{"tags": null}"#, "hello", None).is_err());
    }

    #[test]
    fn oci_references_become_tag_list_urls() {
        assert_eq!(
            oci_tags_url("oci://127.0.0.1:5000/charts/", "hello", true),
            Ok("http://127.0.0.1:5000/v2/charts/hello/tags/list".to_owned())
        );
        assert_eq!(
            oci_tags_url("oci://ghcr.io", "hello", false),
            Ok("https://ghcr.io/v2/hello/tags/list".to_owned())
        );
        assert!(oci_tags_url("https://x", "hello", false).is_err());
        assert!(oci_tags_url("oci:///charts", "hello", false).is_err());
    }

    #[test]
    fn a_bearer_challenge_gives_the_token_url() {
        let c = bearer_challenge(
            r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:charts/hello:pull""#,
        )
        .unwrap();
        assert_eq!(
            c.token_url(),
            "https://auth.example.com/token?service=registry.example.com&scope=repository%3Acharts%2Fhello%3Apull"
        );
        assert_eq!(bearer_challenge("Basic realm=\"x\""), None);
        assert_eq!(
            bearer_challenge(r#"Bearer realm="https://a/t""#)
                .unwrap()
                .token_url(),
            "https://a/t"
        );
    }
}
