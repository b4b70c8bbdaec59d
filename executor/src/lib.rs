//! Wharf executor: hosts connector instances and tasks for the control plane and runs
//! their lifecycle, including the deletion-aware stops of KIP-883/KIP-901.
//!
//! This library links no plugin. A connector author builds an executor with their own
//! plugins through [`Executor::builder`] ([`launcher`]); the stock `wharf-executor`
//! binary (crate `wharf-executor-stock`) is the same builder with the built-in plugins of
//! `wharf-connectors` added, and `wharf-dev` runs the same [`app::ExecutorApp`]
//! in-process with them.

pub mod app;
pub mod config;
pub mod counters;
pub mod data_dir;
pub mod grpc;
pub mod host;
pub mod launcher;
pub mod log;
pub mod observe;
pub mod peer_auth;
pub mod pipeline;
pub mod process;
pub mod providers;
pub mod registry_client;
pub(crate) mod runtime;

pub use launcher::{
    BuilderError, Executor, ExecutorBuilder, PluginAdapter, PluginSettings, PluginSource,
    no_plugins,
};
