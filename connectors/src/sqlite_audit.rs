//! `sqlite-audit`: the KIP-883 example on a SQLite database file on the executor's host.
//! The same behaviour as `postgres-audit`: the connector start creates (idempotently, in
//! one `BEGIN IMMEDIATE` transaction) an audit table and AFTER INSERT/UPDATE/DELETE
//! triggers on every watched table; tasks read the audit rows of their tables in id order.
//!
//! SQLite has no trigger functions: each watched table gets three triggers whose bodies
//! write the row as `json_object(...)` of its columns (BLOBs as hex). A connector start
//! re-creates a trigger whose text no longer matches (a column was added), and drops ours
//! on tables no longer watched.
//!
//! Lifecycle: `stop_with(false)` closes the connection and drops nothing; a task's
//! `stop_with(true)` drops its tables' triggers; the connector's drops the remaining
//! triggers and the audit table. Cleanup of a file that no longer exists succeeds.
//!
//! Ordering: SQLite allows one writer at a time, so audit ids (the rowid, never reused
//! because audit rows are never deleted) are in commit order.
//!
//! Every SQLite call runs on the blocking pool (`spawn_blocking`), never on the runtime.
//!
//! Records: as `postgres-audit` (source partition `{"table": "main.<name>"}`, offset
//! `{"id": n}`, value `{"id", "table", "schema", "name", "operation", "old", "new",
//! "commit_time_ms"}`), where the time is the statement's `julianday('now')` in Unix
//! milliseconds (SQLite keeps no commit time).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};
use wharf::sdk::{
    ConfigDef, ConfigKey, ConfigMap, ConfigType, Connector, ConnectorContext, Importance, Plugin,
    PluginResult, SourceRecord, SourceTask, TaskContext, TaskFactory,
};

use crate::audit_names::{
    TableName, derived_name, format_table_list, parse_single_table, parse_table_list, quote_ident,
    quote_literal, source_partition, split_tables, stable_hash, validate_single_table,
    validate_table_list,
};

/// Name of the plugin, used as `connector.class`.
pub const PLUGIN_NAME: &str = "sqlite-audit";

/// How long a statement waits for another writer's lock, in milliseconds.
pub const BUSY_TIMEOUT_MS: u64 = 5_000;

/// The only schema supported: triggers must live in the database of their table.
pub const MAIN_SCHEMA: &str = "main";

/// Columns of the audit table, in order; a table with other columns is not ours.
const AUDIT_COLUMNS: [&str; 6] = [
    "id",
    "table_name",
    "operation",
    "old_row",
    "new_row",
    "commit_time_ms",
];

/// Config keys.
pub mod keys {
    /// Path of the database file; it must exist.
    pub const DATABASE_PATH: &str = "database.path";
    /// Watched tables, comma-separated (`main.` prefix optional).
    pub const TABLES: &str = "tables";
    /// Audit table name.
    pub const AUDIT_TABLE: &str = "audit.table";
    /// Topic the records go to.
    pub const TOPIC: &str = "topic";
    /// Wait between two polls that found nothing, in milliseconds.
    pub const POLL_INTERVAL_MS: &str = "poll.interval.ms";
    /// Most records returned by one poll.
    pub const BATCH_SIZE: &str = "batch.size";
}

