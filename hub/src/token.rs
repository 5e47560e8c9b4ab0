//! Tokens: Kubernetes-style bootstrap tokens (first contact) and per-cluster tokens (afterwards).
//!
//! Pure functions only: parsing, checking a bootstrap-token Secret's data, minting and hashing a
//! cluster token. Every comparison of secret material is constant-time. Tokens never appear in
//! `Debug` output or error messages.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use k8s_openapi::jiff::Timestamp;
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Namespace holding bootstrap-token Secrets.
pub const BOOTSTRAP_TOKEN_NAMESPACE: &str = "clusternet-system";
/// Type of a bootstrap-token Secret.
pub const BOOTSTRAP_TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// The key of a bootstrap-token Secret that must be `"true"` for the token to authenticate.
pub const USAGE_AUTHENTICATION: &str = "usage-bootstrap-authentication";
/// Prefix of a bootstrap-token Secret's name; the token id follows.
pub const BOOTSTRAP_TOKEN_SECRET_PREFIX: &str = "bootstrap-token-";
/// Name of the Secret in a cluster's dedicated namespace holding the cluster token's hash.
pub const CLUSTER_TOKEN_SECRET: &str = "cluster-token";
/// Data key of [`CLUSTER_TOKEN_SECRET`] holding the SHA-256 (hex) of the cluster token.
pub const CLUSTER_TOKEN_SHA256_KEY: &str = "sha256";
/// Data key of [`CLUSTER_TOKEN_SECRET`]: the hash of the token a rotation replaced, accepted
/// until the agent shows it has the new one (so that a rotation never locks an agent out).
pub const CLUSTER_TOKEN_PREVIOUS_KEY: &str = "sha256-previous";
/// Data key of [`CLUSTER_TOKEN_SECRET`]: until when the replaced token is accepted (RFC 3339).
pub const CLUSTER_TOKEN_PREVIOUS_UNTIL_KEY: &str = "previous-valid-until";
/// Data key of [`CLUSTER_TOKEN_SECRET`]: when the current token was issued (RFC 3339).
pub const CLUSTER_TOKEN_ISSUED_KEY: &str = "issued-at";
/// Data key of [`CLUSTER_TOKEN_SECRET`]: when the current token stops being accepted (RFC 3339;
/// absent when the hub runs without `--cluster-token-lifetime`).
pub const CLUSTER_TOKEN_EXPIRES_KEY: &str = "expires-at";
/// Data key of [`CLUSTER_TOKEN_SECRET`]: the value of the ManagedCluster's
/// [`ANNOTATION_ROTATE_TOKEN`] the current token was issued for.
pub const CLUSTER_TOKEN_ROTATION_KEY: &str = "rotation";
/// Data key of [`CLUSTER_TOKEN_SECRET`], `"true"` while the current token, issued at a
/// registration, has not reached its agent as far as the hub knows: no heartbeat came on the
/// stream that carried it and no stream presented it since. Such a cluster may register again
/// with a bootstrap token without an administrator: its agent lost the token on the way (the
/// stream broke, or the agent could not store it), and nobody can hold a token that never arrived.
pub const CLUSTER_TOKEN_AWAITING_AGENT_KEY: &str = "awaiting-agent";
/// Annotation on a ManagedCluster by which an administrator asks for a new cluster token: when
/// its value differs from the one the current token was issued for, the hub closes the
/// cluster's stream, and the agent's reconnection gets a new token in its Welcome.
pub const ANNOTATION_ROTATE_TOKEN: &str = "hub.atoll.io/rotate-token";

/// A parsed bootstrap token `<token-id>.<token-secret>` (6 and 16 characters of `[a-z0-9]`).
#[derive(Clone, PartialEq, Eq)]
pub struct BootstrapToken {
    /// The public part: names the Secret `bootstrap-token-<id>`.
    pub id: String,
    secret: String,
}

