//! Wharf: a connector runtime in the tradition of Kafka Connect whose deletions are
//! guaranteed to reach every task with `connector_deleted = true` (KIP-883, KIP-901).
//!
//! This crate is shared by the control plane and the executors: the generated gRPC
//! wire types ([`pb`]), the connector SDK ([`sdk`]) and small shared types ([`ids`]).

pub mod certs;
pub mod identity;
pub mod ids;
pub mod pb;
pub mod sdk;
pub mod server;
pub mod tls;
pub mod wire;
