//! The audit core shared by `sqlite-audit` and `postgres-audit` (KIP-883's own example):
//! the connector instance, the source task, their config, the records they emit and the
//! ownership rules. A database is a backend ([`AuditBackend`]: provision, clean up, read
//! rows); a third one is a new backend, not a third copy of the lifecycle.
//!
//! Lifecycle (KIP-883/KIP-901), the same for every backend:
//! - the connector's start provisions, idempotently and in one transaction, an audit
//!   table and the triggers that fill it; a cleanup-only start provisions nothing;
//! - `stop_with(false)` only closes connections: every database object stays;
//! - a task's `stop_with(true)` drops the triggers on that task's tables; the connector's
//!   drops whatever is left (triggers, helper code, the audit table);
//! - cleanup is idempotent and tolerates objects already gone or a start that never ran.
//!
//! Ownership: the audit table carries an owner record ([`OwnerRecord`]: plugin,
//! connector, incarnation) written when it is created. Every provisioning and every
//! cleanup reads it inside its transaction and asks [`decide_provision`] or
//! [`decide_cleanup`], the one place where ownership is checked: a connector never adopts
//! a table somebody else made, and a cleanup never drops what another connector or
//! another incarnation of the same connector owns (a late `stop(true)` of a deleted
//! incarnation must not remove what its re-created successor provisioned).
//!
//! Re-creating a connector after a deletion with `keep_resources`: the kept audit table
//! still names the deleted incarnation. The new connector chooses with `audit.adopt`
//! ([`Adopt`]): `never` (the default) refuses to start and says what to do; `from-start`
//! takes the table over and emits every row kept in it; `from-end` takes it over and
//! emits only rows written after the takeover. The deleted incarnation's source offsets
//! are gone with its deletion (lifecycle contract, point 7), so there is no "resume from
//! the kept offsets": `from-start` re-emits, `from-end` skips. See docs/contract.md.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use wharf_sdk::{
    ConfigDef, ConfigKey, ConfigMap, ConfigType, Connector, ConnectorContext, Importance,
    PluginResult, SourceRecord, SourceTask, TaskContext,
};

use crate::audit_names::{TableName, format_table_list, source_partition, split_tables};

/// Config keys every audit backend takes.
pub mod keys {
    /// Watched tables, comma-separated.
    pub const TABLES: &str = "tables";
    /// Audit table name.
    pub const AUDIT_TABLE: &str = "audit.table";
    /// Topic the records go to.
    pub const TOPIC: &str = "topic";
    /// Wait between two polls that found nothing, in milliseconds.
    pub const POLL_INTERVAL_MS: &str = "poll.interval.ms";
    /// Most records returned by one poll.
    pub const BATCH_SIZE: &str = "batch.size";
    /// What to do with an audit table kept by an earlier incarnation: `never`,
    /// `from-start`, `from-end` (see [`super::Adopt`]).
    pub const ADOPT: &str = "audit.adopt";
    /// Set by the connector in each task config, not by operators: audit ids up to this
    /// one were written before the table was adopted with `from-end` and are skipped by a
    /// task that has no committed offset.
    pub const START_AFTER: &str = "audit.start.after";
}

