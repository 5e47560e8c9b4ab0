//! Registration with a bootstrap token: the ClusterRegistrationRequest, the approval
//! (automatic, or an administrator's), then the dedicated namespace, ManagedCluster and a fresh
//! cluster token.
//!
//! A bootstrap token is shared by every cluster that is yet to join, so a request for a cluster
//! that is registered already must never change that registration: it is recorded apart, in
//! `status.reRegistration`, and acted on only when an administrator decides it.

use super::{
    KubeBackend, api_err, cluster_labels, credentials_of, managed_cluster_labels,
    random_namespace_name,
};
use crate::Error;
use crate::domain::{Admission, AgentHello, SecretString};
use crate::token::{self, ANNOTATION_ROTATE_TOKEN, BootstrapToken, TokenRecord};
use atoll_crds::clusters::{
    ApprovedResult, ClusterRegistrationRequest, ClusterRegistrationRequestSpec, ManagedCluster,
    ReRegistration, ReRegistrationReplaces, SyncMode,
};
use atoll_crds::known;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use rand::Rng;
use serde_json::{Value, json};
use std::time::Instant;

/// Whether the dedicated namespace a registration recorded is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecordedNamespace {
    /// The request records none (it was never completed).
    Unrecorded,
    /// It exists and is not being deleted.
    Present,
    /// It was deleted, or is being deleted.
    Gone,
}

/// What a bootstrap Hello asks for, given the registration it finds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Standing {
    /// The ordinary registration: wait for approval unless approval is automatic (or the
    /// request is approved already, and what it recorded can be given again).
    Register,
    /// Approving would replace something of a registered cluster: only an administrator's
    /// decision on a re-registration request lets it happen.
    Replaces(ReRegistrationReplaces),
}

/// Decides what a bootstrap Hello for a cluster asks for. A registration that is approved is
/// given again at once only when nothing it holds is lost: its token never reached its agent
/// (nobody can hold a token that never arrived), or its namespace is gone and approval is
/// automatic (then anyone with a bootstrap token may register a cluster anyway).
pub(crate) fn standing(
    result: Option<ApprovedResult>,
    namespace: RecordedNamespace,
    token: &TokenRecord,
    manual_approval: bool,
    now: Timestamp,
) -> Standing {
    if result != Some(ApprovedResult::Approved) {
        return Standing::Register;
    }
    match namespace {
        RecordedNamespace::Unrecorded => Standing::Register,
        RecordedNamespace::Gone if manual_approval => {
            Standing::Replaces(ReRegistrationReplaces::LostNamespace)
        }
        RecordedNamespace::Gone => Standing::Register,
        RecordedNamespace::Present if token.awaiting_agent && !token.current.is_empty() => {
            Standing::Register
        }
        RecordedNamespace::Present
            if token.current.is_empty() || token.expires_at.is_some_and(|at| at <= now) =>
        {
            Standing::Replaces(ReRegistrationReplaces::RevokedToken)
        }
        RecordedNamespace::Present => Standing::Replaces(ReRegistrationReplaces::LiveRegistration),
    }
}

/// What an administrator is told about a re-registration request, and how to decide it.
pub(crate) fn re_registration_notice(
    name: &str,
    cluster_id: &str,
    request: &ReRegistration,
) -> String {
    let what = match request.replaces {
        ReRegistrationReplaces::LiveRegistration => {
            "the cluster is registered and its agent holds a valid cluster token; approving \
             hands the cluster (its Descriptions, Secrets included) to the requester and locks \
             the current agent out"
        }
        ReRegistrationReplaces::RevokedToken => {
            "the cluster's token was revoked or expired; approving issues a new one for the \
             same dedicated namespace"
        }
        ReRegistrationReplaces::LostNamespace => {
            "the cluster's dedicated namespace is gone; approving creates a new one"
        }
    };
    format!(
        "a bootstrap token (id {}) from {} asked to register cluster {cluster_id} again; the \
         registration is unchanged until you decide: {what}. Approve: kubectl atoll approve \
         {name}{}; deny (the registration stays): kubectl atoll deny {name} --reason REASON",
        request.bootstrap_token_id,
        request.peer.as_deref().unwrap_or("an unknown address"),
        if request.replaces == ReRegistrationReplaces::LiveRegistration {
            " --replace"
        } else {
            ""
        },
    )
}

