//! `atoll-agent`: see `atoll_agent::app`.

use clap::Parser;

/// mimalloc rather than glibc's malloc: see the workspace's `Cargo.toml`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    Ok(atoll_agent::app::run(atoll_agent::app::Args::parse()).await?)
}
