//! Domain types of the hub-agent conversation, and their conversion from the protocol's prost
//! types. Conversion happens here, at the gRPC edge; nothing below this module sees prost types.

use crate::Error;
use atoll_applier::heartbeat::Heartbeat;
use atoll_applier::model::{ObjectRef, ObjectReport, Phase, ReleaseReport, ReleaseStatus, Report};
use atoll_proto::v1;
use atoll_runtime::text::truncate;
use std::collections::BTreeMap;

/// Longest ManagedCluster name an agent may ask for.
pub const MAX_CLUSTER_NAME: usize = 30;

/// A secret string: never shown by `Debug`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretString(pub String);

impl std::fmt::Debug for SecretString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A chart repository's credentials, from a HelmChart's `chartPullSecret`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PullCredentials {
    /// The username.
    pub username: String,
    /// The password (or identity token).
    pub password: SecretString,
}

/// The agent's Hello, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentHello {
    /// The uid of the child's kube-system namespace.
    pub cluster_id: String,
    /// The ManagedCluster name (defaulted from the id when the agent sent none).
    pub cluster_name: String,
    /// Labels for the ManagedCluster.
    pub cluster_labels: BTreeMap<String, String>,
    /// Bootstrap or cluster token.
    pub token: SecretString,
    /// The agent's version.
    pub agent_version: String,
    /// `StandardCluster` or `EdgeCluster` (defaulted to `StandardCluster`).
    pub cluster_type: String,
    /// The network address the stream came from, as the hub saw it (recorded on a request to
    /// register a registered cluster again).
    pub peer: Option<String>,
}

fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

fn is_dns_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.first().is_some_and(u8::is_ascii_alphanumeric)
        && b.last().is_some_and(u8::is_ascii_alphanumeric)
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Whether `key=value` is a valid Kubernetes label (`[prefix/]name`, value empty or a name).
pub fn is_valid_label(key: &str, value: &str) -> bool {
    let name_ok = match key.split_once('/') {
        Some((prefix, name)) => {
            !prefix.is_empty()
                && prefix.len() <= 253
                && prefix.split('.').all(|p| is_dns_label(p, 63))
                && is_label_name(name)
        }
        None => is_label_name(key),
    };
    name_ok && (value.is_empty() || is_label_name(value))
}

/// The ManagedCluster name used when the agent sends none: `cluster-` and the first eight
/// characters of the cluster id.
pub fn default_cluster_name(cluster_id: &str) -> String {
    let short: String = cluster_id.chars().take(8).collect();
    format!("cluster-{}", short.to_ascii_lowercase())
}

impl AgentHello {
    /// Validates a Hello: protocol version first (FAILED_PRECONDITION), then the fields
    /// (INVALID_ARGUMENT), then the presence of a token (UNAUTHENTICATED).
    pub fn from_proto(hello: v1::Hello) -> Result<AgentHello, Error> {
        if hello.protocol_version != v1::ProtocolVersion::V1 as i32 {
            return Err(Error::CheckProtocolVersion {
                got: hello.protocol_version,
            });
        }
        if !is_uuid(&hello.cluster_id) {
            return Err(Error::ParseHello {
                reason: format!(
                    "cluster_id {:?} is not a UUID; send the uid of the child's kube-system namespace",
                    hello.cluster_id
                ),
            });
        }
        let cluster_name = if hello.cluster_name.is_empty() {
            default_cluster_name(&hello.cluster_id)
        } else {
            hello.cluster_name
        };
        if !is_dns_label(&cluster_name, MAX_CLUSTER_NAME) {
            return Err(Error::ParseHello {
                reason: format!(
                    "cluster_name {cluster_name:?} must be a DNS label of at most {MAX_CLUSTER_NAME} \
                     characters (lower-case letters, digits, '-')"
                ),
            });
        }
        if hello.token.is_empty() {
            return Err(Error::Authenticate {
                cluster_id: hello.cluster_id,
                reason: "no token was sent".into(),
            });
        }
        if let Some((k, v)) = hello
            .cluster_labels
            .iter()
            .find(|(k, v)| !is_valid_label(k, v))
        {
            return Err(Error::ParseHello {
                reason: format!(
                    "cluster label {k:?}={v:?} is not a valid Kubernetes label; fix the agent's \
                     cluster labels"
                ),
            });
        }
        let cluster_type = match hello.cluster_type.as_str() {
            "" => "StandardCluster".to_string(),
            "StandardCluster" | "EdgeCluster" => hello.cluster_type,
            other => {
                return Err(Error::ParseHello {
                    reason: format!(
                        "cluster_type {other:?} is neither StandardCluster nor EdgeCluster"
                    ),
                });
            }
        };
        Ok(AgentHello {
            cluster_id: hello.cluster_id.to_ascii_lowercase(),
            cluster_name,
            cluster_labels: hello.cluster_labels.into_iter().collect(),
            token: SecretString(hello.token),
            agent_version: hello.agent_version,
            cluster_type,
            peer: None,
        })
    }
}

