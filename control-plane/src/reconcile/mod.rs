//! Acting on decisions: the herder ([`herder`]), its start path ([`start`]), the deletion
//! finalizer ([`finalizer`]), the executor client ([`client`]) and the state they share
//! ([`cluster`]: store, leases, executor health, wake-ups). Decisions themselves are pure
//! functions in [`crate::plan`].
//!
//! The herder never touches a connector marked deleting; the finalizer owns it then. The
//! herder's and the finalizer's writes go through the store's batched writes
//! ([`crate::store::StateStore::put_connector_batched`]), so that the writes of many
//! connectors share commits.

pub mod client;
pub mod cluster;
pub mod fault;
pub mod finalizer;
pub mod herder;
pub mod start;

pub use cluster::{
    Cluster, ExecutorView, FULL_PASS_INTERVAL_MS, HerderError, Lease, LeaseConfig,
    RECONCILE_INTERVAL_MS, now_ms,
};
pub use herder::run_herder;
