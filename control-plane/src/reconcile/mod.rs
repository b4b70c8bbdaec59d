//! Acting on decisions: the herder ([`herder`]), its start path ([`start`]), the deletion
//! finalizer ([`finalizer`]) and the record of its deletions ([`deletions`]), the executor
//! client ([`client`]), the purges of orphaned resources that run ([`purges`]), status corrections from heartbeats (`hosted.rs`) and the state they
//! share ([`cluster`]: store, the executor table of [`crate::executors`], wake-ups).
//! Decisions themselves are pure functions in [`crate::plan`] and [`crate::executors`].
//!
//! The herder never touches a connector marked deleting; the finalizer owns it then. The
//! herder's and the finalizer's writes go through the store's batched writes
//! ([`crate::store::StateStore::put_connector_batched`]), so that the writes of many
//! connectors share commits.

pub mod client;
pub mod cluster;
pub mod deletions;
pub mod fault;
pub mod finalizer;
pub mod herder;
mod herder_stops;
mod hosted;
mod load;
pub mod purges;
pub mod start;

pub use crate::executors::{ExecutorView, Lease, LeaseConfig};
pub use cluster::{Cluster, FULL_PASS_INTERVAL_MS, HerderError, RECONCILE_INTERVAL_MS, now_ms};
pub use herder::run_herder;
