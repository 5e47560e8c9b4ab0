//! Writes the atoll CRDs (`--out DIR`) or checks a directory for drift (`--check DIR`).
//!
//! ```text
//! crdgen --out manifests/crds     # regenerate (make crds)
//! crdgen --check manifests/crds   # exit 1 naming drifted files (make crds-check)
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: crdgen --out DIR | --check DIR";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [flag, dir] if flag == "--out" => match atoll_crds::crdgen::write(&PathBuf::from(dir)) {
            Ok(files) => {
                println!("wrote {} files to {dir}", files.len());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("crdgen: {e}");
                ExitCode::FAILURE
            }
        },
        [flag, dir] if flag == "--check" => match atoll_crds::crdgen::check(&PathBuf::from(dir)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("crdgen: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