/// Errors of the sqlite-audit plugin.
#[derive(Debug, thiserror::Error)]
pub enum SqliteAuditError {
    /// A config value is missing or wrong.
    #[error("invalid config {key}: {reason}")]
    InvalidConfig {
        /// Offending key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The database file could not be opened.
    #[error("cannot open sqlite database {path}: {detail}")]
    Open {
        /// File path.
        path: String,
        /// SQLite error text.
        detail: String,
    },
    /// A watched table does not exist.
    #[error("watched table {table} does not exist")]
    TableMissing {
        /// The table, in list form.
        table: String,
    },
    /// `audit.table` names a table with other columns than ours.
    #[error("audit table {table} exists but was not created by this connector")]
    AuditTableNotOurs {
        /// The table.
        table: String,
    },
    /// Provisioning failed.
    #[error("provisioning failed while {step}: {detail}")]
    ProvisionFailed {
        /// The step that failed.
        step: &'static str,
        /// SQLite error text.
        detail: String,
    },
    /// Cleanup failed.
    #[error("cleanup failed while {step}: {detail}")]
    CleanupFailed {
        /// The step that failed.
        step: &'static str,
        /// SQLite error text.
        detail: String,
    },
    /// Reading the audit table failed.
    #[error("reading the audit table failed: {detail}")]
    PollFailed {
        /// SQLite error text.
        detail: String,
    },
    /// The blocking worker panicked or was cancelled.
    #[error("sqlite worker did not finish: {detail}")]
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

/// The plugin: name, version, config keys and factories.
pub fn plugin() -> Plugin {
    Plugin {
        name: PLUGIN_NAME.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        config_def: config_def(),
        connector: Arc::new(|| Box::new(SqliteAuditConnector::default()) as Box<dyn Connector>),
        task: TaskFactory::Source(Arc::new(|| {
            Box::new(SqliteAuditTask::default()) as Box<dyn SourceTask>
        })),
    }
}

fn non_negative(value: &str) -> Result<(), String> {
    match value.trim().parse::<i64>() {
        Ok(n) if n >= 0 => Ok(()),
        _ => Err(format!("value {value:?} is not a non-negative integer")),
    }
}

fn positive(value: &str) -> Result<(), String> {
    match value.trim().parse::<i64>() {
        Ok(n) if n > 0 => Ok(()),
        _ => Err(format!("value {value:?} is not a positive integer")),
    }
}

fn non_empty(value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        Err("value must not be empty".to_owned())
    } else {
        Ok(())
    }
}

fn main_only_list(value: &str) -> Result<(), String> {
    validate_table_list(value)?;
    check_main(&parse_table_list(value)?)
}

fn main_only_single(value: &str) -> Result<(), String> {
    validate_single_table(value)?;
    check_main(&[parse_single_table(value)?])
}

fn check_main(tables: &[TableName]) -> Result<(), String> {
    match tables.iter().find(|t| {
        t.schema
            .as_deref()
            .is_some_and(|s| !s.eq_ignore_ascii_case(MAIN_SCHEMA))
    }) {
        Some(t) => Err(format!(
            "table {t} is not in schema main (the only one supported)"
        )),
        None => Ok(()),
    }
}

/// The plugin's config keys.
pub fn config_def() -> ConfigDef {
    ConfigDef::new()
        .define(
            ConfigKey::new(keys::DATABASE_PATH, ConfigType::String, Importance::High, "Path of the SQLite database file on the executor's host; it must exist. Immutable: the audit objects live in this file, so delete the connector and create it again to move.")
                .required()
                .immutable()
                .validator(non_empty),
        )
        .define(
            ConfigKey::new(keys::TABLES, ConfigType::List, Importance::High, "Tables to watch, comma-separated, optionally prefixed main. (the only schema supported). Double-quote a name holding a dot, a comma or a quote. Empty: no tables, no tasks.")
                .default_value("")
                .validator(main_only_list),
        )
        .define(
            ConfigKey::new(keys::AUDIT_TABLE, ConfigType::String, Importance::Medium, "Audit table. Default: wharf_audit_<connector>_<hash>, derived from the connector name. Immutable: the deletion's cleanup drops the table named here.")
                .immutable()
                .validator(main_only_single),
        )
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
}

/// Names derived from the connector name.
#[derive(Debug, Clone)]
struct Names {
    audit_table: String,
    /// Every trigger of this connector starts with it (the connector hash keeps two
    /// connectors' prefixes apart).
    trigger_prefix: String,
}

impl Names {
    fn derive(connector: &str, audit_table: Option<String>) -> Names {
        Names {
            audit_table: audit_table.unwrap_or_else(|| derived_name("wharf_audit", connector)),
            trigger_prefix: format!("{}_", derived_name("wharf_audit_trg", connector)),
        }
    }

