//! The drift repair loop: reads what the drift watchers ([`crate::drift`]) observe, records each
//! object's `.status` for the reports, re-applies an object someone else changed or deleted,
//! deletes again one the applier deleted that a late write brought back, and rewrites an
//! inventory someone deleted. One repair at a time per object: a request that
//! arrives during a repair runs once more after it.

use crate::applier::{Applier, Notice};
use crate::drift::{Observation, kind_key};
use crate::model::ObjectRef;
use kube::api::DynamicObject;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// The pause before a failed repair is tried again; it doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(500);

/// The longest pause between tries of a failing repair.
const MAX_RETRY: Duration = Duration::from_secs(30);

/// Objects being repaired → whether another repair was asked for meanwhile.
type Inflight = Arc<Mutex<HashMap<ObjectRef, bool>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts drift repair for `applier`: its drift watchers, and the repair loop that reads them.
/// Both stop when the applier is dropped; a second call (of this or of [`start_status_watch`])
/// does nothing.
pub fn start_drift_repair(applier: &Arc<Applier>) {
    if let Some(observations) = applier.watch_drift() {
        applier.set_repairs_drift();
        tokio::spawn(run(Arc::downgrade(applier), observations, true));
    }
}

/// Starts the drift watchers for the statuses only: each object's `.status` is recorded for the
/// reports (a changed report is notified), and nothing is re-applied or rewritten. For an
/// applier that is not the only writer of its Descriptions: every hub replica serves every
/// Push-mode cluster, and two replicas repairing from views of different ages undo each
/// other's applies, hundreds of times a second, until their views agree.
pub fn start_status_watch(applier: &Arc<Applier>) {
    if let Some(observations) = applier.watch_drift() {
        tokio::spawn(run(Arc::downgrade(applier), observations, false));
    }
}

/// Runs until the watchers stop (their applier was dropped); re-applies and rewrites only with
/// `repairs`.
pub(crate) async fn run(
    applier: Weak<Applier>,
    mut observations: UnboundedReceiver<Observation>,
    repairs: bool,
) {
    let inflight = Inflight::default();
    while let Some(observation) = observations.recv().await {
        let Some(strong) = applier.upgrade() else {
            return;
        };
        match observation {
            Observation::Live {
                object,
                live,
                replayed,
            } => {
                // While its Description is being applied, an object's changes (its status
                // included) wait: the apply records its own view of the object when it ends,
                // and would overwrite (or, for a new object, never see) what came meanwhile.
                // A replayed observation is not held again (it could displace a newer one);
                // that apply will judge the object itself.
                if strong.defer_while_applying(&object, &live, !replayed) {
                    continue;
                }
                if !replayed {
                    strong.observe_status(&object, &live);
                }
                if !repairs {
                    continue;
                }
                // Drifted, or deleted by the applier and back (a late write): repaired either way.
                if live.metadata.deletion_timestamp.is_none()
                    && (drifted(&strong, &object, &live) || strong.came_back(&object, &live))
                {
                    repair(&applier, &inflight, object);
                }
            }
            Observation::Deleted(object) => {
                if repairs && strong.state().objects.contains_key(&object) {
                    repair(&applier, &inflight, object);
                }
            }
            Observation::Listed { .. } | Observation::InventoryDeleted(_) if !repairs => {}
            Observation::Listed {
                kind,
                namespace,
                present,
            } => {
                let missing: Vec<ObjectRef> = strong
                    .state()
                    .objects
                    .iter()
                    .filter(|(r, d)| {
                        kind_key(&d.kind) == kind_key(&kind)
                            && namespace.as_ref().is_none_or(|ns| &r.namespace == ns)
                            && !present.contains(*r)
                    })
                    .map(|(r, _)| r.clone())
                    .collect();
                for object in missing {
                    repair(&applier, &inflight, object);
                }
            }
            Observation::InventoryDeleted(key) => strong.restore_inventory(&key).await,
        }
    }
}

/// Whether the live object differs from what the applier wants.
fn drifted(applier: &Applier, object: &ObjectRef, live: &DynamicObject) -> bool {
    applier
        .state()
        .objects
        .get(object)
        .is_some_and(|desired| desired.differs_from(live))
}

/// Re-applies `object` in the background, coalescing repeated requests.
fn repair(applier: &Weak<Applier>, inflight: &Inflight, object: ObjectRef) {
    {
        let mut inflight = lock(inflight);
        if let Some(again) = inflight.get_mut(&object) {
            *again = true;
            return;
        }
        inflight.insert(object.clone(), false);
    }
    let (applier, inflight) = (applier.clone(), inflight.clone());
    tokio::spawn(async move {
        let mut backoff = FIRST_RETRY;
        loop {
            let Some(applier) = applier.upgrade() else {
                return;
            };
            tracing::info!(%object, "repairing drift");
            match applier.reapply(&object).await {
                Ok(true) => {
                    crate::metrics::count(&applier.metrics.drift_repairs, "repaired");
                    let owner = applier
                        .state()
                        .objects
                        .get(&object)
                        .map(|d| d.owner.clone());
                    if let Some(owner) = owner {
                        applier.notify(Notice::ReportChanged(owner));
                    }
                }
                Ok(false) => {}
                Err(e) => {
                    crate::metrics::count(&applier.metrics.drift_repairs, "failed");
                    tracing::warn!(%object, error = %e, retry_in = ?backoff, "drift repair failed");
                    applier.repair_failed(&object);
                    // Tried again after a pause, doubling up to a limit: the object stays as it
                    // drifted, so no new observation may come to ask for it (found by the chaos
                    // run's drifts: a repair that met the child unreachable was never retried).
                    drop(applier);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_RETRY);
                    continue;
                }
            }
            let mut inflight = lock(&inflight);
            match inflight.get_mut(&object) {
                Some(again) if *again => *again = false,
                _ => {
                    inflight.remove(&object);
                    return;
                }
            }
        }
    });
}
