//! Kind resolution through API discovery, cached per group version and refreshed on a miss so
//! that kinds of CRDs installed after the agent started are found.

use crate::Error;
use kube::discovery::ApiResource;
use std::collections::HashMap;
use tokio::sync::Mutex;

/// A served kind: its REST resource and whether it is namespaced.
#[derive(Clone, Debug, PartialEq)]
pub struct Kind {
    /// The REST resource (group, version, plural).
    pub resource: ApiResource,
    /// Whether objects of the kind live in a namespace.
    pub namespaced: bool,
}

/// The discovery cache of one cluster.
pub struct Discovery {
    client: kube::Client,
    cache: Mutex<HashMap<String, HashMap<String, Kind>>>,
}

impl Discovery {
    /// An empty cache for `client`'s cluster.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// Resolves `kind` of `api_version`, asking the API server again when the cache does not
    /// know it (a CRD may have been installed since).
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<Kind, Error> {
        let mut cache = self.cache.lock().await;
        if let Some(found) = cache.get(api_version).and_then(|kinds| kinds.get(kind)) {
            return Ok(found.clone());
        }
        let kinds = self.fetch(api_version).await?;
        let found = kinds.get(kind).cloned();
        cache.insert(api_version.to_owned(), kinds);
        found.ok_or_else(|| Error::ResolveKind {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        })
    }

    async fn fetch(&self, api_version: &str) -> Result<HashMap<String, Kind>, Error> {
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let list = if group.is_empty() {
            self.client.list_core_api_resources(version).await
        } else {
            self.client.list_api_group_resources(api_version).await
        };
        let list = match list {
            Ok(list) => list,
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(HashMap::new()),
            Err(source) => {
                return Err(Error::Discover {
                    api_version: api_version.to_owned(),
                    source,
                });
            }
        };
        Ok(list
            .resources
            .into_iter()
            .filter(|r| !r.name.contains('/'))
            .map(|r| {
                let kind = Kind {
                    resource: ApiResource {
                        group: group.to_owned(),
                        version: version.to_owned(),
                        api_version: api_version.to_owned(),
                        kind: r.kind.clone(),
                        plural: r.name.clone(),
                    },
                    namespaced: r.namespaced,
                };
                (r.kind, kind)
            })
            .collect())
    }
}