/// The hub's decision on a Hello.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Admission {
    /// The cluster's dedicated namespace.
    pub namespace: String,
    /// The ManagedCluster name.
    pub managed_cluster_name: String,
    /// A newly minted cluster token (registration or rotation), sent in the Welcome.
    pub cluster_token: Option<SecretString>,
    /// What the stream is authenticated with, to close it when that is revoked.
    pub credentials: Credentials,
}

/// What a stream is authenticated with: the hash of its cluster token (never the token) and
/// the rotation request that token answers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    /// SHA-256 (hex) of the cluster token the stream holds.
    pub token_sha256: String,
    /// The rotation request (`hub.atoll.io/rotate-token`) the token answers.
    pub rotation: Option<String>,
    /// When the token is due for renewal (it has a lifetime): the stream is closed then, and the
    /// agent's reconnection gets a new token.
    pub renew_at: Option<k8s_openapi::jiff::Timestamp>,
}

/// One connected stream's cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// The cluster id.
    pub cluster_id: String,
    /// The dedicated namespace.
    pub namespace: String,
    /// The ManagedCluster name.
    pub managed_cluster_name: String,
    /// The stream's epoch.
    pub epoch: u64,
}

/// A heartbeat as the hub receives it: the child cluster's version, nodes, capacity and health
/// as the applier collects them, and what the agent says of itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterHeartbeat {
    /// The child cluster's version, node counts, capacity and health endpoints.
    pub cluster: Heartbeat,
    /// The agent's version.
    pub agent_version: String,
    /// The agent's heartbeat period, seconds.
    pub heartbeat_seconds: u32,
    /// The prune after a snapshot the agent holds back for confirmation, if any.
    pub prune_hold: Option<PruneHold>,
}

/// A prune the agent holds back because it would delete more than its limit allows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneHold {
    /// What the confirmation annotation must say.
    pub id: String,
    /// Some of the Descriptions it would remove.
    pub descriptions: Vec<String>,
    /// How many Descriptions it would remove.
    pub description_count: u32,
    /// Objects it would delete.
    pub objects: u32,
    /// Objects the agent owns.
    pub owned_objects: u32,
    /// The agent's limit, percent.
    pub max_percent: u32,
    /// Objects of an earlier registration of the cluster it would delete.
    pub earlier_registration_objects: u32,
}

impl From<v1::PruneHold> for PruneHold {
    fn from(h: v1::PruneHold) -> Self {
        PruneHold {
            id: h.id,
            descriptions: h.descriptions,
            description_count: h.description_count,
            objects: h.objects,
            owned_objects: h.owned_objects,
            max_percent: h.max_percent,
            earlier_registration_objects: h.earlier_registration_objects,
        }
    }
}

/// Most Description names of a prune hold kept.
pub const MAX_PRUNE_HOLD_NAMES: usize = 10;
/// Longest prune hold id kept.
pub const MAX_PRUNE_HOLD_ID: usize = 64;

impl From<v1::Heartbeat> for ClusterHeartbeat {
    fn from(h: v1::Heartbeat) -> Self {
        let n = h.node_statistics.unwrap_or_default();
        ClusterHeartbeat {
            cluster: Heartbeat {
                k8s_version: h.k8s_version,
                platform: h.platform,
                ready_nodes: n.ready_nodes,
                not_ready_nodes: n.not_ready_nodes,
                unknown_nodes: n.unknown_nodes,
                capacity: h.capacity.into_iter().collect(),
                allocatable: h.allocatable.into_iter().collect(),
                healthz: h.healthz,
                livez: h.livez,
                readyz: h.readyz,
            },
            agent_version: h.agent_version,
            heartbeat_seconds: h.heartbeat_seconds,
            prune_hold: h.prune_hold.map(PruneHold::from),
        }
    }
}

