//! What each subcommand does: read the objects from the parent cluster and print a page or a
//! `List` (once, or again on each change with `status --watch`), patch a registration's
//! status, apply and delete the Manifests of objects read from files, plan a Subscription read
//! from a file with the scheduler's planner, or print a completion script.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::process::ExitCode;

use atoll_crds::apps::{Description, Feed, Globalization, Localization, Manifest, Subscription};
use atoll_crds::atoll::FeedGrant;
use atoll_crds::clusters::{ClusterRegistrationRequest, ManagedCluster, check_registered};
use atoll_crds::known;
use atoll_runtime::args::ClientArgs;
use atoll_scheduler::controller::plan::{self as scheduler_plan, ResolvedFeed, Unresolved};
use atoll_scheduler::placement::ClusterInfo;
use atoll_scheduler::tenancy;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::discovery::Scope;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::Value;

use crate::Error;
use crate::args::{
    ApplyArgs, Cli, ClustersArgs, Command, CompletionArgs, DeleteArgs, Describe,
    DescribeClusterArgs, Get, GetManifestsArgs, InputArgs, PlanArgs, Shell, StatusArgs,
};
use crate::manifests::{self, Kind, Object};
use crate::registration::{self, Action, Decision, Lookup, ReplaceNeeded};
use crate::{clusters, describe, output, plan, status};

pub use crate::FIELD_MANAGER;

/// Runs the subcommand, writing what it prints to `out`.
pub async fn run(cli: Cli, out: &mut impl Write) -> Result<(), Error> {
    let text = match cli.command {
        Command::Clusters(a) => list_clusters(&a).await?,
        Command::Approve(a) => decide(&a.client, &a.cluster, Decision::Approve, a.replace).await?,
        Command::Deny(a) => {
            let decision = Decision::Deny { reason: a.reason };
            decide(&a.client, &a.cluster, decision, false).await?
        }
        Command::Status(a) if a.watch => return watch_status(&a, out).await,
        Command::Status(a) => subscription_status(&a).await?,
        Command::Describe(Describe::Cluster(a)) => describe_cluster(&a).await?,
        Command::Get(Get::Manifests(a)) => list_manifests(&a).await?,
        Command::Plan(a) => plan(&a).await?,
        Command::Completion(a) => completion(&a),
        // These print a line per object as they go, so that a failure leaves what was done.
        Command::Apply(a) => return apply(&a, out).await,
        Command::Delete(a) => return delete(&a, out).await,
    };
    write(out, &text)
}

/// Writes `text` to `out` and flushes it.
fn write(out: &mut impl Write, text: &str) -> Result<(), Error> {
    written(out, text).map(|_| ())
}

/// Writes `text` to `out` and flushes it; `false` when the reader has gone (a closed pipe).
fn written(out: &mut impl Write, text: &str) -> Result<bool, Error> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        // `kubectl atoll clusters | head` closes the pipe early; that is no failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(Error::WriteOutput(e)),
    }
}

/// The process's exit: success, or the error as one line on stderr and exit code 1.
pub fn exit(result: Result<(), Error>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", report(&e));
            ExitCode::FAILURE
        }
    }
}

/// `error: ` and the error with its causes, on one line: `error: a: b: c`. A cause whose text
/// the line carries already is not repeated.
pub fn report(error: &dyn std::error::Error) -> String {
    let mut line = format!("error: {error}");
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    crate::table::one_line(&line)
}

async fn connect(args: &ClientArgs) -> Result<Client, Error> {
    atoll_runtime::client::client(args)
        .await
        .map_err(Error::Connect)
}

async fn list_clusters(args: &ClustersArgs) -> Result<String, Error> {
    let client = connect(&args.client).await?;
    let clusters = Api::<ManagedCluster>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::ListManagedClusters)?
        .items;
    let requests = registration_requests(&client).await?;
    match args.output {
        None => Ok(clusters::render(&clusters, &requests, Timestamp::now())),
        Some(format) => {
            let pending: Vec<&ClusterRegistrationRequest> = requests
                .iter()
                .filter(|c| clusters::is_pending(c))
                .collect();
            let mut items = output::values(&clusters)?;
            items.extend(output::values(&pending)?);
            output::encode(&output::list(items), format)
        }
    }
}

