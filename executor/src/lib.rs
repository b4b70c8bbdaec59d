//! Wharf executor: hosts connector instances and tasks for the control plane and runs
//! their lifecycle, including the deletion-aware stops of KIP-883/KIP-901.
//!
//! The binary (`main.rs`) is one call to [`Executor::builder`], the same builder a
//! connector author uses to build an executor with their own plugins ([`launcher`]); the
//! control plane's `--dev` mode runs the same [`app::ExecutorApp`] in-process.

pub mod app;
pub mod config;
pub mod counters;
pub mod grpc;
pub mod host;
pub mod launcher;
pub mod log;
pub mod observe;
pub mod peer_auth;
pub mod registry_client;
pub(crate) mod runtime;

pub use launcher::{BuilderError, Executor, ExecutorBuilder};