/// Most entries of a heartbeat's capacity or allocatable map.
pub const MAX_RESOURCES_PER_HEARTBEAT: usize = 64;
/// Most nodes a heartbeat may count in one state.
pub const MAX_NODES_PER_STATE: i32 = 1_000_000;
/// Longest version or platform string kept from a heartbeat.
pub const MAX_HEARTBEAT_TEXT: usize = 128;

impl ClusterHeartbeat {
    /// The heartbeat with what an agent sends bounded before it reaches the ManagedCluster: the
    /// period within `1..=max_period_seconds` (the period the hub asked for; a longer one would
    /// delay the detection of a silent cluster), node counts within `0..=1,000,000`, at most 64
    /// resources each for capacity and allocatable, each a valid resource name with a quantity
    /// that parses and fits (an unreadable or overflowing one is left out, never a panic or a
    /// failed status write), and version strings cut to 128 bytes. Also returns what was
    /// changed, for the log.
    pub fn bounded(mut self, max_period_seconds: u32) -> (ClusterHeartbeat, Vec<String>) {
        let mut notes = Vec::new();
        let max_period = max_period_seconds.max(1);
        let period = match self.heartbeat_seconds {
            0 => max_period,
            p => p.min(max_period),
        };
        if period != self.heartbeat_seconds {
            notes.push(format!(
                "heartbeat period {}s bounded to {period}s",
                self.heartbeat_seconds
            ));
            self.heartbeat_seconds = period;
        }
        for (what, count) in [
            ("ready", &mut self.cluster.ready_nodes),
            ("not-ready", &mut self.cluster.not_ready_nodes),
            ("unknown", &mut self.cluster.unknown_nodes),
        ] {
            let bounded = (*count).clamp(0, MAX_NODES_PER_STATE);
            if bounded != *count {
                notes.push(format!("{what} node count {count} bounded to {bounded}"));
                *count = bounded;
            }
        }
        for (what, map) in [
            ("capacity", &mut self.cluster.capacity),
            ("allocatable", &mut self.cluster.allocatable),
        ] {
            let mut kept = BTreeMap::new();
            for (name, quantity) in std::mem::take(map) {
                if kept.len() >= MAX_RESOURCES_PER_HEARTBEAT {
                    notes.push(format!(
                        "{what}: more than {MAX_RESOURCES_PER_HEARTBEAT} resources; the rest left out"
                    ));
                    break;
                }
                if !is_resource_name(&name) {
                    notes.push(format!(
                        "{what}: resource name {:?} is not valid",
                        truncate(&name, MAX_HEARTBEAT_TEXT)
                    ));
                    continue;
                }
                match atoll_crds::quantity::parse_milli(&quantity) {
                    Ok(_) => {
                        kept.insert(name, quantity);
                    }
                    Err(e) => notes.push(format!("{what}: {name}: {e}")),
                }
            }
            *map = kept;
        }
        for text in [
            &mut self.cluster.k8s_version,
            &mut self.cluster.platform,
            &mut self.agent_version,
        ] {
            if text.len() > MAX_HEARTBEAT_TEXT {
                *text = truncate(text, MAX_HEARTBEAT_TEXT);
                notes.push(format!("{text:?}: cut to {MAX_HEARTBEAT_TEXT} bytes"));
            }
        }
        if let Some(hold) = &mut self.prune_hold {
            if hold.descriptions.len() > MAX_PRUNE_HOLD_NAMES {
                hold.descriptions.truncate(MAX_PRUNE_HOLD_NAMES);
                notes.push(format!(
                    "prune hold: more than {MAX_PRUNE_HOLD_NAMES} Descriptions listed; the rest left out"
                ));
            }
            for name in &mut hold.descriptions {
                if name.len() > MAX_HEARTBEAT_TEXT {
                    *name = truncate(name, MAX_HEARTBEAT_TEXT);
                    notes.push(format!(
                        "prune hold: a name cut to {MAX_HEARTBEAT_TEXT} bytes"
                    ));
                }
            }
            if hold.id.len() > MAX_PRUNE_HOLD_ID {
                hold.id = truncate(&hold.id, MAX_PRUNE_HOLD_ID);
                notes.push(format!("prune hold: id cut to {MAX_PRUNE_HOLD_ID} bytes"));
            }
        }
        (self, notes)
    }
}