async fn registration_requests(client: &Client) -> Result<Vec<ClusterRegistrationRequest>, Error> {
    Ok(Api::<ClusterRegistrationRequest>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::ListRegistrationRequests)?
        .items)
}

/// Sets the result of `cluster`'s registration request, as the hub README tells an administrator
/// to with `kubectl patch clsrr … --subresource=status --type=merge`.
async fn decide(
    args: &ClientArgs,
    cluster: &str,
    decision: Decision,
    replace: bool,
) -> Result<String, Error> {
    let client = connect(args).await?;
    let requests = registration_requests(&client).await?;
    let crr = registration::find(&requests, cluster).map_err(|lookup| match lookup {
        Lookup::None => Error::UnknownCluster {
            cluster: cluster.to_owned(),
        },
        Lookup::Ambiguous(candidates) => Error::AmbiguousCluster {
            cluster: cluster.to_owned(),
            candidates,
        },
    })?;
    let name = crr.name_any();
    let resource = format!("clusterregistrationrequest.clusters.clusternet.io/{name}");
    let (patch, done) = match registration::action(crr, &decision, replace) {
        Ok(Action::AlreadyApproved) => return Ok(format!("{resource} already approved\n")),
        Ok(Action::Write { patch, done }) => (patch, done),
        Err(ReplaceNeeded { request }) => {
            return Err(Error::ReplaceNeeded {
                name,
                bootstrap_token_id: request.bootstrap_token_id,
                peer: request.peer.unwrap_or_else(|| "an unknown address".into()),
                requested_at: request
                    .requested_at
                    .map(|t| t.0.to_string())
                    .unwrap_or_else(|| "an unknown time".into()),
            });
        }
    };
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    Api::<ClusterRegistrationRequest>::all(client)
        .patch_status(&name, &params, &Patch::Merge(patch))
        .await
        .map_err(|source| Error::PatchRegistrationStatus {
            name: name.clone(),
            source,
        })?;
    Ok(format!("{resource} {done}\n"))
}

/// The Subscription's namespace: `-n`, else the kubeconfig context's.
fn status_namespace(client: &Client, args: &StatusArgs) -> String {
    args.namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned())
}

/// The label selector of a Subscription's Descriptions.
fn descriptions_of(namespace: &str, name: &str) -> String {
    format!(
        "{}={name},{}={namespace}",
        known::LABEL_SUBS_NAME,
        known::LABEL_SUBS_NAMESPACE
    )
}

async fn subscription_status(args: &StatusArgs) -> Result<String, Error> {
    let client = connect(&args.client).await?;
    let namespace = status_namespace(&client, args);
    status_page(&client, &namespace, args).await
}

/// The `status` page (or `List`) of the Subscription as it is now.
async fn status_page(client: &Client, namespace: &str, args: &StatusArgs) -> Result<String, Error> {
    let name = &args.subscription;
    let sub = Api::<Subscription>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .map_err(|source| Error::GetSubscription {
            namespace: namespace.to_owned(),
            name: name.clone(),
            source,
        })?
        .ok_or_else(|| Error::UnknownSubscription {
            namespace: namespace.to_owned(),
            name: name.clone(),
        })?;
    let descriptions = Api::<Description>::all(client.clone())
        .list(&ListParams::default().labels(&descriptions_of(namespace, name)))
        .await
        .map_err(|source| Error::ListDescriptions {
            namespace: namespace.to_owned(),
            name: name.clone(),
            source,
        })?
        .items;
    match args.output {
        None => Ok(status::render(&sub, &descriptions, Timestamp::now())),
        Some(format) => {
            let mut items = output::values(std::slice::from_ref(&sub))?;
            items.extend(output::values(&descriptions)?);
            output::encode(&output::list(items), format)
        }
    }
}

