//! `devcluster`: run an embedded kube-apiserver stand-in (local runs and tests only); see
//! `devcluster::app`.

use clap::Parser;

/// mimalloc rather than glibc's malloc, as in atoll's binaries (see the workspace's
/// `Cargo.toml`): glibc's allocator was a quarter to a third of the parent devcluster's CPU in
/// the 1,000-cluster fleet benchmark (docs/bench/README.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    Ok(devcluster::app::run(devcluster::app::Args::parse()).await?)
}