impl std::fmt::Debug for BootstrapToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BootstrapToken")
            .field("id", &self.id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

impl BootstrapToken {
    /// Parses `<token-id>.<token-secret>`; `None` when the string is not a bootstrap token
    /// (then it may be a cluster token).
    pub fn parse(token: &str) -> Option<BootstrapToken> {
        let (id, secret) = token.split_once('.')?;
        let valid = |s: &str, len: usize| {
            s.len() == len
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        };
        if valid(id, 6) && valid(secret, 16) {
            Some(BootstrapToken {
                id: id.to_string(),
                secret: secret.to_string(),
            })
        } else {
            None
        }
    }

    /// The name of the Secret holding this token: `bootstrap-token-<id>`.
    pub fn secret_name(&self) -> String {
        format!("{BOOTSTRAP_TOKEN_SECRET_PREFIX}{}", self.id)
    }
}

/// Why a token was refused. The messages never contain the token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenRejection {
    /// No Secret for the token id.
    Unknown,
    /// The Secret is not of type `bootstrap.kubernetes.io/token`.
    WrongSecretType,
    /// `token-id` in the Secret does not match.
    IdMismatch,
    /// `token-secret` does not match.
    SecretMismatch,
    /// The Secret does not say `usage-bootstrap-authentication: "true"`.
    NotForAuthentication,
    /// `expiration` is in the past.
    Expired,
    /// `expiration` is not RFC 3339.
    BadExpiration,
    /// The cluster has no stored cluster-token hash, or the hash does not match.
    ClusterTokenMismatch,
    /// The cluster token's lifetime is over.
    ClusterTokenExpired,
}

impl std::fmt::Display for TokenRejection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            TokenRejection::Unknown => "no bootstrap-token Secret for this token id",
            TokenRejection::WrongSecretType => {
                "the bootstrap-token Secret is not of type bootstrap.kubernetes.io/token"
            }
            TokenRejection::IdMismatch => "the Secret's token-id does not match",
            TokenRejection::SecretMismatch => "the token secret does not match",
            TokenRejection::NotForAuthentication => {
                "the bootstrap-token Secret does not allow authentication (set \
                 usage-bootstrap-authentication: \"true\")"
            }
            TokenRejection::Expired => "the bootstrap token has expired",
            TokenRejection::BadExpiration => {
                "the bootstrap-token Secret's expiration is not an RFC 3339 time"
            }
            TokenRejection::ClusterTokenMismatch => {
                "the cluster token is unknown or revoked (register again with a bootstrap token)"
            }
            TokenRejection::ClusterTokenExpired => {
                "the cluster token has expired (register again with a bootstrap token)"
            }
        };
        f.write_str(s)
    }
}

/// Checks `token` against the data of its bootstrap-token Secret (`secret_type` is the
/// Secret's `type`). Valid when type, `token-id` and `token-secret` match and `expiration`, if
/// present, is after `now`, and `usage-bootstrap-authentication` is `"true"`.
pub fn check_bootstrap_secret(
    token: &BootstrapToken,
    secret_type: Option<&str>,
    data: &BTreeMap<String, Vec<u8>>,
    now: Timestamp,
) -> Result<(), TokenRejection> {
    if secret_type != Some(BOOTSTRAP_TOKEN_SECRET_TYPE) {
        return Err(TokenRejection::WrongSecretType);
    }
    let id = data.get("token-id").map(Vec::as_slice).unwrap_or_default();
    if !constant_time_eq(id, token.id.as_bytes()) {
        return Err(TokenRejection::IdMismatch);
    }
    let secret = data
        .get("token-secret")
        .map(Vec::as_slice)
        .unwrap_or_default();
    if !constant_time_eq(secret, token.secret.as_bytes()) {
        return Err(TokenRejection::SecretMismatch);
    }
    // As kube-apiserver's bootstrap-token authenticator: a token is for authentication only when
    // its Secret says so.
    if data.get(USAGE_AUTHENTICATION).map(Vec::as_slice) != Some(b"true".as_slice()) {
        return Err(TokenRejection::NotForAuthentication);
    }
    if let Some(expiration) = data.get("expiration") {
        let text = std::str::from_utf8(expiration).map_err(|_| TokenRejection::BadExpiration)?;
        let at: Timestamp = text
            .trim()
            .parse()
            .map_err(|_| TokenRejection::BadExpiration)?;
        if at <= now {
            return Err(TokenRejection::Expired);
        }
    }
    Ok(())
}