/// Errors of the audit connectors. Messages never hold a password.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// A config value is missing or wrong.
    #[error("invalid config {key}: {reason}")]
    InvalidConfig {
        /// Offending key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The database could not be reached or opened.
    #[error("cannot open {target}: {detail}")]
    Connect {
        /// Where (a URL without password, or a file path).
        target: String,
        /// Driver error text.
        detail: String,
    },
    /// A watched table does not exist.
    #[error("watched table {table} does not exist or is not an ordinary table")]
    TableMissing {
        /// The table, in list form.
        table: String,
    },
    /// `audit.table` names a table this connector did not create (no owner record).
    #[error("audit table {table} exists but was not created by this connector")]
    AuditTableNotOurs {
        /// The table, in list form.
        table: String,
    },
    /// `audit.table` is owned by another connector.
    #[error("audit table {table} is already claimed by connector {owner:?}")]
    AuditTableClaimed {
        /// The table, in list form.
        table: String,
        /// The connector that owns it.
        owner: String,
    },
    /// The audit table was kept by a deleted incarnation of this connector and
    /// `audit.adopt` is `never`.
    #[error(
        "audit table {table} was kept by an earlier incarnation ({incarnation}) of this connector, deleted with keep_resources: set audit.adopt=from-start to emit its rows, audit.adopt=from-end to skip them, or drop the table"
    )]
    AuditTableKept {
        /// The table, in list form.
        table: String,
        /// The incarnation recorded as owner.
        incarnation: String,
    },
    /// Provisioning at connector start failed.
    #[error("provisioning failed while {step}: {detail}")]
    ProvisionFailed {
        /// The step that failed.
        step: &'static str,
        /// Server error text.
        detail: String,
    },
    /// Cleanup at stop(true) failed.
    #[error("cleanup failed while {step}: {detail}")]
    CleanupFailed {
        /// The step that failed.
        step: &'static str,
        /// Server error text.
        detail: String,
    },
    /// Reading the audit table failed.
    #[error("reading the audit table failed: {detail}")]
    PollFailed {
        /// Server error text.
        detail: String,
    },
    /// The database stayed busy (locked by another writer) for longer than the retries
    /// allow; transient, the backend retries it with backoff first.
    #[error("database stayed busy while {step}: {detail}")]
    Busy {
        /// The step that was retried.
        step: &'static str,
        /// Driver error text.
        detail: String,
    },
    /// A blocking worker panicked or was cancelled.
    #[error("database worker did not finish: {detail}")]
    Worker {
        /// Join error text.
        detail: String,
    },
    /// A call came before a successful start.
    #[error("{call} called before a successful start")]
    NotStarted {
        /// The call.
        call: &'static str,
    },
}

/// What a connector does with an audit table kept by an earlier incarnation of itself
/// (deleted with `keep_resources`), chosen at create with `audit.adopt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopt {
    /// Refuse to start: the operator decides (the default).
    Never,
    /// Take the table over; tasks emit every row kept in it.
    FromStart,
    /// Take the table over; tasks emit only rows written after the takeover.
    FromEnd,
}

impl Adopt {
    /// Config values, in documentation order.
    pub const VALUES: [&'static str; 3] = ["never", "from-start", "from-end"];

    fn parse(value: &str) -> Result<Adopt, String> {
        match value.trim() {
            "never" => Ok(Adopt::Never),
            "from-start" => Ok(Adopt::FromStart),
            "from-end" => Ok(Adopt::FromEnd),
            _ => Err(format!("value is not one of: {}", Adopt::VALUES.join(", "))),
        }
    }
}

/// Who asks: this connector incarnation of this plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Plugin name (`sqlite-audit`, `postgres-audit`).
    pub plugin: &'static str,
    /// Connector name.
    pub connector: String,
    /// Connector incarnation ([`ConnectorContext::incarnation`]).
    pub incarnation: String,
}

impl Claim {
    /// The owner record to write for this claim.
    pub fn record(&self, start_after: i64) -> OwnerRecord {
        OwnerRecord {
            wharf: self.plugin.to_owned(),
            connector: self.connector.clone(),
            incarnation: self.incarnation.clone(),
            start_after,
        }
    }
}

/// The owner record stored with an audit table (PostgreSQL: the table's comment; SQLite:
/// a row of `wharf_owners`), as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRecord {
    /// Plugin that created the table.
    pub wharf: String,
    /// Connector that owns it.
    pub connector: String,
    /// Incarnation of that connector.
    pub incarnation: String,
    /// Audit ids up to this one predate an adoption `from-end` (0 otherwise).
    #[serde(default)]
    pub start_after: i64,
}

impl OwnerRecord {
    /// The stored text.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses stored text; `None` when it is not an owner record (a user's comment).
    pub fn from_text(text: &str) -> Option<OwnerRecord> {
        serde_json::from_str(text).ok()
    }
}