    /// The trigger for `op` (`i`, `u`, `d`) on a table; case-insensitive in the table
    /// name, as SQLite's table names are.
    fn trigger(&self, table: &str, op: char) -> String {
        format!(
            "{}{:016x}_{op}",
            self.trigger_prefix,
            stable_hash(&table.to_ascii_lowercase())
        )
    }
}

/// The parsed config.
#[derive(Debug, Clone)]
struct SqliteAuditConfig {
    path: PathBuf,
    /// Table names (schema dropped: always main).
    tables: Vec<String>,
    topic: String,
    poll_interval: Duration,
    batch_size: i64,
    names: Names,
}

fn number<T: std::str::FromStr>(
    config: &ConfigMap,
    key: &'static str,
    default: &str,
    check: fn(&str) -> Result<(), String>,
) -> Result<T, SqliteAuditError> {
    let raw = config.get(key).map(String::as_str).unwrap_or(default);
    let invalid = |reason: String| SqliteAuditError::InvalidConfig { key, reason };
    check(raw).map_err(invalid)?;
    raw.trim()
        .parse::<T>()
        .map_err(|_| invalid(format!("value {raw:?} is out of range")))
}

fn required(config: &ConfigMap, key: &'static str) -> Result<String, SqliteAuditError> {
    match config.get(key).map(|v| v.trim()) {
        Some(v) if !v.is_empty() => Ok(v.to_owned()),
        _ => Err(SqliteAuditError::InvalidConfig {
            key,
            reason: "missing required value".to_owned(),
        }),
    }
}

impl SqliteAuditConfig {
    fn parse(connector: &str, config: &ConfigMap) -> Result<Self, SqliteAuditError> {
        let raw_tables = config.get(keys::TABLES).map(String::as_str).unwrap_or("");
        main_only_list(raw_tables).map_err(|reason| SqliteAuditError::InvalidConfig {
            key: keys::TABLES,
            reason,
        })?;
        let mut tables: Vec<String> = Vec::new();
        for t in parse_table_list(raw_tables).unwrap_or_default() {
            if !tables.iter().any(|k| k.eq_ignore_ascii_case(&t.name)) {
                tables.push(t.name);
            }
        }
        let audit_table = match config.get(keys::AUDIT_TABLE).map(|v| v.trim()) {
            Some(v) if !v.is_empty() => {
                main_only_single(v).map_err(|reason| SqliteAuditError::InvalidConfig {
                    key: keys::AUDIT_TABLE,
                    reason,
                })?;
                parse_single_table(v).ok().map(|t| t.name)
            }
            _ => None,
        };
        let names = Names::derive(connector, audit_table);
        if tables
            .iter()
            .any(|t| t.eq_ignore_ascii_case(&names.audit_table))
        {
            return Err(SqliteAuditError::InvalidConfig {
                key: keys::TABLES,
                reason: format!("the audit table {} cannot be watched", names.audit_table),
            });
        }
        Ok(Self {
            path: PathBuf::from(required(config, keys::DATABASE_PATH)?),
            tables,
            topic: required(config, keys::TOPIC)?,
            poll_interval: Duration::from_millis(number(
                config,
                keys::POLL_INTERVAL_MS,
                "1000",
                non_negative,
            )?),
            batch_size: number(config, keys::BATCH_SIZE, "500", positive)?,
            names,
        })
    }

    fn table_names(&self) -> Vec<TableName> {
        self.tables.iter().map(|t| list_name(t)).collect()
    }
}

/// `main.<name>` as a [`TableName`]: the source partition and list form.
fn list_name(table: &str) -> TableName {
    TableName {
        schema: Some(MAIN_SCHEMA.to_owned()),
        name: table.to_owned(),
    }
}

/// Opens an existing database file (never creates one), `None` when the file is gone.
fn open(path: &Path) -> Result<Option<Connection>, SqliteAuditError> {
    if !path.exists() {
        return Ok(None);
    }
    let open_err = |e: rusqlite::Error| SqliteAuditError::Open {
        path: path.display().to_string(),
        detail: e.to_string(),
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(open_err)?;
    conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))
        .map_err(open_err)?;
    Ok(Some(conn))
}

fn open_existing(path: &Path) -> Result<Connection, SqliteAuditError> {
    open(path)?.ok_or_else(|| SqliteAuditError::Open {
        path: path.display().to_string(),
        detail: "file does not exist".to_owned(),
    })
}

/// Runs blocking SQLite work on the blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, SqliteAuditError> + Send + 'static,
) -> Result<T, SqliteAuditError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| SqliteAuditError::Worker {
            detail: e.to_string(),
        })?
}