/// What the hub keeps of a cluster's token in [`CLUSTER_TOKEN_SECRET`]: hashes and times, never
/// the token.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenRecord {
    /// SHA-256 (hex) of the current token; empty when the cluster's token is revoked.
    pub current: String,
    /// SHA-256 (hex) of the token the last rotation replaced, until the agent uses the new one.
    pub previous: Option<String>,
    /// Until when `previous` is accepted.
    pub previous_until: Option<Timestamp>,
    /// When the current token was issued.
    pub issued_at: Option<Timestamp>,
    /// When the current token stops being accepted.
    pub expires_at: Option<Timestamp>,
    /// The rotation request ([`ANNOTATION_ROTATE_TOKEN`]) the current token answers.
    pub rotation: Option<String>,
    /// The current token was issued at a registration and its agent has not shown that it
    /// holds it ([`CLUSTER_TOKEN_AWAITING_AGENT_KEY`]).
    pub awaiting_agent: bool,
}

/// Which of a record's hashes a token matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenMatch {
    /// The current token.
    Current,
    /// The token a rotation replaced: the agent has not stored the new one yet.
    Previous,
}

impl TokenRecord {
    /// A record for a token issued `now`, valid for `lifetime` when one is set.
    pub fn issue(
        token: &str,
        now: Timestamp,
        lifetime: Option<std::time::Duration>,
        rotation: Option<String>,
    ) -> TokenRecord {
        TokenRecord {
            current: sha256_hex(token),
            previous: None,
            previous_until: None,
            issued_at: Some(now),
            expires_at: lifetime
                .and_then(jiff_span)
                .and_then(|span| now.checked_add(span).ok()),
            rotation,
            awaiting_agent: false,
        }
    }

    /// Whether a bootstrap token must not register the cluster again without an administrator:
    /// it has a token, and its agent has shown that it holds it.
    pub fn holds_registration(&self) -> bool {
        !self.current.is_empty() && !self.awaiting_agent
    }

    /// Reads a record from the data of [`CLUSTER_TOKEN_SECRET`]. A time that does not parse
    /// reads as the earliest time: an unreadable expiry must not make a token valid forever.
    pub fn from_data(data: &BTreeMap<String, Vec<u8>>) -> TokenRecord {
        let text = |k: &str| {
            data.get(k)
                .and_then(|v| std::str::from_utf8(v).ok())
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let time = |k: &str| text(k).map(|t| t.parse::<Timestamp>().unwrap_or(Timestamp::MIN));
        TokenRecord {
            current: text(CLUSTER_TOKEN_SHA256_KEY).unwrap_or_default(),
            previous: text(CLUSTER_TOKEN_PREVIOUS_KEY),
            previous_until: time(CLUSTER_TOKEN_PREVIOUS_UNTIL_KEY),
            issued_at: time(CLUSTER_TOKEN_ISSUED_KEY),
            expires_at: time(CLUSTER_TOKEN_EXPIRES_KEY),
            rotation: text(CLUSTER_TOKEN_ROTATION_KEY),
            awaiting_agent: text(CLUSTER_TOKEN_AWAITING_AGENT_KEY).as_deref() == Some("true"),
        }
    }

    /// The Secret data of this record.
    pub fn to_data(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        out.insert(CLUSTER_TOKEN_SHA256_KEY.to_string(), self.current.clone());
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                out.insert(k.to_string(), v);
            }
        };
        put(CLUSTER_TOKEN_PREVIOUS_KEY, self.previous.clone());
        put(
            CLUSTER_TOKEN_PREVIOUS_UNTIL_KEY,
            self.previous_until.map(|t| t.to_string()),
        );
        put(
            CLUSTER_TOKEN_ISSUED_KEY,
            self.issued_at.map(|t| t.to_string()),
        );
        put(
            CLUSTER_TOKEN_EXPIRES_KEY,
            self.expires_at.map(|t| t.to_string()),
        );
        put(CLUSTER_TOKEN_ROTATION_KEY, self.rotation.clone());
        put(
            CLUSTER_TOKEN_AWAITING_AGENT_KEY,
            self.awaiting_agent.then(|| "true".to_string()),
        );
        out
    }

    /// Whether a token hashing to `token_sha256` is accepted at `now`, and as which.
    pub fn check(&self, token_sha256: &str, now: Timestamp) -> Result<TokenMatch, TokenRejection> {
        if self.expires_at.is_some_and(|at| at <= now) {
            return Err(TokenRejection::ClusterTokenExpired);
        }
        let matches = |stored: &str| {
            !stored.is_empty() && constant_time_eq(stored.as_bytes(), token_sha256.as_bytes())
        };
        if matches(&self.current) {
            Ok(TokenMatch::Current)
        } else if self.previous.as_deref().is_some_and(matches)
            && self.previous_until.is_none_or(|until| now < until)
        {
            Ok(TokenMatch::Previous)
        } else {
            Err(TokenRejection::ClusterTokenMismatch)
        }
    }

    /// Whether an agent that presented a token matching `matched` gets a new one now: it
    /// presented the replaced token (it missed the last rotation), an administrator asked for a
    /// rotation (`requested` differs from what the current token answers), or the token is past
    /// half of its lifetime.
    pub fn needs_rotation(
        &self,
        matched: TokenMatch,
        requested: Option<&str>,
        now: Timestamp,
    ) -> bool {
        matched == TokenMatch::Previous
            || requested.is_some_and(|r| self.rotation.as_deref() != Some(r))
            || self.renew_at().is_some_and(|at| at <= now)
    }

    /// When a token with an expiry is renewed: half-way through its lifetime, so that an agent
    /// that is away for a while still gets a new one before the old one expires.
    pub fn renew_at(&self) -> Option<Timestamp> {
        let (issued, expires) = (self.issued_at?, self.expires_at?);
        let half = expires.duration_since(issued) / 2;
        issued.checked_add(half).ok()
    }
}

