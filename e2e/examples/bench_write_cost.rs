//! Write-cost benchmark (issue 41 item 1): what each way atoll writes a Description costs a real
//! kube-apiserver, in its own CPU (and etcd's) per request.
//!
//! One real control plane of the real tier (etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler, kwok without nodes; `make k8s`), atoll's Description CRD installed (and copies of it with other forms of `raw`). For each
//! Description size (`--objects`, default 1, 10 and 50 Deployments of about 700 bytes each) and each
//! way of writing, `--writes` requests (default 200, after 20 to warm up) are sent one after the
//! other, each changing one annotation of the first object (or the status' reason), and the CPU
//! time kube-apiserver and etcd spent meanwhile (`/proc/<pid>/stat`), less what they spend idle
//! (measured for 5 s first), is divided by the number of requests. The ways:
//!
//! - `apply`: server-side apply of the whole Description, JSON body, forced, one field manager
//!   (what the scheduler does);
//! - `apply unchanged`: the same apply with nothing changed (a resync's write);
//! - `apply YAML body`: the same apply sent as YAML text;
//! - `apply, 10 managers`: the apply after ten other field managers each own a label (a larger
//!   `managedFields`);
//! - `merge patch`: a JSON merge patch replacing `spec.raw`;
//! - `update`: a PUT of the whole object with its resourceVersion (an optimistic precondition);
//! - `status apply`: server-side apply of `status` (what the hub does);
//! - `status merge patch`: a merge patch of `status`;
//! - `apply as a ServiceAccount` and `status apply as a ServiceAccount`: the first and the
//!   status apply sent with a ServiceAccount's bearer token (granted by a Role) instead of the
//!   administrator's client certificate, as atoll's controllers run: token authentication and
//!   RBAC per request;
//! - `apply, raw as embedded objects` and `status apply, raw as embedded objects`: the same two
//!   applies to a copy of the CRD (another group) whose `raw` items are embedded resources
//!   (`x-kubernetes-embedded-resource`), the form atoll stored them in before strings of JSON
//!   text (atoll's CRD, the rows above);
//! - `apply, raw as plain objects` and `status apply, raw as plain objects`: the same to a copy
//!   whose `raw` items are free-form objects (no metadata validation of each);
//! - `apply, raw as byte strings` and `status apply, raw as byte strings`: the same to a copy
//!   whose `raw` items are base64 strings (`format: byte`), as Clusternet stores them.
//!
//! ```text
//! make k8s
//! cargo run --release -p atoll-e2e --example bench_write_cost -- [--objects 1,10,50] [--writes 200]
//! ```
//!
//! (`make bench-write-cost`.) The control plane is stopped at the end.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use atoll_bench::cpu_seconds;
use atoll_crds::apps::{Deployer, Description, DescriptionSpec};
use atoll_e2e::state::{FleetState, Role};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};

const NAMESPACE: &str = "clusternet-bench";
const WARM_UP: usize = 20;
const IDLE: Duration = Duration::from_secs(5);
const DESCRIPTION_CRD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../manifests/crds/apps.clusternet.io_descriptions.yaml"
);

struct Options {
    objects: Vec<usize>,
    writes: usize,
}

fn options() -> Result<Options> {
    let mut opts = Options {
        objects: vec![1, 10, 50],
        writes: 200,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args
            .next()
            .with_context(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--objects" => {
                opts.objects = value
                    .split(',')
                    .map(|n| {
                        n.trim()
                            .parse()
                            .context("--objects: numbers, comma-separated")
                    })
                    .collect::<Result<_>>()?;
            }
            "--writes" => opts.writes = value.parse().context("--writes: a number")?,
            other => bail!("unknown flag {other}: --objects 1,10,50 --writes 200"),
        }
    }
    Ok(opts)
}

/// The ways of writing a Description, in the table's order.
#[derive(Clone, Copy, Debug)]
enum Way {
    Apply,
    ApplyUnchanged,
    ApplyYaml,
    ApplyManyManagers,
    MergePatch,
    Update,
    StatusApply,
    StatusMergePatch,
    ApplyPlain,
    StatusApplyPlain,
    ApplyBytes,
    StatusApplyBytes,
    ApplyEmbedded,
    StatusApplyEmbedded,
    ApplyAsServiceAccount,
    StatusApplyAsServiceAccount,
}

