//! The author's view of the external system that the checks compare.

use std::collections::BTreeSet;

use async_trait::async_trait;
use wharf_sdk::ConfigMap;

/// What the author's external system holds, as the kit needs to see it. Resource names
/// are any stable text (`table public.audit_x`, `queue q1`); the kit only compares sets.
#[async_trait]
pub trait Probe: Send + Sync {
    /// The resources connector `connector` (configured with `config`) owns right now.
    ///
    /// # Errors
    /// Text saying why the system could not be read; the check fails with it.
    async fn owned(&self, connector: &str, config: &ConfigMap) -> Result<BTreeSet<String>, String>;

    /// The resources the user made that the connector uses but MUST never remove (the
    /// watched tables of an audit source, a pre-declared queue). Empty by default.
    ///
    /// # Errors
    /// As [`Probe::owned`].
    async fn pre_existing(&self, config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        let _ = config;
        Ok(BTreeSet::new())
    }

    /// Removes one owned resource behind the plugin's back, to leave the state of a
    /// start that failed halfway. `Ok(false)` when the probe cannot (the half-start check
    /// then only runs the cleanup on the full set).
    ///
    /// # Errors
    /// As [`Probe::owned`].
    async fn remove(&self, resource: &str) -> Result<bool, String> {
        let _ = resource;
        Ok(false)
    }

    /// For a sink plugin: the record values the external system holds for connector
    /// `connector` right now (a queue's messages, a table's rows), in any order, each as
    /// often as it is there. `Ok(None)` (the default) when the probe cannot read them;
    /// [`Kit::sink_acknowledges_only_flushed_records`](crate::Kit::sink_acknowledges_only_flushed_records)
    /// then fails and says so.
    ///
    /// # Errors
    /// As [`Probe::owned`].
    async fn delivered(
        &self,
        connector: &str,
        config: &ConfigMap,
    ) -> Result<Option<Vec<Vec<u8>>>, String> {
        let _ = (connector, config);
        Ok(None)
    }
}