/// A Kubernetes resource name: an optional DNS-subdomain prefix and `/`, then a name of
/// `[A-Za-z0-9._-]`, 253 characters at most (`cpu`, `nvidia.com/gpu`, `hugepages-2Mi`).
fn is_resource_name(name: &str) -> bool {
    let (prefix, base) = name.rsplit_once('/').unwrap_or(("", name));
    let word = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
    };
    name.len() <= 253 && word(base) && (prefix.is_empty() || word(prefix))
}

/// The applier's report that a protocol `DescriptionReport` carries. An object's status that is
/// not valid JSON is dropped; a phase the hub does not know reads as `Unknown`.
pub fn report_from_wire(r: v1::DescriptionReport) -> Report {
    Report {
        name: r.name,
        uid: r.uid,
        observed_generation: r.observed_generation,
        phase: Phase::parse(&r.phase),
        reason: r.reason,
        objects: r
            .objects
            .into_iter()
            .map(|o| ObjectReport {
                object: ObjectRef {
                    api_version: o.api_version,
                    kind: o.kind,
                    namespace: o.namespace,
                    name: o.name,
                },
                status: if o.status.is_empty() {
                    None
                } else {
                    serde_json::from_slice(&o.status).ok()
                },
                error: Some(o.error).filter(|e| !e.is_empty()),
            })
            .collect(),
        releases: r.releases.into_iter().map(release_from_wire).collect(),
        deleted: r.deleted,
    }
}