/// Whether `asked` is the same request as the recorded `earlier`, asked again: the same
/// bootstrap token, name, replacement and address (the port aside: a retry is a new
/// connection).
pub(crate) fn is_retry_of(asked: &ReRegistration, earlier: &ReRegistration) -> bool {
    fn host(peer: &Option<String>) -> Option<&str> {
        peer.as_deref()
            .map(|p| p.rsplit_once(':').map_or(p, |(host, _)| host))
    }
    asked.bootstrap_token_id == earlier.bootstrap_token_id
        && asked.cluster_name == earlier.cluster_name
        && asked.replaces == earlier.replaces
        && host(&asked.peer).is_some()
        && host(&asked.peer) == host(&earlier.peer)
}

/// A fresh id for a re-registration request.
fn request_id() -> String {
    format!("{:016x}", rand::rng().random::<u64>())
}

impl KubeBackend {
    /// Registers a cluster that presented bootstrap token `bootstrap`.
    pub(super) async fn register(
        &self,
        hello: &AgentHello,
        bootstrap: &BootstrapToken,
    ) -> Result<Admission, Error> {
        // Held for the API calls, released while waiting for a decision.
        let mut permit = self.handshake_permit().await;
        let crr = self.registration_request(hello).await?;
        let crr = match self.standing(&crr).await? {
            Standing::Register => self.await_approval(hello, crr, &mut permit).await?,
            Standing::Replaces(replaces) => {
                self.await_re_registration(hello, bootstrap, &crr, replaces, &mut permit)
                    .await?
            }
        };
        let admission = self.complete_registration(hello, &crr).await;
        drop(permit);
        admission
    }

    /// The cluster's ClusterRegistrationRequest, created pending when it has none.
    async fn registration_request(
        &self,
        hello: &AgentHello,
    ) -> Result<ClusterRegistrationRequest, Error> {
        if let Some(crr) = self.crr(&hello.cluster_id).await? {
            return Ok(crr);
        }
        let name = known::cluster_registration_request_name(&hello.cluster_id);
        let spec = ClusterRegistrationRequestSpec {
            cluster_id: hello.cluster_id.clone(),
            cluster_type: Some(hello.cluster_type.clone()),
            cluster_name: Some(hello.cluster_name.clone()),
            cluster_namespace: None,
            cluster_labels: hello.cluster_labels.clone(),
            sync_mode: SyncMode::Pull,
        };
        let mut crr = ClusterRegistrationRequest::new(&name, spec);
        crr.metadata.labels = Some(cluster_labels(hello, true));
        let api: Api<ClusterRegistrationRequest> = Api::all(self.client());
        match api.create(&PostParams::default(), &crr).await {
            Ok(c) => Ok(c),
            Err(kube::Error::Api(s)) if s.code == 409 => self
                .crr(&hello.cluster_id)
                .await?
                .ok_or_else(|| Error::WriteParentObject {
                    operation: "create ClusterRegistrationRequest".into(),
                    object: name.clone(),
                    reason: "it already existed, then was gone on reading".into(),
                }),
            Err(e) => Err(api_err("create ClusterRegistrationRequest", &name)(e)),
        }
    }

    /// Reads what [`standing`] needs: the recorded namespace and its token record.
    async fn standing(&self, crr: &ClusterRegistrationRequest) -> Result<Standing, Error> {
        let st = crr.status.clone().unwrap_or_default();
        if st.result != Some(ApprovedResult::Approved) {
            return Ok(Standing::Register);
        }
        let (namespace, record) = match &st.dedicated_namespace {
            None => (RecordedNamespace::Unrecorded, TokenRecord::default()),
            Some(ns) if self.namespace_present(ns).await? => {
                // A token whose ManagedCluster was deleted admits no more: it is revoked.
                let record = match &st.managed_cluster_name {
                    Some(mc) if self.managed_cluster_present(ns, mc).await? => {
                        self.token_record(ns).await?.0
                    }
                    _ => TokenRecord::default(),
                };
                (RecordedNamespace::Present, record)
            }
            Some(_) => (RecordedNamespace::Gone, TokenRecord::default()),
        };
        Ok(standing(
            st.result,
            namespace,
            &record,
            self.inner.config.manual_approval,
            Timestamp::now(),
        ))
    }