/// What the catalog holds at the audit table's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No such table.
    Absent,
    /// A table without an owner record: somebody else's.
    Unowned,
    /// A table with this owner record.
    Owned(OwnerRecord),
}

/// What provisioning does with the audit table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvisionStep {
    /// Create it and write this owner record.
    Create(OwnerRecord),
    /// Ours already (a restart, a reconfiguration): keep it; tasks start after
    /// `start_after`.
    Reuse {
        /// From the owner record.
        start_after: i64,
    },
    /// Kept by an earlier incarnation: take it over. With `from_end`, write the highest
    /// audit id as `start_after`.
    Adopt {
        /// Skip the rows already there.
        from_end: bool,
    },
    /// Do nothing and fail the start.
    Refuse(Refusal),
}

/// Why provisioning is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A table without an owner record.
    NotOurs,
    /// Owned by another connector (or another plugin).
    ClaimedBy(String),
    /// Kept by an earlier incarnation and `audit.adopt=never`.
    Kept(String),
}

impl Refusal {
    /// The error the start fails with.
    pub fn into_error(self, table: &TableName) -> AuditError {
        let table = table.to_string();
        match self {
            Refusal::NotOurs => AuditError::AuditTableNotOurs { table },
            Refusal::ClaimedBy(owner) => AuditError::AuditTableClaimed { table, owner },
            Refusal::Kept(incarnation) => AuditError::AuditTableKept { table, incarnation },
        }
    }
}

/// The ownership decision at provisioning: what `claim` may do with what was `found`.
pub fn decide_provision(found: &Found, claim: &Claim, adopt: Adopt) -> ProvisionStep {
    match found {
        Found::Absent => ProvisionStep::Create(claim.record(0)),
        Found::Unowned => ProvisionStep::Refuse(Refusal::NotOurs),
        Found::Owned(owner)
            if owner.wharf != claim.plugin || owner.connector != claim.connector =>
        {
            ProvisionStep::Refuse(Refusal::ClaimedBy(owner.connector.clone()))
        }
        Found::Owned(owner) if owner.incarnation == claim.incarnation => ProvisionStep::Reuse {
            start_after: owner.start_after,
        },
        Found::Owned(owner) => match adopt {
            Adopt::Never => ProvisionStep::Refuse(Refusal::Kept(owner.incarnation.clone())),
            Adopt::FromStart => ProvisionStep::Adopt { from_end: false },
            Adopt::FromEnd => ProvisionStep::Adopt { from_end: true },
        },
    }
}

/// What a cleanup may drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanupStep {
    /// Ours: the triggers in scope and, for the connector, the helper code and the table.
    DropAll,
    /// The table is not ours (or gone): drop only our connector's triggers and helper
    /// code (named from the connector, so nobody else's), never the table.
    DropCodeOnly,
    /// Another incarnation of this connector owns the table and the triggers that feed
    /// it: drop nothing.
    Leave,
}

/// The ownership decision at cleanup: what `claim` may drop given what was `found`.
pub fn decide_cleanup(found: &Found, claim: &Claim) -> CleanupStep {
    match found {
        Found::Absent | Found::Unowned => CleanupStep::DropCodeOnly,
        Found::Owned(owner)
            if owner.wharf != claim.plugin || owner.connector != claim.connector =>
        {
            CleanupStep::DropCodeOnly
        }
        Found::Owned(owner) if owner.incarnation == claim.incarnation => CleanupStep::DropAll,
        Found::Owned(_) => CleanupStep::Leave,
    }
}

/// Which objects a cleanup covers.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// A task's: the triggers on these tables.
    Tables(&'a [TableName]),
    /// The connector's: every trigger, the helper code and the audit table.
    Everything,
}

/// One audit row as a backend read it.
#[derive(Debug, Clone)]
pub struct AuditRow {
    /// Audit id: increasing in commit order.
    pub id: i64,
    /// The watched table, spelled as in the task's config.
    pub table: TableName,
    /// `INSERT`, `UPDATE` or `DELETE`.
    pub operation: String,
    /// Row before, JSON text.
    pub old: Option<String>,
    /// Row after, JSON text.
    pub new: Option<String>,
    /// Commit (or statement) time, Unix milliseconds.
    pub commit_ms: i64,
    /// The same time in RFC 3339 UTC, when the backend has it.
    pub commit_time: Option<String>,
}