const WAYS: [Way; 16] = [
    Way::Apply,
    Way::ApplyUnchanged,
    Way::ApplyYaml,
    Way::ApplyManyManagers,
    Way::MergePatch,
    Way::Update,
    Way::StatusApply,
    Way::StatusMergePatch,
    Way::ApplyPlain,
    Way::StatusApplyPlain,
    Way::ApplyBytes,
    Way::StatusApplyBytes,
    Way::ApplyEmbedded,
    Way::StatusApplyEmbedded,
    Way::ApplyAsServiceAccount,
    Way::StatusApplyAsServiceAccount,
];

impl Way {
    fn label(self) -> &'static str {
        match self {
            Way::Apply => "apply",
            Way::ApplyUnchanged => "apply unchanged",
            Way::ApplyYaml => "apply YAML body",
            Way::ApplyManyManagers => "apply, 10 managers",
            Way::MergePatch => "merge patch",
            Way::Update => "update",
            Way::StatusApply => "status apply",
            Way::StatusMergePatch => "status merge patch",
            Way::ApplyPlain => "apply, raw as plain objects",
            Way::StatusApplyPlain => "status apply, raw as plain objects",
            Way::ApplyBytes => "apply, raw as byte strings",
            Way::StatusApplyBytes => "status apply, raw as byte strings",
            Way::ApplyEmbedded => "apply, raw as embedded objects",
            Way::StatusApplyEmbedded => "status apply, raw as embedded objects",
            Way::ApplyAsServiceAccount => "apply as a ServiceAccount",
            Way::StatusApplyAsServiceAccount => "status apply as a ServiceAccount",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Way::Apply => "apply",
            Way::ApplyUnchanged => "apply-unchanged",
            Way::ApplyYaml => "apply-yaml",
            Way::ApplyManyManagers => "apply-managers",
            Way::MergePatch => "merge",
            Way::Update => "update",
            Way::StatusApply => "status-apply",
            Way::StatusMergePatch => "status-merge",
            Way::ApplyPlain => "apply-plain",
            Way::StatusApplyPlain => "status-apply-plain",
            Way::ApplyBytes => "apply-bytes",
            Way::StatusApplyBytes => "status-apply-bytes",
            Way::ApplyEmbedded => "apply-embedded",
            Way::StatusApplyEmbedded => "status-apply-embedded",
            Way::ApplyAsServiceAccount => "apply-sa",
            Way::StatusApplyAsServiceAccount => "status-apply-sa",
        }
    }

    /// The copy of the Description CRD this way writes to, if not atoll's.
    fn variant(self) -> Option<Variant> {
        match self {
            Way::ApplyPlain | Way::StatusApplyPlain => Some(Variant::Plain),
            Way::ApplyBytes | Way::StatusApplyBytes => Some(Variant::Bytes),
            Way::ApplyEmbedded | Way::StatusApplyEmbedded => Some(Variant::Embedded),
            _ => None,
        }
    }
}

/// A copy of the Description CRD in a group of the benchmark's, with another schema for `raw`.
#[derive(Clone, Copy, Debug)]
enum Variant {
    /// Free-form objects (`x-kubernetes-preserve-unknown-fields`, not embedded resources).
    Plain,
    /// Base64 strings (`format: byte`).
    Bytes,
    /// Embedded resources (`x-kubernetes-embedded-resource`).
    Embedded,
}

const VARIANTS: [Variant; 3] = [Variant::Plain, Variant::Bytes, Variant::Embedded];