/// Our triggers in the catalog: `(name, table)`.
fn our_triggers(
    conn: &Connection,
    names: &Names,
) -> rusqlite::Result<Vec<(String, String, String)>> {
    let mut stmt = conn.prepare(
        "SELECT name, tbl_name, coalesce(sql, '') FROM sqlite_master WHERE type = 'trigger' ORDER BY name",
    )?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (name, table, sql): (String, String, String) = row?;
        if name.starts_with(&names.trigger_prefix) {
            out.push((name, table, sql));
        }
    }
    Ok(out)
}

/// The catalog name of a table (SQLite matches table names without case).
fn catalog_table(conn: &Connection, table: &str) -> rusqlite::Result<Option<String>> {
    let mut stmt = conn.prepare(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?1 COLLATE NOCASE",
    )?;
    let mut rows = stmt.query([table])?;
    match rows.next()? {
        Some(row) => Ok(Some(row.get(0)?)),
        None => Ok(None),
    }
}

fn columns(conn: &Connection, table: &str) -> rusqlite::Result<Vec<String>> {
    let mut stmt = conn.prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")?;
    let rows = stmt.query_map([table], |r| r.get::<_, String>(0))?;
    rows.collect()
}

/// The expected `CREATE TRIGGER` text for `op` on `table` (catalog name) with `cols`.
fn trigger_sql(names: &Names, list_table: &str, table: &str, cols: &[String], op: char) -> String {
    let row_json = |alias: &str| {
        let pairs: Vec<String> = cols
            .iter()
            .map(|c| {
                let v = format!("{alias}.{}", quote_ident(c));
                format!(
                    "{}, CASE WHEN typeof({v}) = 'blob' THEN hex({v}) ELSE {v} END",
                    quote_literal(c)
                )
            })
            .collect();
        format!("json_object({})", pairs.join(", "))
    };
    let (event, operation, old, new) = match op {
        'i' => ("INSERT", "INSERT", "NULL".to_owned(), row_json("NEW")),
        'u' => ("UPDATE", "UPDATE", row_json("OLD"), row_json("NEW")),
        _ => ("DELETE", "DELETE", row_json("OLD"), "NULL".to_owned()),
    };
    format!(
        "CREATE TRIGGER {trigger} AFTER {event} ON {table} FOR EACH ROW BEGIN \
         INSERT INTO {audit} (table_name, operation, old_row, new_row, commit_time_ms) \
         VALUES ({name}, '{operation}', {old}, {new}, \
         CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)); END",
        trigger = quote_ident(&names.trigger(table, op)),
        table = quote_ident(table),
        audit = quote_ident(&names.audit_table),
        name = quote_literal(list_table),
    )
}

fn audit_table_state(conn: &Connection, table: &str) -> rusqlite::Result<Option<bool>> {
    match catalog_table(conn, table)? {
        None => Ok(None),
        Some(actual) => {
            let cols = columns(conn, &actual)?;
            Ok(Some(cols.iter().map(String::as_str).eq(AUDIT_COLUMNS)))
        }
    }
}

/// Drops `table` when it has exactly our audit columns; leaves anything else in place.
fn drop_audit_table_if_ours(conn: &Connection, table: &str) -> rusqlite::Result<()> {
    match audit_table_state(conn, table)? {
        Some(true) => conn.execute_batch(&format!("DROP TABLE IF EXISTS {}", quote_ident(table))),
        Some(false) => {
            tracing::warn!(
                table,
                "sqlite-audit leaves the audit table in place: it was not created by this connector"
            );
            Ok(())
        }
        None => Ok(()),
    }
}

/// The audit table one of our triggers writes to (the quoted name after `INSERT INTO`),
/// so that a table left behind by a changed `audit.table` is found again.
fn audit_table_in(trigger_sql: &str) -> Option<String> {
    let start = trigger_sql.find("INSERT INTO \"")? + "INSERT INTO \"".len();
    let mut name = String::new();
    let mut chars = trigger_sql[start..].chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' {
            if chars.peek() == Some(&'"') {
                chars.next();
                name.push('"');
            } else {
                return Some(name);
            }
        } else {
            name.push(c);
        }
    }
    None
}