/// Whether a watch event may change the page: an object added, modified or deleted, or the
/// end of a (re)list.
fn changes<K>(event: &kube::runtime::watcher::Event<K>) -> bool {
    use kube::runtime::watcher::Event;
    matches!(event, Event::Apply(_) | Event::Delete(_) | Event::InitDone)
}

/// `status --watch`: the page, then the page again after a blank line whenever a watch event
/// on the Subscription or one of its Descriptions changes it, until Ctrl-C. A Subscription
/// deleted meanwhile is a page saying so; the watch goes on.
async fn watch_status(args: &StatusArgs, out: &mut impl Write) -> Result<(), Error> {
    use futures::StreamExt;
    use kube::runtime::watcher;

    let client = connect(&args.client).await?;
    let namespace = status_namespace(&client, args);
    let name = &args.subscription;
    let mut last = status_page(&client, &namespace, args).await?;
    if !written(out, &last)? {
        return Ok(());
    }
    let subs = watcher::watcher(
        Api::<Subscription>::namespaced(client.clone(), &namespace),
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .map(|e| e.map(|e| changes(&e)))
    .boxed();
    let descs = watcher::watcher(
        Api::<Description>::all(client.clone()),
        watcher::Config::default().labels(&descriptions_of(&namespace, name)),
    )
    .map(|e| e.map(|e| changes(&e)))
    .boxed();
    let mut events = futures::stream::select(subs, descs);
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let event = tokio::select! {
            _ = &mut interrupted => return Ok(()),
            event = events.next() => event,
        };
        match event {
            None => return Ok(()),
            Some(Err(source)) => {
                return Err(Error::WatchSubscription {
                    namespace,
                    name: name.clone(),
                    source,
                });
            }
            Some(Ok(false)) => {}
            Some(Ok(true)) => {
                let page = match status_page(&client, &namespace, args).await {
                    Err(e @ Error::UnknownSubscription { .. }) => format!("{e}\n"),
                    other => other?,
                };
                if page != last {
                    if !written(out, &format!("\n{page}"))? {
                        return Ok(());
                    }
                    last = page;
                }
            }
        }
    }
}

/// `describe cluster`: the ManagedCluster, the Descriptions in its dedicated namespace and the
/// Events whose `involvedObject` is the ManagedCluster.
async fn describe_cluster(args: &DescribeClusterArgs) -> Result<String, Error> {
    let client = connect(&args.client).await?;
    let all = Api::<ManagedCluster>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::ListManagedClusters)?
        .items;
    let mc = describe::find(&all, &args.cluster).map_err(|lookup| match lookup {
        describe::Lookup::None => Error::UnknownManagedCluster {
            cluster: args.cluster.clone(),
        },
        describe::Lookup::Ambiguous(candidates) => Error::AmbiguousManagedCluster {
            cluster: args.cluster.clone(),
            candidates,
        },
    })?;
    let namespace = mc.metadata.namespace.clone().unwrap_or_default();
    let descriptions = Api::<Description>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default())
        .await
        .map_err(|source| Error::ListNamespaceDescriptions {
            namespace: namespace.clone(),
            source,
        })?
        .items;
    // The fields `kubectl describe` selects the events of an object by.
    let selector = format!(
        "involvedObject.kind={},involvedObject.name={},involvedObject.namespace={namespace}",
        ManagedCluster::kind(&()),
        mc.name_any()
    );
    let events = Api::<Event>::namespaced(client, &namespace)
        .list(&ListParams::default().fields(&selector))
        .await
        .map_err(|source| Error::ListEvents {
            namespace: namespace.clone(),
            source,
        })?
        .items;
    Ok(describe::render(
        mc,
        &descriptions,
        &events,
        Timestamp::now(),
    ))
}

/// The `kind` of a Manifest in kubectl's output, `manifest.apps.clusternet.io`.
fn manifest_resource() -> String {
    format!("manifest.{}", Manifest::group(&()))
}

