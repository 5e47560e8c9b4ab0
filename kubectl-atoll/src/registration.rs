//! `kubectl atoll approve` and `deny`: which ClusterRegistrationRequest a name means, and the
//! status patch an administrator writes (the hub README's `kubectl patch clsrr … --subresource=status
//! --type=merge`).

use atoll_crds::clusters::{ApprovedResult, ClusterRegistrationRequest};
use serde_json::{Value, json};

/// What the administrator decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Let the cluster register (`result: Approved`).
    Approve,
    /// Refuse it (`result: Denied`), telling the agent why (`errorMessage`).
    Deny {
        /// Why; the agent's stream ends with `PERMISSION_DENIED` and this message.
        reason: String,
    },
}

impl Decision {
    /// The result this decision writes.
    pub fn result(&self) -> ApprovedResult {
        match self {
            Decision::Approve => ApprovedResult::Approved,
            Decision::Deny { .. } => ApprovedResult::Denied,
        }
    }

    /// The merge patch of the `status` subresource, exactly what the hub README tells an
    /// administrator to send with kubectl: `{"status":{"result":"Approved"}}`, or for a denial
    /// `{"status":{"result":"Denied","errorMessage":REASON}}`.
    pub fn status_patch(&self) -> Value {
        match self {
            Decision::Approve => json!({"status": {"result": "Approved"}}),
            Decision::Deny { reason } => {
                json!({"status": {"result": "Denied", "errorMessage": reason}})
            }
        }
    }

    /// The past participle kubectl-style output uses: `approved`, `denied`.
    pub fn verb(&self) -> &'static str {
        match self {
            Decision::Approve => "approved",
            Decision::Deny { .. } => "denied",
        }
    }
}

/// Why no single registration matches a name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// No ClusterRegistrationRequest has that name, cluster name, ManagedCluster name or id.
    None,
    /// Several do (by cluster name); their names.
    Ambiguous(Vec<String>),
}

/// The ClusterRegistrationRequest `cluster` means: the one of that name
/// (`clusternet-<clusterId>`), else the one whose cluster id is `cluster`, else the one whose
/// cluster name (`spec.clusterName`) or ManagedCluster name (`status.managedClusterName`) is
/// `cluster`, which must then be unique.
pub fn find<'a>(
    requests: &'a [ClusterRegistrationRequest],
    cluster: &str,
) -> Result<&'a ClusterRegistrationRequest, Lookup> {
    if let Some(crr) = requests
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some(cluster))
    {
        return Ok(crr);
    }
    if let Some(crr) = requests.iter().find(|c| c.spec.cluster_id == cluster) {
        return Ok(crr);
    }
    let by_name: Vec<&ClusterRegistrationRequest> = requests
        .iter()
        .filter(|c| {
            c.spec.cluster_name.as_deref() == Some(cluster)
                || c.status
                    .as_ref()
                    .and_then(|s| s.managed_cluster_name.as_deref())
                    == Some(cluster)
        })
        .collect();
    match by_name.as_slice() {
        [] => Err(Lookup::None),
        [one] => Ok(one),
        many => Err(Lookup::Ambiguous(
            many.iter()
                .map(|c| c.metadata.name.clone().unwrap_or_default())
                .collect(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_crds::clusters::{ClusterRegistrationRequestSpec, ClusterRegistrationRequestStatus};

    fn crr(id: &str, cluster_name: Option<&str>, mc: Option<&str>) -> ClusterRegistrationRequest {
        let mut c = ClusterRegistrationRequest::new(
            &format!("clusternet-{id}"),
            ClusterRegistrationRequestSpec {
                cluster_id: id.into(),
                cluster_name: cluster_name.map(str::to_owned),
                ..ClusterRegistrationRequestSpec::default()
            },
        );
        c.status = mc.map(|m| ClusterRegistrationRequestStatus {
            managed_cluster_name: Some(m.into()),
            ..ClusterRegistrationRequestStatus::default()
        });
        c
    }

    fn name(found: Result<&ClusterRegistrationRequest, Lookup>) -> Result<String, Lookup> {
        found.map(|c| c.metadata.name.clone().unwrap_or_default())
    }

    #[test]
    fn a_cluster_is_found_by_request_name_id_cluster_name_or_managed_cluster_name() {
        let requests = [
            crr("id-a", Some("alpha"), None),
            crr("id-b", None, Some("edge")),
            crr("id-c", Some("twin"), None),
            crr("id-d", Some("twin"), None),
        ];
        let cases = [
            ("clusternet-id-a", Ok("clusternet-id-a".to_owned())),
            ("id-a", Ok("clusternet-id-a".to_owned())),
            ("alpha", Ok("clusternet-id-a".to_owned())),
            ("edge", Ok("clusternet-id-b".to_owned())),
            ("nope", Err(Lookup::None)),
            (
                "twin",
                Err(Lookup::Ambiguous(vec![
                    "clusternet-id-c".into(),
                    "clusternet-id-d".into(),
                ])),
            ),
            ("clusternet-id-c", Ok("clusternet-id-c".to_owned())),
        ];
        for (query, want) in cases {
            assert_eq!(name(find(&requests, query)), want, "{query}");
        }
        assert_eq!(name(find(&[], "x")), Err(Lookup::None));
    }

    #[test]
    fn the_patches_are_the_ones_the_hub_readme_gives_administrators() {
        assert_eq!(
            Decision::Approve.status_patch(),
            json!({"status": {"result": "Approved"}})
        );
        let deny = Decision::Deny {
            reason: "unknown site".into(),
        };
        assert_eq!(
            deny.status_patch(),
            json!({"status": {"result": "Denied", "errorMessage": "unknown site"}})
        );
        assert_eq!(Decision::Approve.result(), ApprovedResult::Approved);
        assert_eq!(deny.result(), ApprovedResult::Denied);
        // The patch's result parses as the CRD's own enum, so the hub reads what we wrote.
        let parsed: ApprovedResult =
            serde_json::from_value(deny.status_patch()["status"]["result"].clone()).unwrap();
        assert_eq!(parsed, ApprovedResult::Denied);
    }
}
