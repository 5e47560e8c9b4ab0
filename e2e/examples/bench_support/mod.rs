//! What the failover and cold-start benchmarks share (`bench_failover.rs`, `bench_cold_start.rs`):
//! where the binaries are, progress lines, a guard that stops the fleet, the machine's figures
//! and duration formatting. A directory module, so that Cargo does not take it for an example.

use std::fmt::Display;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use atoll_bench::loadavg;
use atoll_e2e::fleet;
use atoll_e2e::plan::{Backend, Layout};

/// `ATOLL_BIN_DIR`, or the directory above this example's (`target/release/examples/x` →
/// `target/release`).
pub fn bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("ATOLL_BIN_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().context("locating this executable")?;
    let dir = exe.parent().context("the executable has no directory")?;
    Ok(if dir.file_name().is_some_and(|n| n == "examples") {
        dir.parent().unwrap_or(dir).to_path_buf()
    } else {
        dir.to_path_buf()
    })
}

/// The fleet options both benchmarks use: devcluster children with 3 simulated nodes whose
/// workloads turn ready `workload_delay_ms` after each change, the hub and the scheduler with
/// the fleet launcher's flags (their defaults, plus `--insecure` and `--auto-approve`).
pub fn up_options(dir: &Path, children: usize, workload_delay_ms: u64) -> Result<fleet::UpOptions> {
    Ok(fleet::UpOptions {
        dir: dir.to_path_buf(),
        children,
        bin_dir: bin_dir()?,
        manifests: Path::new(env!("CARGO_MANIFEST_DIR")).join("../manifests"),
        nodes: 3,
        workload_delay_ms,
        timeout: Duration::from_secs(180).max(Duration::from_millis(600 * children as u64)),
        backend: Backend::Devcluster,
        persist_parent: false,
        detours: Default::default(),
        real_nodes: false,
    })
}

/// What a parent of `backend` is, for tables.
pub fn parent_name(backend: Backend) -> &'static str {
    match backend {
        Backend::Devcluster => "devcluster",
        Backend::Kube => "kube-apiserver and etcd",
    }
}

/// `--parent devcluster|kube`'s value.
pub fn parse_parent(value: Option<&str>) -> Result<Backend> {
    match value {
        Some("devcluster") => Ok(Backend::Devcluster),
        Some("kube") => Ok(Backend::Kube),
        other => Err(anyhow!("--parent {other:?}: give devcluster or kube")),
    }
}

/// Progress on stderr, stamped with the time since `started`.
pub fn log(started: Instant, msg: &str) {
    eprintln!("[{:>7.1}s] {msg}", started.elapsed().as_secs_f64());
}

/// Cores and the three load averages, e.g. `2 cores, load 1.20 0.90 0.70`.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    format!("{cores} cores, load {}", loadavg())
}

/// Stops the fleet in `dir` when dropped: at the end, on an error, on Ctrl-C (the run's future is
/// dropped) and on a panic. Logs are kept unless the run succeeded.
pub struct FleetGuard {
    /// The fleet directory.
    pub dir: PathBuf,
    /// Set once the run succeeded: the directory is removed with its logs.
    pub succeeded: bool,
    /// Prefix of the messages (the benchmark's name).
    pub who: &'static str,
}

impl Drop for FleetGuard {
    fn drop(&mut self) {
        let (dir, who) = (self.dir.clone(), self.who);
        if !Layout::new(&dir).state().is_file() {
            // Nothing running: `fleet up` failed and stopped what it had started itself.
            eprintln!("{who}: logs kept in {}/logs", dir.display());
            return;
        }
        eprintln!("{who}: stopping the fleet in {}", dir.display());
        // A runtime of its own on a thread of its own: this may run inside the main runtime.
        let outcome = std::thread::spawn(move || -> Result<Vec<String>> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let results = rt.block_on(fleet::down(&dir, Duration::from_secs(5)))?;
            Ok(results
                .into_iter()
                .filter_map(|(name, r)| r.err().map(|e| format!("{name}: {e}")))
                .collect())
        })
        .join();
        match outcome {
            Ok(Ok(failed)) if failed.is_empty() => {}
            Ok(Ok(failed)) => eprintln!(
                "{who}: some processes could not be stopped: {}",
                failed.join("; ")
            ),
            Ok(Err(e)) => eprintln!("{who}: fleet down failed: {e:#}"),
            Err(_) => eprintln!("{who}: fleet down panicked"),
        }
        if self.succeeded {
            let _ = std::fs::remove_dir_all(&self.dir);
        } else {
            eprintln!("{who}: logs kept in {}/logs", self.dir.display());
        }
    }
}

/// Milliseconds with one decimal.
pub fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// Seconds with three decimals (milliseconds).
pub fn secs(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

/// A markdown table of two columns.
pub fn table(rows: &[(String, String)]) -> String {
    let mut out = String::from("| figure | value |\n|---|---|\n");
    for (k, v) in rows {
        out.push_str(&format!("| {k} | {v} |\n"));
    }
    out
}

/// A benchmark's `main`: the options or why they are wrong, `run` until it ends or Ctrl-C (its
/// future is dropped, so its fleet guard stops the fleet), the report on stdout or the failure
/// on stderr, each prefixed with `who`.
pub async fn main_with<O, R, F>(who: &str, opts: Result<O>, run: impl FnOnce(O) -> F) -> ExitCode
where
    R: Display,
    F: std::future::Future<Output = Result<R>>,
{
    let opts = match opts {
        Ok(o) => o,
        Err(e) => {
            eprintln!("{who}: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let result = tokio::select! {
        r = run(opts) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };
    match result {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{who}: FAILED: {e:#}");
            ExitCode::FAILURE
        }
    }
}