/// A database the audit connectors can watch. One value per connector instance or task;
/// it may keep a connection between reads.
#[async_trait]
pub trait AuditBackend: Sized + Send + Sync + std::fmt::Debug + 'static {
    /// Plugin name, used as `connector.class` and in owner records.
    const PLUGIN: &'static str;

    /// Parses the backend's keys (where the database is, the watched tables, the audit
    /// table, defaulting names from `connector`).
    ///
    /// # Errors
    /// [`AuditError::InvalidConfig`] naming the key.
    fn parse(connector: &str, config: &ConfigMap) -> Result<Self, AuditError>;

    /// The watched tables, deduplicated, in list order.
    fn tables(&self) -> &[TableName];

    /// Provisions the audit table and the triggers on [`AuditBackend::tables`] in one
    /// transaction, dropping our triggers on tables no longer watched. It reads the
    /// owner record and acts on [`decide_provision`]; returns the `start_after` of the
    /// owner record it left.
    ///
    /// # Errors
    /// A refusal's error, [`AuditError::TableMissing`], or a failed step.
    async fn provision(&self, claim: &Claim, adopt: Adopt) -> Result<i64, AuditError>;

    /// Drops what `scope` covers and [`decide_cleanup`] allows, in one transaction;
    /// succeeds when the objects (or the database file) are already gone.
    ///
    /// # Errors
    /// A failed step.
    async fn cleanup(&self, claim: &Claim, scope: Scope<'_>) -> Result<(), AuditError>;

    /// Opens the connection a task reads through.
    ///
    /// # Errors
    /// [`AuditError::Connect`].
    async fn open(&mut self) -> Result<(), AuditError>;

    /// Reads at most `limit` audit rows of [`AuditBackend::tables`] with an id above
    /// `after`, in id order. Must be cancel-safe.
    ///
    /// # Errors
    /// [`AuditError::PollFailed`] or [`AuditError::Connect`].
    async fn read_rows(&mut self, after: i64, limit: i64) -> Result<Vec<AuditRow>, AuditError>;

    /// Closes the task's connection.
    fn close(&mut self);

    /// What the connector instance records in the resource ledger (docs/resources.md):
    /// what it creates (the audit table, the triggers, a trigger function) and what it
    /// only uses (the watched tables, adopted). The default records nothing.
    fn ledger(&self) -> Vec<wharf_sdk::Resource> {
        Vec::new()
    }

    /// The part of [`AuditBackend::ledger`] that a create must claim for itself (the
    /// audit table when it is configured: a derived name is unique already).
    fn declared(&self, config: &ConfigMap) -> Vec<wharf_sdk::Resource> {
        let _ = config;
        Vec::new()
    }

    /// After a cleanup: whether each of `resources` still exists; `None` when the place
    /// they live cannot be looked at (an SQLite file that is gone: the objects may live
    /// on in the moved file). The default says nothing.
    ///
    /// # Errors
    /// A failed look-up.
    async fn still_there(
        &self,
        resources: &[wharf_sdk::Resource],
    ) -> Result<Option<Vec<bool>>, AuditError> {
        let _ = resources;
        Ok(None)
    }
}

fn non_negative(value: &str) -> Result<(), String> {
    match value.trim().parse::<i64>() {
        Ok(n) if n >= 0 => Ok(()),
        _ => Err("value is not a non-negative integer".to_owned()),
    }
}

fn positive(value: &str) -> Result<(), String> {
    match value.trim().parse::<i64>() {
        Ok(n) if n > 0 => Ok(()),
        _ => Err("value is not a positive integer".to_owned()),
    }
}

/// Checks a value is not blank.
pub fn non_empty(value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        Err("value must not be empty".to_owned())
    } else {
        Ok(())
    }
}

