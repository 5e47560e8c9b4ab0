//! `atoll-hub`: see `atoll_hub::app`.

use clap::Parser;

/// mimalloc rather than glibc's malloc: see the workspace's `Cargo.toml`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    Ok(atoll_hub::app::run(atoll_hub::args::HubArgs::parse()).await?)
}
