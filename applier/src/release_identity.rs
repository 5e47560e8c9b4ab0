//! The identity helm acts as for a release, when the applier runs releases as one
//! ([`crate::helm::Helm::with_release_account`]): a ServiceAccount of the release's own
//! namespace, bound to the built-in ClusterRole `admin` there only. A chart can then create
//! what an administrator of that namespace may, and the child's RBAC refuses the rest (a
//! ClusterRoleBinding, a CRD, objects in other namespaces), reported as the release's error.
//!
//! The applier makes the namespace (when the chart asks for it and the applier may write
//! namespaces), the ServiceAccount and the RoleBinding before helm runs, labelled as part of
//! atoll so that no Description can take them over, and waits until the API server's
//! authorizer counts the RoleBinding.

use crate::Error;
use atoll_crds::known;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use std::collections::BTreeMap;
use std::time::Duration;

/// The ClusterRole the release identity is bound to in its namespace.
pub const NAMESPACE_ROLE: &str = "admin";

/// The user name helm acts as: the ServiceAccount `account` of `namespace`.
pub fn user_name(namespace: &str, account: &str) -> String {
    format!("system:serviceaccount:{namespace}:{account}")
}

fn metadata(name: &str, namespace: Option<&str>, field_manager: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(BTreeMap::from([
            (
                known::LABEL_PART_OF.to_owned(),
                known::PART_OF_ATOLL.to_owned(),
            ),
            (
                "app.kubernetes.io/managed-by".to_owned(),
                field_manager.to_owned(),
            ),
        ])),
        ..ObjectMeta::default()
    }
}

/// The ServiceAccount and RoleBinding of the release identity `account` in `namespace`.
pub fn objects(
    namespace: &str,
    account: &str,
    field_manager: &str,
) -> (ServiceAccount, RoleBinding) {
    let account_object = ServiceAccount {
        metadata: metadata(account, Some(namespace), field_manager),
        ..ServiceAccount::default()
    };
    let binding = RoleBinding {
        metadata: metadata(account, Some(namespace), field_manager),
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "ClusterRole".to_owned(),
            name: NAMESPACE_ROLE.to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: account.to_owned(),
            namespace: Some(namespace.to_owned()),
            ..Subject::default()
        }]),
    };
    (account_object, binding)
}

/// Makes the release identity `account` of `namespace` exist: the namespace first when
/// `create_namespace` and it is missing, then its ServiceAccount and RoleBinding (server-side
/// applied as `field_manager`).
pub async fn ensure(
    client: &kube::Client,
    namespace: &str,
    account: &str,
    create_namespace: bool,
    field_manager: &str,
) -> Result<(), Error> {
    let failed = |what: &str, source: kube::Error| Error::ReleaseIdentity {
        what: format!("{what} {namespace}/{account}"),
        source,
    };
    if create_namespace {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let missing = namespaces
            .get_opt(namespace)
            .await
            .map_err(|e| failed("reading the namespace of", e))?
            .is_none();
        if missing {
            let new = Namespace {
                metadata: ObjectMeta {
                    name: Some(namespace.to_owned()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            match namespaces.create(&PostParams::default(), &new).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(e) => return Err(failed("creating the namespace of", e)),
            }
        }
    }
    let (account_object, binding) = objects(namespace, account, field_manager);
    let params = PatchParams::apply(field_manager).force();
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .patch(account, &params, &Patch::Apply(&account_object))
        .await
        .map_err(|e| failed("applying the ServiceAccount", e))?;
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .patch(account, &params, &Patch::Apply(&binding))
        .await
        .map_err(|e| failed("applying the RoleBinding", e))?;
    wait_effective(client, namespace, account).await
}

/// How long a new RoleBinding may take to reach the API server's authorizer.
const EFFECTIVE_WITHIN: Duration = Duration::from_secs(10);

/// Waits until the API server's authorizer lets the identity read its namespace's Secrets
/// (helm's release records), asked with a SubjectAccessReview: kube-apiserver's RBAC reads
/// RoleBindings from a watch, so a RoleBinding just made takes a moment to count. A server that
/// serves no SubjectAccessReviews has no authorizer to wait for.
async fn wait_effective(
    client: &kube::Client,
    namespace: &str,
    account: &str,
) -> Result<(), Error> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user_name(namespace, account)),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(namespace.to_owned()),
                verb: Some("list".to_owned()),
                resource: Some("secrets".to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let reviews: Api<SubjectAccessReview> = Api::all(client.clone());
    let deadline = tokio::time::Instant::now() + EFFECTIVE_WITHIN;
    loop {
        match reviews.create(&PostParams::default(), &review).await {
            Ok(answer) if answer.status.as_ref().is_some_and(|s| s.allowed) => return Ok(()),
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
            Err(source) => {
                return Err(Error::ReleaseIdentity {
                    what: format!("asking whether the RBAC of {namespace}/{account} counts"),
                    source,
                });
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Error::ReleaseIdentityNotEffective {
                user: user_name(namespace, account),
                seconds: EFFECTIVE_WITHIN.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_is_an_admin_of_its_own_namespace_only() {
        assert_eq!(
            user_name("demo", "atoll-helm"),
            "system:serviceaccount:demo:atoll-helm"
        );
        let (account, binding) = objects("demo", "atoll-helm", "atoll-agent");
        assert_eq!(account.metadata.namespace.as_deref(), Some("demo"));
        assert_eq!(binding.metadata.namespace.as_deref(), Some("demo"));
        assert_eq!(
            (
                binding.role_ref.kind.as_str(),
                binding.role_ref.name.as_str()
            ),
            ("ClusterRole", "admin")
        );
        let subjects = binding.subjects.unwrap_or_default();
        assert_eq!(subjects.len(), 1);
        assert_eq!(
            (
                subjects[0].kind.as_str(),
                subjects[0].name.as_str(),
                subjects[0].namespace.as_deref()
            ),
            ("ServiceAccount", "atoll-helm", Some("demo"))
        );
        // Labelled as atoll's own: no Description takes them over.
        for labels in [account.metadata.labels, binding.metadata.labels] {
            assert_eq!(
                labels
                    .unwrap_or_default()
                    .get(known::LABEL_PART_OF)
                    .map(String::as_str),
                Some(known::PART_OF_ATOLL)
            );
        }
    }
}