/// Provisioning at connector start: audit table, triggers, reconcile. One transaction.
fn provision(cfg: &SqliteAuditConfig) -> Result<(), SqliteAuditError> {
    let mut conn = open_existing(&cfg.path)?;
    let n = &cfg.names;
    let fail = |step: &'static str| {
        move |e: rusqlite::Error| SqliteAuditError::ProvisionFailed {
            step,
            detail: e.to_string(),
        }
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail("beginning the transaction"))?;
    match audit_table_state(&tx, &n.audit_table).map_err(fail("looking up the audit table"))? {
        Some(false) => {
            return Err(SqliteAuditError::AuditTableNotOurs {
                table: n.audit_table.clone(),
            });
        }
        Some(true) => {}
        None => tx
            .execute_batch(&format!(
                "CREATE TABLE {} (id INTEGER PRIMARY KEY, table_name TEXT NOT NULL, \
                 operation TEXT NOT NULL, old_row TEXT, new_row TEXT, \
                 commit_time_ms INTEGER NOT NULL)",
                quote_ident(&n.audit_table)
            ))
            .map_err(fail("creating the audit table"))?,
    }

    let mut desired: HashMap<String, String> = HashMap::new();
    for list_table in &cfg.tables {
        let Some(table) =
            catalog_table(&tx, list_table).map_err(fail("looking up a watched table"))?
        else {
            return Err(SqliteAuditError::TableMissing {
                table: list_name(list_table).to_string(),
            });
        };
        let cols = columns(&tx, &table).map_err(fail("reading a watched table's columns"))?;
        for op in ['i', 'u', 'd'] {
            desired.insert(
                n.trigger(&table, op),
                trigger_sql(n, list_table, &table, &cols, op),
            );
        }
    }
    let present = our_triggers(&tx, n).map_err(fail("listing the triggers"))?;
    let mut previous_audit: Vec<String> = Vec::new();
    for (_, _, sql) in &present {
        if let Some(t) = audit_table_in(sql).filter(|t| !t.eq_ignore_ascii_case(&n.audit_table))
            && !previous_audit.contains(&t)
        {
            previous_audit.push(t);
        }
    }
    let mut kept = Vec::new();
    for (name, _table, sql) in present {
        if desired.get(&name) == Some(&sql) {
            kept.push(name);
        } else {
            tx.execute_batch(&format!("DROP TRIGGER IF EXISTS {}", quote_ident(&name)))
                .map_err(fail("dropping a stale trigger"))?;
        }
    }
    let mut to_create: Vec<(&String, &String)> = desired
        .iter()
        .filter(|(name, _)| !kept.contains(name))
        .collect();
    to_create.sort();
    for (_, sql) in to_create {
        tx.execute_batch(sql).map_err(fail("creating a trigger"))?;
    }
    // The audit table of an earlier audit.table, no longer written to.
    for table in &previous_audit {
        drop_audit_table_if_ours(&tx, table)
            .map_err(fail("dropping the audit table of an earlier audit.table"))?;
    }
    tx.commit().map_err(fail("committing the transaction"))?;
    Ok(())
}

/// Drops our triggers on `only` (all when `None`), and with `everything` the audit table.
fn cleanup(
    path: &Path,
    names: &Names,
    only: Option<&[String]>,
    everything: bool,
) -> Result<(), SqliteAuditError> {
    let Some(mut conn) = open(path)? else {
        tracing::info!(path = %path.display(), "sqlite-audit cleanup: database file is gone, nothing to drop");
        return Ok(());
    };
    let fail = |step: &'static str| {
        move |e: rusqlite::Error| SqliteAuditError::CleanupFailed {
            step,
            detail: e.to_string(),
        }
    };
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail("beginning the transaction"))?;
    let triggers = our_triggers(&tx, names).map_err(fail("listing the triggers"))?;
    let mut audit_tables = vec![names.audit_table.clone()];
    for (_, _, sql) in &triggers {
        if let Some(t) = audit_table_in(sql)
            && !audit_tables.iter().any(|a| a.eq_ignore_ascii_case(&t))
        {
            audit_tables.push(t);
        }
    }
    for (name, table, _) in triggers {
        let selected = only.is_none_or(|tables| {
            tables.iter().any(|t| {
                t.eq_ignore_ascii_case(&table)
                    || ['i', 'u', 'd']
                        .iter()
                        .any(|op| names.trigger(t, *op) == name)
            })
        });
        if selected {
            tx.execute_batch(&format!("DROP TRIGGER IF EXISTS {}", quote_ident(&name)))
                .map_err(fail("dropping a trigger"))?;
        }
    }
    if everything {
        for table in &audit_tables {
            drop_audit_table_if_ours(&tx, table).map_err(fail("dropping the audit table"))?;
        }
    }
    tx.commit().map_err(fail("committing the transaction"))?;
    Ok(())
}

