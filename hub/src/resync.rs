//! How often one stream's agent may have the whole snapshot of its Descriptions sent again.
//! An agent asks after losing an inventory (one request per Description at once, say); a
//! snapshot answers them all, so requests within [`MIN_INTERVAL`] of the last snapshot are
//! coalesced into one more snapshot when the interval ends. A client sending nothing but
//! resync requests thus costs one snapshot per interval, not one per message.

use tokio::time::{Duration, Instant};

/// The shortest time between two snapshots of one stream.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// The resync requests of one stream.
#[derive(Debug, Default)]
pub struct ResyncGate {
    last: Option<Instant>,
    pending: bool,
}

impl ResyncGate {
    /// A request at `now`: true when the snapshot is to be sent now (then it is recorded),
    /// false when it waits for [`ResyncGate::due`].
    pub fn ask(&mut self, now: Instant) -> bool {
        match self.last {
            Some(last) if now < last + MIN_INTERVAL => {
                self.pending = true;
                false
            }
            _ => {
                self.sent(now);
                true
            }
        }
    }

    /// When a waiting request is to be answered; `None` when none waits.
    pub fn due(&self) -> Option<Instant> {
        self.pending
            .then(|| self.last.map_or_else(Instant::now, |l| l + MIN_INTERVAL))
    }

    /// Records a snapshot sent at `now` (a waiting request is answered by it).
    pub fn sent(&mut self, now: Instant) {
        self.last = Some(now);
        self.pending = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_within_the_interval_wait_for_one_more_snapshot() {
        let t0 = Instant::now();
        let mut gate = ResyncGate::default();
        assert!(gate.ask(t0), "the first is answered at once");
        assert_eq!(gate.due(), None);
        for i in 1..100 {
            assert!(!gate.ask(t0 + Duration::from_millis(i)), "a burst waits");
        }
        assert_eq!(
            gate.due(),
            Some(t0 + MIN_INTERVAL),
            "one snapshot for the burst"
        );
        gate.sent(t0 + MIN_INTERVAL);
        assert_eq!(gate.due(), None);
        assert!(
            gate.ask(t0 + MIN_INTERVAL * 2),
            "a later one is answered at once"
        );
    }
}
