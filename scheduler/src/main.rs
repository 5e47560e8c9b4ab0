//! `atoll-scheduler`: Subscriptions and overrides in, one Description per chosen cluster out.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = atoll_scheduler::app::Args::parse();
    atoll_runtime::telemetry::init(&args.telemetry)?;
    atoll_scheduler::app::run(args)
        .await
        .map_err(|e| anyhow::anyhow!(e))
}
