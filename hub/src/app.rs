//! The `atoll-hub` process: flags in, the hub served until SIGINT/SIGTERM.

use crate::Error;
use crate::args::HubArgs;
use crate::run::{self, HubConfig};
use atoll_runtime::process::Process;

/// Runs the hub until SIGINT/SIGTERM, then closes the agents' streams (they reconnect to
/// another replica) and stops.
pub async fn run(args: HubArgs) -> Result<(), Error> {
    let mut process = Process::start(&args.telemetry, &args.client).await?;
    if args.insecure {
        tracing::warn!(
            "serving plaintext gRPC (--insecure): use --tls-cert/--tls-key outside local demos"
        );
    }
    let client = process.client();
    let readiness = process.readiness();
    let mut hub = run::start(
        client,
        HubConfig::from_args(&args),
        process.registry(),
        readiness,
    )
    .await?;
    process
        .run(&args.admin, |shutdown| async move {
            tokio::select! {
                () = shutdown.requested() => hub.stop().await,
                e = hub.server_ended() => {
                    tracing::error!(error = %e, "the gRPC server stopped");
                    Err(e)
                }
            }
        })
        .await
}