/// Every object of the inputs, read and parsed in order; nothing is written before all are.
async fn read_objects(input: &InputArgs, verb: &'static str) -> Result<Vec<Object>, Error> {
    let mut objects = Vec::new();
    if let Some(dir) = &input.kustomize {
        let name = format!("kustomize {}", dir.display());
        objects.extend(manifests::parse(&kustomize(dir).await?, &name)?);
    }
    for file in &input.filename {
        for (name, text) in read_input(file)? {
            objects.extend(manifests::parse(&text, &name)?);
        }
    }
    if objects.is_empty() {
        return Err(Error::NoObjects { verb });
    }
    Ok(objects)
}

/// The texts `-f FILE` names, with their names: stdin for `-`, a directory's `.yaml`, `.yml`
/// and `.json` files in name order, or the file.
fn read_input(file: &str) -> Result<Vec<(String, String)>, Error> {
    let failed = |input: &str| {
        let input = input.to_owned();
        move |source| Error::ReadInput { input, source }
    };
    if file == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(failed(file))?;
        return Ok(vec![(file.to_owned(), text)]);
    }
    let path = Path::new(file);
    if !path.is_dir() {
        let text = std::fs::read_to_string(path).map_err(failed(file))?;
        return Ok(vec![(file.to_owned(), text)]);
    }
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(path).map_err(failed(file))? {
        let p = entry.map_err(failed(file))?.path();
        let known = p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| manifests::EXTENSIONS.contains(&e));
        if known && p.is_file() {
            paths.push(p);
        }
    }
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let name = p.display().to_string();
            let text = std::fs::read_to_string(&p).map_err(failed(&name))?;
            Ok((name, text))
        })
        .collect()
}

