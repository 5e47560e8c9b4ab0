//! `fleet up`, `fleet down`, `fleet status`, `fleet wait`: a parent and N child devclusters,
//! the scheduler, the hub and one agent per child, as detached local processes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use atoll_crds::apps::{Description, DescriptionPhase, Subscription};
use atoll_crds::clusters::ManagedCluster;
use atoll_crds::{conditions, known};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

use crate::Error;
use crate::control_plane::write_private;
use crate::kubectl::Kubectl;
pub use crate::kubectl::client_for;
use crate::plan::{self, Backend, Binaries, ChildSpec, Layout};
use crate::process::{
    self, Launch, Stopped, exited, free_addr, launch, poll_until, wait_for_process,
};
use crate::real_tier;
use crate::state::{ChildRecord, FleetState, Role};
use crate::status;

pub use crate::install::FIELD_MANAGER;
pub use crate::process::{http_get, parse_status_line};

/// How to start a fleet.
#[derive(Clone, Debug)]
pub struct UpOptions {
    /// The fleet directory (kubeconfigs, logs, state).
    pub dir: PathBuf,
    /// Number of child clusters.
    pub children: usize,
    /// Where the binaries are.
    pub bin_dir: PathBuf,
    /// The repository's `manifests/` directory (for `manifests/crds`).
    pub manifests: PathBuf,
    /// Simulated nodes per child.
    pub nodes: u32,
    /// Delay before simulated workloads in children become ready.
    pub workload_delay_ms: u64,
    /// How long to wait for each step (clusters Ready in particular).
    pub timeout: Duration,
    /// What the clusters are made of.
    pub backend: Backend,
    /// Persist the parent's objects in SQLite under `<dir>/parent-data` (devcluster
    /// `--data-dir`), so that the parent can be restarted without losing its state.
    pub persist_parent: bool,
    /// Where components reach each other, when something (a fault proxy) sits in between;
    /// the default is direct.
    pub detours: Detours,
    /// With the `Kube` backend: one real node per cluster, and atoll installed and running as
    /// pods on them (see [`crate::pods`]) instead of as local processes.
    pub real_nodes: bool,
}

/// What `fleet up` changes so that a fault proxy (`chaos::proxy`) can sit between components.
/// Each field left `None` (or `false`) keeps the direct path.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Detours {
    /// The hub's gRPC address, instead of a free port picked at start, so that a proxy in front
    /// of it can be started first.
    pub hub_listen: Option<SocketAddr>,
    /// The hub URL the agents are given, instead of the hub's own (a proxy in front of it).
    pub agents_hub_url: Option<String>,
    /// The parent API server URL the scheduler and the hub are given, instead of the parent's
    /// own: their kubeconfigs are copied to `<dir>/<name>-detour.kubeconfig` with this server.
    pub components_parent_url: Option<String>,
    /// Keep each child devcluster's objects in SQLite under `<dir>/<child>-data`, so that a child
    /// can be killed and restarted without losing them (as a real cluster keeps etcd).
    pub persist_children: bool,
    /// The child API server URL each agent is given, by child name, instead of its child's own:
    /// the agent's kubeconfig is copied to `<dir>/agent-<child>-detour.kubeconfig` with this
    /// server. Children not named keep the direct path.
    pub agents_child_urls: BTreeMap<String, String>,
}

/// The most children `fleet up` starts: a devcluster child and its agent take a few tens of MiB,
/// a real control plane about 545 MiB (e2e/README.md), on a 24 GiB machine.
pub fn max_children(backend: Backend) -> usize {
    match backend {
        Backend::Devcluster => 250,
        Backend::Kube => 30,
    }
}

/// The children host's executable (`atoll_e2e::children_host`), next to the other binaries.
pub const CHILDREN_HOST_BINARY: &str = "fleet-children";

/// The most children [`up_shared`] starts (1,000 for issue 15, with room to spare).
pub const MAX_SHARED_CHILDREN: usize = 2000;

/// Starts the fleet and returns once every ManagedCluster is Ready; the processes keep running
/// after this process exits. On failure everything started so far is stopped again (logs are
/// kept).
pub async fn up(opts: &UpOptions) -> Result<FleetState, Error> {
    up_with(opts, None).await
}

/// [`up`] with the children in shared processes: the parent, the scheduler and the hub are
/// processes of their own as in [`up`], but the children's devclusters and agents run
/// `per_host` children to a `fleet-children` process ([`crate::children_host`]), named
/// `children-<first>-<last>` in the state. For fleets too large for two processes per child
/// (up to [`MAX_SHARED_CHILDREN`]). The children are always devclusters; with the `Kube`
/// backend the parent is a real control plane (kube-apiserver and etcd, atoll installed with
/// `kubectl apply -k` and run with its ServiceAccounts), so that a figure can be taken with a
/// real parent at a fleet size no real children would fit.
pub async fn up_shared(opts: &UpOptions, per_host: usize) -> Result<FleetState, Error> {
    if per_host == 0 {
        return Err(Error::InvalidArgument {
            what: "children per host".into(),
            message: "0: shared children need at least 1 child per host".into(),
        });
    }
    up_with(opts, Some(per_host)).await
}

