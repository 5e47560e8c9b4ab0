//! Chart repository credentials on a stream or a Push session. A HelmChart may name a
//! `chartPullSecret` in its own namespace; the hub reads it when it sends the chart's
//! Description (or applies it, for a Push cluster) and sends the username and password with the
//! chart, never in the Description. [`CredentialChecks`] keeps, per Description of the stream
//! or session, when to look at its Secrets again: soon (with backoff) when
//! they could not be read, so that a Secret created or granted later is picked up; every
//! `recheck` when they were, so that a rotated Secret reaches the cluster without an edit.

use crate::domain::PullCredentials;
use crate::index::{ChartRelease, DescEntry};
use crate::parent::Backend;
use atoll_proto::v1;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// Longest wait between two tries of credentials that could not be read.
pub const RETRY_MAX: Duration = Duration::from_secs(300);

/// What a Description went out with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// None of its charts names a `chartPullSecret`.
    NoSecrets,
    /// Every named Secret was read; a fingerprint of what was sent (to notice a rotation).
    Complete(u64),
    /// Some Secret could not be read; its chart carries the reason.
    Incomplete,
}

/// The credentials of each chart of `e` that names a `chartPullSecret`, read now (`None` for a
/// chart that names none, `Err` with the reason for one whose Secret cannot be used), and what
/// a delivery with them is.
pub async fn read_chart_credentials<B: Backend>(
    backend: &B,
    e: &DescEntry,
) -> (Vec<Option<Result<PullCredentials, String>>>, Delivery) {
    let mut named = false;
    let mut complete = true;
    let mut fingerprint = std::collections::hash_map::DefaultHasher::new();
    let mut read_all = Vec::with_capacity(e.charts.len());
    for (index, entry) in e.charts.iter().enumerate() {
        let Some(release) = &entry.release else {
            read_all.push(None);
            continue;
        };
        let read = read_pull_secret(backend, release).await;
        match &read {
            None => {}
            Some(Ok(credentials)) => {
                named = true;
                (index, &credentials.username, &credentials.password.0).hash(&mut fingerprint);
            }
            Some(Err(reason)) => {
                named = true;
                complete = false;
                tracing::warn!(description = %e.name, chart = %format!("{}/{}", release.chart_namespace, release.name), %reason, "a chart goes without its repository credentials");
            }
        }
        read_all.push(read);
    }
    let delivery = match (named, complete) {
        (false, _) => Delivery::NoSecrets,
        (true, true) => Delivery::Complete(fingerprint.finish()),
        (true, false) => Delivery::Incomplete,
    };
    (read_all, delivery)
}

/// Gives each chart of `message` that names a `chartPullSecret` the credentials in it, read
/// now, or the reason they cannot be ([`read_chart_credentials`]).
pub async fn add_pull_credentials<B: Backend>(
    backend: &B,
    e: &DescEntry,
    message: &mut v1::DescriptionUpsert,
) -> Delivery {
    let (read_all, delivery) = read_chart_credentials(backend, e).await;
    for (read, chart) in read_all.into_iter().zip(message.charts.iter_mut()) {
        match read {
            None => {}
            Some(Ok(credentials)) => {
                chart.credentials = Some(v1::PullCredentials {
                    username: credentials.username,
                    password: credentials.password.0,
                });
            }
            Some(Err(reason)) => chart.credentials_error = reason,
        }
    }
    delivery
}

/// The credentials in the `chartPullSecret` a chart's release names, read now, or why they
/// cannot be; `None` when it names none. A chart may only use a Secret of its own namespace: its
/// owner's, who alone can grant the hub `get` on it.
pub async fn read_pull_secret<B: Backend>(
    backend: &B,
    release: &ChartRelease,
) -> Option<Result<PullCredentials, String>> {
    let secret = &release.options.chart_pull_secret;
    if secret.is_empty() {
        return None;
    }
    if release.chart_namespace.is_empty() {
        return Some(Err(format!(
            "the Description does not name the HelmChart {} comes from, so no Secret may be \
             read for it",
            release.name
        )));
    }
    let namespace = if secret.namespace.is_empty() {
        release.chart_namespace.as_str()
    } else {
        secret.namespace.as_str()
    };
    Some(if namespace != release.chart_namespace {
        Err(format!(
            "chartPullSecret {namespace}/{} is not in the HelmChart's namespace {}; a chart \
             may only use a Secret of its own namespace",
            secret.name, release.chart_namespace
        ))
    } else {
        backend.pull_credentials(namespace, &secret.name).await
    })
}

