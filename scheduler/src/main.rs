//! `atoll-scheduler`: Subscriptions and overrides in, one Description per chosen cluster out.

use clap::Parser;

/// mimalloc rather than glibc's malloc: see the workspace's `Cargo.toml`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    Ok(atoll_scheduler::app::run(atoll_scheduler::app::Args::parse()).await?)
}