async fn up_with(opts: &UpOptions, per_host: Option<usize>) -> Result<FleetState, Error> {
    let most = match per_host {
        Some(_) => MAX_SHARED_CHILDREN,
        None => max_children(opts.backend),
    };
    if opts.children == 0 || opts.children > most {
        return Err(Error::InvalidArgument {
            what: "--children".into(),
            message: format!(
                "{} is out of range; give 1 to {most} with the {:?} backend",
                opts.children, opts.backend
            ),
        });
    }
    let binaries = Binaries::locate(&opts.bin_dir)?;
    if per_host.is_some() && !opts.bin_dir.join(CHILDREN_HOST_BINARY).is_file() {
        return Err(Error::LocateBinary {
            name: CHILDREN_HOST_BINARY.into(),
            package: "atoll-e2e --bin fleet-children".into(),
            dir: opts.bin_dir.clone(),
        });
    }
    let crds = opts.manifests.join("crds");
    if !crds.join("kustomization.yaml").is_file() {
        return Err(Error::InvalidArgument {
            what: "--manifests".into(),
            message: format!(
                "{} has no kustomization.yaml; point --manifests at the repository's manifests/ directory",
                crds.display()
            ),
        });
    }
    let layout = Layout::new(&opts.dir);
    if let Ok(previous) = FleetState::load(&layout.state())
        && previous
            .processes
            .iter()
            .chain(previous.node_processes())
            .any(process::is_running)
    {
        return Err(Error::AlreadyRunning {
            dir: opts.dir.clone(),
        });
    }
    for dir in [layout.dir.clone(), layout.logs(), layout.kube_cache()] {
        std::fs::create_dir_all(&dir).map_err(|source| Error::CreateFile { path: dir, source })?;
    }
    let mut state = FleetState {
        parent_kubeconfig: layout.parent_kubeconfig(),
        ..Default::default()
    };
    match start(opts, &binaries, &layout, &mut state, per_host).await {
        Ok(()) => Ok(state),
        Err(e) => {
            eprintln!(
                "fleet: start-up failed, stopping what was started (logs kept in {})",
                layout.logs().display()
            );
            stop_fleet(&state, Duration::from_secs(5)).await;
            let _ = std::fs::remove_file(layout.state());
            Err(e)
        }
    }
}

async fn start(
    opts: &UpOptions,
    binaries: &Binaries,
    layout: &Layout,
    state: &mut FleetState,
    per_host: Option<usize>,
) -> Result<(), Error> {
    let children = plan::child_specs(opts.children);
    state.backend = opts.backend;
    for path in std::iter::once(layout.parent_kubeconfig())
        .chain(children.iter().map(|c| layout.child_kubeconfig(c.index)))
    {
        let _ = std::fs::remove_file(path);
    }
    for child in &children {
        state.children.push(ChildRecord {
            name: child.name.clone(),
            kubeconfig: layout.child_kubeconfig(child.index),
            labels: child.labels.clone(),
        });
    }
    if opts.real_nodes {
        return start_on_real_nodes(opts, layout, state, per_host, &children).await;
    }
    // Clusters first: they take longest and start in parallel. Then what atoll needs in the
    // parent, and the kubeconfigs atoll's components run with.
    let kubeconfigs = match opts.backend {
        Backend::Devcluster => {
            // Shared children: their devclusters start in the children hosts, below.
            let own_processes = if per_host.is_some() {
                &[][..]
            } else {
                &children
            };
            start_devclusters(opts, binaries, layout, state, own_processes).await?;
            install_devcluster_parent(opts, layout).await?;
            ComponentKubeconfigs::admin(layout, &children)
        }
        Backend::Kube => {
            let k8s = real_tier::locate_binaries()?;
            // Shared children are devclusters in the children hosts: only the parent is real.
            let real_children = if per_host.is_some() {
                &[][..]
            } else {
                &children
            };
            let clusters = real_tier::cluster_list(layout, real_children);
            let real =
                real_tier::start_clusters(&clusters, &k8s, layout, state, opts.nodes, opts.timeout)
                    .await?;
            println!("fleet: {} real clusters up", real.len());
            let (parent, children) = real.split_first().ok_or_else(|| Error::InvalidArgument {
                what: "--children".into(),
                message: "no clusters were started".into(),
            })?;
            let (scheduler, hub) =
                real_tier::install_parent(parent, layout, &opts.manifests).await?;
            println!("fleet: atoll installed in the parent (kubectl apply -k)");
            ComponentKubeconfigs {
                scheduler,
                hub,
                agents: Vec::new(),
                real_children: children.to_vec(),
            }
        }
    };
    let kubeconfigs = detour_components(kubeconfigs, layout, &opts.detours)?;
    let parent = client_for(&layout.parent_kubeconfig()).await?;
    poll_until(
        opts.timeout,
        "the CRDs to be served by the parent",
        "",
        || async {
            Ok(Api::<ManagedCluster>::all(parent.clone())
                .list(&ListParams::default().limit(1))
                .await
                .is_ok()
                && Api::<Subscription>::all(parent.clone())
                    .list(&ListParams::default().limit(1))
                    .await
                    .is_ok())
        },
    )
    .await?;
    let (id, secret) = plan::new_bootstrap_token(&mut rand::rng());
    crate::install::apply_bootstrap_token(&parent, &id, &secret).await?;
    let token = format!("{id}.{secret}");
    write_private(&layout.bootstrap_token(), &token)?;
    state.bootstrap_token_id = Some(id);
    println!("fleet: a bootstrap token in the parent");

    // Control plane.
    let scheduler_admin = free_addr()?;
    launch(
        state,
        layout,
        Launch {
            name: "scheduler",
            role: Role::Scheduler,
            binary: &binaries.scheduler,
            args: vec![
                "--kubeconfig".into(),
                kubeconfigs.scheduler.display().to_string(),
                "--admin-listen".into(),
                scheduler_admin.to_string(),
                "--leader-elect-identity".into(),
                "fleet-scheduler".into(),
            ],
            log: layout.log("scheduler"),
            admin: Some(scheduler_admin.to_string()),
        },
    )?;
    let hub_listen = match opts.detours.hub_listen {
        Some(addr) => addr,
        None => free_addr()?,
    };
    let hub_admin = free_addr()?;
    let mut hub_args: Vec<String> = vec![
        "--kubeconfig".into(),
        kubeconfigs.hub.display().to_string(),
        "--listen".into(),
        hub_listen.to_string(),
        "--admin-listen".into(),
        hub_admin.to_string(),
        "--insecure".into(),
        // Push children of a devcluster fleet serve plain http on loopback.
        "--push-allow-insecure".into(),
        // A local fleet of the user's own clusters: its agents register unattended.
        "--auto-approve".into(),
        // Charts in the Push clusters, with the helm of `make k8s` when it was built.
        "--helm-home".into(),
        layout.dir.join("helm-hub").display().to_string(),
    ];
    let helm = crate::control_plane::helm_from_env();
    if let Some(helm) = &helm {
        hub_args.push("--helm".into());
        hub_args.push(helm.display().to_string());
    }
    launch(
        state,
        layout,
        Launch {
            name: "hub",
            role: Role::Hub,
            binary: &binaries.hub,
            args: hub_args,
            log: layout.log("hub"),
            admin: Some(hub_admin.to_string()),
        },
    )?;
    let hub_url = format!("http://{hub_listen}");
    state.hub_url = Some(hub_url.clone());
    state.save(&layout.state())?;
    wait_http_ok(
        state,
        "scheduler",
        scheduler_admin,
        "/healthz",
        opts.timeout,
    )
    .await?;
    wait_http_ok(state, "hub", hub_admin, "/healthz", opts.timeout).await?;
    wait_tcp(state, "hub", hub_listen, opts.timeout).await?;
    println!("fleet: scheduler and hub up (hub at {hub_url})");
    // What the agents dial: the hub, or what stands in front of it.
    let hub_url = opts.detours.agents_hub_url.clone().unwrap_or(hub_url);

    if let Some(per_host) = per_host {
        start_children_hosts(opts, layout, state, &children, per_host, &hub_url).await?;
        wait_clusters_ready(state, &parent, &children, opts.timeout).await?;
        state.save(&layout.state())?;
        return Ok(());
    }

    // One agent per child; on the real tier each child first gets the agent's install.
    let mut agent_kubeconfigs = kubeconfigs.agents;
    for (child, real) in children.iter().zip(&kubeconfigs.real_children) {
        agent_kubeconfigs.push(
            real_tier::install_agent(
                real,
                layout,
                &opts.manifests,
                &hub_url,
                &token,
                &child.labels,
            )
            .await?,
        );
    }
    let agent_kubeconfigs = detour_agents(agent_kubeconfigs, &children, layout, &opts.detours)?;
    for (child, kubeconfig) in children.iter().zip(&agent_kubeconfigs) {
        let admin = free_addr()?;
        let name = format!("agent-{}", child.name);
        let helm_home = layout.dir.join(format!("helm-{}", child.name));
        launch(
            state,
            layout,
            Launch {
                name: &name,
                role: Role::Agent,
                binary: &binaries.agent,
                args: agent_args(
                    child,
                    kubeconfig,
                    &hub_url,
                    &token,
                    admin,
                    helm.as_deref(),
                    &helm_home,
                ),
                log: layout.log(&name),
                admin: Some(admin.to_string()),
            },
        )?;
    }
    state.save(&layout.state())?;
    wait_clusters_ready(state, &parent, &children, opts.timeout).await?;
    state.save(&layout.state())?;
    Ok(())
}

