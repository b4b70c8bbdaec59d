//! The gRPC adapters: `ConnectorAdmin` for operators and `ExecutorRegistry` for
//! executors. Wire types are converted here ([`convert`]); errors are mapped to
//! `tonic::Status` in exactly one place ([`error`]).

pub mod admin;
pub mod convert;
pub mod error;
pub mod registry;
