//! Polling until a condition holds.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long [`eventually`] and [`eventually_timed`] sleep between two checks.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// What one check of a poll saw: the value it waited for, or what it saw instead, which the
/// failure message shows if the time runs out.
pub trait Observation {
    /// What the poll returns once the check holds.
    type Value;

    /// `Ok` with the value once the check holds, else `Err` with what was seen.
    fn into_result(self) -> Result<Self::Value, String>;
}

/// `true` holds.
impl Observation for bool {
    type Value = ();

    fn into_result(self) -> Result<(), String> {
        if self { Ok(()) } else { Err("false".into()) }
    }
}

/// `Some` holds, with its value.
impl<T> Observation for Option<T> {
    type Value = T;

    fn into_result(self) -> Result<T, String> {
        self.ok_or_else(|| "None".into())
    }
}

/// `Ok` holds, with its value; `Err` says what was seen instead.
impl<T> Observation for Result<T, String> {
    type Value = T;

    fn into_result(self) -> Result<T, String> {
        self
    }
}

/// A poll interval: `Poll::every(d).eventually(..)` is [`eventually`] sleeping `d` between
/// checks. `Poll::default()` polls every [`INTERVAL`].
#[derive(Clone, Copy, Debug)]
pub struct Poll {
    interval: Duration,
}

impl Default for Poll {
    fn default() -> Poll {
        Poll::every(INTERVAL)
    }
}

impl Poll {
    /// Polls every `interval`.
    pub const fn every(interval: Duration) -> Poll {
        Poll { interval }
    }

    /// Like [`eventually`], at this interval.
    pub async fn eventually<O, F, Fut>(self, what: &str, timeout: Duration, check: F) -> O::Value
    where
        O: Observation,
        F: FnMut() -> Fut,
        Fut: Future<Output = O>,
    {
        self.eventually_timed(what, timeout, check).await.0
    }

    /// Like [`eventually_timed`], at this interval.
    pub async fn eventually_timed<O, F, Fut>(
        self,
        what: &str,
        timeout: Duration,
        mut check: F,
    ) -> (O::Value, Duration)
    where
        O: Observation,
        F: FnMut() -> Fut,
        Fut: Future<Output = O>,
    {
        let started = Instant::now();
        loop {
            match check().await.into_result() {
                Ok(value) => return (value, started.elapsed()),
                Err(last) => {
                    if started.elapsed() >= timeout {
                        panic!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
                    }
                }
            }
            tokio::time::sleep(self.interval).await;
        }
    }
}

/// Runs `check` every [`INTERVAL`] until it holds (`true`, `Some(v)` or `Ok(v)`, see
/// [`Observation`]) and returns its value; panics once `timeout` has passed, naming `what`, the
/// timeout and the last observation (an `Err`'s text; `false` or `None` otherwise).
pub async fn eventually<O, F, Fut>(what: &str, timeout: Duration, check: F) -> O::Value
where
    O: Observation,
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
{
    Poll::default().eventually(what, timeout, check).await
}

/// Like [`eventually`], also returning how long it took until the check held.
pub async fn eventually_timed<O, F, Fut>(
    what: &str,
    timeout: Duration,
    check: F,
) -> (O::Value, Duration)
where
    O: Observation,
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
{
    Poll::default().eventually_timed(what, timeout, check).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    const FAST: Poll = Poll::every(Duration::from_millis(1));

    #[tokio::test]
    async fn each_observation_returns_its_value_once_it_holds() {
        let n = AtomicU32::new(0);
        FAST.eventually("a bool", Duration::from_secs(5), || async {
            n.fetch_add(1, Ordering::SeqCst) >= 2
        })
        .await;
        assert_eq!(n.load(Ordering::SeqCst), 3);
        let v = FAST
            .eventually("an option", Duration::from_secs(5), || async {
                let i = n.fetch_add(1, Ordering::SeqCst);
                (i >= 5).then_some(i)
            })
            .await;
        assert_eq!(v, 5);
        let (v, took) = FAST
            .eventually_timed("a result", Duration::from_secs(5), || async {
                let i = n.fetch_add(1, Ordering::SeqCst);
                if i >= 7 { Ok(i) } else { Err(format!("{i}")) }
            })
            .await;
        assert_eq!(v, 7);
        assert!(took < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn a_timeout_names_what_and_the_last_observation() {
        let n = AtomicU32::new(0);
        let failed = tokio::spawn(async move {
            FAST.eventually("the moon", Duration::from_millis(20), || async {
                Err::<(), _>(format!("seen {}", n.fetch_add(1, Ordering::SeqCst)))
            })
            .await
        })
        .await
        .unwrap_err();
        let message = failed.into_panic();
        let message = message.downcast_ref::<String>().unwrap();
        assert!(
            message.starts_with("timed out after 20ms waiting for the moon; last seen: seen "),
            "{message}"
        );
    }

    #[tokio::test]
    async fn a_check_that_holds_at_once_does_not_sleep() {
        let (v, took) = Poll::every(Duration::from_secs(60))
            .eventually_timed("now", Duration::ZERO, || async { Some(1) })
            .await;
        assert_eq!(v, 1);
        assert!(took < Duration::from_secs(1));
    }
}