fn adopt_value(value: &str) -> Result<(), String> {
    Adopt::parse(value).map(|_| ())
}

/// The keys of [`keys`] after `tables` and `audit.table` (which each backend defines
/// with its own naming rules).
pub fn shared_config_def() -> ConfigDef {
    ConfigDef::new()
        .define(
            ConfigKey::new(keys::TOPIC, ConfigType::String, Importance::High, "Topic the change records are written to.")
                .required()
                .validator(non_empty),
        )
        .define(
            ConfigKey::new(keys::POLL_INTERVAL_MS, ConfigType::Long, Importance::Low, "Wait after a poll that found no change, in milliseconds.")
                .default_value("1000")
                .validator(non_negative),
        )
        .define(
            ConfigKey::new(keys::BATCH_SIZE, ConfigType::Int, Importance::Low, "Most records returned by one poll.")
                .default_value("500")
                .validator(positive),
        )
        .define(
            ConfigKey::new(keys::ADOPT, ConfigType::String, Importance::Low, "An audit table kept by a deleted earlier incarnation of this connector (delete with keep_resources): never refuses to start, from-start takes it over and emits every kept row, from-end takes it over and emits only rows written after the takeover.")
                .default_value("never")
                .one_of(&Adopt::VALUES)
                .validator(adopt_value),
        )
}

/// Reads a required, non-blank value.
///
/// # Errors
/// [`AuditError::InvalidConfig`] naming `key`.
pub fn required(config: &ConfigMap, key: &'static str) -> Result<String, AuditError> {
    match config.get(key).map(|v| v.trim()) {
        Some(v) if !v.is_empty() => Ok(v.to_owned()),
        _ => Err(AuditError::InvalidConfig {
            key,
            reason: "missing required value".to_owned(),
        }),
    }
}

/// Reads a number with a default and a check.
///
/// # Errors
/// [`AuditError::InvalidConfig`] naming `key`.
pub fn number<T: std::str::FromStr>(
    config: &ConfigMap,
    key: &'static str,
    default: &str,
    check: fn(&str) -> Result<(), String>,
) -> Result<T, AuditError> {
    let raw = config.get(key).map(String::as_str).unwrap_or(default);
    let invalid = |reason: String| AuditError::InvalidConfig { key, reason };
    check(raw).map_err(invalid)?;
    raw.trim()
        .parse::<T>()
        .map_err(|_| invalid("value is out of range".to_owned()))
}

/// The parsed shared config with the backend.
#[derive(Debug)]
struct Parsed<B> {
    backend: B,
    topic: String,
    poll_interval: Duration,
    batch_size: i64,
    adopt: Adopt,
    start_after: i64,
}

impl<B: AuditBackend> Parsed<B> {
    fn parse(connector: &str, config: &ConfigMap) -> Result<Self, AuditError> {
        let adopt = Adopt::parse(
            config
                .get(keys::ADOPT)
                .map(String::as_str)
                .unwrap_or("never"),
        )
        .map_err(|reason| AuditError::InvalidConfig {
            key: keys::ADOPT,
            reason,
        })?;
        Ok(Self {
            backend: B::parse(connector, config)?,
            topic: required(config, keys::TOPIC)?,
            poll_interval: Duration::from_millis(number(
                config,
                keys::POLL_INTERVAL_MS,
                "1000",
                non_negative,
            )?),
            batch_size: number(config, keys::BATCH_SIZE, "500", positive)?,
            adopt,
            start_after: number(config, keys::START_AFTER, "0", non_negative)?,
        })
    }
}

/// The connector instance of an audit plugin: provisions at start, splits the tables
/// into task configs, cleans up at stop(true).
pub struct AuditConnector<B> {
    claim: Option<Claim>,
    config: ConfigMap,
    parsed: Option<Parsed<B>>,
    start_after: i64,
    /// The instance's ledger handle (from its context).
    resources: Option<wharf_sdk::Resources>,
}

