//! `kubectl atoll approve` and `deny`: which ClusterRegistrationRequest a name means, and the
//! status patch an administrator writes (the hub README's `kubectl patch clsrr … --subresource=status
//! --type=merge`). A pending request to register a registered cluster again is decided apart
//! from the registration, and approving one that would replace a live registration takes
//! `--replace`.

use atoll_crds::clusters::{
    ApprovedResult, ClusterRegistrationRequest, ReRegistration, ReRegistrationReplaces,
};
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

/// What deciding a request writes.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// A merge patch of the request's `status` subresource, and what the output line says.
    Write {
        /// The patch.
        patch: Value,
        /// What was done: `approved`, `denied`, `re-registration approved`, ….
        done: &'static str,
    },
    /// The registration is approved and nothing else waits.
    AlreadyApproved,
}

/// An approval that would replace a live registration, asked for without `--replace`.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplaceNeeded {
    /// The request waiting.
    pub request: Box<ReRegistration>,
}

/// The request to register `crr`'s cluster again that waits for a decision, if any.
pub fn pending_re_registration(crr: &ClusterRegistrationRequest) -> Option<&ReRegistration> {
    crr.status
        .as_ref()
        .and_then(|s| s.re_registration.as_ref())
        .filter(|r| r.result.is_none())
}

/// What `decision` on `crr` writes. With a re-registration waiting, the decision is about it
/// alone (a denial leaves the registration as it is) and names it by id, on the
/// resourceVersion read, so that it never lands on a newer request; approving one that
/// replaces a live registration needs `replace`.
pub fn action(
    crr: &ClusterRegistrationRequest,
    decision: &Decision,
    replace: bool,
) -> Result<Action, ReplaceNeeded> {
    let Some(request) = pending_re_registration(crr) else {
        if *decision == Decision::Approve
            && crr.status.as_ref().and_then(|s| s.result) == Some(ApprovedResult::Approved)
        {
            return Ok(Action::AlreadyApproved);
        }
        return Ok(Action::Write {
            patch: decision.status_patch(),
            done: decision.verb(),
        });
    };
    if *decision == Decision::Approve
        && request.replaces == ReRegistrationReplaces::LiveRegistration
        && !replace
    {
        return Err(ReplaceNeeded {
            request: Box::new(request.clone()),
        });
    }
    let (answer, done) = match decision {
        Decision::Approve => (
            json!({"id": request.id, "result": "Approved"}),
            "re-registration approved",
        ),
        Decision::Deny { reason } => (
            json!({"id": request.id, "result": "Denied", "errorMessage": reason}),
            "re-registration denied; the registration is unchanged",
        ),
    };
    let mut patch = json!({"status": {"reRegistration": answer}});
    if let Some(rv) = &crr.metadata.resource_version {
        patch["metadata"] = json!({ "resourceVersion": rv });
    }
    Ok(Action::Write { patch, done })
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

    fn re_registering(replaces: ReRegistrationReplaces) -> ClusterRegistrationRequest {
        let mut c = crr("id-a", Some("alpha"), Some("alpha"));
        c.metadata.resource_version = Some("42".into());
        let status = c.status.get_or_insert_default();
        status.result = Some(ApprovedResult::Approved);
        status.re_registration = Some(ReRegistration {
            id: "r1".into(),
            bootstrap_token_id: "abcdef".into(),
            replaces,
            ..ReRegistration::default()
        });
        c
    }

    #[test]
    fn a_re_registration_is_decided_apart_and_replacing_a_live_registration_takes_replace() {
        use ReRegistrationReplaces::*;
        let deny = Decision::Deny {
            reason: "not ours".into(),
        };
        let live = re_registering(LiveRegistration);
        let needed = action(&live, &Decision::Approve, false).unwrap_err();
        assert_eq!(needed.request.bootstrap_token_id, "abcdef");
        let approved = json!({"metadata": {"resourceVersion": "42"},
            "status": {"reRegistration": {"id": "r1", "result": "Approved"}}});
        assert_eq!(
            action(&live, &Decision::Approve, true),
            Ok(Action::Write {
                patch: approved.clone(),
                done: "re-registration approved"
            })
        );
        // A denial never needs --replace and never touches the registration's own result.
        let denied = json!({"metadata": {"resourceVersion": "42"},
            "status": {"reRegistration": {"id": "r1", "result": "Denied", "errorMessage": "not ours"}}});
        for replace in [false, true] {
            assert_eq!(
                action(&live, &deny, replace),
                Ok(Action::Write {
                    patch: denied.clone(),
                    done: "re-registration denied; the registration is unchanged"
                })
            );
        }
        // Nothing live is replaced: no --replace needed.
        for replaces in [RevokedToken, LostNamespace] {
            assert_eq!(
                action(&re_registering(replaces), &Decision::Approve, false),
                Ok(Action::Write {
                    patch: approved.clone(),
                    done: "re-registration approved"
                })
            );
        }
        // A decided re-registration no longer waits: the registration is decided as before.
        let mut decided = re_registering(LiveRegistration);
        if let Some(r) = decided
            .status
            .as_mut()
            .and_then(|s| s.re_registration.as_mut())
        {
            r.result = Some(ApprovedResult::Denied);
        }
        assert_eq!(pending_re_registration(&decided), None);
        assert_eq!(
            action(&decided, &Decision::Approve, false),
            Ok(Action::AlreadyApproved)
        );
        assert_eq!(
            action(&decided, &deny, false),
            Ok(Action::Write {
                patch: deny.status_patch(),
                done: "denied"
            })
        );
        let pending = crr("id-b", None, None);
        assert_eq!(
            action(&pending, &Decision::Approve, false),
            Ok(Action::Write {
                patch: Decision::Approve.status_patch(),
                done: "approved"
            })
        );
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