impl Variant {
    fn group(self) -> &'static str {
        match self {
            Variant::Plain => "plain.bench.atoll.dev",
            Variant::Bytes => "bytes.bench.atoll.dev",
            Variant::Embedded => "embedded.bench.atoll.dev",
        }
    }

    fn resource(self) -> ApiResource {
        ApiResource {
            group: self.group().into(),
            version: "v1alpha1".into(),
            api_version: format!("{}/v1alpha1", self.group()),
            kind: "Description".into(),
            plural: "descriptions".into(),
        }
    }

    /// atoll's Description CRD moved to this variant's group, with its schema of `raw`.
    fn crd(self, atoll: &CustomResourceDefinition) -> Result<CustomResourceDefinition> {
        let mut crd = serde_json::to_value(atoll)?;
        crd["metadata"] = json!({"name": format!("descriptions.{}", self.group())});
        crd["spec"]["group"] = json!(self.group());
        let items = match self {
            Variant::Plain => {
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
            }
            Variant::Bytes => json!({"type": "string", "format": "byte"}),
            Variant::Embedded => json!({"type": "object",
                "x-kubernetes-embedded-resource": true,
                "x-kubernetes-preserve-unknown-fields": true}),
        };
        let versions = crd["spec"]["versions"]
            .as_array_mut()
            .context("the CRD has no versions")?;
        for version in versions {
            let raw = version
                .pointer_mut("/schema/openAPIV3Schema/properties/spec/properties/raw")
                .context("the CRD's schema has no spec.raw")?;
            raw["items"] = items.clone();
        }
        Ok(serde_json::from_value(crd)?)
    }

    /// `description` in this variant's group and form of `raw`.
    fn object(self, description: &Description) -> Result<Value> {
        let mut object = serde_json::to_value(description)?;
        object["apiVersion"] = json!(format!("{}/v1alpha1", self.group()));
        let encode = |o: &Value| -> Result<Value> {
            use base64::Engine as _;
            let text = serde_json::to_string(o)?;
            Ok(match self {
                Variant::Plain | Variant::Embedded => o.clone(),
                Variant::Bytes => json!(base64::engine::general_purpose::STANDARD.encode(text)),
            })
        };
        let raw: Vec<Value> = description
            .spec
            .raw
            .iter()
            .map(encode)
            .collect::<Result<_>>()?;
        object["spec"]["raw"] = Value::Array(raw);
        Ok(object)
    }
}

/// A Deployment of about 700 bytes, as a feed typically renders.
fn deployment(i: usize, revision: usize) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": format!("web-{i}"), "namespace": "shop",
            "labels": {"app": format!("web-{i}"), "app.kubernetes.io/managed-by": "atoll"},
            "annotations": {"bench.atoll.dev/revision": revision.to_string()}},
        "spec": {"replicas": 3,
            "selector": {"matchLabels": {"app": format!("web-{i}")}},
            "template": {"metadata": {"labels": {"app": format!("web-{i}")}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27",
                    "ports": [{"containerPort": 80, "name": "http"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                  "limits": {"cpu": "500m", "memory": "256Mi"}},
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"},
                        "periodSeconds": 10},
                    "env": [{"name": "MODE", "value": "production"},
                            {"name": "REGION", "value": "eu-west-1"}]}]}}}
    })
}

fn description(name: &str, objects: usize, revision: usize) -> Description {
    let mut d = Description::new(
        name,
        DescriptionSpec {
            deployer: Deployer::Generic,
            raw: (0..objects)
                .map(|i| deployment(i, if i == 0 { revision } else { 0 }))
                .collect(),
            ..DescriptionSpec::default()
        },
    );
    d.metadata.namespace = Some(NAMESPACE.into());
    d
}

fn status(revision: usize) -> Value {
    json!({
        "apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
        "status": {"phase": "Success", "reason": format!("applied revision {revision}")}
    })
}

/// CPU seconds of kube-apiserver and of etcd.
fn cpu(pids: (u32, u32)) -> (f64, f64) {
    (cpu_seconds(pids.0), cpu_seconds(pids.1))
}

/// Applies `status` to `name`'s status as the hub does; returns the body's size.
async fn apply_status<K>(api: &Api<K>, name: &str, status: &Value) -> Result<usize>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(
        name,
        &PatchParams::apply("atoll-hub").force(),
        &Patch::Apply(status),
    )
    .await?;
    Ok(serde_json::to_vec(status)?.len())
}