/// [`start`] with atoll as pods on real nodes ([`crate::pods`]).
async fn start_on_real_nodes(
    opts: &UpOptions,
    layout: &Layout,
    state: &mut FleetState,
    per_host: Option<usize>,
    children: &[ChildSpec],
) -> Result<(), Error> {
    if opts.backend != Backend::Kube || per_host.is_some() || opts.detours != Detours::default() {
        return Err(Error::InvalidArgument {
            what: "--real-nodes".into(),
            message: "takes the kube backend, children of their own and no detours".into(),
        });
    }
    let pods = crate::pods::PodsOptions {
        bin_dir: &opts.bin_dir,
        manifests: &opts.manifests,
        fake_nodes: opts.nodes,
        timeout: opts.timeout,
    };
    crate::pods::start(&pods, layout, state, children).await?;
    let parent = client_for(&layout.parent_kubeconfig()).await?;
    wait_clusters_ready(state, &parent, children, opts.timeout).await
}

/// Starts the `fleet-children` processes, `per_host` children each, and waits until each has
/// written the kubeconfigs of its children (its agents are then registering).
async fn start_children_hosts(
    opts: &UpOptions,
    layout: &Layout,
    state: &mut FleetState,
    children: &[ChildSpec],
    per_host: usize,
    hub_url: &str,
) -> Result<(), Error> {
    let binary = opts.bin_dir.join(CHILDREN_HOST_BINARY);
    let helm = crate::control_plane::helm_from_env();
    let mut hosts = Vec::new();
    for group in children.chunks(per_host) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let name = format!("children-{}-{}", first.index, last.index);
        let mut args = vec![
            "--dir".to_string(),
            layout.dir.display().to_string(),
            "--first".into(),
            first.index.to_string(),
            "--count".into(),
            group.len().to_string(),
            "--hub".into(),
            hub_url.into(),
            "--nodes".into(),
            opts.nodes.to_string(),
            "--workload-delay-ms".into(),
            opts.workload_delay_ms.to_string(),
        ];
        if let Some(helm) = &helm {
            args.push("--helm".into());
            args.push(helm.display().to_string());
        }
        launch(
            state,
            layout,
            Launch {
                name: &name,
                role: Role::ChildrenHost,
                binary: &binary,
                args,
                log: layout.log(&name),
                admin: None,
            },
        )?;
        hosts.push((name, group));
    }
    state.save(&layout.state())?;
    for (name, group) in &hosts {
        for child in group.iter() {
            wait_for_file(
                state,
                name,
                &layout.child_kubeconfig(child.index),
                opts.timeout,
            )
            .await?;
        }
    }
    println!(
        "fleet: {} children in {} children hosts",
        children.len(),
        hosts.len()
    );
    Ok(())
}

/// The kubeconfigs atoll's components run with.
struct ComponentKubeconfigs {
    scheduler: PathBuf,
    hub: PathBuf,
    /// One per child, in order; empty when the agents' installs are still to be made
    /// (`real_children`).
    agents: Vec<PathBuf>,
    /// The real tier's children, whose agents are installed once the hub's URL is known.
    real_children: Vec<real_tier::RealCluster>,
}

impl ComponentKubeconfigs {
    /// devcluster authenticates nobody: every component uses the cluster's own kubeconfig.
    fn admin(layout: &Layout, children: &[ChildSpec]) -> ComponentKubeconfigs {
        ComponentKubeconfigs {
            scheduler: layout.parent_kubeconfig(),
            hub: layout.parent_kubeconfig(),
            agents: children
                .iter()
                .map(|c| layout.child_kubeconfig(c.index))
                .collect(),
            real_children: Vec::new(),
        }
    }
}

