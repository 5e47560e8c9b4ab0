//! Which feeds a Subscription may use (pure): a Subscription cannot make the scheduler, which
//! reads everything, ship what its author could not read.
//!
//! The rule, in the spirit of Gateway API's ReferenceGrant:
//! - every feed has an owning namespace: a namespaced object's namespace; for a `Namespace`
//!   object, that namespace itself; for any other cluster-scoped object, the administrator's
//!   namespace (`clusternet-system`);
//! - a Subscription may use the feeds its own namespace owns;
//! - any other feed needs a [`FeedGrant`] in the owning namespace whose `from` names the
//!   Subscription's namespace and whose `to` names the feed's group and kind (and its name, when
//!   the entry has one).
//!
//! Manifests in `clusternet-reserved` are copies of feeds: they are judged by the namespace they
//! were copied from (their `apps.clusternet.io/config.namespace` label, which is the feed's
//! `namespace`), never by `clusternet-reserved`.

use atoll_crds::apps::Feed;
use atoll_crds::atoll::{self, FeedGrant};
use atoll_crds::known;
use kube::ResourceExt;

/// The namespace that owns a feed: the only namespace whose FeedGrants can grant it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedOwner {
    /// A namespaced object (or a Namespace object, which owns itself).
    Namespace(String),
    /// A cluster-scoped object other than a Namespace: only the administrator grants those.
    Cluster,
}

impl FeedOwner {
    /// The namespace whose FeedGrants decide about the feed.
    pub fn grant_namespace(&self) -> &str {
        match self {
            FeedOwner::Namespace(namespace) => namespace,
            FeedOwner::Cluster => known::NAMESPACE_SYSTEM,
        }
    }
}

/// The owner of `feed`, an object of a kind that is `namespaced` or not. A namespaced feed
/// without a namespace is read from `default` (as Clusternet does), so `default` owns it.
pub fn feed_owner(feed: &Feed, namespaced: bool) -> FeedOwner {
    if is_namespace_kind(feed) {
        return FeedOwner::Namespace(feed.name.clone());
    }
    if !namespaced {
        return FeedOwner::Cluster;
    }
    match feed.namespace.as_deref() {
        Some(namespace) if !namespace.is_empty() => FeedOwner::Namespace(namespace.to_owned()),
        _ => FeedOwner::Namespace("default".to_owned()),
    }
}

fn is_namespace_kind(feed: &Feed) -> bool {
    feed.api_version == "v1" && feed.kind == "Namespace"
}

/// Why a Subscription may use a feed, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// The Subscription's own namespace owns the feed.
    Own,
    /// A FeedGrant of the owning namespace allows it (`namespace/name` of the grant).
    Granted(String),
    /// Nothing allows it.
    Refused(Refusal),
}

/// A refused feed: the rule it broke and the FeedGrant that would allow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The Subscription's namespace.
    pub subscription_namespace: String,
    /// The feed's owner.
    pub owner: FeedOwner,
    /// API group of the feed (`""` for the core group).
    pub group: String,
    /// Kind of the feed.
    pub kind: String,
    /// Name of the feed.
    pub name: String,
}

impl Refusal {
    /// The rule, and the exact FeedGrant to create (as one line of YAML) to allow the feed.
    pub fn message(&self, feed_text: &str) -> String {
        let rule = match &self.owner {
            FeedOwner::Cluster => format!(
                "{feed_text} is cluster-scoped, and a Subscription may use cluster-scoped feeds \
                 only when the administrator grants them in namespace {}",
                known::NAMESPACE_SYSTEM
            ),
            FeedOwner::Namespace(owner) => format!(
                "{feed_text} belongs to namespace {owner}, and a Subscription in namespace {} \
                 may use feeds of another namespace only when that namespace grants them",
                self.subscription_namespace
            ),
        };
        format!(
            "{rule} (FeedNotGranted); to allow it, create in namespace {}: {}",
            self.owner.grant_namespace(),
            self.grant_yaml()
        )
    }

    /// The FeedGrant that allows exactly this feed, as one line of YAML.
    pub fn grant_yaml(&self) -> String {
        format!(
            "{{apiVersion: {}, kind: FeedGrant, metadata: {{name: {}-feeds, namespace: {}}}, \
             spec: {{from: [{{namespace: {}}}], to: [{{group: \"{}\", kind: {}, name: {}}}]}}}}",
            atoll::API_VERSION,
            self.subscription_namespace,
            self.owner.grant_namespace(),
            self.subscription_namespace,
            self.group,
            self.kind,
            self.name
        )
    }
}