/// Sends write `revision` of `way` to Description `name`.
/// Who writes which Description of how many objects, and how.
struct Writer<'a> {
    client: &'a Client,
    api: Api<Description>,
    way: Way,
    name: &'a str,
    objects: usize,
}

async fn write(
    writer: &Writer<'_>,
    revision: usize,
    last: &mut Option<Description>,
) -> Result<usize> {
    let Writer {
        client,
        ref api,
        way,
        name,
        objects,
    } = *writer;
    let apply = PatchParams::apply("atoll-scheduler").force();
    let body = description(name, objects, revision);
    let size = serde_json::to_vec(&body)?.len();
    if let Some(variant) = way.variant() {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), NAMESPACE, &variant.resource());
        if matches!(
            way,
            Way::StatusApplyPlain | Way::StatusApplyBytes | Way::StatusApplyEmbedded
        ) {
            let mut status = status(revision);
            status["apiVersion"] = json!(variant.resource().api_version);
            return apply_status(&api, name, &status).await;
        }
        let object = variant.object(&body)?;
        api.patch(name, &apply, &Patch::Apply(&object)).await?;
        return Ok(serde_json::to_vec(&object)?.len());
    }
    match way {
        Way::Apply | Way::ApplyManyManagers | Way::ApplyAsServiceAccount => {
            api.patch(name, &apply, &Patch::Apply(&body)).await?;
        }
        Way::ApplyUnchanged => {
            api.patch(name, &apply, &Patch::Apply(&description(name, objects, 0)))
                .await?;
        }
        Way::ApplyYaml => {
            let text = serde_yaml::to_string(&body)?;
            let request = http::Request::patch(format!(
                "/apis/apps.clusternet.io/v1alpha1/namespaces/{NAMESPACE}/descriptions/{name}\
                 ?fieldManager=atoll-scheduler&force=true"
            ))
            .header(http::header::CONTENT_TYPE, "application/apply-patch+yaml")
            .body(text.clone().into_bytes())?;
            client.request_text(request).await?;
            return Ok(text.len());
        }
        Way::MergePatch => {
            let patch = json!({"spec": {"raw": atoll_crds::json_text::encode_all(&body.spec.raw)}});
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
        }
        Way::Update => {
            let mut current = match last.take() {
                Some(d) => d,
                None => api.get(name).await?,
            };
            current.spec.raw = body.spec.raw;
            *last = Some(api.replace(name, &PostParams::default(), &current).await?);
        }
        Way::StatusApply | Way::StatusApplyAsServiceAccount => {
            return apply_status(api, name, &status(revision)).await;
        }
        Way::StatusMergePatch => {
            let status = json!({"status": status(revision)["status"]});
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
                .await?;
            return Ok(serde_json::to_vec(&status)?.len());
        }
        Way::ApplyPlain
        | Way::StatusApplyPlain
        | Way::ApplyBytes
        | Way::StatusApplyBytes
        | Way::ApplyEmbedded
        | Way::StatusApplyEmbedded => {
            bail!("{} writes a copy of the CRD", way.label())
        }
    }
    Ok(size)
}

struct Row {
    objects: usize,
    way: Way,
    body_bytes: usize,
    managed_fields_bytes: usize,
    apiserver_ms: f64,
    etcd_ms: f64,
    wall_ms: f64,
}