/// The scheduler's and the hub's kubeconfigs pointed at `detours.components_parent_url`, when
/// set: copies next to the fleet's files with the `server:` line replaced.
fn detour_components(
    mut kubeconfigs: ComponentKubeconfigs,
    layout: &Layout,
    detours: &Detours,
) -> Result<ComponentKubeconfigs, Error> {
    let Some(url) = &detours.components_parent_url else {
        return Ok(kubeconfigs);
    };
    for (name, path) in [
        ("scheduler", &mut kubeconfigs.scheduler),
        ("hub", &mut kubeconfigs.hub),
    ] {
        let text = std::fs::read_to_string(&*path).map_err(|e| Error::Kubeconfig {
            path: path.clone(),
            message: e.to_string(),
        })?;
        let detour = layout.dir.join(format!("{name}-detour.kubeconfig"));
        write_private(&detour, &with_server(&text, url))?;
        *path = detour;
    }
    Ok(kubeconfigs)
}

/// Each agent's kubeconfig pointed at its entry of `detours.agents_child_urls`, when it has one
/// (a fault proxy in front of its child's API server).
fn detour_agents(
    kubeconfigs: Vec<PathBuf>,
    children: &[ChildSpec],
    layout: &Layout,
    detours: &Detours,
) -> Result<Vec<PathBuf>, Error> {
    children
        .iter()
        .zip(kubeconfigs)
        .map(|(child, path)| {
            let Some(url) = detours.agents_child_urls.get(&child.name) else {
                return Ok(path);
            };
            let text = std::fs::read_to_string(&path).map_err(|e| Error::Kubeconfig {
                path: path.clone(),
                message: e.to_string(),
            })?;
            let detour = layout
                .dir
                .join(format!("agent-{}-detour.kubeconfig", child.name));
            write_private(&detour, &with_server(&text, url))?;
            Ok(detour)
        })
        .collect()
}

/// A kubeconfig's text with every `server:` URL replaced by `url` (indentation kept).
pub fn with_server(kubeconfig: &str, url: &str) -> String {
    let mut out: String = kubeconfig
        .lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with("server:") {
                let indent = line.len() - trimmed.len();
                format!("{}server: {url}", " ".repeat(indent))
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    out.push('\n');
    out
}

/// Starts the parent and the children as devclusters and waits for their kubeconfigs.
async fn start_devclusters(
    opts: &UpOptions,
    binaries: &Binaries,
    layout: &Layout,
    state: &mut FleetState,
    children: &[ChildSpec],
) -> Result<(), Error> {
    launch(
        state,
        layout,
        Launch {
            name: "parent",
            role: Role::Parent,
            binary: &binaries.devcluster,
            args: parent_args(layout, opts.persist_parent),
            log: layout.log("parent"),
            admin: None,
        },
    )?;
    for child in children {
        launch(
            state,
            layout,
            Launch {
                name: &child.name,
                role: Role::Child,
                binary: &binaries.devcluster,
                args: child_devcluster_args(
                    &layout.child_kubeconfig(child.index),
                    opts.nodes,
                    opts.workload_delay_ms,
                    opts.detours
                        .persist_children
                        .then(|| layout.dir.join(format!("{}-data", child.name)))
                        .as_deref(),
                ),
                log: layout.log(&child.name),
                admin: None,
            },
        )?;
    }
    state.save(&layout.state())?;
    wait_for_file(state, "parent", &layout.parent_kubeconfig(), opts.timeout).await?;
    for child in children {
        wait_for_file(
            state,
            &child.name,
            &layout.child_kubeconfig(child.index),
            opts.timeout,
        )
        .await?;
    }
    println!("fleet: {} clusters up", children.len() + 1);
    Ok(())
}

/// A devcluster parent gets the CRDs (the real kubectl, `apply -k manifests/crds`) and the two
/// namespaces; RBAC means nothing to devcluster.
async fn install_devcluster_parent(opts: &UpOptions, layout: &Layout) -> Result<(), Error> {
    let kubectl = Kubectl::new(layout.parent_kubeconfig(), layout.kube_cache());
    kubectl
        .apply_kustomization(&opts.manifests.join("crds"), &[])
        .await?;
    let parent = client_for(&layout.parent_kubeconfig()).await?;
    for ns in [known::NAMESPACE_SYSTEM, known::NAMESPACE_RESERVED] {
        apply_namespace(&parent, ns).await?;
    }
    println!("fleet: CRDs and namespaces installed in the parent");
    Ok(())
}

/// Where a persistent parent keeps its objects: `<dir>/parent-data`.
pub fn parent_data_dir(layout: &Layout) -> PathBuf {
    layout.dir.join("parent-data")
}

/// The parent devcluster's command line; with `persist`, its objects are kept in
/// [`parent_data_dir`].
pub fn parent_args(layout: &Layout, persist: bool) -> Vec<String> {
    let mut args = vec![
        "--port".into(),
        "0".into(),
        "--kubeconfig".into(),
        layout.parent_kubeconfig().display().to_string(),
    ];
    if persist {
        args.push("--data-dir".into());
        args.push(parent_data_dir(layout).display().to_string());
    }
    args
}

/// The agent's command line for `child`: `helm` is the binary it installs HelmChart feeds with
/// (the one `make k8s` built; without it the agent looks for `helm` on `PATH`), and `helm_home`
/// its own directory for Helm's cache.
pub fn agent_args(
    child: &ChildSpec,
    kubeconfig: &Path,
    hub_url: &str,
    token: &str,
    admin: SocketAddr,
    helm: Option<&Path>,
    helm_home: &Path,
) -> Vec<String> {
    let mut args = vec![
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--hub".into(),
        hub_url.into(),
        "--bootstrap-token".into(),
        token.into(),
        "--cluster-name".into(),
        child.name.clone(),
        "--cluster-labels".into(),
        child.labels_arg(),
        "--insecure".into(),
        "--admin-listen".into(),
        admin.to_string(),
        "--helm-home".into(),
        helm_home.display().to_string(),
    ];
    if let Some(helm) = helm {
        args.push("--helm".into());
        args.push(helm.display().to_string());
    }
    args
}

async fn wait_for_file(
    state: &FleetState,
    name: &str,
    path: &Path,
    timeout: Duration,
) -> Result<(), Error> {
    let what = format!("{name} to write {}", path.display());
    wait_for_process(state, name, &what, timeout, || async {
        path.metadata().is_ok_and(|m| m.len() > 0)
    })
    .await
}

/// `GET <path>` over plain HTTP/1.1; the status code.
pub async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    http_get(addr, path).await.map(|(code, _)| code)
}

