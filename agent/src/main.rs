//! `atoll-agent`: see `atoll_agent::cli`.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    atoll_agent::cli::run(atoll_agent::cli::Args::parse()).await
}
