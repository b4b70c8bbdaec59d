//! The gRPC adapters: `ConnectorAdmin` for operators and `ExecutorRegistry` for
//! executors. Wire types are converted here ([`convert`]); errors are mapped to
//! `tonic::Status` in exactly one place ([`error`]). Admin callers pass [`guard`] first
//! (authentication, roles, audit trail).

pub mod admin;
pub mod convert;
pub mod error;
pub mod guard;
pub mod leader_route;
pub mod registry;