/// The sum of every sample of `name` in Prometheus text whose labels contain `label` (any
/// when empty).
pub fn metric_sum(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric_name, labels) = series.split_once('{').unwrap_or((series, ""));
            (metric_name == name && labels.contains(label)).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}

async fn wait_http_ok(
    state: &FleetState,
    name: &str,
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let what = format!("{name} to answer GET http://{addr}{path} with 200");
    wait_for_process(state, name, &what, timeout, || async {
        http_status(addr, path).await == Some(200)
    })
    .await
}

async fn wait_tcp(
    state: &FleetState,
    name: &str,
    addr: SocketAddr,
    timeout: Duration,
) -> Result<(), Error> {
    let what = format!("{name} to listen on {addr}");
    wait_for_process(state, name, &what, timeout, || async {
        tokio::net::TcpStream::connect(addr).await.is_ok()
    })
    .await
}

async fn apply_namespace(client: &Client, name: &str) -> Result<(), Error> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name},
    }))
    .map_err(|e| Error::InvalidArgument {
        what: "namespace".into(),
        message: e.to_string(),
    })?;
    Api::<Namespace>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&ns),
        )
        .await
        .map_err(|source| Error::Api {
            action: format!("creating namespace {name} in the parent"),
            source,
        })?;
    Ok(())
}

/// Whether a ManagedCluster's Ready condition is True.
pub fn is_ready(cluster: &ManagedCluster) -> bool {
    cluster
        .status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.conditions, known::CONDITION_READY))
}

/// The names in `want` that are not Ready among `clusters`.
pub fn not_ready<'a>(want: &'a [String], clusters: &[ManagedCluster]) -> Vec<&'a str> {
    want.iter()
        .filter(|name| {
            !clusters
                .iter()
                .any(|c| c.name_any() == **name && is_ready(c))
        })
        .map(String::as_str)
        .collect()
}