/// What `kubectl kustomize DIR` prints.
async fn kustomize(dir: &Path) -> Result<String, Error> {
    let shown = dir.display().to_string();
    let out = tokio::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(dir)
        .output()
        .await
        .map_err(|source| Error::RunKustomize {
            dir: shown.clone(),
            source,
        })?;
    if !out.status.success() {
        return Err(Error::Kustomize {
            dir: shown,
            message: crate::table::one_line(&String::from_utf8_lossy(&out.stderr)),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The Manifest of each object, its kind found by API discovery of the parent cluster (one
/// query per group version and kind).
async fn to_manifests(
    client: &Client,
    objects: &[Object],
    namespace: Option<&str>,
) -> Result<Vec<Manifest>, Error> {
    let default_namespace = namespace.unwrap_or(client.default_namespace());
    let mut kinds: BTreeMap<(String, String), Kind> = BTreeMap::new();
    let mut out = Vec::new();
    for object in objects {
        let key = (object.api_version().to_owned(), object.kind().to_owned());
        if !kinds.contains_key(&key) {
            let (group, version) = object.group_version();
            let gvk = GroupVersionKind::gvk(group, version, object.kind());
            let (resource, caps) =
                kube::discovery::pinned_kind(client, &gvk)
                    .await
                    .map_err(|source| Error::UnknownKind {
                        api_version: key.0.clone(),
                        kind: key.1.clone(),
                        source,
                    })?;
            let kind = Kind {
                plural: resource.plural,
                namespaced: caps.scope == Scope::Namespaced,
            };
            kinds.insert(key.clone(), kind);
        }
        if let Some(kind) = kinds.get(&key) {
            out.push(manifests::manifest(object, kind, default_namespace));
        }
    }
    Ok(out)
}

/// `apply`: reads every object and finds its kind, then server-side applies each Manifest,
/// printing `manifest.apps.clusternet.io/NAME configured` as kubectl does.
async fn apply(args: &ApplyArgs, out: &mut impl Write) -> Result<(), Error> {
    let objects = read_objects(&args.input, "apply").await?;
    let client = connect(&args.client).await?;
    let all = to_manifests(&client, &objects, args.input.namespace.as_deref()).await?;
    let manager = match &args.field_manager {
        Some(manager) => manager.clone(),
        None => manifests::field_manager(who_am_i(&client).await?.as_deref()),
    };
    let api = Api::<Manifest>::namespaced(client, known::NAMESPACE_RESERVED);
    let mut params = PatchParams::apply(&manager);
    params.force = args.force_conflicts;
    for m in all {
        let name = m.name_any();
        api.patch(&name, &params, &Patch::Apply(&m))
            .await
            .map_err(|source| match source {
                kube::Error::Api(status) if status.code == 409 => Error::ManifestConflict {
                    name: name.clone(),
                    manager: manager.clone(),
                    message: status.message,
                },
                source => Error::ApplyManifest {
                    name: name.clone(),
                    source,
                },
            })?;
        write(out, &format!("{}/{name} configured\n", manifest_resource()))?;
    }
    Ok(())
}

/// The user the parent's API server authenticates this client as (a SelfSubjectReview), or
/// `None` where it does not serve SelfSubjectReviews.
async fn who_am_i(client: &Client) -> Result<Option<String>, Error> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let review = SelfSubjectReview::default();
    match Api::<SelfSubjectReview>::all(client.clone())
        .create(&kube::api::PostParams::default(), &review)
        .await
    {
        Ok(answer) => Ok(answer
            .status
            .and_then(|s| s.user_info)
            .and_then(|u| u.username)),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(None),
        Err(source) => Err(Error::ReviewSelf(source)),
    }
}

/// `delete -f`: deletes the Manifest of each object, printing `… deleted`; the ones that do
/// not exist are named in the error at the end.
async fn delete(args: &DeleteArgs, out: &mut impl Write) -> Result<(), Error> {
    let objects = read_objects(&args.input, "delete").await?;
    let client = connect(&args.client).await?;
    let all = to_manifests(&client, &objects, args.input.namespace.as_deref()).await?;
    let api = Api::<Manifest>::namespaced(client, known::NAMESPACE_RESERVED);
    let mut missing = Vec::new();
    for m in all {
        let name = m.name_any();
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => write(out, &format!("{}/{name} deleted\n", manifest_resource()))?,
            Err(kube::Error::Api(e)) if e.code == 404 => missing.push(name),
            Err(source) => return Err(Error::DeleteManifest { name, source }),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Error::ManifestsNotFound { names: missing })
    }
}

/// `get manifests`: the Manifests in the reserved namespace.
async fn list_manifests(args: &GetManifestsArgs) -> Result<String, Error> {
    let client = connect(&args.client).await?;
    let all = Api::<Manifest>::namespaced(client, known::NAMESPACE_RESERVED)
        .list(&ListParams::default())
        .await
        .map_err(Error::ListManifests)?
        .items;
    match args.output {
        None => Ok(manifests::render(&all, Timestamp::now())),
        Some(format) => output::encode(&output::list(output::values(&all)?), format),
    }
}

/// The plugin's executable, as completion scripts name it.
const BIN: &str = "kubectl-atoll";

/// `completion SHELL`: the completion script of the [`Cli`], for the command `kubectl-atoll`.
///
/// clap_complete's bash script spells its states two ways when the command's name has a hyphen,
/// so nothing after a subcommand completes (clap-rs/clap#6421): the bash script is generated
/// for `kubectl_atoll` (its function `_kubectl_atoll`) and registered for `kubectl-atoll`.
fn completion(args: &CompletionArgs) -> String {
    use clap::CommandFactory;
    let shell = args.shell.generator();
    let name = match args.shell {
        Shell::Bash => BIN.replace('-', "_"),
        Shell::Zsh | Shell::Fish => BIN.to_owned(),
    };
    let mut script = Vec::new();
    let mut command = Cli::command();
    clap_complete::generate(shell, &mut command, name.as_str(), &mut script);
    let script = String::from_utf8_lossy(&script);
    match args.shell {
        // Only the `complete -F _kubectl_atoll … kubectl_atoll` lines end with the name.
        Shell::Bash => script.replace(&format!(" {name}\n"), &format!(" {BIN}\n")),
        Shell::Zsh | Shell::Fish => script.into_owned(),
    }
}

/// The ManagedClusters a placement may choose, as the scheduler's `registered_clusters` picks
/// them: not being deleted, and registered by the hub ([`check_registered`]).
fn registered(
    clusters: &[ManagedCluster],
    requests: &[ClusterRegistrationRequest],
) -> Vec<ClusterInfo> {
    clusters
        .iter()
        .filter(|mc| mc.metadata.deletion_timestamp.is_none())
        .filter(|mc| {
            let name = known::cluster_registration_request_name(&mc.spec.cluster_id);
            let crr = requests.iter().find(|c| c.name_any() == name);
            check_registered(mc, crr).is_ok()
        })
        .map(ClusterInfo::from_managed_cluster)
        .collect()
}

/// Resolves `feed` for a Subscription in `namespace` as the scheduler does: its kind by
/// discovery, then the Manifest's template when there is one (judged as the object it holds:
/// refused unless granted, or when it holds another object than its labels name); else the live
/// object (refused unless granted), or why there is none.
async fn resolve_feed(
    client: &Client,
    feed: &Feed,
    namespace: &str,
    manifests: &[Manifest],
    grants: &[&FeedGrant],
) -> Result<Result<Value, Unresolved>, Error> {
    let (group, version) = scheduler_plan::split_api_version(&feed.api_version);
    let gvk = GroupVersionKind::gvk(group, version, &feed.kind);
    let found = match kube::discovery::pinned_kind(client, &gvk).await {
        Ok(found) => Some(found),
        Err(kube::Error::Api(e)) if e.code == 404 => None,
        Err(kube::Error::Discovery(_)) => None,
        Err(source) => {
            return Err(Error::DiscoverFeedKind {
                feed: feed.key(),
                source,
            });
        }
    };
    if let Some(template) = plan::manifest_template(feed, manifests) {
        // A kind the parent does not serve counts as cluster-scoped, as in the scheduler.
        let namespaced = found
            .as_ref()
            .is_some_and(|(_, caps)| caps.scope == Scope::Namespaced);
        let owner = tenancy::feed_owner(feed, namespaced);
        if let Some(refusal) = plan::refused(feed, &owner, namespace, grants) {
            return Ok(Err(refusal));
        }
        return Ok(
            match scheduler_plan::manifest_difference(feed, &template, namespaced) {
                Some(difference) => Err(Unresolved::manifest_not_its_feed(feed, &difference)),
                None => Ok(template),
            },
        );
    }
    let Some((resource, caps)) = found else {
        return Ok(Err(Unresolved::kind_not_served(feed)));
    };
    let namespaced = caps.scope == Scope::Namespaced;
    let owner = tenancy::feed_owner(feed, namespaced);
    if let Some(refusal) = plan::refused(feed, &owner, namespace, grants) {
        return Ok(Err(refusal));
    }
    let api: Api<DynamicObject> = if namespaced {
        let ns = feed.namespace.as_deref().filter(|ns| !ns.is_empty());
        Api::namespaced_with(client.clone(), ns.unwrap_or("default"), &resource)
    } else {
        Api::all_with(client.clone(), &resource)
    };
    let object = api
        .get_opt(&feed.name)
        .await
        .map_err(|source| Error::GetFeed {
            feed: feed.key(),
            source,
        })?;
    let Some(mut object) = object else {
        return Ok(Err(Unresolved::not_found(feed)));
    };
    object.metadata.managed_fields = None;
    let mut value = serde_json::to_value(&object).map_err(Error::EncodeJson)?;
    // As the scheduler does: a DynamicObject does not always carry apiVersion and kind.
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), Value::from(feed.api_version.clone()));
        map.insert("kind".into(), Value::from(feed.kind.clone()));
    }
    Ok(Ok(value))
}

