//! What each subcommand does: read the objects from the parent cluster, print a page or a
//! `List`, or patch a registration's status.

use std::io::Write;
use std::process::ExitCode;

use atoll_crds::apps::{Description, Subscription};
use atoll_crds::clusters::{ClusterRegistrationRequest, ManagedCluster};
use atoll_crds::known;
use atoll_runtime::args::ClientArgs;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};

use crate::Error;
use crate::args::{Cli, ClustersArgs, Command, StatusArgs};
use crate::registration::{self, Decision, Lookup};
use crate::{clusters, output, status};

/// Field manager of the plugin's writes, as the API server records it in `managedFields`.
pub const FIELD_MANAGER: &str = "kubectl-atoll";

/// Runs the subcommand, writing what it prints to `out`.
pub async fn run(cli: Cli, out: &mut impl Write) -> Result<(), Error> {
    let text = match cli.command {
        Command::Clusters(a) => list_clusters(&a).await?,
        Command::Approve(a) => decide(&a.client, &a.cluster, Decision::Approve).await?,
        Command::Deny(a) => {
            let decision = Decision::Deny { reason: a.reason };
            decide(&a.client, &a.cluster, decision).await?
        }
        Command::Status(a) => subscription_status(&a).await?,
    };
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        // `kubectl atoll clusters | head` closes the pipe early; that is no failure.
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::WriteOutput(e)),
        _ => Ok(()),
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
async fn decide(args: &ClientArgs, cluster: &str, decision: Decision) -> Result<String, Error> {
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
    if decision == Decision::Approve
        && crr.status.as_ref().and_then(|s| s.result) == Some(decision.result())
    {
        return Ok(format!("{resource} already approved\n"));
    }
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    Api::<ClusterRegistrationRequest>::all(client)
        .patch_status(&name, &params, &Patch::Merge(decision.status_patch()))
        .await
        .map_err(|source| Error::PatchRegistrationStatus {
            name: name.clone(),
            source,
        })?;
    Ok(format!("{resource} {}\n", decision.verb()))
}

async fn subscription_status(args: &StatusArgs) -> Result<String, Error> {
    let client = connect(&args.client).await?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let name = &args.subscription;
    let sub = Api::<Subscription>::namespaced(client.clone(), &namespace)
        .get_opt(name)
        .await
        .map_err(|source| Error::GetSubscription {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        })?
        .ok_or_else(|| Error::UnknownSubscription {
            namespace: namespace.clone(),
            name: name.clone(),
        })?;
    let selector = format!(
        "{}={name},{}={namespace}",
        known::LABEL_SUBS_NAME,
        known::LABEL_SUBS_NAMESPACE
    );
    let descriptions = Api::<Description>::all(client)
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::ListDescriptions {
            namespace: namespace.clone(),
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
