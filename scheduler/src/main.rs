//! `atoll-scheduler`: Subscriptions and overrides in, one Description per chosen cluster out.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    Ok(atoll_scheduler::app::run(atoll_scheduler::app::Args::parse()).await?)
}
