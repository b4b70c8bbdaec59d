//! The one error type of the admin core (shared by the gRPC and REST adapters). It is
//! mapped once to a `tonic::Status` (`grpc::error`) and once to Kafka Connect's HTTP
//! status and error body (`rest::error`).

use crate::auth::AuthError;
use crate::reconcile::HerderError;
use crate::store::StoreError;

/// Why an admin or registry call was refused.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A request field is wrong; `field` names it (for example `name` or
    /// `config[tasks.max]`).
    #[error("invalid {field}: {reason}")]
    InvalidArgument {
        /// The offending field.
        field: String,
        /// What is wrong, with the rule.
        reason: String,
    },
    /// No connector of that name.
    #[error("connector {0:?} not found")]
    ConnectorNotFound(String),
    /// No live executor offers a plugin of that name, and no transform or predicate is
    /// built in under it.
    #[error("plugin {0:?} not found: no registered executor offers it")]
    PluginNotFound(String),
    /// No task of that number (the connector exists).
    #[error("connector {name:?} has no task {task}")]
    TaskNotFound {
        /// Connector.
        name: String,
        /// The task asked for.
        task: u32,
    },
    /// Create of a name that exists.
    #[error("connector {0:?} already exists")]
    AlreadyExists(String),
    /// The connector is being deleted.
    #[error("connector {0:?} is being deleted; its name is free once the deletion finishes")]
    StillDeleting(String),
    /// Deleting again in the other mode than the deletion in progress (`keep_resources`
    /// or cleanup): FAILED_PRECONDITION, REST 409 as a deletion in progress is.
    #[error("connector {name:?} {reason}")]
    DeletionModeConflict {
        /// Connector.
        name: String,
        /// The mode in progress, and what the caller may do.
        reason: String,
    },
    /// The connector's state forbids the call.
    #[error("connector {name:?} {reason}")]
    WrongState {
        /// Connector.
        name: String,
        /// Which state and what is needed.
        reason: String,
    },
    /// A registry call from an epoch that is not current (superseded or expired).
    #[error("executor {executor:?} epoch {epoch} is fenced; register again")]
    FencedEpoch {
        /// Executor id.
        executor: String,
        /// The epoch it sent.
        epoch: u64,
    },
    /// A registration whose record log differs from the live executors' (one log per
    /// cluster, see [`crate::plan::record_log`]).
    #[error("executor {executor:?} refused: {mismatch}")]
    RecordLogMismatch {
        /// Executor id.
        executor: String,
        /// Both logs and the live executor on the cluster's.
        mismatch: crate::plan::record_log::LogMismatch,
    },
    /// A registration offering a plugin version whose definition differs from a live
    /// executor's (one definition per plugin version, see [`crate::plan::plugin_defs`]).
    #[error("executor {executor:?} refused: {conflict}")]
    PluginDefinitionConflict {
        /// Executor id.
        executor: String,
        /// The plugin version, the live executor and what differs.
        conflict: crate::plan::plugin_defs::DefinitionConflict,
    },
    /// A call from a generation older than the current assignment.
    #[error("generation {got} of {what} is older than the current {current}")]
    StaleGeneration {
        /// Which instance.
        what: String,
        /// Generation in the request.
        got: u64,
        /// Current generation.
        current: u64,
    },
    /// A config change of a key that must not change on an existing connector
    /// (`connector.class`, or a key the plugin marks immutable).
    #[error(
        "connector {name:?}: {field} cannot change ({change}): {why}; delete the connector and create it again"
    )]
    ImmutableConfig {
        /// Connector.
        name: String,
        /// The key, as `config[<key>]`.
        field: String,
        /// What the change did to the key (`set`, `removed`, `changed`), never the
        /// values: an error names the key and the rule.
        change: String,
        /// What the change would break.
        why: String,
    },
    /// DeleteConnector with `wait`: the deletion is recorded but did not finish in time.
    #[error(
        "deletion of connector {name:?} is recorded but did not finish within {waited_ms} ms; it is still in progress (status DELETING){detail}; see GetConnectorStatus for every cleanup step, RetryCleanup to run failed steps now, or DeleteConnector with force=true to skip what is left (external resources may remain)"
    )]
    DeletionPending {
        /// Connector.
        name: String,
        /// How long the call waited, in milliseconds.
        waited_ms: u32,
        /// The first unfinished step with an error, as `"; task 0 FAILED after 5 attempts: ..."`,
        /// or empty.
        detail: String,
    },
    /// The record log, reached through an executor (a sink connector's offsets), did not
    /// answer; the message says which executor and why.
    #[error("{0}")]
    RecordLogUnavailable(String),
    /// A resource the connector would provision is held by another live connector
    /// (docs/resources.md, "A second claim"): FAILED_PRECONDITION, REST 409.
    #[error("connector {connector:?}: {reason}")]
    ResourceHeld {
        /// The connector that asked.
        connector: String,
        /// The resource and the connector holding it.
        reason: String,
    },
    /// An instance's ledger change was refused (not its host at that generation, another
    /// incarnation): FAILED_PRECONDITION.
    #[error("resource ledger of connector {connector:?}: {reason}")]
    LedgerFenced {
        /// Connector.
        connector: String,
        /// Why.
        reason: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A record kept changing under the update.
    #[error("connector {0:?} kept changing during the update; retry")]
    Contended(String),
    /// The admin caller is not authenticated or its role may not make the call.
    #[error(transparent)]
    Auth(#[from] AuthError),
}

impl From<HerderError> for ApiError {
    fn from(e: HerderError) -> Self {
        match e {
            HerderError::Store(s) => ApiError::Store(s),
            HerderError::Contended(n) => ApiError::Contended(n),
        }
    }
}
