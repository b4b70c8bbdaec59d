//! The executor's [`ResourceLedger`]: a plugin instance's ledger changes go to the control
//! plane (`ExecutorRegistry.RecordResources`), tagged with the instance's connector,
//! task, generation and incarnation, and the plugin's call returns only once they are
//! stored (docs/resources.md). A refusal (another live connector holds the resource, the
//! instance is fenced) comes back to the plugin as its error text.

use std::sync::Arc;

use async_trait::async_trait;
use wharf::pb::v1 as pb;
use wharf::sdk::{LedgerChange, PluginResult, Resource, ResourceLedger, ResourceOwner, Resources};

use crate::registry_client::{Registry, RegistryError};

/// One instance's ledger: where its changes go.
pub(crate) struct RegistryLedger {
    registry: Arc<Registry>,
    connector: String,
    generation: u64,
    incarnation: String,
}

impl RegistryLedger {
    /// The handle an instance of `connector` at `generation` gets in its context.
    pub(crate) fn resources(
        registry: Arc<Registry>,
        connector: &str,
        owner: ResourceOwner,
        generation: u64,
        incarnation: &str,
    ) -> Resources {
        Resources::new(
            Arc::new(Self {
                registry,
                connector: connector.to_owned(),
                generation,
                incarnation: incarnation.to_owned(),
            }),
            owner,
        )
    }
}

#[async_trait]
impl ResourceLedger for RegistryLedger {
    async fn record(
        &self,
        owner: ResourceOwner,
        resource: &Resource,
        change: LedgerChange,
    ) -> PluginResult<()> {
        let task = match owner {
            ResourceOwner::Connector => None,
            ResourceOwner::Task(i) => Some(i),
        };
        let changes = vec![pb::ResourceLedgerChange {
            resource: Some(wharf::wire::resource(resource)),
            change: wharf::wire::ledger_change(change) as i32,
        }];
        self.registry
            .record_resources(
                &self.connector,
                task,
                self.generation,
                &self.incarnation,
                changes,
            )
            .await
            .map_err(|e| {
                let why = match e {
                    RegistryError::Call(status) => status.message().to_owned(),
                    other @ (RegistryError::InvalidUrl { .. } | RegistryError::NotRegistered) => {
                        other.to_string()
                    }
                };
                format!(
                    "resource ledger: {} of {resource} not recorded: {why}",
                    change.as_str()
                )
                .into()
            })
    }
}
