//! `devcluster`: run an embedded kube-apiserver stand-in (local runs and tests only); see
//! `devcluster::app`.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    Ok(devcluster::app::run(devcluster::app::Args::parse()).await?)
}
