//! Writes the atoll CRDs and the API reference, or checks them for drift.
//!
//! ```text
//! crdgen --out manifests/crds [--docs docs/api.md]     # regenerate (make crds)
//! crdgen --check manifests/crds [--docs docs/api.md]   # exit 1 naming drifted files (make crds-check)
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: crdgen (--out DIR | --check DIR) [--docs FILE]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mode, dir, docs) = match args.as_slice() {
        [mode, dir] => (mode, dir, None),
        [mode, dir, flag, docs] if flag == "--docs" => (mode, dir, Some(PathBuf::from(docs))),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let reference = atoll_crds::apidoc::api_reference();
    match mode.as_str() {
        "--out" => {
            match atoll_crds::crdgen::write(&PathBuf::from(dir)) {
                Ok(files) => println!("wrote {} files to {dir}", files.len()),
                Err(e) => {
                    eprintln!("crdgen: {e}");
                    return ExitCode::FAILURE;
                }
            }
            if let Some(docs) = docs {
                if let Err(e) = std::fs::write(&docs, reference) {
                    eprintln!("crdgen: failed to write {}: {e}", docs.display());
                    return ExitCode::FAILURE;
                }
                println!("wrote {}", docs.display());
            }
            ExitCode::SUCCESS
        }
        "--check" => {
            let mut ok = true;
            if let Err(e) = atoll_crds::crdgen::check(&PathBuf::from(dir)) {
                eprintln!("crdgen: {e}");
                ok = false;
            }
            if let Some(docs) = docs
                && std::fs::read_to_string(&docs).ok().as_deref() != Some(reference.as_str())
            {
                eprintln!(
                    "crdgen: {} differs from the API types; run `make crds`",
                    docs.display()
                );
                ok = false;
            }
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
