//! `atoll-images`: builds the OCI image archives of `make images`.

use atoll_images::host::{Inputs, build_images};
use clap::Parser;
use std::path::PathBuf;

/// Builds OCI image archives of the scheduler, the hub, the agent and kubectl-atoll from the
/// release binaries, without a container daemon.
#[derive(Parser, Debug)]
struct Args {
    /// The directory of the release binaries.
    #[arg(long, default_value = "target/release")]
    bin_dir: PathBuf,
    /// helm, for the hub's and the agent's images.
    #[arg(long)]
    helm: PathBuf,
    /// The CA bundle the images carry.
    #[arg(long, default_value = "/etc/ssl/certs/ca-certificates.crt")]
    ca_bundle: PathBuf,
    /// The repository the images are named in.
    #[arg(long, default_value = "localhost")]
    repository: String,
    /// Their tag.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    tag: String,
    /// Where the archives go.
    #[arg(long, default_value = "target/images")]
    out: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let inputs = Inputs {
        bin_dir: args.bin_dir,
        helm: args.helm,
        ca_bundle: args.ca_bundle,
        repository: args.repository,
        tag: args.tag,
    };
    for built in build_images(&inputs, &args.out)? {
        println!(
            "{} {} {} ({:.1} MiB)",
            built.reference,
            built.digest,
            built.archive.display(),
            built.size as f64 / (1024.0 * 1024.0)
        );
    }
    Ok(())
}
