#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The short chaos run of `make test`: one seed (`CHAOS_SEED`, default 1), `CHAOS_SECONDS` of
//! faults (default 20) on a fleet of `CHAOS_CHILDREN` children with agents (default 3) and
//! `CHAOS_PUSH` Push-mode children served by the hub (default 1; 0 leaves them out), late copies
//! of writes unless `CHAOS_LATE_COPIES=0`, the checks
//! made while the faults are active, then the invariants of `atoll_e2e::chaos` within 60 s. A failure
//! names the seed; `CHAOS_SEED=<n> cargo test -p atoll-e2e --test chaos` replays its plan.
//! `make chaos` runs longer, more seeds and more children.

mod support;

use std::time::{Duration, Instant};

use atoll_e2e::chaos;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test]
async fn a_fleet_converges_to_its_descriptions_after_seeded_faults_kills_and_edits() {
    if !support::prerequisites_or_skip("chaos").await {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let opts = chaos::Options {
        seed: env_u64("CHAOS_SEED", 1),
        chaos: Duration::from_secs(env_u64("CHAOS_SECONDS", 20)),
        converge: Duration::from_secs(60),
        children: env_u64("CHAOS_CHILDREN", 3) as usize,
        dir: tmp.path().join("fleet"),
        bin_dir: support::bin_dir(),
        manifests: support::manifests(),
        backend: support::backend(),
        rss_limit_mib: 512,
        hubs: 2,
        helm: env_u64("CHAOS_HELM", 1) != 0,
        late_copies: env_u64("CHAOS_LATE_COPIES", 1) != 0,
    };
    let started = Instant::now();
    match chaos::run(&opts).await {
        Ok(report) => {
            eprint!("{}", report.summary());
            eprintln!(
                "FIGURE chaos run (seed {}, {}s of faults, {} faults, {} edits): {:.1}s",
                opts.seed,
                opts.chaos.as_secs(),
                report.fault_total(),
                report.edits,
                started.elapsed().as_secs_f64()
            );
            assert!(report.fault_total() > 0, "no fault was injected");
            let relayed = report
                .effects
                .get("message-proxy streams")
                .copied()
                .unwrap_or(0);
            assert!(
                relayed > 0,
                "no agent stream went through the message proxy"
            );
            // A request proxy stands in front of the parent and every agent's child (on both
            // tiers); the first of its steps starts 1-4 s into the faults, while the
            // components write all the time.
            let repeated = report
                .effects
                .get("request-proxy repeated")
                .copied()
                .unwrap_or(0);
            assert!(repeated > 0, "no write was sent twice by a request proxy");
        }
        Err(e) => {
            // Keep the fleet's logs past the temporary directory.
            let keep = std::env::temp_dir().join(format!("atoll-chaos-failed-seed-{}", opts.seed));
            let _ = std::fs::remove_dir_all(&keep);
            let _ = std::fs::rename(tmp.path().join("fleet"), &keep);
            panic!("{e}\n(fleet directory kept in {})", keep.display());
        }
    }
}
