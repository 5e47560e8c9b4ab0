//! The hub-agent protocol (`proto/hub.proto`) and its generated tonic/prost code.
//!
//! Domain types stay out of here: the hub and the agent convert at their gRPC edges.

#![allow(clippy::all, missing_docs)]

pub mod codec;

/// Generated from `proto/hub.proto`, package `atoll.hub.v1`.
pub mod v1 {
    tonic::include_proto!("atoll.hub.v1");
}

impl std::fmt::Debug for v1::PullCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullCredentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// `encoded_len` and friends of the generated messages.
pub use prost::Message;
pub use v1::ProtocolVersion;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: v1::ProtocolVersion = v1::ProtocolVersion::V1;

#[cfg(test)]
mod tests {
    use super::v1;

    #[test]
    fn pull_credentials_never_print_their_password() {
        let credentials = v1::PullCredentials {
            username: "robot".into(),
            password: "hunter2".into(),
        };
        let chart = v1::Chart {
            credentials: Some(credentials),
            ..v1::Chart::default()
        };
        let printed = format!("{chart:?}");
        assert!(printed.contains("robot"), "{printed}");
        assert!(!printed.contains("hunter2"), "{printed}");
    }
}
