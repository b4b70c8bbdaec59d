//! Wharf: a connector runtime in the tradition of Kafka Connect whose deletions are
//! guaranteed to reach every task with `connector_deleted = true` (KIP-883, KIP-901).
//!
//! This crate is shared by the control plane and the executors: the generated gRPC
//! wire types ([`pb`]) and the plumbing every binary uses ([`server`], [`http`], [`task`],
//! [`config`], [`config_provider`], [`telemetry`], [`tls`], [`identity`], [`certs`], [`observability`],
//! [`trace`]) and their leaves ([`exposition`], [`throttle`]). The connector SDK and the
//! shared ids live in the light `wharf-sdk` crate, which a plugin author depends on
//! alone; they are re-exported here as [`sdk`] and [`ids`].

pub mod certs;
pub mod config;
pub mod config_provider;
pub mod exposition;
pub mod http;
pub mod identity;
pub mod observability;
pub mod pb;
pub mod server;
pub mod task;
pub mod telemetry;
pub mod throttle;
pub mod tls;
pub mod topic_creation;
pub mod trace;
pub mod wire;

/// The connector SDK (the `wharf-sdk` crate).
pub use wharf_sdk as sdk;
/// Identifiers shared by plugins, the control plane and the executors (`wharf_sdk::ids`).
pub use wharf_sdk::ids;