    async fn managed_cluster_present(&self, ns: &str, name: &str) -> Result<bool, Error> {
        Ok(Api::<ManagedCluster>::namespaced(self.client(), ns)
            .get_opt(name)
            .await
            .map_err(api_err("get ManagedCluster", &format!("{ns}/{name}")))?
            .is_some())
    }

    async fn namespace_present(&self, ns: &str) -> Result<bool, Error> {
        Ok(Api::<Namespace>::all(self.client())
            .get_opt(ns)
            .await
            .map_err(api_err("get Namespace", ns))?
            .is_some_and(|n| n.metadata.deletion_timestamp.is_none()))
    }

    /// Waits until the request is approved (at once with automatic approval), polling it
    /// without holding a handshake permit; a denial ends the registration with an Event.
    async fn await_approval<'a>(
        &'a self,
        hello: &AgentHello,
        mut crr: ClusterRegistrationRequest,
        permit: &mut Option<tokio::sync::SemaphorePermit<'a>>,
    ) -> Result<ClusterRegistrationRequest, Error> {
        let name = crr.name_any();
        let mut waiting = None;
        let started = Instant::now();
        loop {
            match crr.status.as_ref().and_then(|s| s.result) {
                Some(ApprovedResult::Approved) => return Ok(crr),
                Some(ApprovedResult::Denied) | Some(ApprovedResult::Failed) => {
                    let reason = crr
                        .status
                        .as_ref()
                        .and_then(|s| s.error_message.clone())
                        .unwrap_or_else(|| "denied by an administrator".into());
                    return Err(self.refuse(hello, &crr, "RegistrationDenied", reason).await);
                }
                None if !self.inner.config.manual_approval => return Ok(crr),
                None => {
                    if waiting.is_none() {
                        waiting = Some(self.waiting_slot(hello, &name)?);
                        tracing::info!(
                            cluster_id = %hello.cluster_id,
                            "waiting for approval: kubectl atoll approve {name}"
                        );
                    }
                    self.within_wait(started, hello, &name)?;
                    crr = self.reread(hello, &name, permit).await?;
                }
            }
        }
    }

    /// Records a request to register a registered cluster again, apart from its registration,
    /// and waits for an administrator's decision on it. Only an approval of this very request
    /// lets the registration be given to the requester; a denial refuses this Hello alone.
    async fn await_re_registration<'a>(
        &'a self,
        hello: &AgentHello,
        bootstrap: &BootstrapToken,
        crr: &ClusterRegistrationRequest,
        replaces: ReRegistrationReplaces,
        permit: &mut Option<tokio::sync::SemaphorePermit<'a>>,
    ) -> Result<ClusterRegistrationRequest, Error> {
        let name = crr.name_any();
        let _waiting = self.waiting_slot(hello, &name)?;
        let started = Instant::now();
        let asked = ReRegistration {
            id: request_id(),
            requested_at: Some(Time(Timestamp::now())),
            bootstrap_token_id: bootstrap.id.clone(),
            peer: hello.peer.clone(),
            cluster_name: Some(hello.cluster_name.clone()),
            replaces,
            result: None,
            error_message: None,
        };
        let recorded = crr.status.as_ref().and_then(|s| s.re_registration.as_ref());
        // The agent retrying after the hub stopped holding its Hello asks again with the same
        // request, so that a decision taken meanwhile applies to it.
        let (id, mut current) = match recorded.filter(|r| is_retry_of(&asked, r)) {
            Some(r) => (r.id.clone(), Some(crr.clone())),
            None => {
                self.record_re_registration(hello, crr, &asked).await?;
                (asked.id, None)
            }
        };
        loop {
            let crr = match current.take() {
                Some(crr) => crr,
                None => {
                    self.within_wait(started, hello, &name)?;
                    self.reread(hello, &name, permit).await?
                }
            };
            let st = crr.status.clone().unwrap_or_default();
            if st.result != Some(ApprovedResult::Approved) {
                let reason = st
                    .error_message
                    .unwrap_or_else(|| "the registration is no longer approved".into());
                return Err(self.refuse(hello, &crr, "RegistrationDenied", reason).await);
            }
            let Some(request) = st.re_registration.filter(|r| r.id == id) else {
                let reason =
                    "a newer request to register the cluster again replaced this one, or the \
                     registration was given again meanwhile"
                        .to_string();
                return Err(Error::RegistrationDenied {
                    cluster_id: hello.cluster_id.clone(),
                    reason,
                });
            };
            match request.result {
                None => continue,
                Some(ApprovedResult::Approved) => return Ok(crr),
                Some(ApprovedResult::Denied) | Some(ApprovedResult::Failed) => {
                    let reason = format!(
                        "the request to register the cluster again was denied: {}; the \
                         cluster's registration is unchanged",
                        request
                            .error_message
                            .as_deref()
                            .unwrap_or("denied by an administrator")
                    );
                    return Err(self
                        .refuse(hello, &crr, "ReRegistrationDenied", reason)
                        .await);
                }
            }
        }
    }

    /// Records `request` in `crr`'s `status.reRegistration`, replacing any earlier one, with a
    /// Warning Event and a log line for the administrator.
    async fn record_re_registration(
        &self,
        hello: &AgentHello,
        crr: &ClusterRegistrationRequest,
        request: &ReRegistration,
    ) -> Result<(), Error> {
        let name = crr.name_any();
        // A merge patch keeps the fields it leaves out: the decision on an earlier request
        // must be cleared explicitly.
        let mut recorded = json!(request);
        recorded["result"] = Value::Null;
        recorded["errorMessage"] = Value::Null;
        let api: Api<ClusterRegistrationRequest> = Api::all(self.client());
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"reRegistration": recorded}})),
        )
        .await
        .map_err(api_err("record a re-registration request", &name))?;
        tracing::warn!(
            cluster_id = %hello.cluster_id,
            bootstrap_token_id = %request.bootstrap_token_id,
            peer = request.peer.as_deref().unwrap_or("unknown"),
            replaces = ?request.replaces,
            "a bootstrap token asked to register a registered cluster again; waiting for an administrator"
        );
        self.event(
            crr.object_ref(&()),
            EventType::Warning,
            "ReRegistrationPending",
            re_registration_notice(&name, &hello.cluster_id, request),
            "Register",
        )
        .await;
        Ok(())
    }

    /// A slot among the Hellos that wait for a decision, or the refusal when all are taken.
    fn waiting_slot(
        &self,
        hello: &AgentHello,
        name: &str,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, Error> {
        self.inner
            .waiting_registrations
            .clone()
            .try_acquire_owned()
            .map_err(|_| {
                self.inner
                    .metrics
                    .handshake_refused("registrations_waiting_full");
                Error::AwaitApproval {
                    cluster_id: hello.cluster_id.clone(),
                    reason: format!(
                        "{} registrations wait for an administrator on this hub already; the \
                         request {name} stays, decide it with kubectl atoll approve or deny, \
                         and the agent retries",
                        self.inner.config.max_waiting_registrations
                    ),
                    full: true,
                }
            })
    }

    /// Whether the Hello may be held longer; after [`BackendConfig::approval_wait`] the agent
    /// is told to retry, and the request stays for the decision.
    fn within_wait(&self, started: Instant, hello: &AgentHello, name: &str) -> Result<(), Error> {
        let wait = self.inner.config.approval_wait;
        if started.elapsed() < wait {
            return Ok(());
        }
        Err(Error::AwaitApproval {
            cluster_id: hello.cluster_id.clone(),
            reason: format!(
                "no decision on registration request {name} within {wait:?}: approve it with \
                 kubectl atoll approve {name} (or deny it); the agent retries"
            ),
            full: false,
        })
    }

    /// Waits one poll without a handshake permit, then reads the request again.
    async fn reread<'a>(
        &'a self,
        hello: &AgentHello,
        name: &str,
        permit: &mut Option<tokio::sync::SemaphorePermit<'a>>,
    ) -> Result<ClusterRegistrationRequest, Error> {
        *permit = None;
        tokio::time::sleep(self.inner.config.approval_poll).await;
        *permit = self.handshake_permit().await;
        self.crr(&hello.cluster_id)
            .await?
            .ok_or_else(|| Error::RegistrationDenied {
                cluster_id: hello.cluster_id.clone(),
                reason: format!("ClusterRegistrationRequest {name} was deleted"),
            })
    }

    /// Publishes a Warning Event `reason` on the request and returns the refusal of this Hello.
    async fn refuse(
        &self,
        hello: &AgentHello,
        crr: &ClusterRegistrationRequest,
        event_reason: &str,
        reason: String,
    ) -> Error {
        self.event(
            crr.object_ref(&()),
            EventType::Warning,
            event_reason,
            format!(
                "the agent of cluster {} was refused: {reason}",
                hello.cluster_id
            ),
            "Register",
        )
        .await;
        Error::RegistrationDenied {
            cluster_id: hello.cluster_id.clone(),
            reason,
        }
    }

    /// Gives an approved cluster its dedicated namespace (the one it had, if any), its
    /// ManagedCluster and a fresh cluster token, and records all of it on the request.
    async fn complete_registration(
        &self,
        hello: &AgentHello,
        crr: &ClusterRegistrationRequest,
    ) -> Result<Admission, Error> {
        let name = crr.name_any();
        let previous_ns = crr
            .status
            .as_ref()
            .and_then(|s| s.dedicated_namespace.clone());
        let mc_name = crr
            .status
            .as_ref()
            .and_then(|s| s.managed_cluster_name.clone())
            .unwrap_or_else(|| hello.cluster_name.clone());
        let ns = self.ensure_namespace(hello, previous_ns, &mc_name).await?;
        let existing = self
            .ensure_managed_cluster(hello, &ns, &mc_name, true)
            .await?;
        let cluster_token = token::mint_cluster_token();
        // A rotation asked for before this registration is answered by its token.
        let requested =
            existing.and_then(|mc| mc.annotations().get(ANNOTATION_ROTATE_TOKEN).cloned());
        let mut record = TokenRecord::issue(
            &cluster_token,
            Timestamp::now(),
            self.inner.config.cluster_token_lifetime,
            requested,
        );
        // Until the agent shows it holds the token, losing it on the way (a broken stream, a
        // failed write of its Secret) must not leave the cluster waiting for an administrator.
        record.awaiting_agent = true;
        self.store_token_record(&ns, &record).await?;
        self.inner
            .tokens_awaiting_agent
            .lock()
            .insert(ns.clone(), record.current.clone());
        let status = json!({"status": {
            "result": "Approved",
            "dedicatedNamespace": ns,
            "managedClusterName": mc_name,
            "errorMessage": null,
            "reRegistration": null,
        }});
        let api: Api<ClusterRegistrationRequest> = Api::all(self.client());
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .map_err(api_err("approve ClusterRegistrationRequest", &name))?;
        self.inner.metrics.write("registration");
        tracing::info!(cluster_id = %hello.cluster_id, namespace = %ns, managed_cluster = %mc_name, "cluster registered");
        self.event(
            crr.object_ref(&()),
            EventType::Normal,
            "Registered",
            format!(
                "cluster {} registered as {ns}/{mc_name}; a new cluster token was issued",
                hello.cluster_id
            ),
            "Register",
        )
        .await;
        Ok(Admission {
            namespace: ns,
            managed_cluster_name: mc_name,
            credentials: credentials_of(&record, record.current.clone()),
            cluster_token: Some(SecretString(cluster_token)),
        })
    }

    async fn ensure_namespace(
        &self,
        hello: &AgentHello,
        previous: Option<String>,
        mc_name: &str,
    ) -> Result<String, Error> {
        if let Some(ns) = previous
            && self.namespace_present(&ns).await?
        {
            return Ok(ns);
        }
        let api: Api<Namespace> = Api::all(self.client());
        let selector = format!("{}={}", known::LABEL_CLUSTER_ID, hello.cluster_id);
        let existing = api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(api_err("list Namespaces", &selector))?;
        for n in existing.items {
            if is_adoptable_dedicated_namespace(&n, &hello.cluster_id) {
                tracing::info!(namespace = %n.name_any(), cluster_id = %hello.cluster_id, "adopting the cluster's dedicated namespace");
                return Ok(n.name_any());
            }
            if n.metadata.deletion_timestamp.is_none() {
                tracing::warn!(namespace = %n.name_any(), cluster_id = %hello.cluster_id, "a namespace carries the cluster's id but was not made by a hub (its name or labels say otherwise); not adopted");
            }
        }
        for _ in 0..5 {
            let name = random_namespace_name();
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(managed_cluster_labels(&hello.cluster_id, mc_name)),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            match api.create(&PostParams::default(), &ns).await {
                Ok(_) => return Ok(name),
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(api_err("create Namespace", &name)(e)),
            }
        }
        Err(Error::WriteParentObject {
            operation: "create Namespace".into(),
            object: known::DEDICATED_NAMESPACE_PREFIX.into(),
            reason: "five random names were all taken".into(),
        })
    }
}