impl<B: std::fmt::Debug> std::fmt::Debug for AuditConnector<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The raw config may hold a password: show only the parsed (redacting) form.
        f.debug_struct("AuditConnector")
            .field("claim", &self.claim)
            .field("parsed", &self.parsed)
            .finish_non_exhaustive()
    }
}

impl<B> Default for AuditConnector<B> {
    fn default() -> Self {
        Self {
            claim: None,
            config: ConfigMap::new(),
            parsed: None,
            start_after: 0,
            resources: None,
        }
    }
}

#[async_trait]
impl<B: AuditBackend> Connector for AuditConnector<B> {
    async fn start(&mut self, ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()> {
        let parsed = Parsed::<B>::parse(&ctx.connector, &config)?;
        let claim = Claim {
            plugin: B::PLUGIN,
            connector: ctx.connector.clone(),
            incarnation: ctx.incarnation.clone(),
        };
        self.config = config;
        // Kept before provisioning: a start that fails halfway is still cleaned up by
        // the stop(true) that may follow.
        let parsed = self.parsed.insert(parsed);
        let claim = self.claim.insert(claim);
        self.resources = Some(ctx.resources().clone());
        if !ctx.cleanup_only {
            // In the ledger before the transaction that creates them, confirmed after.
            let owned = parsed.backend.ledger();
            for r in &owned {
                ctx.resources().intend(r).await?;
            }
            self.start_after = parsed.backend.provision(claim, parsed.adopt).await?;
            for r in &owned {
                ctx.resources().confirm(r).await?;
            }
            tracing::info!(
                connector = %ctx.connector,
                plugin = B::PLUGIN,
                tables = parsed.backend.tables().len(),
                "audit objects provisioned"
            );
        }
        Ok(())
    }

    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
        let parsed = self.parsed.as_ref().ok_or(AuditError::NotStarted {
            call: "task_configs",
        })?;
        Ok(split_tables(parsed.backend.tables(), max_tasks)
            .into_iter()
            .map(|share| {
                let mut c = self.config.clone();
                c.insert(keys::TABLES.to_owned(), format_table_list(&share));
                c.insert(keys::START_AFTER.to_owned(), self.start_after.to_string());
                c
            })
            .collect())
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        if !connector_deleted {
            // No connection is held between calls: nothing to release, nothing to drop.
            return Ok(());
        }
        let (Some(parsed), Some(claim)) = (&self.parsed, &self.claim) else {
            return Err(AuditError::NotStarted {
                call: "stop_with(true)",
            }
            .into());
        };
        parsed.backend.cleanup(claim, Scope::Everything).await?;
        tracing::info!(connector = %claim.connector, plugin = B::PLUGIN, "audit connector cleanup done");
        // What is gone now is accounted for; what is still there, or where nothing can
        // be looked at (the database file moved away), stays in the ledger, and the
        // deletion names it.
        if let Some(ledger) = &self.resources {
            let created: Vec<wharf_sdk::Resource> = parsed
                .backend
                .ledger()
                .into_iter()
                .filter(|r| r.origin == wharf_sdk::Origin::Created)
                .collect();
            match parsed.backend.still_there(&created).await? {
                Some(there) => {
                    for (r, _) in created.iter().zip(there).filter(|(_, t)| !t) {
                        ledger.release(r).await?;
                    }
                }
                None => {
                    tracing::warn!(connector = %claim.connector, plugin = B::PLUGIN,
                        "audit cleanup: the database cannot be looked at; its objects stay in the resource ledger");
                }
            }
        }
        Ok(())
    }

    fn declared_resources(&self, config: &ConfigMap) -> PluginResult<Vec<wharf_sdk::Resource>> {
        let parsed = Parsed::<B>::parse("declared", config)?;
        Ok(parsed.backend.declared(config))
    }
}

/// A task of an audit plugin: reads the audit rows of its tables.
#[derive(Debug)]
pub struct AuditTask<B> {
    claim: Option<Claim>,
    task: u32,
    parsed: Option<Parsed<B>>,
    /// Last audit id emitted per table (from the committed offset at start).
    last: HashMap<TableName, i64>,
    /// Every audit id up to this one has been read already.
    scanned: i64,
}