/// Whether a Subscription in `subscription_namespace` may use `feed`, owned by `owner`, given
/// every FeedGrant of the parent (only those in the owning namespace count).
pub fn feed_access(
    subscription_namespace: &str,
    feed: &Feed,
    owner: &FeedOwner,
    grants: &[&FeedGrant],
) -> Access {
    let grant_namespace = owner.grant_namespace();
    if grant_namespace == subscription_namespace {
        return Access::Own;
    }
    let group = group_of(&feed.api_version);
    let granting = grants.iter().find(|grant| {
        grant.metadata.namespace.as_deref() == Some(grant_namespace)
            // A grant being deleted is a grant being revoked.
            && grant.metadata.deletion_timestamp.is_none()
            && grant
                .spec
                .from
                .iter()
                .any(|from| from.namespace == subscription_namespace)
            && grant.spec.to.iter().any(|to| {
                to.group == group
                    && to.kind == feed.kind
                    && to.name.as_deref().is_none_or(|name| name == feed.name)
            })
    });
    match granting {
        Some(grant) => Access::Granted(format!("{grant_namespace}/{}", grant.name_any())),
        None => Access::Refused(Refusal {
            subscription_namespace: subscription_namespace.to_owned(),
            owner: owner.clone(),
            group: group.to_owned(),
            kind: feed.kind.clone(),
            name: feed.name.clone(),
        }),
    }
}

