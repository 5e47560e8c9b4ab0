//! `kubectl-atoll`: see `kubectl_atoll::app`.

use clap::Parser;
use std::process::ExitCode;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = kubectl_atoll::args::Cli::parse();
    kubectl_atoll::app::exit(kubectl_atoll::app::run(cli, &mut std::io::stdout().lock()).await)
}