/// When to look at each Description's Secrets again, on one stream.
#[derive(Debug)]
pub struct CredentialChecks {
    retry_first: Duration,
    recheck: Duration,
    due: HashMap<Arc<str>, Check>,
}

#[derive(Clone, Copy, Debug)]
struct Check {
    at: Instant,
    /// Tries in a row that could not read every Secret.
    failures: u32,
    /// What was last sent, when it was complete.
    sent: Option<u64>,
}

impl CredentialChecks {
    /// Checks that retry unreadable Secrets after `retry_first` (doubling up to [`RETRY_MAX`])
    /// and look at readable ones every `recheck`.
    pub fn new(retry_first: Duration, recheck: Duration) -> CredentialChecks {
        CredentialChecks {
            retry_first,
            recheck,
            due: HashMap::new(),
        }
    }

    /// Records what Description `name` went out (or would go out) with, and schedules its next
    /// look.
    pub fn record(&mut self, name: &Arc<str>, delivery: Delivery, now: Instant) {
        let failures = self.due.get(name).map_or(0, |c| c.failures);
        let check = match delivery {
            Delivery::NoSecrets => {
                self.due.remove(name);
                return;
            }
            Delivery::Complete(fingerprint) => Check {
                at: now + self.recheck,
                failures: 0,
                sent: Some(fingerprint),
            },
            Delivery::Incomplete => Check {
                at: now + crate::flow::doubling_backoff(self.retry_first, failures, RETRY_MAX),
                failures: failures.saturating_add(1),
                sent: None,
            },
        };
        self.due.insert(name.clone(), check);
    }

    /// When the next look is due, if any.
    pub fn next_due(&self) -> Option<Instant> {
        self.due.values().map(|c| c.at).min()
    }

    /// Takes the Descriptions due at `now`, each with the fingerprint of what it was last sent
    /// with (`None`: it went without some credentials). Each is recorded again when it is
    /// looked at or sent.
    pub fn take_due(&mut self, now: Instant) -> Vec<(Arc<str>, Option<u64>)> {
        let due: Vec<(Arc<str>, Option<u64>)> = self
            .due
            .iter()
            .filter(|(_, c)| c.at <= now)
            .map(|(name, c)| (name.clone(), c.sent))
            .collect();
        for (name, _) in &due {
            // Until it is recorded again, no spin on it.
            if let Some(c) = self.due.get_mut(name) {
                c.at = now + RETRY_MAX;
            }
        }
        due
    }

    /// Forgets Description `name` (gone from the parent).
    pub fn forget(&mut self, name: &str) {
        self.due.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreadable_secrets_are_retried_with_backoff_and_readable_ones_rechecked() {
        let t0 = Instant::now();
        let mut checks = CredentialChecks::new(Duration::from_secs(10), Duration::from_secs(60));
        let name: Arc<str> = Arc::from("apps.web");
        checks.record(&name, Delivery::Incomplete, t0);
        assert_eq!(checks.next_due(), Some(t0 + Duration::from_secs(10)));
        checks.record(&name, Delivery::Incomplete, t0);
        assert_eq!(checks.next_due(), Some(t0 + Duration::from_secs(20)));
        for _ in 0..20 {
            checks.record(&name, Delivery::Incomplete, t0);
        }
        assert_eq!(checks.next_due(), Some(t0 + RETRY_MAX));
        // Read at last: looked at again every recheck, and the backoff starts over.
        checks.record(&name, Delivery::Complete(7), t0);
        assert_eq!(checks.next_due(), Some(t0 + Duration::from_secs(60)));
        assert!(checks.take_due(t0 + Duration::from_secs(59)).is_empty());
        let due = checks.take_due(t0 + Duration::from_secs(60));
        assert_eq!(due, vec![(name.clone(), Some(7))]);
        // Taken: not due again until recorded.
        assert!(checks.take_due(t0 + Duration::from_secs(61)).is_empty());
        checks.record(&name, Delivery::Incomplete, t0);
        assert_eq!(checks.next_due(), Some(t0 + Duration::from_secs(10)));
        checks.record(&name, Delivery::NoSecrets, t0);
        assert_eq!(checks.next_due(), None);
    }
}
