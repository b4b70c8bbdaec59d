//! Wharf executor: hosts connector instances and tasks for the control plane and runs
//! their lifecycle, including the deletion-aware stops of KIP-883/KIP-901.
//!
//! The binary (`main.rs`) is a thin composition root over [`app`]; the control plane's
//! `--dev` mode runs the same [`app::ExecutorApp`] in-process.

pub mod app;
pub mod grpc;
pub mod host;
pub mod log;
pub mod registry_client;
