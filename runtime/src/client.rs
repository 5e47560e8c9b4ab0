//! Building the kube client from [`ClientArgs`](crate::args::ClientArgs).

use crate::Error;
use crate::args::ClientArgs;
use kube::config::{Config, KubeConfigOptions, Kubeconfig};

/// Builds a client from `--kubeconfig`/`--context`, or infers the configuration as kubectl does
/// (`KUBECONFIG`, `~/.kube/config`, then in-cluster).
pub async fn client(args: &ClientArgs) -> Result<kube::Client, Error> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path).map_err(Error::LoadKubeconfig)?;
            Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(Error::LoadKubeconfig)?
        }
        None if args.context.is_some() => Config::from_kubeconfig(&options)
            .await
            .map_err(Error::LoadKubeconfig)?,
        None => Config::infer().await.map_err(Error::InferConfig)?,
    };
    kube::Client::try_from(config).map_err(Error::BuildClient)
}
