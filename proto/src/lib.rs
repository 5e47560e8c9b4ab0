//! The hub-agent protocol (`proto/hub.proto`) and its generated tonic/prost code.
//!
//! Domain types stay out of here: the hub and the agent convert at their gRPC edges.

#![allow(clippy::all, missing_docs)]

pub mod codec;

/// Generated from `proto/hub.proto`, package `atoll.hub.v1`.
pub mod v1 {
    tonic::include_proto!("atoll.hub.v1");
}

/// `encoded_len` and friends of the generated messages.
pub use prost::Message;
pub use v1::ProtocolVersion;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: v1::ProtocolVersion = v1::ProtocolVersion::V1;