impl<B> Default for AuditTask<B> {
    fn default() -> Self {
        Self {
            claim: None,
            task: 0,
            parsed: None,
            last: HashMap::new(),
            scanned: 0,
        }
    }
}

fn json(text: Option<String>) -> serde_json::Value {
    text.and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .unwrap_or(serde_json::Value::Null)
}

/// The record of one audit row on `topic`.
fn record(topic: &str, row: AuditRow) -> SourceRecord {
    let table = row.table;
    let mut value = serde_json::json!({
        "id": row.id,
        "table": table.to_string(),
        "schema": table.schema,
        "name": table.name,
        "operation": row.operation,
        "old": json(row.old),
        "new": json(row.new),
        "commit_time_ms": row.commit_ms,
    });
    if let Some(t) = row.commit_time {
        value["commit_time"] = serde_json::Value::String(t);
    }
    SourceRecord {
        topic: topic.to_owned(),
        key: Some(table.to_string().into_bytes()),
        value: value.to_string().into_bytes(),
        headers: Vec::new(),
        timestamp_ms: Some(row.commit_ms),
        partition: None,
        source_partition: source_partition(&table),
        source_offset: serde_json::json!({ "id": row.id }),
        data: None,
    }
}

impl<B: AuditBackend> AuditTask<B> {
    async fn read_batch(&mut self) -> Result<Vec<SourceRecord>, AuditError> {
        let parsed = self
            .parsed
            .as_mut()
            .ok_or(AuditError::NotStarted { call: "poll" })?;
        if parsed.backend.tables().is_empty() {
            return Ok(Vec::new());
        }
        let rows = parsed
            .backend
            .read_rows(self.scanned, parsed.batch_size)
            .await?;
        let mut scanned = self.scanned;
        let mut last = self.last.clone();
        let mut records = Vec::with_capacity(rows.len());
        for row in rows {
            scanned = scanned.max(row.id);
            if last.get(&row.table).is_some_and(|l| *l >= row.id) {
                continue;
            }
            last.insert(row.table.clone(), row.id);
            records.push(record(&parsed.topic, row));
        }
        // State changes only after the last await: a cancelled poll loses nothing.
        self.scanned = scanned;
        self.last = last;
        Ok(records)
    }
}