/// Lists every object of kind `K` in all namespaces, or fails with `failed`.
async fn list_all<K>(client: &Client, failed: fn(kube::Error) -> Error) -> Result<Vec<K>, Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(failed)?
        .items)
}

/// `plan -f`: reads the Subscription, then what the scheduler reads (registered clusters,
/// overrides, FeedGrants, Manifests, each feed, the current binding if the Subscription
/// exists), and prints the scheduler's plan. Writes nothing.
async fn plan(args: &PlanArgs) -> Result<String, Error> {
    let inputs = read_input(&args.filename)?;
    let client = connect(&args.client).await?;
    let default_namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let sub = plan::read_subscription(&inputs, &args.filename, &default_namespace)?;
    let namespace = sub.metadata.namespace.clone().unwrap_or_default();
    let name = sub.metadata.name.clone().unwrap_or_default();

    let clusters = list_all::<ManagedCluster>(&client, Error::ListManagedClusters).await?;
    let requests = registration_requests(&client).await?;
    let clusters = registered(&clusters, &requests);
    let globalizations = list_all::<Globalization>(&client, Error::ListGlobalizations).await?;
    let localizations = list_all::<Localization>(&client, Error::ListLocalizations).await?;
    let grants = list_all::<FeedGrant>(&client, Error::ListFeedGrants).await?;
    let manifests = Api::<Manifest>::namespaced(client.clone(), known::NAMESPACE_RESERVED)
        .list(&ListParams::default())
        .await
        .map_err(Error::ListManifests)?
        .items;
    let existing = Api::<Subscription>::namespaced(client.clone(), &namespace)
        .get_opt(&name)
        .await
        .map_err(|source| Error::GetSubscription {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        })?;
    let bound = existing
        .and_then(|s| s.status)
        .map(|s| s.binding_clusters)
        .unwrap_or_default();

    let grant_refs: Vec<&FeedGrant> = grants.iter().collect();
    let mut resolved = Vec::with_capacity(sub.spec.feeds.len());
    // As the scheduler: too many feeds are refused by the planner before any is resolved.
    if sub.spec.feeds.len() <= scheduler_plan::MAX_FEEDS {
        for feed in &sub.spec.feeds {
            let object = resolve_feed(&client, feed, &namespace, &manifests, &grant_refs).await?;
            resolved.push(ResolvedFeed {
                feed: feed.clone(),
                object,
            });
        }
    }
    let globs: Vec<&Globalization> = globalizations.iter().collect();
    let locs: Vec<&Localization> = localizations.iter().collect();
    let planned = scheduler_plan::plan(&sub.spec, &resolved, &clusters, &globs, &locs, &bound);
    match args.output {
        None => plan::render(&sub, &planned, clusters.len(), args.show_objects),
        Some(format) => {
            let status = plan::planned_subscription(&sub, &planned, Timestamp::now());
            let mut items = output::values(std::slice::from_ref(&status))?;
            items.extend(output::values(&plan::descriptions(&sub, &planned))?);
            output::encode(&output::list(items), format)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_reported_on_one_line_with_its_causes_once() {
        let e = Error::UnknownSubscription {
            namespace: "shop".into(),
            name: "web".into(),
        };
        assert_eq!(
            report(&e),
            "error: subscription \"web\" not found in namespace \"shop\""
        );
        let io = std::io::Error::other("disk\nfull");
        let e = Error::WriteOutput(io);
        assert_eq!(report(&e), "error: failed to write the output: disk full");
    }

    #[test]
    fn a_watch_redraws_on_changes_and_at_the_end_of_a_list_only() {
        use kube::runtime::watcher::Event;
        let sub = || Subscription::new("web", Default::default());
        assert!(changes(&Event::Apply(sub())));
        assert!(changes(&Event::Delete(sub())));
        assert!(changes(&Event::<Subscription>::InitDone));
        assert!(!changes(&Event::<Subscription>::Init));
        assert!(!changes(&Event::InitApply(sub())));
    }

    #[test]
    fn a_closed_pipe_is_no_failure_but_stops_the_output() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        assert!(!written(&mut Closed, "page").unwrap());
        assert!(write(&mut Closed, "page").is_ok());
        let mut buf = Vec::new();
        assert!(written(&mut buf, "page").unwrap());
        assert_eq!(buf, b"page");
    }

    #[test]
    fn a_cause_already_in_the_message_is_not_repeated() {
        let e = Error::Connect(atoll_runtime::Error::LoadKubeconfig(
            kube::config::KubeconfigError::CurrentContextNotSet,
        ));
        assert_eq!(
            report(&e),
            "error: cannot reach the parent cluster: failed to load the kubeconfig: failed to \
             determine current context"
        );
    }
}
