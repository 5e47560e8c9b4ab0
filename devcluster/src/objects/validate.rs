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

const DNS1123_LABEL_MAX: usize = 63;
const DNS1123_SUBDOMAIN_MAX: usize = 253;
const QUALIFIED_NAME_MAX: usize = 63;
const LABEL_VALUE_MAX: usize = 63;

const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";

/// apimachinery's `RegexError`, including its odd `', ` before each ` or `.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut out = format!("{msg} (e.g. ");
    for (i, example) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push_str(&format!("'{example}', "));
    }
    out.push_str(&format!("regex used for validation is '{fmt}')"));
    out
}

fn max_len_error(max: usize) -> String {
    format!("must be no more than {max} characters")
}

fn is_lower_alnum(c: char) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`
fn matches_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.chars().all(|c| is_lower_alnum(c) || c == '-')
        && s.starts_with(is_lower_alnum)
        && s.ends_with(is_lower_alnum)
}

/// DNS-1123 labels joined by dots.
fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

/// `[a-z]([-a-z0-9]*[a-z0-9])?`
fn matches_dns1035_label(s: &str) -> bool {
    matches_dns1123_label(s) && s.starts_with(|c: char| c.is_ascii_lowercase())
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn matches_qualified_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// apimachinery `IsDNS1123Subdomain`.
fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_MSG,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// apimachinery `IsDNS1123Label`.
fn dns1123_label_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !matches_dns1123_label(value) {
        errs.push(regex_error(
            DNS1123_LABEL_MSG,
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errs
}

/// apimachinery `IsDNS1035Label`.
fn dns1035_label_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errs.push(max_len_error(DNS1123_LABEL_MAX));
    }
    if !matches_dns1035_label(value) {
        errs.push(regex_error(
            DNS1035_LABEL_MSG,
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// apimachinery `path.IsValidPathSegmentName`: names end up in URL paths.
fn path_segment_errors(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    let mut errs = Vec::new();
    for illegal in ["/", "%"] {
        if name.contains(illegal) {
            errs.push(format!("may not contain '{illegal}'"));
        }
    }
    errs
}

/// Every message kube-apiserver reports for `metadata.name` (each one becomes its own
/// `metadata.name: Invalid value: "<name>": <message>` cause).
pub fn name_errors(name: &str, rule: NameRule) -> Vec<String> {
    let segment = path_segment_errors(name);
    if !segment.is_empty() {
        return segment;
    }
    match rule {
        NameRule::Subdomain => dns1123_subdomain_errors(name),
        NameRule::Label => dns1123_label_errors(name),
        NameRule::Dns1035Label => dns1035_label_errors(name),
    }
}

/// Validates a `metadata.name`; returns the message kube-apiserver puts after
/// `metadata.name: Invalid value: "<name>": `, or `None` when valid.
///
/// An empty name is reported as invalid too, but kube-apiserver words that case as
/// `metadata.name: Required value: name or generateName is required`; callers check it first.
/// When several rules fail (too long and bad characters) the messages are joined with `; `;
/// [`name_errors`] returns them separately.
pub fn validate_name(name: &str, rule: NameRule) -> Option<String> {
    let errs = name_errors(name, rule);
    if errs.is_empty() {
        None
    } else {
        Some(errs.join("; "))
    }
}

/// apimachinery `IsQualifiedName` (label and annotation keys).
pub fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > QUALIFIED_NAME_MAX {
        errs.push(format!("name part {}", max_len_error(QUALIFIED_NAME_MAX)));
    }
    if !matches_qualified_name(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// apimachinery `IsValidLabelValue`.
pub fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX {
        errs.push(max_len_error(LABEL_VALUE_MAX));
    }
    if !value.is_empty() && !matches_qualified_name(value) {
        errs.push(regex_error(
            LABEL_VALUE_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Go's `%q` of a string, which is what `field.Invalid` prints for string values.
pub(crate) fn go_quote(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// Validates `metadata.labels`; returns field errors as (field, message).
///
/// The field is `metadata.labels` (apimachinery does not name the key); the message is the
/// whole error body, e.g. `Invalid value: "Bad Key": name part must consist of ...`, which is
/// also what goes into a Status cause's `message`.
pub fn validate_labels(
    labels: &serde_json::Map<String, serde_json::Value>,
) -> Vec<(String, String)> {
    const FIELD: &str = "metadata.labels";
    let mut out = Vec::new();
    for (key, value) in labels {
        for msg in qualified_name_errors(key) {
            out.push((
                FIELD.to_string(),
                format!("Invalid value: {}: {msg}", go_quote(key)),
            ));
        }
        match value.as_str() {
            Some(v) => {
                for msg in label_value_errors(v) {
                    out.push((
                        FIELD.to_string(),
                        format!("Invalid value: {}: {msg}", go_quote(v)),
                    ));
                }
            }
            None => out.push((
                FIELD.to_string(),
                format!("Invalid value: {value}: label values must be strings"),
            )),
        }
    }
    out
}

/// Total size limit of all annotation keys and values (256 KiB).
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// Validates `metadata.annotations` as apimachinery does: keys are qualified names (case
/// does not matter) and keys plus values stay within [`TOTAL_ANNOTATION_SIZE_LIMIT`].
/// Returns (field, message) pairs like [`validate_labels`].
pub fn validate_annotations(
    annotations: &serde_json::Map<String, serde_json::Value>,
) -> Vec<(String, String)> {
    const FIELD: &str = "metadata.annotations";
    let mut out = Vec::new();
    let mut size = 0;
    for (key, value) in annotations {
        for msg in qualified_name_errors(&key.to_lowercase()) {
            out.push((
                FIELD.to_string(),
                format!("Invalid value: {}: {msg}", go_quote(key)),
            ));
        }
        size += key.len() + value.as_str().map_or(0, str::len);
    }
    if size > TOTAL_ANNOTATION_SIZE_LIMIT {
        out.push((
            FIELD.to_string(),
            format!("Too long: may not be more than {TOTAL_ANNOTATION_SIZE_LIMIT} bytes"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    const DNS1035_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

    #[test]
    fn validate_name_words_errors_like_apimachinery() {
        let long_label = "a".repeat(64);
        let long_subdomain = format!("{}.{}", "a".repeat(200), "b".repeat(60));
        let cases: Vec<(&str, NameRule, Option<String>)> = vec![
            ("web", NameRule::Subdomain, None),
            ("web.example.com", NameRule::Subdomain, None),
            ("0abc", NameRule::Subdomain, None),
            ("Bad_Name", NameRule::Subdomain, Some(SUBDOMAIN_MSG.into())),
            ("-web", NameRule::Subdomain, Some(SUBDOMAIN_MSG.into())),
            ("web.", NameRule::Subdomain, Some(SUBDOMAIN_MSG.into())),
            ("a..b", NameRule::Subdomain, Some(SUBDOMAIN_MSG.into())),
            (
                &long_subdomain,
                NameRule::Subdomain,
                Some("must be no more than 253 characters".into()),
            ),
            ("kube-system", NameRule::Label, None),
            ("a.b", NameRule::Label, Some(LABEL_MSG.into())),
            (
                &long_label,
                NameRule::Label,
                Some("must be no more than 63 characters".into()),
            ),
            ("svc-1", NameRule::Dns1035Label, None),
            ("1svc", NameRule::Dns1035Label, Some(DNS1035_MSG.into())),
            ("..", NameRule::Subdomain, Some("may not be '..'".into())),
            (
                "a/b",
                NameRule::Subdomain,
                Some("may not contain '/'".into()),
            ),
            ("a%b", NameRule::Label, Some("may not contain '%'".into())),
        ];
        for (name, rule, want) in cases {
            assert_eq!(validate_name(name, rule), want, "{name} {rule:?}");
        }
    }

    #[test]
    fn validate_labels_reports_keys_and_values() {
        let labels = json!({
            "app": "web",
            "example.com/tier": "",
            "Bad Key": "ok",
            "bad": "-x",
            "/x": "y",
            "a/b/c": "y",
        });
        let labels = labels.as_object().cloned().unwrap_or_default();
        let mut got = validate_labels(&labels);
        got.sort();
        let qn = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        let want: Vec<(String, String)> = vec![
            format!("Invalid value: \"/x\": prefix part must be non-empty"),
            format!("Invalid value: \"Bad Key\": name part {qn}"),
            format!(
                "Invalid value: \"a/b/c\": a qualified name {qn} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            ),
            "Invalid value: \"-x\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_string(),
        ]
        .into_iter()
        .map(|m| ("metadata.labels".to_string(), m))
        .collect();
        let mut want = want;
        want.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn validate_annotations_checks_keys_and_total_size() {
        let ok = json!({"kubectl.kubernetes.io/last-applied-configuration": "{}", "Mixed.Case/Key": "v"});
        assert_eq!(validate_annotations(ok.as_object().unwrap()), vec![]);
        let bad = json!({"a b": "v"});
        assert_eq!(validate_annotations(bad.as_object().unwrap()).len(), 1);
        let big = json!({"k": "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT)});
        assert_eq!(
            validate_annotations(big.as_object().unwrap()),
            vec![(
                "metadata.annotations".to_string(),
                "Too long: may not be more than 262144 bytes".to_string()
            )]
        );
    }

    #[test]
    fn label_values_longer_than_63_are_invalid() {
        let errs = label_value_errors(&"a".repeat(64));
        assert_eq!(errs, vec!["must be no more than 63 characters".to_string()]);
    }
}