/// The API group of an apiVersion (`""` for the core group).
fn group_of(api_version: &str) -> &str {
    api_version
        .split_once('/')
        .map_or("", |(group, _version)| group)
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_crds::atoll::{FeedGrantFrom, FeedGrantSpec, FeedGrantTo};

    fn feed(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Feed {
        Feed {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    fn grant(namespace: &str, from: &[&str], to: &[(&str, &str, Option<&str>)]) -> FeedGrant {
        let mut grant = FeedGrant::new(
            "g",
            FeedGrantSpec {
                from: from
                    .iter()
                    .map(|ns| FeedGrantFrom {
                        namespace: (*ns).to_owned(),
                    })
                    .collect(),
                to: to
                    .iter()
                    .map(|(group, kind, name)| FeedGrantTo {
                        group: (*group).to_owned(),
                        kind: (*kind).to_owned(),
                        name: name.map(str::to_owned),
                    })
                    .collect(),
            },
        );
        grant.metadata.namespace = Some(namespace.to_owned());
        grant
    }

    #[test]
    fn a_feed_is_owned_by_its_namespace_a_namespace_by_itself_and_the_rest_by_the_admin() {
        let cases = [
            (
                feed("v1", "Secret", Some("b"), "s"),
                true,
                FeedOwner::Namespace("b".into()),
            ),
            (
                feed("v1", "ConfigMap", None, "c"),
                true,
                FeedOwner::Namespace("default".into()),
            ),
            (
                feed("v1", "Namespace", None, "foo"),
                false,
                FeedOwner::Namespace("foo".into()),
            ),
            (
                feed("rbac.authorization.k8s.io/v1", "ClusterRole", None, "r"),
                false,
                FeedOwner::Cluster,
            ),
            // A namespace written on a cluster-scoped feed does not make it the author's.
            (
                feed(
                    "rbac.authorization.k8s.io/v1",
                    "ClusterRole",
                    Some("a"),
                    "r",
                ),
                false,
                FeedOwner::Cluster,
            ),
        ];
        for (feed, namespaced, want) in cases {
            assert_eq!(feed_owner(&feed, namespaced), want, "{feed:?}");
        }
    }

    #[test]
    fn feed_access_table() {
        let secret = feed("v1", "Secret", Some("b"), "db");
        let deployment = feed("apps/v1", "Deployment", Some("b"), "web");
        let namespace_b = feed("v1", "Namespace", None, "b");
        let cluster_role = feed(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            None,
            "reader",
        );
        let mut deleting = grant("b", &["a"], &[("", "Secret", None)]);
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let b_grants_a_all_secrets = grant("b", &["a"], &[("", "Secret", None)]);
        let b_grants_a_secret_db = grant("b", &["x", "a"], &[("", "Secret", Some("db"))]);
        let b_grants_a_secret_other = grant("b", &["a"], &[("", "Secret", Some("other"))]);
        let b_grants_c = grant("b", &["c"], &[("", "Secret", None)]);
        // A namespace cannot grant what another namespace owns.
        let a_grants_itself = grant("a", &["a"], &[("", "Secret", None)]);
        let b_grants_core_deployments = grant("b", &["a"], &[("", "Deployment", None)]);
        let b_grants_apps_deployments = grant("b", &["a"], &[("apps", "Deployment", None)]);
        let b_grants_its_namespace = grant("b", &["a"], &[("", "Namespace", None)]);
        let admin_grants_roles = grant(
            known::NAMESPACE_SYSTEM,
            &["a"],
            &[("rbac.authorization.k8s.io", "ClusterRole", None)],
        );
        let other_grants_roles = grant(
            "b",
            &["a"],
            &[("rbac.authorization.k8s.io", "ClusterRole", None)],
        );

        // (what, Subscription namespace, feed, kind is namespaced, grants, expected access)
        type Case<'a> = (
            &'a str,
            &'a str,
            &'a Feed,
            bool,
            Vec<&'a FeedGrant>,
            &'a str,
        );
        let cases: Vec<Case> = vec![
            ("own namespace", "b", &secret, true, vec![], "Own"),
            (
                "other namespace, no grant",
                "a",
                &secret,
                true,
                vec![],
                "Refused",
            ),
            (
                "grant of every Secret",
                "a",
                &secret,
                true,
                vec![&b_grants_a_all_secrets],
                "Granted",
            ),
            (
                "grant of the one Secret",
                "a",
                &secret,
                true,
                vec![&b_grants_a_secret_db],
                "Granted",
            ),
            (
                "grant of another Secret",
                "a",
                &secret,
                true,
                vec![&b_grants_a_secret_other],
                "Refused",
            ),
            (
                "grant to another namespace",
                "a",
                &secret,
                true,
                vec![&b_grants_c],
                "Refused",
            ),
            (
                "grant in the Subscription's own namespace",
                "a",
                &secret,
                true,
                vec![&a_grants_itself],
                "Refused",
            ),
            (
                "grant being deleted",
                "a",
                &secret,
                true,
                vec![&deleting],
                "Refused",
            ),
            (
                "grant of the wrong group",
                "a",
                &deployment,
                true,
                vec![&b_grants_core_deployments],
                "Refused",
            ),
            (
                "grant of the right group",
                "a",
                &deployment,
                true,
                vec![&b_grants_core_deployments, &b_grants_apps_deployments],
                "Granted",
            ),
            (
                "the Subscription's own Namespace object",
                "b",
                &namespace_b,
                false,
                vec![],
                "Own",
            ),
            (
                "another Namespace object",
                "a",
                &namespace_b,
                false,
                vec![],
                "Refused",
            ),
            (
                "a Namespace object granted by itself",
                "a",
                &namespace_b,
                false,
                vec![&b_grants_its_namespace],
                "Granted",
            ),
            (
                "cluster-scoped, no grant",
                "a",
                &cluster_role,
                false,
                vec![],
                "Refused",
            ),
            (
                "cluster-scoped, granted by a non-admin namespace",
                "a",
                &cluster_role,
                false,
                vec![&other_grants_roles],
                "Refused",
            ),
            (
                "cluster-scoped, granted by the admin",
                "a",
                &cluster_role,
                false,
                vec![&admin_grants_roles],
                "Granted",
            ),
            (
                "cluster-scoped, from the admin's namespace",
                known::NAMESPACE_SYSTEM,
                &cluster_role,
                false,
                vec![],
                "Own",
            ),
        ];
        for (what, sub_namespace, feed, namespaced, grants, want) in cases {
            let owner = feed_owner(feed, namespaced);
            let got = feed_access(sub_namespace, feed, &owner, &grants);
            let got_name = match &got {
                Access::Own => "Own",
                Access::Granted(_) => "Granted",
                Access::Refused(_) => "Refused",
            };
            assert_eq!(got_name, want, "{what}: {got:?}");
        }
    }

    #[test]
    fn a_refusal_names_the_feed_the_rule_and_the_grant_to_create() {
        let secret = feed("v1", "Secret", Some("b"), "db");
        let Access::Refused(refusal) = feed_access("a", &secret, &feed_owner(&secret, true), &[])
        else {
            panic!("refused");
        };
        let message = refusal.message("Secret b/db");
        for want in [
            "Secret b/db",
            "namespace a",
            "FeedNotGranted",
            "create in namespace b",
            "{apiVersion: apps.atoll.dev/v1alpha1, kind: FeedGrant, metadata: {name: a-feeds, \
             namespace: b}, spec: {from: [{namespace: a}], to: [{group: \"\", kind: Secret, \
             name: db}]}}",
        ] {
            assert!(message.contains(want), "{want} not in {message}");
        }
        let role = feed(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            None,
            "reader",
        );
        let Access::Refused(refusal) = feed_access("a", &role, &feed_owner(&role, false), &[])
        else {
            panic!("refused");
        };
        let message = refusal.message("ClusterRole reader");
        assert!(message.contains("cluster-scoped"), "{message}");
        assert!(
            message.contains("create in namespace clusternet-system"),
            "{message}"
        );
        assert!(
            message.contains("group: \"rbac.authorization.k8s.io\", kind: ClusterRole"),
            "{message}"
        );
    }
}
