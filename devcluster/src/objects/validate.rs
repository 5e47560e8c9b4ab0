//! Metadata validation: names, label keys and values, as apimachinery does it.

/// Which naming rule a kind follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// DNS-1123 subdomain (most kinds).
    Subdomain,
    /// DNS-1123 label (Namespace).
    Label,
    /// DNS-1035 label (Service).
    Dns1035Label,
}

/// Validates a `metadata.name`; returns the message kube-apiserver puts after
/// `metadata.name: Invalid value: "<name>": `, or `None` when valid.
pub fn validate_name(name: &str, rule: NameRule) -> Option<String> {
    let _ = (name, rule);
    None
}

/// Validates `metadata.labels`; returns field errors as (field, message).
pub fn validate_labels(
    labels: &serde_json::Map<String, serde_json::Value>,
) -> Vec<(String, String)> {
    let _ = labels;
    Vec::new()
}