async fn measure(
    client: &Client,
    service_account: &Client,
    pids: (u32, u32),
    idle: (f64, f64),
    objects: usize,
    way: Way,
    writes: usize,
) -> Result<Row> {
    let api: Api<Description> = Api::namespaced(client.clone(), NAMESPACE);
    let name = format!("bench.{}-{objects}", way.slug());
    let first = description(&name, objects, 0);
    match way.variant() {
        Some(variant) => {
            Api::<DynamicObject>::namespaced_with(client.clone(), NAMESPACE, &variant.resource())
                .patch(
                    &name,
                    &PatchParams::apply("atoll-scheduler").force(),
                    &Patch::Apply(&variant.object(&first)?),
                )
                .await?;
        }
        None => {
            api.patch(
                &name,
                &PatchParams::apply("atoll-scheduler").force(),
                &Patch::Apply(&first),
            )
            .await?;
        }
    }
    if matches!(way, Way::ApplyManyManagers) {
        for m in 0..10 {
            let label = json!({"apiVersion": "apps.clusternet.io/v1alpha1", "kind": "Description",
                "metadata": {"labels": {format!("bench.atoll.dev/m{m}"): "x"}}});
            api.patch(
                &name,
                &PatchParams::apply(&format!("bench-manager-{m}")),
                &Patch::Apply(&label),
            )
            .await?;
        }
    }
    let writer = match way {
        Way::ApplyAsServiceAccount | Way::StatusApplyAsServiceAccount => service_account,
        _ => client,
    };
    let writer = Writer {
        client: writer,
        api: Api::namespaced(writer.clone(), NAMESPACE),
        way,
        name: &name,
        objects,
    };
    let mut last = None;
    let mut body_bytes = 0;
    for revision in 1..=WARM_UP {
        body_bytes = write(&writer, revision, &mut last).await?;
    }
    let before = cpu(pids);
    let started = Instant::now();
    for revision in WARM_UP + 1..=WARM_UP + writes {
        write(&writer, revision, &mut last).await?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let after = cpu(pids);
    let per = |spent: f64, idle_rate: f64| {
        ((spent - idle_rate * elapsed).max(0.0)) * 1000.0 / writes as f64
    };
    let managed_fields = match way.variant() {
        Some(variant) => {
            Api::<DynamicObject>::namespaced_with(client.clone(), NAMESPACE, &variant.resource())
                .get(&name)
                .await?
                .metadata
                .managed_fields
        }
        None => api.get(&name).await?.metadata.managed_fields,
    };
    let managed_fields_bytes = serde_json::to_vec(&managed_fields)?.len();
    Ok(Row {
        objects,
        way,
        body_bytes,
        managed_fields_bytes,
        apiserver_ms: per(after.0 - before.0, idle.0),
        etcd_ms: per(after.1 - before.1, idle.1),
        wall_ms: elapsed * 1000.0 / writes as f64,
    })
}

/// A client of the parent that authenticates as ServiceAccount `bench-writer` of the
/// benchmark's namespace, which a Role lets write Descriptions and their status.
async fn service_account_client(admin: &Client, kubeconfig: &std::path::Path) -> Result<Client> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    let pp = PostParams::default();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), NAMESPACE);
    accounts
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "bench-writer"}}))?,
        )
        .await?;
    Api::<Role>::namespaced(admin.clone(), NAMESPACE)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "bench-writer"},
                "rules": [{"apiGroups": ["apps.clusternet.io"],
                    "resources": ["descriptions", "descriptions/status"], "verbs": ["*"]}]}))?,
        )
        .await?;
    Api::<RoleBinding>::namespaced(admin.clone(), NAMESPACE)
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "bench-writer"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "bench-writer"},
                "subjects": [{"kind": "ServiceAccount", "name": "bench-writer",
                    "namespace": NAMESPACE}]}))?,
        )
        .await?;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let token = accounts
        .create_token_request("bench-writer", &pp, &request)
        .await?
        .status
        .context("the TokenRequest has no status")?
        .token;
    let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..kube::config::AuthInfo::default()
    };
    Ok(Client::try_from(config)?)
}

