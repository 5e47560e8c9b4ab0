//! Request parsing helpers: query strings, media types, paths.

use http::HeaderMap;

/// Percent-decodes a query component (`+` is a space).
pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A parsed query string (tolerates `?&a=b` and empty pairs, as kube-rs sends them).
#[derive(Clone, Debug, Default)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Parses `a=b&c=d`.
    pub fn parse(q: Option<&str>) -> Query {
        let pairs = q
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (percent_decode(k), percent_decode(v)),
                None => (percent_decode(p), String::new()),
            })
            .collect();
        Query { pairs }
    }

    /// The first value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `name` unless absent or empty.
    pub fn non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.is_empty())
    }

    /// True for `name=true` / `name=1` / bare `name`.
    pub fn flag(&self, name: &str) -> bool {
        matches!(self.get(name), Some("true" | "1" | ""))
    }

    /// Whether `name` is present at all.
    pub fn has(&self, name: &str) -> bool {
        self.pairs.iter().any(|(k, _)| k == name)
    }
}

/// What the client asked for in `Accept`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// The object or list itself.
    Plain,
    /// `as=Table`.
    Table,
    /// `as=PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata,
}

/// Picks the response form from the `Accept` header (first acceptable entry wins).
pub fn output(headers: &HeaderMap) -> Output {
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    for entry in accept.split(',') {
        let e = entry.replace(' ', "");
        if e.contains("as=Table") {
            return Output::Table;
        }
        if e.contains("as=PartialObjectMetadata") {
            return Output::Metadata;
        }
        if e.starts_with("application/json") || e.starts_with("*/*") || e.is_empty() {
            return Output::Plain;
        }
    }
    Output::Plain
}

/// The media type of `Content-Type`, lowercased and without parameters.
pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// The field manager for non-apply writes: `fieldManager`, else the User-Agent up to the
/// first `/`, else `unknown`.
pub fn field_manager(query: &Query, headers: &HeaderMap) -> String {
    if let Some(m) = query.non_empty("fieldManager") {
        return m.to_string();
    }
    let ua = headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let prefix = ua.split('/').next().unwrap_or("").trim();
    if prefix.is_empty() {
        "unknown".to_string()
    } else {
        prefix.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_tolerates_leading_ampersand_and_decodes() {
        let q = Query::parse(Some("&labelSelector=app%3Dweb%2Cx+in+(a)&watch=true&"));
        assert_eq!(q.get("labelSelector"), Some("app=web,x in (a)"));
        assert!(q.flag("watch"));
        assert!(!q.has("limit"));
    }

    #[test]
    fn accept_negotiation() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
                .parse()
                .unwrap(),
        );
        assert_eq!(output(&h), Output::Table);
        h.insert(http::header::ACCEPT, "application/json".parse().unwrap());
        assert_eq!(output(&h), Output::Plain);
    }
}
