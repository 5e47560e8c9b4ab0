//! A readiness flag that any number of tasks can wait on.
//!
//! kube-runtime's `Store::wait_until_ready` wakes only one of several concurrent waiters (each
//! waiter polls the same one-shot), which once stalled the scheduler's reconciles for seconds.
//! atoll's controllers therefore publish "the first list is in" through a [`Ready`] flag.

use kube::runtime::reflector::Store;
use std::sync::Arc;
use tokio::sync::watch;

/// Set once, never reset; cheap to clone (clones share the flag).
#[derive(Clone, Debug)]
pub struct Ready(Arc<watch::Sender<bool>>);

impl Default for Ready {
    fn default() -> Self {
        Ready(Arc::new(watch::channel(false).0))
    }
}

impl Ready {
    /// A flag that is not set yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A flag set once `store` has its first list (one task waits on the store for everyone).
    pub fn after_first_list<K>(store: Store<K>) -> Self
    where
        K: kube::Resource + Clone + Send + Sync + 'static,
        K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let ready = Ready::new();
        let flag = ready.clone();
        tokio::spawn(async move {
            if store.wait_until_ready().await.is_ok() {
                flag.set();
            }
        });
        ready
    }

    /// Sets the flag and wakes every waiter.
    pub fn set(&self) {
        self.0
            .send_if_modified(|ready| !std::mem::replace(ready, true));
    }

    /// Whether the flag is set.
    pub fn is_set(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the flag is set.
    pub async fn wait(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives as long as `self`, so this only ends when the flag is set.
        let _ = rx.wait_for(|ready| *ready).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn every_waiter_wakes_when_set() {
        let ready = Ready::new();
        let waiters: Vec<_> = (0..8)
            .map(|_| {
                let ready = ready.clone();
                tokio::spawn(async move { ready.wait().await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(!ready.is_set());
        ready.set();
        for waiter in waiters {
            tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("a waiter was not woken")
                .expect("waiter task");
        }
        assert!(ready.is_set());
        // Waiting on a set flag returns at once.
        tokio::time::timeout(Duration::from_secs(1), ready.wait())
            .await
            .expect("set flag");
    }

    #[tokio::test]
    async fn after_first_list_wakes_every_waiter() {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::runtime::reflector::store::Writer;
        use kube::runtime::watcher::Event;
        let mut writer: Writer<ConfigMap> = Writer::default();
        let ready = Ready::after_first_list(writer.as_reader());
        let waiters: Vec<_> = (0..4)
            .map(|_| {
                let ready = ready.clone();
                tokio::spawn(async move { ready.wait().await })
            })
            .collect();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitDone);
        for waiter in waiters {
            tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("a waiter was not woken")
                .expect("waiter task");
        }
    }
}
