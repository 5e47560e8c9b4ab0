//! What a heartbeat carries: the child's version, node counts, capacity and allocatable sums
//! (cpu, memory, pods, nvidia.com/gpu) and its health endpoints.

use crate::Error;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;
use std::collections::BTreeMap;

/// The resources summed over nodes.
pub const RESOURCES: [&str; 4] = ["cpu", "memory", "pods", "nvidia.com/gpu"];

/// A heartbeat, free of protobuf types.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Heartbeat {
    /// `gitVersion` of the child's API server.
    pub k8s_version: String,
    /// `platform` of the child's API server.
    pub platform: String,
    /// Nodes whose Ready condition is True.
    pub ready_nodes: i32,
    /// Nodes whose Ready condition is False.
    pub not_ready_nodes: i32,
    /// Nodes without a Ready condition, or with Unknown.
    pub unknown_nodes: i32,
    /// Capacity sums, as quantity strings.
    pub capacity: BTreeMap<String, String>,
    /// Allocatable sums, as quantity strings.
    pub allocatable: BTreeMap<String, String>,
    /// `/healthz` answered ok.
    pub healthz: bool,
    /// `/livez` answered ok.
    pub livez: bool,
    /// `/readyz` answered ok.
    pub readyz: bool,
}

/// Collects a heartbeat from the child cluster.
pub async fn collect(client: &kube::Client) -> Result<Heartbeat, Error> {
    let version = client
        .apiserver_version()
        .await
        .map_err(Error::CollectHeartbeat)?;
    let nodes: Api<Node> = Api::all(client.clone());
    let nodes = nodes
        .list(&ListParams::default())
        .await
        .map_err(Error::CollectHeartbeat)?
        .items;
    let mut hb = summarize(&nodes);
    hb.k8s_version = version.git_version;
    hb.platform = version.platform;
    hb.healthz = probe(client, "/healthz").await;
    hb.livez = probe(client, "/livez").await;
    hb.readyz = probe(client, "/readyz").await;
    Ok(hb)
}

async fn probe(client: &kube::Client, path: &str) -> bool {
    let Ok(request) = http::Request::get(path).body(Vec::new()) else {
        return false;
    };
    matches!(client.request_text(request).await, Ok(body) if body.trim() == "ok")
}

/// The largest sum reported, in milli-units (10^29): it still formats as a quantity the hub and
/// the scheduler read back (at most 30 digits), and no real cluster comes near it.
pub const MAX_SUM_MILLI: i128 = 100_000_000_000_000_000_000_000_000_000;

/// Node counts and resource sums of `nodes`.
pub fn summarize(nodes: &[Node]) -> Heartbeat {
    let mut hb = Heartbeat::default();
    let mut capacity = [0i128; 4];
    let mut allocatable = [0i128; 4];
    for node in nodes {
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.as_str());
        match ready {
            Some("True") => hb.ready_nodes += 1,
            Some("False") => hb.not_ready_nodes += 1,
            _ => hb.unknown_nodes += 1,
        }
        let Some(status) = node.status.as_ref() else {
            continue;
        };
        for (i, resource) in RESOURCES.iter().enumerate() {
            if let Some(q) = status.capacity.as_ref().and_then(|c| c.get(*resource)) {
                capacity[i] = capacity[i]
                    .saturating_add(parse_milli(&q.0).unwrap_or(0))
                    .min(MAX_SUM_MILLI);
            }
            if let Some(q) = status.allocatable.as_ref().and_then(|c| c.get(*resource)) {
                allocatable[i] = allocatable[i]
                    .saturating_add(parse_milli(&q.0).unwrap_or(0))
                    .min(MAX_SUM_MILLI);
            }
        }
    }
    for (i, resource) in RESOURCES.iter().enumerate() {
        hb.capacity
            .insert((*resource).to_owned(), format_milli(resource, capacity[i]));
        hb.allocatable.insert(
            (*resource).to_owned(),
            format_milli(resource, allocatable[i]),
        );
    }
    hb
}

/// Parses a Kubernetes quantity into thousandths of its unit (`"500m"` → 500, `"1Ki"` →
/// 1_024_000). `None` when it is not a quantity, or too large ([`atoll_crds::quantity`]).
pub fn parse_milli(q: &str) -> Option<i128> {
    atoll_crds::quantity::parse_milli(q).ok()
}