/// The connector instance.
#[derive(Debug, Default)]
pub struct SqliteAuditConnector {
    connector: String,
    config: ConfigMap,
    parsed: Option<SqliteAuditConfig>,
}

#[async_trait]
impl Connector for SqliteAuditConnector {
    async fn start(&mut self, ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()> {
        let parsed = SqliteAuditConfig::parse(&ctx.connector, &config)?;
        self.connector = ctx.connector.clone();
        self.config = config;
        self.parsed = Some(parsed.clone());
        if ctx.cleanup_only {
            return Ok(());
        }
        blocking(move || provision(&parsed)).await?;
        Ok(())
    }

    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
        let parsed = self.parsed.as_ref().ok_or(SqliteAuditError::NotStarted {
            call: "task_configs",
        })?;
        Ok(split_tables(&parsed.table_names(), max_tasks)
            .into_iter()
            .map(|share| {
                let mut c = self.config.clone();
                c.insert(keys::TABLES.to_owned(), format_table_list(&share));
                c
            })
            .collect())
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        if !connector_deleted {
            return Ok(());
        }
        let parsed = self.parsed.clone().ok_or(SqliteAuditError::NotStarted {
            call: "stop_with(true)",
        })?;
        blocking(move || cleanup(&parsed.path, &parsed.names, None, true)).await?;
        tracing::info!(connector = %self.connector, "sqlite-audit removed its audit table and triggers");
        Ok(())
    }
}

/// A task: reads the audit rows of its tables.
#[derive(Default)]
pub struct SqliteAuditTask {
    connector: String,
    task: u32,
    parsed: Option<SqliteAuditConfig>,
    /// Shared with the blocking worker so a cancelled poll does not lose it.
    conn: Option<Arc<Mutex<Connection>>>,
    /// Last audit id emitted per table (lowercased name).
    last: HashMap<String, i64>,
    /// Every audit id up to this one has been read already.
    scanned: i64,
}

impl std::fmt::Debug for SqliteAuditTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteAuditTask")
            .field("connector", &self.connector)
            .field("task", &self.task)
            .field("config", &self.parsed)
            .field("connected", &self.conn.is_some())
            .field("scanned", &self.scanned)
            .finish_non_exhaustive()
    }
}

/// One audit row.
struct AuditRow {
    id: i64,
    table: String,
    operation: String,
    old: Option<String>,
    new: Option<String>,
    commit_ms: i64,
}

fn read_rows(
    conn: &Connection,
    audit_table: &str,
    tables: &[String],
    after: i64,
    limit: i64,
) -> rusqlite::Result<Vec<AuditRow>> {
    let placeholders: Vec<String> = (0..tables.len())
        .map(|i| format!("lower(?{})", i + 3))
        .collect();
    let sql = format!(
        "SELECT id, table_name, operation, old_row, new_row, commit_time_ms FROM {audit} \
         WHERE id > ?1 AND lower(table_name) IN ({list}) ORDER BY id LIMIT ?2",
        audit = quote_ident(audit_table),
        list = placeholders.join(", ")
    );
    let mut stmt = conn.prepare(&sql)?;
    let mut params: Vec<&dyn rusqlite::ToSql> = vec![&after, &limit];
    for t in tables {
        params.push(t);
    }
    let rows = stmt.query_map(params.as_slice(), |r| {
        Ok(AuditRow {
            id: r.get(0)?,
            table: r.get(1)?,
            operation: r.get(2)?,
            old: r.get(3)?,
            new: r.get(4)?,
            commit_ms: r.get(5)?,
        })
    })?;
    rows.collect()
}