/// Whether `ns` may be taken as cluster `cluster_id`'s dedicated namespace without a record of
/// it: only what a hub (this one, or Clusternet's) makes, a `clusternet-` name labelled with
/// the cluster's id and `clusternet.io/created-by: clusternet-hub`, and not being deleted. A
/// label alone would let whoever may label a namespace (their own, or `default`) receive a new
/// cluster's ManagedCluster, token record and Descriptions.
pub fn is_adoptable_dedicated_namespace(ns: &Namespace, cluster_id: &str) -> bool {
    let labels = ns.metadata.labels.clone().unwrap_or_default();
    let label = |key: &str| labels.get(key).map(String::as_str);
    ns.metadata.deletion_timestamp.is_none()
        && ns.metadata.name.as_deref().is_some_and(|n| {
            n.starts_with(known::DEDICATED_NAMESPACE_PREFIX)
                && ![
                    known::NAMESPACE_SYSTEM,
                    known::NAMESPACE_RESERVED,
                    known::NAMESPACE_MCS,
                ]
                .contains(&n)
        })
        && label(known::LABEL_CLUSTER_ID) == Some(cluster_id)
        && label(known::LABEL_CREATED_BY) == Some(known::CREATED_BY_HUB)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_namespace_a_hub_made_is_adopted_by_its_label() {
        let ns = |name: &str, labels: &[(&str, &str)]| Namespace {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        let id = "3f1e9a52-8c41-4b7e-9d0a-2b6c5e4f7a10";
        let hub_made = [
            (known::LABEL_CLUSTER_ID, id),
            (known::LABEL_CREATED_BY, known::CREATED_BY_HUB),
        ];
        assert!(is_adoptable_dedicated_namespace(
            &ns("clusternet-x7k2p", &hub_made),
            id
        ));
        assert!(
            !is_adoptable_dedicated_namespace(&ns("team-a", &hub_made), id),
            "a tenant's namespace, labelled"
        );
        assert!(
            !is_adoptable_dedicated_namespace(
                &ns("clusternet-x7k2p", &[(known::LABEL_CLUSTER_ID, id)]),
                id
            ),
            "not made by a hub"
        );
        assert!(!is_adoptable_dedicated_namespace(
            &ns("clusternet-x7k2p", &hub_made),
            "another-cluster"
        ));
        for system in [known::NAMESPACE_SYSTEM, known::NAMESPACE_RESERVED] {
            assert!(!is_adoptable_dedicated_namespace(
                &ns(system, &hub_made),
                id
            ));
        }
        let mut deleting = ns("clusternet-x7k2p", &hub_made);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-06-01T00:00:00Z".parse().unwrap(),
            ));
        assert!(!is_adoptable_dedicated_namespace(&deleting, id));
    }

    fn token(current: &str, awaiting_agent: bool, expires_at: Option<&str>) -> TokenRecord {
        TokenRecord {
            current: current.into(),
            awaiting_agent,
            expires_at: expires_at.map(|t| t.parse().unwrap()),
            ..TokenRecord::default()
        }
    }

    #[test]
    fn only_what_loses_nothing_is_registered_again_without_an_administrator() {
        use ApprovedResult::*;
        use ReRegistrationReplaces::*;
        use RecordedNamespace::*;
        let now: Timestamp = "2026-06-01T00:00:00Z".parse().unwrap();
        let live = token("h", false, None);
        let unarrived = token("h", true, None);
        let revoked = TokenRecord::default();
        let expired = token("h", false, Some("2026-05-01T00:00:00Z"));
        let valid_until_later = token("h", false, Some("2026-07-01T00:00:00Z"));
        let replaces = Standing::Replaces;
        // (result, namespace, token, manual approval) -> standing
        let cases = [
            (None, Unrecorded, &revoked, false, Standing::Register),
            (None, Unrecorded, &revoked, true, Standing::Register),
            (Some(Denied), Present, &live, false, Standing::Register),
            (
                Some(Approved),
                Unrecorded,
                &revoked,
                true,
                Standing::Register,
            ),
            (
                Some(Approved),
                Present,
                &live,
                false,
                replaces(LiveRegistration),
            ),
            (
                Some(Approved),
                Present,
                &live,
                true,
                replaces(LiveRegistration),
            ),
            (
                Some(Approved),
                Present,
                &valid_until_later,
                false,
                replaces(LiveRegistration),
            ),
            (
                Some(Approved),
                Present,
                &unarrived,
                true,
                Standing::Register,
            ),
            (
                Some(Approved),
                Present,
                &revoked,
                false,
                replaces(RevokedToken),
            ),
            (
                Some(Approved),
                Present,
                &revoked,
                true,
                replaces(RevokedToken),
            ),
            (
                Some(Approved),
                Present,
                &expired,
                false,
                replaces(RevokedToken),
            ),
            (Some(Approved), Gone, &revoked, false, Standing::Register),
            (
                Some(Approved),
                Gone,
                &revoked,
                true,
                replaces(LostNamespace),
            ),
        ];
        for (result, ns, record, manual, want) in cases {
            assert_eq!(
                standing(result, ns, record, manual, now),
                want,
                "{result:?} {ns:?} {record:?} manual={manual}"
            );
        }
    }

    #[test]
    fn a_retry_is_the_same_token_name_replacement_and_host_on_another_port() {
        let earlier = ReRegistration {
            id: "1".into(),
            bootstrap_token_id: "abcdef".into(),
            peer: Some("10.0.0.9:5555".into()),
            cluster_name: Some("edge".into()),
            ..ReRegistration::default()
        };
        let again = |edit: fn(&mut ReRegistration)| {
            let mut r = earlier.clone();
            r.id = "2".into();
            r.peer = Some("10.0.0.9:6000".into());
            edit(&mut r);
            r
        };
        assert!(is_retry_of(&again(|_| {}), &earlier));
        assert!(!is_retry_of(
            &again(|r| r.peer = Some("10.0.0.8:6000".into())),
            &earlier
        ));
        assert!(!is_retry_of(&again(|r| r.peer = None), &earlier));
        assert!(!is_retry_of(
            &again(|r| r.bootstrap_token_id = "zzzzzz".into()),
            &earlier
        ));
        assert!(!is_retry_of(
            &again(|r| r.cluster_name = Some("other".into())),
            &earlier
        ));
        assert!(!is_retry_of(
            &again(|r| r.replaces = ReRegistrationReplaces::RevokedToken),
            &earlier
        ));
        let v6 = |p: &str| ReRegistration {
            peer: Some(p.into()),
            ..earlier.clone()
        };
        assert!(is_retry_of(&v6("[::1]:1"), &v6("[::1]:2")));
    }

    #[test]
    fn the_notice_names_the_token_id_and_address_and_asks_for_replace_only_for_a_live_registration()
    {
        let mut request = ReRegistration {
            id: "1".into(),
            bootstrap_token_id: "abcdef".into(),
            peer: Some("10.0.0.9:5555".into()),
            ..ReRegistration::default()
        };
        let live = re_registration_notice("clusternet-x", "x", &request);
        assert!(
            live.contains("abcdef") && live.contains("10.0.0.9:5555"),
            "{live}"
        );
        assert!(
            live.contains("kubectl atoll approve clusternet-x --replace"),
            "{live}"
        );
        assert!(live.contains("locks the current agent out"), "{live}");
        assert!(live.contains("the registration stays"), "{live}");
        request.replaces = ReRegistrationReplaces::RevokedToken;
        request.peer = None;
        let revoked = re_registration_notice("clusternet-x", "x", &request);
        assert!(!revoked.contains("--replace"), "{revoked}");
        assert!(revoked.contains("an unknown address"), "{revoked}");
    }
}
