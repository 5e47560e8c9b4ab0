//! `atoll-agent`: see `atoll_agent::app`.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    Ok(atoll_agent::app::run(atoll_agent::app::Args::parse()).await?)
}