/// A release's report from its protocol message; an empty phase means not installed.
fn release_from_wire(r: v1::ReleaseStatus) -> ReleaseReport {
    ReleaseReport {
        status: (!r.phase.is_empty()).then_some(ReleaseStatus {
            phase: r.phase,
            revision: r.revision,
            chart_version: r.chart_version,
            first_deployed: r.first_deployed,
            last_deployed: r.last_deployed,
            description: r.description,
            notes: r.notes,
        }),
        error: Some(r.error).filter(|e| !e.is_empty()),
        name: r.name,
        namespace: r.namespace,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> v1::Hello {
        v1::Hello {
            protocol_version: v1::ProtocolVersion::V1 as i32,
            cluster_id: "3f2c1b9e-0d4a-4c8e-9f1a-2b3c4d5e6f70".into(),
            cluster_name: "edge-1".into(),
            cluster_labels: [("env".to_string(), "dev".to_string())].into(),
            token: "07401b.f395accd246ae52d".into(),
            agent_version: "0.1.0".into(),
            cluster_type: String::new(),
        }
    }

    #[test]
    fn hello_validation_maps_each_fault_to_its_error() {
        type Edit = fn(&mut v1::Hello);
        let cases: Vec<(&str, Edit, Option<&str>)> = vec![
            ("valid", |_| {}, None),
            (
                "old version",
                |h| h.protocol_version = 0,
                Some("check_protocol_version"),
            ),
            (
                "future version",
                |h| h.protocol_version = 7,
                Some("check_protocol_version"),
            ),
            (
                "bad id",
                |h| h.cluster_id = "not-a-uuid".into(),
                Some("parse_hello"),
            ),
            (
                "bad name",
                |h| h.cluster_name = "Edge_1".into(),
                Some("parse_hello"),
            ),
            (
                "long name",
                |h| h.cluster_name = "a".repeat(31),
                Some("parse_hello"),
            ),
            ("no token", |h| h.token.clear(), Some("authenticate")),
            (
                "bad type",
                |h| h.cluster_type = "Big".into(),
                Some("parse_hello"),
            ),
            (
                "bad label value",
                |h| {
                    h.cluster_labels.insert("env".into(), "no spaces".into());
                },
                Some("parse_hello"),
            ),
            (
                "bad label key",
                |h| {
                    h.cluster_labels.insert("-env".into(), "x".into());
                },
                Some("parse_hello"),
            ),
            (
                "prefixed label",
                |h| {
                    h.cluster_labels
                        .insert("topology.kubernetes.io/zone".into(), "eu-1a".into());
                },
                None,
            ),
        ];
        for (what, edit, want) in cases {
            let mut h = hello();
            edit(&mut h);
            let got = AgentHello::from_proto(h).err().map(|e| e.label());
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn label_validation_table() {
        let long = "x".repeat(64);
        let cases = [
            ("env", "prod", true),
            ("env", "", true),
            ("example.com/env", "a.b_c-d", true),
            ("Env", "X1", true),
            ("env", "-x", false),
            ("env", long.as_str(), false),
            ("", "x", false),
            ("a/b/c", "x", false),
            ("/env", "x", false),
            ("Bad_Prefix/env", "x", false),
        ];
        for (k, v, ok) in cases {
            assert_eq!(is_valid_label(k, v), ok, "{k}={v}");
        }
    }

    #[test]
    fn hello_defaults_name_and_type_and_hides_token() {
        let mut h = hello();
        h.cluster_name.clear();
        let a = AgentHello::from_proto(h).unwrap();
        assert_eq!(a.cluster_name, "cluster-3f2c1b9e");
        assert_eq!(a.cluster_type, "StandardCluster");
        assert!(!format!("{a:?}").contains("f395accd246ae52d"));
    }

    #[test]
    fn protocol_version_error_message_is_clear() {
        let mut h = hello();
        h.protocol_version = 2;
        let msg = AgentHello::from_proto(h).unwrap_err().to_string();
        assert!(msg.contains("unsupported protocol version 2"), "{msg}");
    }

    #[test]
    fn agent_heartbeats_are_bounded_before_they_reach_the_cluster() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let hb = ClusterHeartbeat {
            cluster: Heartbeat {
                k8s_version: "v".repeat(1000),
                ready_nodes: -3,
                not_ready_nodes: i32::MAX,
                capacity: map(&[
                    ("cpu", "8"),
                    ("nvidia.com/gpu", "2"),
                    ("memory", "999999999999999999999999999999Ei"),
                    ("bad name!", "1"),
                    ("pods", "lots"),
                ]),
                allocatable: (0..100).map(|i| (format!("r{i:03}"), "1".into())).collect(),
                ..Heartbeat::default()
            },
            heartbeat_seconds: 4_000_000_000,
            prune_hold: Some(PruneHold {
                id: "f".repeat(500),
                descriptions: (0..50)
                    .map(|i| format!("c.{i}{}", "x".repeat(300)))
                    .collect(),
                ..PruneHold::default()
            }),
            ..ClusterHeartbeat::default()
        };
        let (b, notes) = hb.bounded(10);
        assert_eq!(b.heartbeat_seconds, 10);
        assert_eq!(
            (b.cluster.ready_nodes, b.cluster.not_ready_nodes),
            (0, MAX_NODES_PER_STATE)
        );
        assert_eq!(
            b.cluster.capacity,
            map(&[("cpu", "8"), ("nvidia.com/gpu", "2")]),
            "overflowing, unreadable and badly named quantities are left out"
        );
        assert_eq!(b.cluster.allocatable.len(), MAX_RESOURCES_PER_HEARTBEAT);
        assert_eq!(b.cluster.k8s_version.len(), MAX_HEARTBEAT_TEXT);
        let hold = b.prune_hold.unwrap();
        assert_eq!(hold.id.len(), MAX_PRUNE_HOLD_ID);
        assert_eq!(hold.descriptions.len(), MAX_PRUNE_HOLD_NAMES);
        assert!(
            hold.descriptions
                .iter()
                .all(|d| d.len() <= MAX_HEARTBEAT_TEXT)
        );
        assert!(notes.iter().any(|n| n.contains("too large")), "{notes:?}");
        // A well-behaved heartbeat passes unchanged, and a period of 0 means the hub's.
        let fine = ClusterHeartbeat {
            cluster: Heartbeat {
                capacity: map(&[("cpu", "500m")]),
                ..Heartbeat::default()
            },
            heartbeat_seconds: 5,
            ..ClusterHeartbeat::default()
        };
        assert_eq!(fine.clone().bounded(10), (fine, vec![]));
        let unset = ClusterHeartbeat::default().bounded(10).0;
        assert_eq!(unset.heartbeat_seconds, 10);
    }

    #[test]
    fn report_conversion_parses_object_status_json() {
        let r = report_from_wire(v1::DescriptionReport {
            name: "apps.web".into(),
            objects: vec![
                v1::ObjectStatus {
                    kind: "Deployment".into(),
                    status: br#"{"replicas":2}"#.to_vec(),
                    ..Default::default()
                },
                v1::ObjectStatus {
                    kind: "ConfigMap".into(),
                    status: vec![],
                    ..Default::default()
                },
                v1::ObjectStatus {
                    kind: "Bad".into(),
                    status: b"{not json".to_vec(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        });
        let statuses: Vec<_> = r.objects.iter().map(|o| o.status.clone()).collect();
        assert_eq!(
            statuses,
            vec![Some(serde_json::json!({"replicas": 2})), None, None]
        );
    }
}
