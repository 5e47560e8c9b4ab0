//! A counter of input changes, so that a Subscription whose inputs did not change since its last
//! complete pass is not rendered again (its own status writes, the hub's status writes and the
//! initial list of a feed watch all trigger passes that would redo the same work).
//!
//! Every watch bumps the counter when something a render reads changes: a cluster's scheduling
//! facts, any override, a Manifest, a feed object, a deleted Description, or a re-list. A pass is
//! skipped only when the Subscription's generation and the counter are both what they were after
//! its last complete pass, and that pass is younger than the resync period.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The input-change counter, shared by every watch.
#[derive(Clone, Debug, Default)]
pub struct InputEpoch(Arc<AtomicU64>);

impl InputEpoch {
    /// Records that some input changed.
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::Release);
    }

    /// The current value.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

#[derive(Clone, Copy, Debug)]
struct Pass {
    generation: Option<i64>,
    epoch: u64,
    at: Instant,
}

/// The last complete pass of each Subscription, by uid.
#[derive(Debug, Default)]
pub struct Passes(Mutex<HashMap<String, Pass>>);

impl Passes {
    /// How long until a pass is due when nothing changed since the last complete one, or `None`
    /// when a pass is needed now.
    pub fn skip_for(
        &self,
        uid: &str,
        generation: Option<i64>,
        epoch: u64,
        resync: Duration,
    ) -> Option<Duration> {
        let passes = self.0.lock();
        let pass = passes.get(uid)?;
        let age = pass.at.elapsed();
        (pass.generation == generation && pass.epoch == epoch && age < resync).then(|| resync - age)
    }

    /// Records a complete pass that read its inputs at `epoch`.
    pub fn record(&self, uid: &str, generation: Option<i64>, epoch: u64) {
        self.0.lock().insert(
            uid.to_owned(),
            Pass {
                generation,
                epoch,
                at: Instant::now(),
            },
        );
    }

    /// Forgets a Subscription (after an incomplete pass, or once it is deleted).
    pub fn forget(&self, uid: &str) {
        self.0.lock().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_is_skipped_only_when_generation_and_epoch_are_unchanged_and_it_is_recent() {
        let epoch = InputEpoch::default();
        let passes = Passes::default();
        let resync = Duration::from_secs(60);
        assert!(passes.skip_for("u", Some(1), epoch.get(), resync).is_none());
        passes.record("u", Some(1), epoch.get());
        assert!(passes.skip_for("u", Some(1), epoch.get(), resync).is_some());
        assert!(passes.skip_for("u", Some(2), epoch.get(), resync).is_none());
        epoch.bump();
        assert!(passes.skip_for("u", Some(1), epoch.get(), resync).is_none());
        passes.record("u", Some(1), epoch.get());
        assert!(
            passes
                .skip_for("u", Some(1), epoch.get(), Duration::ZERO)
                .is_none()
        );
        passes.forget("u");
        assert!(passes.skip_for("u", Some(1), epoch.get(), resync).is_none());
    }
}