impl SqliteAuditTask {
    async fn read_batch(&mut self) -> Result<Vec<SourceRecord>, SqliteAuditError> {
        let parsed = self
            .parsed
            .clone()
            .ok_or(SqliteAuditError::NotStarted { call: "poll" })?;
        if parsed.tables.is_empty() {
            return Ok(Vec::new());
        }
        let conn = match &self.conn {
            Some(c) => Arc::clone(c),
            None => {
                let path = parsed.path.clone();
                let c = Arc::new(Mutex::new(blocking(move || open_existing(&path)).await?));
                self.conn = Some(Arc::clone(&c));
                c
            }
        };
        let after = self.scanned;
        let worker_cfg = parsed.clone();
        let rows = blocking(move || {
            let guard = conn.lock().map_err(|_| SqliteAuditError::PollFailed {
                detail: "connection lock poisoned".to_owned(),
            })?;
            read_rows(
                &guard,
                &worker_cfg.names.audit_table,
                &worker_cfg.tables,
                after,
                worker_cfg.batch_size,
            )
            .map_err(|e| SqliteAuditError::PollFailed {
                detail: e.to_string(),
            })
        })
        .await?;
        let mut scanned = self.scanned;
        let mut last = self.last.clone();
        let mut records = Vec::with_capacity(rows.len());
        for row in rows {
            scanned = scanned.max(row.id);
            // Partition by the configured spelling of the name.
            let Some(list_table) = parsed
                .tables
                .iter()
                .find(|t| t.eq_ignore_ascii_case(&row.table))
            else {
                continue;
            };
            let key = list_table.to_ascii_lowercase();
            if last.get(&key).is_some_and(|l| *l >= row.id) {
                continue;
            }
            last.insert(key, row.id);
            let table = list_name(list_table);
            let json = |text: Option<String>| {
                text.and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                    .unwrap_or(serde_json::Value::Null)
            };
            let value = serde_json::json!({
                "id": row.id,
                "table": table.to_string(),
                "schema": MAIN_SCHEMA,
                "name": list_table,
                "operation": row.operation,
                "old": json(row.old),
                "new": json(row.new),
                "commit_time_ms": row.commit_ms,
            });
            records.push(SourceRecord {
                topic: parsed.topic.clone(),
                key: Some(table.to_string().into_bytes()),
                value: value.to_string().into_bytes(),
                headers: Vec::new(),
                timestamp_ms: Some(row.commit_ms),
                source_partition: source_partition(&table),
                source_offset: serde_json::json!({ "id": row.id }),
            });
        }
        // State changes only after the last await: a cancelled poll loses nothing.
        self.scanned = scanned;
        self.last = last;
        Ok(records)
    }
}

#[async_trait]
impl SourceTask for SqliteAuditTask {
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        let parsed = SqliteAuditConfig::parse(&ctx.connector, &config)?;
        self.connector = ctx.connector.clone();
        self.task = ctx.task;
        let mut last = HashMap::new();
        for table in &parsed.tables {
            let id = ctx
                .offset(&source_partition(&list_name(table)))
                .and_then(|o| o.get("id"))
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0);
            last.insert(table.to_ascii_lowercase(), id);
        }
        self.scanned = last.values().copied().min().unwrap_or(0);
        self.last = last;
        if !ctx.cleanup_only {
            let path = parsed.path.clone();
            let conn = blocking(move || open_existing(&path)).await?;
            self.conn = Some(Arc::new(Mutex::new(conn)));
        }
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
        // Dropping the last handle closes the connection (a cancelled worker may still
        // hold one briefly; it closes when that finishes).
        self.conn = None;
        if !connector_deleted {
            return Ok(());
        }
        let parsed = self.parsed.clone().ok_or(SqliteAuditError::NotStarted {
            call: "stop_with(true)",
        })?;
        if parsed.tables.is_empty() {
            return Ok(());
        }
        blocking(move || cleanup(&parsed.path, &parsed.names, Some(&parsed.tables), false)).await?;
        tracing::info!(connector = %self.connector, task = self.task, "sqlite-audit task dropped its triggers");
        Ok(())
    }
}