fn jiff_span(d: std::time::Duration) -> Option<k8s_openapi::jiff::SignedDuration> {
    k8s_openapi::jiff::SignedDuration::try_from(d).ok()
}

/// Mints a cluster token: 32 random bytes, base64url without padding.
pub fn mint_cluster_token() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// SHA-256 of `token`, lower-case hex: what the hub stores.
pub fn sha256_hex(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    let mut out = String::with_capacity(64);
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Constant-time equality: the time taken depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b.iter()) {
        diff |= x ^ y;
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn parse_accepts_only_kubernetes_bootstrap_token_shape() {
        let cases = [
            ("07401b.f395accd246ae52d", true),
            ("07401b.f395accd246ae52", false),
            ("07401B.f395accd246ae52d", false),
            ("07401b.f395accd246ae52dx", false),
            ("nodot", false),
            ("", false),
            ("abc", false),
        ];
        for (input, ok) in cases {
            assert_eq!(BootstrapToken::parse(input).is_some(), ok, "{input}");
        }
    }

    #[test]
    fn debug_output_never_contains_the_secret() {
        let t = BootstrapToken::parse("07401b.f395accd246ae52d").unwrap();
        let s = format!("{t:?}");
        assert!(!s.contains("f395accd246ae52d"), "{s}");
        assert_eq!(t.secret_name(), "bootstrap-token-07401b");
    }

    #[test]
    #[allow(clippy::type_complexity)]
    fn bootstrap_secret_check_table() {
        let t = BootstrapToken::parse("07401b.f395accd246ae52d").unwrap();
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let ty = Some(BOOTSTRAP_TOKEN_SECRET_TYPE);
        let cases: Vec<(
            Option<&str>,
            BTreeMap<String, Vec<u8>>,
            Result<(), TokenRejection>,
        )> = vec![
            (
                ty,
                data(&[
                    ("token-id", "07401b"),
                    ("token-secret", "f395accd246ae52d"),
                    ("usage-bootstrap-authentication", "true"),
                ]),
                Ok(()),
            ),
            (
                ty,
                data(&[("token-id", "07401b"), ("token-secret", "f395accd246ae52d")]),
                Err(TokenRejection::NotForAuthentication),
            ),
            (
                ty,
                data(&[
                    ("token-id", "07401b"),
                    ("token-secret", "f395accd246ae52d"),
                    ("usage-bootstrap-authentication", "false"),
                ]),
                Err(TokenRejection::NotForAuthentication),
            ),
            (
                Some("Opaque"),
                data(&[("token-id", "07401b"), ("token-secret", "f395accd246ae52d")]),
                Err(TokenRejection::WrongSecretType),
            ),
            (
                ty,
                data(&[("token-id", "07401c"), ("token-secret", "f395accd246ae52d")]),
                Err(TokenRejection::IdMismatch),
            ),
            (
                ty,
                data(&[("token-id", "07401b"), ("token-secret", "f395accd246ae52e")]),
                Err(TokenRejection::SecretMismatch),
            ),
            (
                ty,
                data(&[("token-id", "07401b")]),
                Err(TokenRejection::SecretMismatch),
            ),
            (
                ty,
                data(&[
                    ("token-id", "07401b"),
                    ("token-secret", "f395accd246ae52d"),
                    ("usage-bootstrap-authentication", "true"),
                    ("expiration", "2025-12-31T23:59:59Z"),
                ]),
                Err(TokenRejection::Expired),
            ),
            (
                ty,
                data(&[
                    ("token-id", "07401b"),
                    ("token-secret", "f395accd246ae52d"),
                    ("usage-bootstrap-authentication", "true"),
                    ("expiration", "2026-01-02T00:00:00Z"),
                ]),
                Ok(()),
            ),
            (
                ty,
                data(&[
                    ("token-id", "07401b"),
                    ("token-secret", "f395accd246ae52d"),
                    ("usage-bootstrap-authentication", "true"),
                    ("expiration", "tomorrow"),
                ]),
                Err(TokenRejection::BadExpiration),
            ),
        ];
        for (i, (ty, d, want)) in cases.into_iter().enumerate() {
            assert_eq!(check_bootstrap_secret(&t, ty, &d, now), want, "case {i}");
        }
    }

    #[test]
    fn minted_cluster_tokens_are_random_32_bytes_base64url() {
        let a = mint_cluster_token();
        let b = mint_cluster_token();
        assert_ne!(a, b);
        assert_eq!(URL_SAFE_NO_PAD.decode(&a).unwrap().len(), 32);
        assert!(BootstrapToken::parse(&a).is_none());
    }

    #[test]
    fn cluster_token_verifies_only_against_its_own_hash() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let verify = |token: &str, stored: &str| {
            TokenRecord::from_data(&data(&[(CLUSTER_TOKEN_SHA256_KEY, stored)]))
                .check(&sha256_hex(token), now)
                .is_ok()
        };
        let token = mint_cluster_token();
        let hash = sha256_hex(&token);
        assert_eq!(hash.len(), 64);
        assert!(verify(&token, &hash));
        assert!(verify(&token, &format!("{hash}\n")));
        assert!(!verify(&mint_cluster_token(), &hash));
        assert!(!verify(&token, ""));
    }

    #[test]
    fn sha256_hex_matches_known_vector() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn token_record_round_trips_through_secret_data() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut r = TokenRecord::issue(
            "tok",
            now,
            Some(std::time::Duration::from_secs(3600)),
            Some("r1".into()),
        );
        r.previous = Some(sha256_hex("old"));
        r.previous_until = Some("2026-01-01T00:10:00Z".parse().unwrap());
        let stored: BTreeMap<String, Vec<u8>> = r
            .to_data()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        assert_eq!(TokenRecord::from_data(&stored), r);
        assert_eq!(r.expires_at, Some("2026-01-01T01:00:00Z".parse().unwrap()));
        // A hash-only record (written before rotation existed) reads as a token without expiry.
        let old = data(&[("sha256", &sha256_hex("tok"))]);
        let old = TokenRecord::from_data(&old);
        assert_eq!(old.check(&sha256_hex("tok"), now), Ok(TokenMatch::Current));
        assert_eq!(old.renew_at(), None);
        // ... and as one whose agent holds it (written before the hub tracked delivery).
        assert!(old.holds_registration());
    }

    #[test]
    fn only_a_token_its_agent_has_shown_it_holds_keeps_a_bootstrap_token_from_registering_again() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let mut issued = TokenRecord::issue("tok", now, None, None);
        issued.awaiting_agent = true;
        let stored: BTreeMap<String, Vec<u8>> = issued
            .to_data()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        assert_eq!(
            stored.get(CLUSTER_TOKEN_AWAITING_AGENT_KEY),
            Some(&b"true".to_vec())
        );
        assert_eq!(TokenRecord::from_data(&stored), issued);
        let delivered = TokenRecord {
            awaiting_agent: false,
            ..issued.clone()
        };
        assert!(
            !delivered
                .to_data()
                .contains_key(CLUSTER_TOKEN_AWAITING_AGENT_KEY)
        );
        let cases = [
            (&issued, false),
            (&delivered, true),
            (&TokenRecord::default(), false),
        ];
        for (record, holds) in cases {
            assert_eq!(record.holds_registration(), holds, "{record:?}");
        }
    }

    #[test]
    fn cluster_token_check_table() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let later: Timestamp = "2026-01-01T02:00:00Z".parse().unwrap();
        let hour = Some(std::time::Duration::from_secs(3600));
        let mut rotated = TokenRecord::issue("new", now, None, None);
        rotated.previous = Some(sha256_hex("old"));
        let mut grace_over = rotated.clone();
        grace_over.previous_until = Some(now);
        let revoked = TokenRecord::default();
        let unreadable_expiry = TokenRecord::from_data(&data(&[
            ("sha256", &sha256_hex("tok")),
            ("expires-at", "never"),
        ]));
        let cases = [
            (&rotated, "new", now, Ok(TokenMatch::Current)),
            (&rotated, "old", now, Ok(TokenMatch::Previous)),
            (
                &rotated,
                "other",
                now,
                Err(TokenRejection::ClusterTokenMismatch),
            ),
            (
                &grace_over,
                "old",
                now,
                Err(TokenRejection::ClusterTokenMismatch),
            ),
            (&grace_over, "new", now, Ok(TokenMatch::Current)),
            (&revoked, "", now, Err(TokenRejection::ClusterTokenMismatch)),
            (
                &revoked,
                "tok",
                now,
                Err(TokenRejection::ClusterTokenMismatch),
            ),
            (
                &TokenRecord::issue("tok", now, hour, None),
                "tok",
                now,
                Ok(TokenMatch::Current),
            ),
            (
                &TokenRecord::issue("tok", now, hour, None),
                "tok",
                later,
                Err(TokenRejection::ClusterTokenExpired),
            ),
            (
                &unreadable_expiry,
                "tok",
                now,
                Err(TokenRejection::ClusterTokenExpired),
            ),
        ];
        for (i, (record, token, at, want)) in cases.into_iter().enumerate() {
            let hash = if token.is_empty() {
                String::new()
            } else {
                sha256_hex(token)
            };
            assert_eq!(record.check(&hash, at), want, "case {i}");
        }
    }

    #[test]
    fn a_token_is_rotated_when_replaced_requested_or_half_way_through_its_lifetime() {
        let now: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let at = |s: &str| -> Timestamp { s.parse().unwrap() };
        let hour = Some(std::time::Duration::from_secs(3600));
        let plain = TokenRecord::issue("t", now, None, Some("r1".into()));
        let expiring = TokenRecord::issue("t", now, hour, None);
        assert_eq!(expiring.renew_at(), Some(at("2026-01-01T00:30:00Z")));
        let cases = [
            (&plain, TokenMatch::Current, None, now, false),
            (&plain, TokenMatch::Current, Some("r1"), now, false),
            (&plain, TokenMatch::Current, Some("r2"), now, true),
            (&plain, TokenMatch::Previous, Some("r1"), now, true),
            (
                &expiring,
                TokenMatch::Current,
                None,
                at("2026-01-01T00:29:59Z"),
                false,
            ),
            (
                &expiring,
                TokenMatch::Current,
                None,
                at("2026-01-01T00:30:00Z"),
                true,
            ),
        ];
        for (i, (record, matched, requested, at, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                record.needs_rotation(matched, requested, at),
                want,
                "case {i}"
            );
        }
    }

    #[test]
    fn constant_time_eq_table() {
        for (a, b, eq) in [
            (&b"abc"[..], &b"abc"[..], true),
            (b"abc", b"abd", false),
            (b"abc", b"ab", false),
            (b"", b"", true),
        ] {
            assert_eq!(constant_time_eq(a, b), eq);
        }
    }
}