async fn wait_clusters_ready(
    state: &FleetState,
    parent: &Client,
    children: &[ChildSpec],
    timeout: Duration,
) -> Result<(), Error> {
    let api = Api::<ManagedCluster>::all(parent.clone());
    let names: Vec<String> = children.iter().map(|c| c.name.clone()).collect();
    let deadline = Instant::now() + timeout;
    loop {
        let clusters = api
            .list(&ListParams::default())
            .await
            .map_err(|source| Error::Api {
                action: "listing ManagedClusters in the parent".into(),
                source,
            })?;
        let missing = not_ready(&names, &clusters.items);
        if missing.is_empty() {
            println!("fleet: {} ManagedClusters Ready", names.len());
            return Ok(());
        }
        for p in &state.processes {
            if let Some(e) = exited(state, &p.name) {
                return Err(e);
            }
        }
        if Instant::now() >= deadline {
            let logs: Vec<String> = missing
                .iter()
                .filter_map(|m| state.process(&format!("agent-{m}")))
                .map(|p| p.log.display().to_string())
                .collect();
            return Err(Error::Timeout {
                what: format!("ManagedClusters {} to be Ready", missing.join(", ")),
                seconds: timeout.as_secs(),
                hint: format!("; see the hub log and {}", logs.join(", ")),
            });
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Stops every process of `state`, newest first (agents before the hub before the clusters).
pub async fn stop_all(
    state: &FleetState,
    grace: Duration,
) -> Vec<(String, Result<Stopped, Error>)> {
    let mut out = Vec::new();
    for record in state.processes.iter().rev() {
        out.push((record.name.clone(), process::stop(record, grace).await));
    }
    out
}

/// `fleet down`: stops everything the fleet in `dir` started and removes its state file.
pub async fn down(
    dir: &Path,
    grace: Duration,
) -> Result<Vec<(String, Result<Stopped, Error>)>, Error> {
    let layout = Layout::new(dir);
    let state = FleetState::load(&layout.state())?;
    let results = stop_fleet(&state, grace).await;
    if results.iter().all(|(_, r)| r.is_ok()) {
        let _ = std::fs::remove_file(layout.state());
    }
    Ok(results)
}

/// [`stop_all`], with the real nodes torn down first (their pods and containerd) and their
/// network removed last; a node that could not be cleaned up fully is one failed result.
pub async fn stop_fleet(
    state: &FleetState,
    grace: Duration,
) -> Vec<(String, Result<Stopped, Error>)> {
    let mut results = Vec::new();
    if let Some(real) = &state.real_nodes {
        for problem in crate::pods::tear_down_nodes(real) {
            results.push((
                "real nodes".to_string(),
                Err(Error::RunCommand {
                    command: "tearing down a real node".into(),
                    status: "incomplete".into(),
                    stderr: problem,
                }),
            ));
        }
    }
    results.extend(stop_all(state, grace).await);
    if let Some(real) = &state.real_nodes {
        crate::pods::remove_network(real);
    }
    results
}

/// The processes table of `state`.
pub fn process_rows(state: &FleetState) -> Vec<Vec<String>> {
    state
        .processes
        .iter()
        .chain(state.node_processes())
        .map(|p| {
            vec![
                p.name.clone(),
                p.pid.to_string(),
                if process::is_running(p) {
                    "running"
                } else {
                    "exited"
                }
                .to_string(),
                p.admin.clone().unwrap_or_else(|| "-".into()),
                p.log.display().to_string(),
            ]
        })
        .collect()
}

/// `fleet status`: processes, clusters and Subscriptions of the fleet in `dir`. When the parent
/// cannot be reached, the processes table is still printed, followed by the reason.
pub async fn status(dir: &Path) -> Result<String, Error> {
    let layout = Layout::new(dir);
    let state = FleetState::load(&layout.state())?;
    let processes = process_rows(&state);
    match parent_objects(&state).await {
        Ok((clusters, subs)) => {
            let now = k8s_openapi::jiff::Timestamp::now().as_second();
            Ok(status::report(&processes, &clusters, &subs, now))
        }
        Err(e) => Ok(format!(
            "Processes\n{}\nThe parent cannot be reached ({e}); see {}\n",
            status::render_table(&status::PROCESS_HEADERS, &processes),
            layout.log("parent").display()
        )),
    }
}

async fn parent_objects(
    state: &FleetState,
) -> Result<(Vec<ManagedCluster>, Vec<Subscription>), Error> {
    let parent = client_for(&state.parent_kubeconfig).await?;
    let clusters = Api::<ManagedCluster>::all(parent.clone())
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::Api {
            action: "listing ManagedClusters in the parent".into(),
            source,
        })?;
    let subs = Api::<Subscription>::all(parent)
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::Api {
            action: "listing Subscriptions in the parent".into(),
            source,
        })?;
    Ok((clusters.items, subs.items))
}

/// Kinds whose replica status the hub aggregates; `fleet wait` waits for it from every cluster.
pub const WORKLOAD_KINDS: [&str; 2] = ["Deployment", "StatefulSet"];

/// Why a Subscription is not settled yet, or `None` when it is: scheduled for its current
/// generation, its status aggregated, every workload with all replicas ready in every cluster,
/// and every Description of it reporting `Success` for its latest generation.
pub fn unsettled(sub: &Subscription, descriptions: &[Description]) -> Option<String> {
    let name = format!("{}/{}", sub.namespace().unwrap_or_default(), sub.name_any());
    let Some(status) = sub.status.as_ref() else {
        return Some(format!("{name}: not scheduled yet"));
    };
    if status.observed_generation.is_some() && status.observed_generation != sub.metadata.generation
    {
        return Some(format!("{name}: generation not scheduled yet"));
    }
    if !conditions::is_true(&status.conditions, known::CONDITION_SCHEDULED)
        && status.binding_clusters.is_empty()
    {
        return Some(format!("{name}: not scheduled yet"));
    }
    if !status.binding_clusters.is_empty() && status.aggregated_statuses.is_empty() {
        return Some(format!("{name}: no status aggregated yet"));
    }
    for agg in &status.aggregated_statuses {
        // Past the status's bound only unavailable clusters are listed: judge by the summary.
        if agg.feed_status_details_omitted.is_some() {
            let summary = &agg.feed_status_summary;
            let r = &summary.replica_status;
            if !summary.available || r.ready_replicas.unwrap_or(0) < r.replicas.unwrap_or(0) {
                return Some(format!(
                    "{name}: {} {} is not available and ready in every cluster yet ({} listed)",
                    agg.feed.kind,
                    agg.feed.name,
                    agg.feed_status_details.len()
                ));
            }
            continue;
        }
        if WORKLOAD_KINDS.contains(&agg.feed.kind.as_str()) {
            for binding in &status.binding_clusters {
                let cluster =
                    known::parse_binding_cluster(binding).map_or(binding.as_str(), |(_, c)| c);
                let reported = agg.feed_status_details.iter().any(|d| {
                    d.cluster_name == cluster && d.replica_status.observed_generation.is_some()
                });
                if !reported {
                    return Some(format!(
                        "{name}: {} {} has no status from {cluster} yet",
                        agg.feed.kind, agg.feed.name
                    ));
                }
            }
        }
        for d in &agg.feed_status_details {
            let r = &d.replica_status;
            if let Some(want) = r.replicas
                && r.ready_replicas.unwrap_or(0) < want
            {
                return Some(format!(
                    "{name}: {} {} has {}/{want} ready replicas in {}",
                    agg.feed.kind,
                    agg.feed.name,
                    r.ready_replicas.unwrap_or(0),
                    d.cluster_name
                ));
            }
        }
    }
    let desc_name = known::description_name(&sub.namespace().unwrap_or_default(), &sub.name_any());
    for binding in &status.binding_clusters {
        let Some((ns, cluster)) = known::parse_binding_cluster(binding) else {
            continue;
        };
        let desc = descriptions
            .iter()
            .find(|d| d.namespace().as_deref() == Some(ns) && d.name_any() == desc_name);
        let status = desc.and_then(|d| d.status.as_ref());
        let phase = status.and_then(|s| s.phase);
        if phase != Some(DescriptionPhase::Success) {
            return Some(format!(
                "{name}: Description for {cluster} is {}",
                phase.map_or_else(|| "not reported".to_string(), |p| format!("{p:?}"))
            ));
        }
        let generation = desc.and_then(|d| d.metadata.generation);
        let observed = status.and_then(|s| s.observed_generation);
        if generation.is_some() && observed.is_some() && observed < generation {
            return Some(format!(
                "{name}: {cluster} has not applied the latest Description yet"
            ));
        }
    }
    None
}

/// `fleet wait`: waits until every Subscription in the parent is settled (see [`unsettled`]).
pub async fn wait_settled(dir: &Path, timeout: Duration) -> Result<(), Error> {
    let layout = Layout::new(dir);
    let state = FleetState::load(&layout.state())?;
    let parent = client_for(&state.parent_kubeconfig).await?;
    let subs_api = Api::<Subscription>::all(parent.clone());
    let desc_api = Api::<Description>::all(parent);
    let deadline = Instant::now() + timeout;
    loop {
        let subs = subs_api
            .list(&ListParams::default())
            .await
            .map_err(|source| Error::Api {
                action: "listing Subscriptions in the parent".into(),
                source,
            })?;
        let descs = desc_api
            .list(&ListParams::default())
            .await
            .map_err(|source| Error::Api {
                action: "listing Descriptions in the parent".into(),
                source,
            })?;
        let pending: Vec<String> = subs
            .items
            .iter()
            .filter_map(|s| unsettled(s, &descs.items))
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(Error::Timeout {
                what: "every Subscription to be applied".into(),
                seconds: timeout.as_secs(),
                hint: format!(
                    "; still pending: {}; see {}",
                    pending.join("; "),
                    layout.logs().display()
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The dedicated namespace of the ManagedCluster named `cluster` in the fleet in `dir`.
pub async fn dedicated_namespace(dir: &Path, cluster: &str) -> Result<String, Error> {
    let state = FleetState::load(&Layout::new(dir).state())?;
    let parent = client_for(&state.parent_kubeconfig).await?;
    let clusters = Api::<ManagedCluster>::all(parent)
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::Api {
            action: "listing ManagedClusters in the parent".into(),
            source,
        })?;
    clusters
        .items
        .iter()
        .find(|c| c.name_any() == cluster)
        .and_then(|c| c.namespace())
        .ok_or_else(|| Error::InvalidArgument {
            what: "cluster".into(),
            message: format!(
                "no ManagedCluster named {cluster}; known: {}",
                clusters
                    .items
                    .iter()
                    .map(|c| c.name_any())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        })
}

/// Per-child summary of what the fleet runs, for printing after `fleet up`.
pub fn summary(state: &FleetState, dir: &Path) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "parent:  kubectl --kubeconfig {}\n",
        state.parent_kubeconfig.display()
    ));
    for child in &state.children {
        let labels: BTreeMap<_, _> = child.labels.iter().collect();
        out.push_str(&format!(
            "{}: kubectl --kubeconfig {}   ({})\n",
            child.name,
            child.kubeconfig.display(),
            labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    if let Some(hub) = &state.hub_url {
        out.push_str(&format!("hub:     {hub}\n"));
    }
    out.push_str(&format!("logs:    {}\n", Layout::new(dir).logs().display()));
    out
}

/// The arguments of a child's devcluster: a free port, its kubeconfig written to `kubeconfig`,
/// `nodes` simulated nodes, workloads that become ready after `workload_delay_ms`, and its data
/// kept in `data_dir` (in memory without one).
pub fn child_devcluster_args(
    kubeconfig: &Path,
    nodes: u32,
    workload_delay_ms: u64,
    data_dir: Option<&Path>,
) -> Vec<String> {
    let mut args = vec![
        "--port".into(),
        "0".into(),
        "--kubeconfig".into(),
        kubeconfig.display().to_string(),
        "--nodes".into(),
        nodes.to_string(),
        "--simulate-workloads".into(),
        "--workload-delay-ms".into(),
        workload_delay_ms.to_string(),
    ];
    if let Some(data) = data_dir {
        args.extend(["--data-dir".into(), data.display().to_string()]);
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_crds::apps::{
        AggregatedStatus, DescriptionSpec, DescriptionStatus, Feed, FeedStatus,
        FeedStatusPerCluster, ReplicaStatus, SubscriptionSpec, SubscriptionStatus,
    };

    #[tokio::test]
    async fn up_takes_1_to_250_devcluster_children_and_30_real_ones() {
        let opts = |children, backend| UpOptions {
            dir: PathBuf::from("/nonexistent/fleet"),
            children,
            bin_dir: PathBuf::from("/nonexistent/bin"),
            manifests: PathBuf::from("/nonexistent/manifests"),
            nodes: 1,
            workload_delay_ms: 0,
            timeout: Duration::from_secs(1),
            backend,
            persist_parent: false,
            detours: Detours::default(),
            real_nodes: false,
        };
        let refused = |children, backend| async move {
            matches!(
                up(&opts(children, backend)).await,
                Err(Error::InvalidArgument { what, .. }) if what == "--children"
            )
        };
        assert!(refused(0, Backend::Devcluster).await);
        assert!(refused(251, Backend::Devcluster).await);
        assert!(refused(31, Backend::Kube).await);
        // In range, it goes on to look for the binaries (and fails there, in this test).
        assert!(!refused(200, Backend::Devcluster).await);
        assert!(!refused(30, Backend::Kube).await);
    }

    #[tokio::test]
    async fn shared_children_take_up_to_2000_children_and_at_least_one_per_host() {
        let opts = |children, backend| UpOptions {
            dir: PathBuf::from("/nonexistent/fleet"),
            children,
            bin_dir: PathBuf::from("/nonexistent/bin"),
            manifests: PathBuf::from("/nonexistent/manifests"),
            nodes: 1,
            workload_delay_ms: 0,
            timeout: Duration::from_secs(1),
            backend,
            persist_parent: false,
            detours: Detours::default(),
            real_nodes: false,
        };
        let cases = [
            (1000, Backend::Devcluster, 250, true),
            (2000, Backend::Devcluster, 1, true),
            (2001, Backend::Devcluster, 250, false),
            (0, Backend::Devcluster, 250, false),
            (100, Backend::Devcluster, 0, false),
            // A real parent with shared devcluster children.
            (1000, Backend::Kube, 250, true),
            (2001, Backend::Kube, 250, false),
        ];
        for (children, backend, per_host, in_range) in cases {
            let result = up_shared(&opts(children, backend), per_host).await;
            // In range, it goes on to look for the binaries (and fails there, in this test).
            assert_eq!(
                matches!(result, Err(Error::LocateBinary { .. })),
                in_range,
                "{children} {backend:?} {per_host}: {result:?}"
            );
        }
    }
    use atoll_crds::clusters::{ManagedClusterSpec, ManagedClusterStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    #[test]
    fn status_lines_yield_their_code_and_garbage_yields_none() {
        let cases = [
            ("HTTP/1.1 200 OK\r\n\r\nok", Some(200)),
            ("HTTP/1.0 503 Service Unavailable\r\n", Some(503)),
            ("SSH-2.0-OpenSSH\r\n", None),
            ("", None),
        ];
        for (text, want) in cases {
            assert_eq!(parse_status_line(text), want, "{text:?}");
        }
    }

    fn mc(name: &str, ready: Option<&str>) -> ManagedCluster {
        let mut c = ManagedCluster::new(name, ManagedClusterSpec::default());
        c.status = ready.map(|r| ManagedClusterStatus {
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: r.into(),
                reason: "R".into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
            }],
            ..Default::default()
        });
        c
    }

    #[test]
    fn only_clusters_with_ready_true_count_as_ready() {
        let clusters = [
            mc("a", Some("True")),
            mc("b", Some("Unknown")),
            mc("c", None),
        ];
        let want: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        assert_eq!(not_ready(&want, &clusters), vec!["b", "c", "d"]);
        assert!(not_ready(&want[..1], &clusters).is_empty());
    }

    #[test]
    fn only_a_persistent_parent_gets_a_data_dir_inside_the_fleet_directory() {
        let layout = Layout::new("/f");
        let cases = [(false, None), (true, Some("/f/parent-data"))];
        for (persist, want) in cases {
            let args = parent_args(&layout, persist);
            let got = args
                .iter()
                .position(|a| a == "--data-dir")
                .and_then(|i| args.get(i + 1))
                .map(String::as_str);
            assert_eq!(got, want, "persist={persist}");
            assert!(args.contains(&"/f/parent.kubeconfig".to_string()));
        }
    }

    #[test]
    fn agents_get_the_hub_token_name_labels_and_their_own_admin_port() {
        let child = &plan::child_specs(2)[1];
        let layout = Layout::new("/f");
        let args = agent_args(
            child,
            &layout.child_kubeconfig(child.index),
            "http://127.0.0.1:1",
            "abcdef.0123456789abcdef",
            "127.0.0.1:9".parse().unwrap(),
            Some(Path::new("/cache/helm")),
            Path::new("/f/helm-child-2"),
        );
        assert!(
            args.join(" ")
                .ends_with("--helm-home /f/helm-child-2 --helm /cache/helm"),
            "{args:?}"
        );
        let joined = args.join(" ");
        assert!(
            joined.contains("--kubeconfig /f/child-2.kubeconfig"),
            "{joined}"
        );
        assert!(joined.contains("--cluster-name child-2"), "{joined}");
        assert!(
            joined.contains("--cluster-labels env=prod,region=us,tier=small"),
            "{joined}"
        );
        assert!(joined.contains("--hub http://127.0.0.1:1 "), "{joined}");
        assert!(joined.contains("--admin-listen 127.0.0.1:9"), "{joined}");
        assert!(joined.contains("--insecure"), "{joined}");
    }

    #[test]
    fn a_detoured_kubeconfig_differs_only_in_its_server() {
        let text =
            "clusters:\n- cluster:\n    server: http://127.0.0.1:4000\n  name: c\nusers: []\n";
        let got = with_server(text, "http://127.0.0.1:5000");
        assert_eq!(
            got,
            "clusters:\n- cluster:\n    server: http://127.0.0.1:5000\n  name: c\nusers: []\n"
        );
    }

    fn sub(gen_: i64, status: Option<SubscriptionStatus>) -> Subscription {
        let mut s = Subscription::new("web", SubscriptionSpec::default());
        s.metadata.namespace = Some("demo".into());
        s.metadata.generation = Some(gen_);
        s.status = status;
        s
    }

    fn desc(ns: &str, phase: Option<DescriptionPhase>) -> Description {
        let mut d = Description::new("demo.web", DescriptionSpec::default());
        d.metadata.namespace = Some(ns.into());
        d.status = phase.map(|p| DescriptionStatus {
            phase: Some(p),
            ..Default::default()
        });
        d
    }

    fn desc_gen(ns: &str, generation: i64, observed: i64) -> Description {
        let mut d = desc(ns, Some(DescriptionPhase::Success));
        d.metadata.generation = Some(generation);
        if let Some(s) = d.status.as_mut() {
            s.observed_generation = Some(observed);
        }
        d
    }

    #[test]
    fn a_subscription_is_settled_only_when_every_bound_cluster_reports_success() {
        let agg = |ready: i32| AggregatedStatus {
            feed: Feed {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: Some("demo".into()),
                name: "web".into(),
            },
            feed_status_summary: FeedStatus::default(),
            feed_status_details: vec![FeedStatusPerCluster {
                cluster_id: String::new(),
                cluster_name: "child-2".into(),
                available: true,
                replica_status: ReplicaStatus {
                    observed_generation: Some(1),
                    replicas: Some(2),
                    ready_replicas: Some(ready),
                    ..Default::default()
                },
            }],
            feed_status_details_omitted: None,
        };
        let bound = SubscriptionStatus {
            binding_clusters: vec!["ns-b/child-2".into()],
            observed_generation: Some(2),
            aggregated_statuses: vec![agg(2)],
            ..Default::default()
        };
        let not_aggregated = SubscriptionStatus {
            aggregated_statuses: vec![],
            ..bound.clone()
        };
        let one_silent = SubscriptionStatus {
            binding_clusters: vec!["ns-a/child-1".into(), "ns-b/child-2".into()],
            ..bound.clone()
        };
        let not_ready = SubscriptionStatus {
            aggregated_statuses: vec![agg(1)],
            ..bound.clone()
        };
        let both = || {
            vec![
                desc("ns-a", Some(DescriptionPhase::Success)),
                desc("ns-b", Some(DescriptionPhase::Success)),
            ]
        };
        let cases: Vec<(&str, Subscription, Vec<Description>, Option<&str>)> = vec![
            ("no status", sub(2, None), vec![], Some("not scheduled")),
            (
                "old generation",
                sub(3, Some(bound.clone())),
                vec![],
                Some("generation not scheduled"),
            ),
            (
                "one description missing",
                sub(2, Some(bound.clone())),
                vec![desc("ns-a", Some(DescriptionPhase::Success))],
                Some("child-2 is not reported"),
            ),
            (
                "one failing",
                sub(2, Some(bound.clone())),
                vec![
                    desc("ns-a", Some(DescriptionPhase::Success)),
                    desc("ns-b", Some(DescriptionPhase::Failure)),
                ],
                Some("child-2 is Failure"),
            ),
            (
                "status not aggregated",
                sub(2, Some(not_aggregated)),
                both(),
                Some("no status aggregated"),
            ),
            (
                "a cluster has not reported the workload",
                sub(2, Some(one_silent)),
                both(),
                Some("Deployment web has no status from child-1 yet"),
            ),
            (
                "replicas not ready",
                sub(2, Some(not_ready)),
                both(),
                Some("Deployment web has 1/2 ready replicas in child-2"),
            ),
            (
                "older generation applied",
                sub(2, Some(bound.clone())),
                vec![
                    desc("ns-a", Some(DescriptionPhase::Success)),
                    desc_gen("ns-b", 3, 2),
                ],
                Some("child-2 has not applied the latest Description"),
            ),
            (
                "all applied",
                sub(2, Some(bound.clone())),
                vec![
                    desc("ns-a", Some(DescriptionPhase::Success)),
                    desc("ns-b", Some(DescriptionPhase::Success)),
                ],
                None,
            ),
        ];
        for (name, s, descs, want) in cases {
            let got = unsettled(&s, &descs);
            match want {
                None => assert_eq!(got, None, "{name}"),
                Some(fragment) => {
                    let got = got.unwrap_or_default();
                    assert!(got.contains(fragment), "{name}: {got}");
                }
            }
        }
    }
}