#[async_trait]
impl<B: AuditBackend> SourceTask for AuditTask<B> {
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        let mut parsed = Parsed::<B>::parse(&ctx.connector, &config)?;
        self.task = ctx.task;
        let mut last = HashMap::new();
        for table in parsed.backend.tables() {
            let id = ctx
                .offset(&source_partition(table))
                .and_then(|o| o.get("id"))
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(parsed.start_after);
            last.insert(table.clone(), id);
        }
        self.scanned = last.values().copied().min().unwrap_or(0);
        self.last = last;
        if !ctx.cleanup_only {
            parsed.backend.open().await?;
        }
        self.claim = Some(Claim {
            plugin: B::PLUGIN,
            connector: ctx.connector.clone(),
            incarnation: ctx.incarnation.clone(),
        });
        self.parsed = Some(parsed);
        Ok(())
    }

    async fn poll(&mut self) -> PluginResult<Vec<SourceRecord>> {
        let records = self.read_batch().await?;
        if records.is_empty() {
            let wait = self
                .parsed
                .as_ref()
                .map(|p| p.poll_interval)
                .unwrap_or_default();
            tokio::time::sleep(wait).await;
        }
        Ok(records)
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        if let Some(p) = self.parsed.as_mut() {
            p.backend.close();
        }
        if !connector_deleted {
            return Ok(());
        }
        let (Some(parsed), Some(claim)) = (&self.parsed, &self.claim) else {
            return Err(AuditError::NotStarted {
                call: "stop_with(true)",
            }
            .into());
        };
        let tables = parsed.backend.tables();
        if tables.is_empty() {
            return Ok(());
        }
        parsed.backend.cleanup(claim, Scope::Tables(tables)).await?;
        tracing::info!(connector = %claim.connector, task = self.task, plugin = B::PLUGIN, "audit task dropped its triggers");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(connector: &str, incarnation: &str) -> Claim {
        Claim {
            plugin: "sqlite-audit",
            connector: connector.to_owned(),
            incarnation: incarnation.to_owned(),
        }
    }

    fn owned(connector: &str, incarnation: &str) -> Found {
        Found::Owned(claim(connector, incarnation).record(7))
    }

    #[test]
    fn an_absent_table_is_created_with_this_incarnation_as_owner() {
        let me = claim("c", "i1");
        assert_eq!(
            decide_provision(&Found::Absent, &me, Adopt::Never),
            ProvisionStep::Create(me.record(0))
        );
    }

    #[test]
    fn a_table_without_owner_record_is_never_adopted() {
        for adopt in [Adopt::Never, Adopt::FromStart, Adopt::FromEnd] {
            assert_eq!(
                decide_provision(&Found::Unowned, &claim("c", "i1"), adopt),
                ProvisionStep::Refuse(Refusal::NotOurs)
            );
        }
    }

    #[test]
    fn a_table_of_another_connector_is_refused_whatever_the_adopt_policy() {
        assert_eq!(
            decide_provision(&owned("other", "i1"), &claim("c", "i1"), Adopt::FromStart),
            ProvisionStep::Refuse(Refusal::ClaimedBy("other".to_owned()))
        );
        let mut pg = claim("c", "i1").record(0);
        pg.wharf = "postgres-audit".to_owned();
        assert!(matches!(
            decide_provision(&Found::Owned(pg), &claim("c", "i1"), Adopt::FromStart),
            ProvisionStep::Refuse(Refusal::ClaimedBy(_))
        ));
    }

    #[test]
    fn the_same_incarnation_reuses_its_table_and_keeps_its_start_point() {
        assert_eq!(
            decide_provision(&owned("c", "i1"), &claim("c", "i1"), Adopt::Never),
            ProvisionStep::Reuse { start_after: 7 }
        );
    }

    #[test]
    fn a_kept_table_is_refused_or_adopted_as_the_policy_says() {
        let me = claim("c", "i2");
        assert_eq!(
            decide_provision(&owned("c", "i1"), &me, Adopt::Never),
            ProvisionStep::Refuse(Refusal::Kept("i1".to_owned()))
        );
        assert_eq!(
            decide_provision(&owned("c", "i1"), &me, Adopt::FromStart),
            ProvisionStep::Adopt { from_end: false }
        );
        assert_eq!(
            decide_provision(&owned("c", "i1"), &me, Adopt::FromEnd),
            ProvisionStep::Adopt { from_end: true }
        );
    }

    #[test]
    fn cleanup_drops_everything_only_for_the_owning_incarnation() {
        assert_eq!(
            decide_cleanup(&owned("c", "i1"), &claim("c", "i1")),
            CleanupStep::DropAll
        );
    }

    #[test]
    fn cleanup_of_a_stale_incarnation_leaves_its_successors_objects() {
        assert_eq!(
            decide_cleanup(&owned("c", "i2"), &claim("c", "i1")),
            CleanupStep::Leave
        );
    }

    #[test]
    fn cleanup_never_drops_a_table_it_does_not_own() {
        let me = claim("c", "i1");
        assert_eq!(
            decide_cleanup(&Found::Absent, &me),
            CleanupStep::DropCodeOnly
        );
        assert_eq!(
            decide_cleanup(&Found::Unowned, &me),
            CleanupStep::DropCodeOnly
        );
        assert_eq!(
            decide_cleanup(&owned("other", "i1"), &me),
            CleanupStep::DropCodeOnly
        );
    }

    #[test]
    fn owner_records_round_trip_and_user_comments_are_not_owner_records() {
        let r = claim("c\"x", "i1").record(3);
        assert_eq!(OwnerRecord::from_text(&r.to_text()), Some(r));
        assert_eq!(OwnerRecord::from_text("my audit table"), None);
    }
}
