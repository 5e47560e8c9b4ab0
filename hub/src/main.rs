//! `atoll-hub`: see `atoll_hub::app`.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    Ok(atoll_hub::app::run(atoll_hub::args::HubArgs::parse()).await?)
}
