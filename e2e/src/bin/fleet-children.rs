//! `fleet-children`: see `atoll_e2e::children_host`.

use clap::Parser;

/// mimalloc rather than glibc's malloc: see the workspace's `Cargo.toml`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    match atoll_e2e::children_host::main(atoll_e2e::children_host::Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet-children: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