/// Formats a sum in thousandths as a quantity string: cpu in cores or millicores, memory with the
/// largest exact binary suffix, counts as integers.
pub fn format_milli(resource: &str, milli: i128) -> String {
    if resource == "cpu" {
        return if milli % 1000 == 0 {
            format!("{}", milli / 1000)
        } else {
            format!("{milli}m")
        };
    }
    let whole = milli / 1000 + i128::from(milli % 1000 > 0);
    if resource == "memory" && whole != 0 {
        for (suffix, shift) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let unit = 1i128 << shift;
            if whole % unit == 0 {
                return format!("{}{suffix}", whole / unit);
            }
        }
    }
    format!("{whole}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    #[test]
    fn quantities_parse_to_thousandths() {
        let cases = [
            ("1", Some(1000)),
            ("500m", Some(500)),
            ("1.5", Some(1500)),
            ("2Ki", Some(2048 * 1000)),
            ("1Gi", Some((1i128 << 30) * 1000)),
            ("1k", Some(1_000_000)),
            ("1e3", Some(1_000_000)),
            ("100n", Some(1)),
            ("abc", None),
            ("1Zi", None),
        ];
        for (q, expected) in cases {
            assert_eq!(parse_milli(q), expected, "{q}");
        }
    }

    #[test]
    fn sums_are_formatted_per_resource() {
        let cases = [
            ("cpu", 8000, "8"),
            ("cpu", 1500, "1500m"),
            ("memory", (32i128 << 30) * 1000, "32Gi"),
            ("memory", 1_000_000_000 * 1000, "1000000000"),
            ("memory", 0, "0"),
            ("pods", 220_000, "220"),
            ("nvidia.com/gpu", 0, "0"),
        ];
        for (resource, milli, expected) in cases {
            assert_eq!(
                format_milli(resource, milli),
                expected,
                "{resource} {milli}"
            );
        }
    }

    fn node(ready: Option<&str>, cpu: &str, memory: &str) -> Node {
        let resources = BTreeMap::from([
            ("cpu".to_owned(), Quantity(cpu.to_owned())),
            ("memory".to_owned(), Quantity(memory.to_owned())),
            ("pods".to_owned(), Quantity("110".to_owned())),
        ]);
        Node {
            status: Some(NodeStatus {
                conditions: ready.map(|s| {
                    vec![NodeCondition {
                        type_: "Ready".into(),
                        status: s.into(),
                        ..NodeCondition::default()
                    }]
                }),
                capacity: Some(resources.clone()),
                allocatable: Some(resources),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn huge_or_overflowing_node_quantities_never_panic_the_sum() {
        // Each fits in milli-units; their sum does not, and saturates.
        let huge = "100000000000000000e18";
        let nodes = [
            node(Some("True"), huge, huge),
            node(Some("True"), huge, huge),
            node(Some("True"), "999999999999999999999999999999Ei", "1Gi"),
        ];
        let hb = summarize(&nodes);
        assert_eq!(hb.ready_nodes, 3);
        assert_eq!(parse_milli(&hb.capacity["cpu"]), Some(MAX_SUM_MILLI));
        assert!(parse_milli(&hb.capacity["memory"]).is_some());
    }

    #[test]
    fn summarize_counts_nodes_by_readiness_and_sums_resources() {
        let nodes = [
            node(Some("True"), "4", "16Gi"),
            node(Some("True"), "3500m", "16Gi"),
            node(Some("False"), "2", "8Gi"),
            node(None, "1", "8Gi"),
        ];
        let hb = summarize(&nodes);
        assert_eq!(
            (hb.ready_nodes, hb.not_ready_nodes, hb.unknown_nodes),
            (2, 1, 1)
        );
        assert_eq!(hb.capacity.get("cpu").map(String::as_str), Some("10500m"));
        assert_eq!(hb.capacity.get("memory").map(String::as_str), Some("48Gi"));
        assert_eq!(hb.allocatable.get("pods").map(String::as_str), Some("440"));
        assert_eq!(
            hb.allocatable.get("nvidia.com/gpu").map(String::as_str),
            Some("0")
        );
    }
}