async fn run(
    client: Client,
    kubeconfig: &std::path::Path,
    pids: (u32, u32),
    opts: &Options,
) -> Result<Vec<Row>> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd: CustomResourceDefinition =
        serde_yaml::from_str(&std::fs::read_to_string(DESCRIPTION_CRD)?)?;
    crds.create(&PostParams::default(), &crd).await?;
    for variant in VARIANTS {
        crds.create(&PostParams::default(), &variant.crd(&crd)?)
            .await?;
    }
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await?;
    // The CRD is served once its first write goes through.
    let api: Api<Description> = Api::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_secs(30);
    while api
        .patch(
            "bench.ready",
            &PatchParams::apply("atoll-scheduler").force(),
            &Patch::Apply(&description("bench.ready", 1, 0)),
        )
        .await
        .is_err()
    {
        if Instant::now() > deadline {
            bail!("the Description CRD was not served within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for variant in VARIANTS {
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), NAMESPACE, &variant.resource());
        let ready = variant.object(&description("bench.ready", 1, 0))?;
        while api
            .patch(
                "bench.ready",
                &PatchParams::apply("atoll-scheduler").force(),
                &Patch::Apply(&ready),
            )
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                bail!(
                    "the {} copy of the CRD was not served within 30 s",
                    variant.group()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let service_account = service_account_client(&client, kubeconfig).await?;
    let start = cpu(pids);
    tokio::time::sleep(IDLE).await;
    let end = cpu(pids);
    let idle = (
        (end.0 - start.0) / IDLE.as_secs_f64(),
        (end.1 - start.1) / IDLE.as_secs_f64(),
    );
    eprintln!(
        "idle: kube-apiserver {:.1} ms/s, etcd {:.1} ms/s",
        idle.0 * 1000.0,
        idle.1 * 1000.0
    );
    let mut rows = Vec::new();
    for &objects in &opts.objects {
        for way in WAYS {
            let row = measure(
                &client,
                &service_account,
                pids,
                idle,
                objects,
                way,
                opts.writes,
            )
            .await
            .with_context(|| format!("{} of {objects} objects", way.label()))?;
            eprintln!(
                "{objects:>3} objects  {:<20} kube-apiserver {:>6.2} ms  etcd {:>5.2} ms  wall {:>6.2} ms",
                way.label(),
                row.apiserver_ms,
                row.etcd_ms,
                row.wall_ms
            );
            rows.push(row);
        }
    }
    Ok(rows)
}

fn table(rows: &[Row], opts: &Options) -> String {
    let mut out = format!(
        "{} requests per row, one at a time, after {WARM_UP} to warm up; CPU less the idle rate.\n\n\
         | objects | write | body bytes | managedFields bytes | kube-apiserver CPU ms/request | etcd CPU ms/request | wall ms/request |\n\
         |---:|---|---:|---:|---:|---:|---:|\n",
        opts.writes
    );
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |\n",
            r.objects,
            r.way.label(),
            r.body_bytes,
            r.managed_fields_bytes,
            r.apiserver_ms,
            r.etcd_ms,
            r.wall_ms
        ));
    }
    out
}

async fn bench() -> Result<String> {
    let opts = options()?;
    let binaries = atoll_e2e::real_tier::locate_binaries()?;
    let dir = tempfile::tempdir()?;
    let layout = atoll_e2e::plan::Layout::new(dir.path().join("real"));
    std::fs::create_dir_all(layout.logs())?;
    let kubeconfig = dir.path().join("kubeconfig");
    let mut state = FleetState::default();
    let started = atoll_e2e::real_tier::start_clusters(
        &[("parent".into(), kubeconfig.clone(), Role::Parent)],
        &binaries,
        &layout,
        &mut state,
        0,
        Duration::from_secs(120),
    )
    .await;
    let result = async {
        started?;
        let pid = |role: Role| {
            state
                .processes
                .iter()
                .find(|p| p.role == role)
                .map(|p| p.pid)
                .ok_or_else(|| anyhow!("no {role:?} process"))
        };
        let pids = (pid(Role::Parent)?, pid(Role::Etcd)?);
        let client = atoll_e2e::kubectl::client_for(&kubeconfig).await?;
        let rows = run(client, &kubeconfig, pids, &opts).await?;
        Ok::<_, anyhow::Error>(table(&rows, &opts))
    }
    .await;
    atoll_e2e::fleet::stop_all(&state, Duration::from_secs(5)).await;
    result.with_context(|| format!("logs in {}", layout.logs().display()))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    match bench().await {
        Ok(table) => {
            println!("{table}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bench_write_cost: {e:#}");
            ExitCode::FAILURE
        }
    }
}
