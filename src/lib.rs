//! Wharf: a connector runtime in the tradition of Kafka Connect whose deletions are
//! guaranteed to reach every task with `connector_deleted = true` (KIP-883, KIP-901).
//!
//! This crate is shared by the control plane and the executors: the generated gRPC
//! wire types ([`pb`]), the connector SDK ([`sdk`]), small shared types ([`ids`]) and the
//! plumbing every binary uses ([`server`], [`http`], [`task`], [`config`], [`telemetry`], [`tls`],
//! [`identity`], [`certs`], [`observability`], [`trace`]) and
//! their leaves ([`exposition`], [`throttle`]).

pub mod certs;
pub mod config;
pub mod exposition;
pub mod http;
pub mod identity;
pub mod ids;
pub mod observability;
pub mod pb;
pub mod sdk;
pub mod server;
pub mod task;
pub mod telemetry;
pub mod throttle;
pub mod tls;
pub mod trace;
pub mod wire;
