//! `fleet`: see `atoll_e2e::app`.

use clap::Parser;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match atoll_e2e::app::run(atoll_e2e::app::Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
