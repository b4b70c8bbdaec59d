//! `sqlite-audit`: the KIP-883 example on a SQLite database file on the executor's host,
//! a backend of the audit core ([`crate::audit`], which holds the lifecycle, the records
//! and the ownership rules). The connector start creates (idempotently, in one
//! `BEGIN IMMEDIATE` transaction) an audit table and AFTER INSERT/UPDATE/DELETE triggers
//! on every watched table; tasks read the audit rows of their tables in id order.
//!
//! SQLite has no trigger functions: each watched table gets three triggers whose bodies
//! write the row as `json_object(...)` of its columns (BLOBs as hex). A connector start
//! re-creates a trigger whose text no longer matches (a column was added), and drops ours
//! on tables no longer watched.
//!
//! Ownership: SQLite has no comments, so the owner record of each audit table is a row of
//! the companion table `wharf_owners` (`object`, `owner` JSON), dropped with its last row.
//!
//! Busy database: SQLite allows one writer at a time. A statement waits up to
//! `busy.timeout.ms` for the lock; a `database is locked` after that is retried with
//! backoff ([`BUSY_RETRY_FIRST_MS`] doubling to [`BUSY_RETRY_MAX_MS`]) for up to
//! [`BUSY_RETRY_LIMIT_MS`] before the call fails, so another process holding the lock
//! for a while delays a task rather than failing it for good.
//!
//! Ordering: audit ids (the rowid, never reused because audit rows are never deleted) are
//! in commit order. Every SQLite call runs on the blocking pool (`spawn_blocking`).
//!
//! Records: as `postgres-audit` (source partition `{"table": "main.<name>"}`, offset
//! `{"id": n}`, value `{"id", "table", "schema", "name", "operation", "old", "new",
//! "commit_time_ms"}`), where the time is the statement's `julianday('now')` in Unix
//! milliseconds (SQLite keeps no commit time).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rusqlite::{Connection, ErrorCode, OpenFlags, TransactionBehavior};
use wharf_sdk::{
    ConfigDef, ConfigKey, ConfigMap, ConfigType, Connector, Importance, Locator, Plugin, Resource,
    ResourceKind, SourceTask, TaskFactory,
};

use crate::audit::{
    Adopt, AuditBackend, AuditConnector, AuditError, AuditRow, AuditTask, Claim, CleanupStep,
    Found, OwnerRecord, ProvisionStep, Scope, decide_cleanup, decide_provision, non_empty, number,
    required,
};
use crate::audit_names::{
    TableName, derived_name, parse_single_table, parse_table_list, quote_ident, quote_literal,
    stable_hash, validate_single_table, validate_table_list,
};

/// Name of the plugin, used as `connector.class`.
pub const PLUGIN_NAME: &str = "sqlite-audit";

/// Default of `busy.timeout.ms`: how long a statement waits for another writer's lock, in
/// milliseconds.
pub const DEFAULT_BUSY_TIMEOUT_MS: u64 = 5_000;

/// First wait before retrying a call that found the database locked, in milliseconds.
pub const BUSY_RETRY_FIRST_MS: u64 = 50;

/// Longest wait between two retries of a locked call, in milliseconds.
pub const BUSY_RETRY_MAX_MS: u64 = 2_000;

/// How long a call keeps retrying while the database stays locked, in milliseconds.
pub const BUSY_RETRY_LIMIT_MS: u64 = 60_000;

/// The only schema supported: triggers must live in the database of their table.
pub const MAIN_SCHEMA: &str = "main";

/// Companion table holding the owner record of each audit table.
pub const OWNERS_TABLE: &str = "wharf_owners";

/// Config keys.
pub mod keys {
    pub use crate::audit::keys::*;
    /// Path of the database file; it must exist.
    pub const DATABASE_PATH: &str = "database.path";
    /// How long a statement waits for another writer's lock, in milliseconds.
    pub const BUSY_TIMEOUT_MS: &str = "busy.timeout.ms";
}

/// Errors of the sqlite-audit plugin (the audit core's).
pub type SqliteAuditError = AuditError;

/// The sqlite-audit connector instance.
pub type SqliteAuditConnector = AuditConnector<Sqlite>;

/// A sqlite-audit task.
pub type SqliteAuditTask = AuditTask<Sqlite>;

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
        _ => Err("value is not a non-negative integer".to_owned()),
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
            ConfigKey::new(keys::AUDIT_TABLE, ConfigType::String, Importance::Medium, "Audit table. Default: wharf_audit_<connector>_<hash>, derived from the connector name. Immutable: the deletion's cleanup drops the table named here. A table claimed by another connector is refused.")
                .immutable()
                .validator(main_only_single),
        )
        .merged(&crate::audit::shared_config_def())
        .define(
            ConfigKey::new(keys::BUSY_TIMEOUT_MS, ConfigType::Long, Importance::Low, "How long one statement waits for another writer's lock, in milliseconds; after it the call is retried with backoff for up to a minute.")
                .default_value("5000")
                .validator(non_negative),
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

/// The SQLite backend: where the file is, what is watched, and a task's connection.
pub struct Sqlite {
    path: PathBuf,
    /// `main.<name>`, spelled as configured.
    tables: Vec<TableName>,
    names: Names,
    busy_timeout: Duration,
    /// Shared with the blocking worker so a cancelled poll does not lose it.
    conn: Option<Arc<Mutex<Connection>>>,
}

impl std::fmt::Debug for Sqlite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sqlite")
            .field("path", &self.path)
            .field("tables", &self.tables)
            .field("names", &self.names)
            .field("connected", &self.conn.is_some())
            .finish_non_exhaustive()
    }
}

/// `main.<name>` as a [`TableName`]: the source partition and list form.
fn list_name(table: &str) -> TableName {
    TableName {
        schema: Some(MAIN_SCHEMA.to_owned()),
        name: table.to_owned(),
    }
}

/// The error of a failed SQLite step: [`AuditError::Busy`] when the database was locked
/// (retried), otherwise what `kind` makes of it.
fn sql_error(
    step: &'static str,
    kind: fn(&'static str, String) -> AuditError,
) -> impl Fn(rusqlite::Error) -> AuditError {
    move |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => AuditError::Busy {
            step,
            detail: e.to_string(),
        },
        _ => kind(step, e.to_string()),
    }
}

fn provision_failed(step: &'static str, detail: String) -> AuditError {
    AuditError::ProvisionFailed { step, detail }
}

fn cleanup_failed(step: &'static str, detail: String) -> AuditError {
    AuditError::CleanupFailed { step, detail }
}

fn poll_failed(_step: &'static str, detail: String) -> AuditError {
    AuditError::PollFailed { detail }
}

/// Opens an existing database file (never creates one), `None` when the file is gone.
fn open(path: &Path, busy_timeout: Duration) -> Result<Option<Connection>, AuditError> {
    if !path.exists() {
        return Ok(None);
    }
    let open_err = |e: rusqlite::Error| AuditError::Connect {
        target: format!("sqlite database {}", path.display()),
        detail: e.to_string(),
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(open_err)?;
    conn.busy_timeout(busy_timeout).map_err(open_err)?;
    Ok(Some(conn))
}

fn open_existing(path: &Path, busy_timeout: Duration) -> Result<Connection, AuditError> {
    open(path, busy_timeout)?.ok_or_else(|| AuditError::Connect {
        target: format!("sqlite database {}", path.display()),
        detail: "file does not exist".to_owned(),
    })
}

/// The wait before retry number `attempt` (from 0): doubling from
/// [`BUSY_RETRY_FIRST_MS`], capped at [`BUSY_RETRY_MAX_MS`].
fn busy_backoff(attempt: u32) -> Duration {
    let ms = BUSY_RETRY_FIRST_MS.saturating_mul(1u64 << attempt.min(16));
    Duration::from_millis(ms.min(BUSY_RETRY_MAX_MS))
}

/// Runs blocking SQLite work on the blocking pool, again with backoff while it fails
/// with [`AuditError::Busy`], for up to [`BUSY_RETRY_LIMIT_MS`]. Cancel-safe: the waits
/// are async, and work that already started finishes on its own.
async fn blocking<T: Send + 'static>(
    work: impl Fn() -> Result<T, AuditError> + Clone + Send + 'static,
) -> Result<T, AuditError> {
    let began = Instant::now();
    let mut attempt = 0;
    loop {
        let once = work.clone();
        let result = tokio::task::spawn_blocking(once)
            .await
            .map_err(|e| AuditError::Worker {
                detail: e.to_string(),
            })?;
        match result {
            Err(AuditError::Busy { step, detail })
                if began.elapsed() < Duration::from_millis(BUSY_RETRY_LIMIT_MS) =>
            {
                tracing::debug!(
                    step,
                    detail,
                    attempt,
                    "sqlite-audit: database locked, retrying"
                );
                tokio::time::sleep(busy_backoff(attempt)).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Our triggers in the catalog: `(name, table, sql)`.
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

/// What the catalog holds at `table`: absent, a table without owner row, or ours.
fn found(conn: &Connection, table: &str) -> rusqlite::Result<Found> {
    if catalog_table(conn, table)?.is_none() {
        return Ok(Found::Absent);
    }
    if catalog_table(conn, OWNERS_TABLE)?.is_none() {
        return Ok(Found::Unowned);
    }
    let mut stmt = conn.prepare(&format!(
        "SELECT owner FROM {} WHERE object = ?1 COLLATE NOCASE",
        quote_ident(OWNERS_TABLE)
    ))?;
    let mut rows = stmt.query([table])?;
    Ok(match rows.next()? {
        Some(row) => match OwnerRecord::from_text(&row.get::<_, String>(0)?) {
            Some(owner) => Found::Owned(owner),
            None => Found::Unowned,
        },
        None => Found::Unowned,
    })
}

fn write_owner(conn: &Connection, table: &str, owner: &OwnerRecord) -> rusqlite::Result<()> {
    conn.execute_batch(&format!(
        "CREATE TABLE IF NOT EXISTS {} (object TEXT PRIMARY KEY COLLATE NOCASE, owner TEXT NOT NULL)",
        quote_ident(OWNERS_TABLE)
    ))?;
    conn.execute(
        &format!(
            "INSERT OR REPLACE INTO {} (object, owner) VALUES (?1, ?2)",
            quote_ident(OWNERS_TABLE)
        ),
        [table, owner.to_text().as_str()],
    )?;
    Ok(())
}

/// Drops `table` and its owner row when `claim` owns it; leaves anything else in place.
fn drop_audit_table_if_ours(conn: &Connection, table: &str, claim: &Claim) -> rusqlite::Result<()> {
    let found = found(conn, table)?;
    match decide_cleanup(&found, claim) {
        CleanupStep::DropAll => {
            conn.execute_batch(&format!("DROP TABLE IF EXISTS {}", quote_ident(table)))?;
            conn.execute(
                &format!(
                    "DELETE FROM {} WHERE object = ?1 COLLATE NOCASE",
                    quote_ident(OWNERS_TABLE)
                ),
                [table],
            )?;
            let left: i64 = conn.query_row(
                &format!("SELECT count(*) FROM {}", quote_ident(OWNERS_TABLE)),
                [],
                |r| r.get(0),
            )?;
            if left == 0 {
                conn.execute_batch(&format!("DROP TABLE {}", quote_ident(OWNERS_TABLE)))?;
            }
        }
        CleanupStep::DropCodeOnly | CleanupStep::Leave => {
            if found != Found::Absent {
                tracing::warn!(
                    table,
                    "sqlite-audit leaves the audit table in place: this connector incarnation does not own it"
                );
            }
        }
    }
    Ok(())
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

/// What provisioning works from: a copy of the backend's settings for the worker.
#[derive(Clone)]
struct Job {
    path: PathBuf,
    tables: Vec<TableName>,
    names: Names,
    busy_timeout: Duration,
}

/// Provisioning at connector start: ownership, audit table, triggers, reconcile. One
/// transaction. Returns the owner record's `start_after`.
fn provision(job: &Job, claim: &Claim, adopt: Adopt) -> Result<i64, AuditError> {
    let mut conn = open_existing(&job.path, job.busy_timeout)?;
    let n = &job.names;
    let fail = |step: &'static str| sql_error(step, provision_failed);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail("beginning the transaction"))?;
    let existing = found(&tx, &n.audit_table).map_err(fail("reading the audit table's owner"))?;
    let start_after = match decide_provision(&existing, claim, adopt) {
        ProvisionStep::Refuse(why) => return Err(why.into_error(&list_name(&n.audit_table))),
        ProvisionStep::Create(owner) => {
            tx.execute_batch(&format!(
                "CREATE TABLE {} (id INTEGER PRIMARY KEY, table_name TEXT NOT NULL, \
                 operation TEXT NOT NULL, old_row TEXT, new_row TEXT, \
                 commit_time_ms INTEGER NOT NULL)",
                quote_ident(&n.audit_table)
            ))
            .map_err(fail("creating the audit table"))?;
            write_owner(&tx, &n.audit_table, &owner).map_err(fail("recording the owner"))?;
            owner.start_after
        }
        ProvisionStep::Reuse { start_after } => start_after,
        ProvisionStep::Adopt { from_end } => {
            let start_after = if from_end {
                tx.query_row(
                    &format!(
                        "SELECT coalesce(max(id), 0) FROM {}",
                        quote_ident(&n.audit_table)
                    ),
                    [],
                    |r| r.get(0),
                )
                .map_err(fail("reading the highest audit id"))?
            } else {
                0
            };
            write_owner(&tx, &n.audit_table, &claim.record(start_after))
                .map_err(fail("recording the owner"))?;
            tracing::info!(table = %n.audit_table, from_end, start_after, "sqlite-audit adopted a kept audit table");
            start_after
        }
    };

    let mut desired: HashMap<String, String> = HashMap::new();
    for list_table in &job.tables {
        let Some(table) =
            catalog_table(&tx, &list_table.name).map_err(fail("looking up a watched table"))?
        else {
            return Err(AuditError::TableMissing {
                table: list_table.to_string(),
            });
        };
        let cols = columns(&tx, &table).map_err(fail("reading a watched table's columns"))?;
        for op in ['i', 'u', 'd'] {
            desired.insert(
                n.trigger(&table, op),
                trigger_sql(n, &list_table.name, &table, &cols, op),
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
        drop_audit_table_if_ours(&tx, table, claim)
            .map_err(fail("dropping the audit table of an earlier audit.table"))?;
    }
    tx.commit().map_err(fail("committing the transaction"))?;
    Ok(start_after)
}

/// Drops our triggers in `only` (all when `None`), and with `everything` the audit
/// tables, as far as [`decide_cleanup`] allows.
fn cleanup(
    job: &Job,
    claim: &Claim,
    only: Option<&[TableName]>,
    everything: bool,
) -> Result<(), AuditError> {
    let Some(mut conn) = open(&job.path, job.busy_timeout)? else {
        tracing::info!(path = %job.path.display(), "sqlite-audit cleanup: database file is gone, nothing to drop");
        return Ok(());
    };
    let names = &job.names;
    let fail = |step: &'static str| sql_error(step, cleanup_failed);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(fail("beginning the transaction"))?;
    let existing =
        found(&tx, &names.audit_table).map_err(fail("reading the audit table's owner"))?;
    match decide_cleanup(&existing, claim) {
        CleanupStep::Leave => {
            tracing::warn!(
                connector = %claim.connector,
                table = %names.audit_table,
                "sqlite-audit cleanup drops nothing: another incarnation of this connector owns the audit table"
            );
            return Ok(());
        }
        CleanupStep::DropAll | CleanupStep::DropCodeOnly => {}
    }
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
                t.name.eq_ignore_ascii_case(&table)
                    || ['i', 'u', 'd']
                        .iter()
                        .any(|op| names.trigger(&t.name, *op) == name)
            })
        });
        if selected {
            tx.execute_batch(&format!("DROP TRIGGER IF EXISTS {}", quote_ident(&name)))
                .map_err(fail("dropping a trigger"))?;
        }
    }
    if everything {
        for table in &audit_tables {
            drop_audit_table_if_ours(&tx, table, claim)
                .map_err(fail("dropping the audit table"))?;
        }
    }
    tx.commit().map_err(fail("committing the transaction"))?;
    Ok(())
}

fn read_rows(
    conn: &Connection,
    audit_table: &str,
    tables: &[TableName],
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
        params.push(&t.name);
    }
    let rows = stmt.query_map(params.as_slice(), |r| {
        let table: String = r.get(1)?;
        Ok(AuditRow {
            id: r.get(0)?,
            // Partition by the configured spelling of the name.
            table: tables
                .iter()
                .find(|t| t.name.eq_ignore_ascii_case(&table))
                .cloned()
                .unwrap_or_else(|| list_name(&table)),
            operation: r.get(2)?,
            old: r.get(3)?,
            new: r.get(4)?,
            commit_ms: r.get(5)?,
            commit_time: None,
        })
    })?;
    rows.collect()
}

impl Sqlite {
    /// Where its objects live, for the resource ledger: the database file's path.
    fn locator(&self) -> Locator {
        Locator::default().path(self.path.display().to_string())
    }

    fn job(&self) -> Job {
        Job {
            path: self.path.clone(),
            tables: self.tables.clone(),
            names: self.names.clone(),
            busy_timeout: self.busy_timeout,
        }
    }
}

#[async_trait]
impl AuditBackend for Sqlite {
    const PLUGIN: &'static str = PLUGIN_NAME;

    fn parse(connector: &str, config: &ConfigMap) -> Result<Self, AuditError> {
        let raw_tables = config.get(keys::TABLES).map(String::as_str).unwrap_or("");
        main_only_list(raw_tables).map_err(|reason| AuditError::InvalidConfig {
            key: keys::TABLES,
            reason,
        })?;
        let mut tables: Vec<TableName> = Vec::new();
        for t in parse_table_list(raw_tables).unwrap_or_default() {
            if !tables.iter().any(|k| k.name.eq_ignore_ascii_case(&t.name)) {
                tables.push(list_name(&t.name));
            }
        }
        let audit_table = match config.get(keys::AUDIT_TABLE).map(|v| v.trim()) {
            Some(v) if !v.is_empty() => {
                main_only_single(v).map_err(|reason| AuditError::InvalidConfig {
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
            .any(|t| t.name.eq_ignore_ascii_case(&names.audit_table))
        {
            return Err(AuditError::InvalidConfig {
                key: keys::TABLES,
                reason: format!("the audit table {} cannot be watched", names.audit_table),
            });
        }
        if names.audit_table.eq_ignore_ascii_case(OWNERS_TABLE) {
            return Err(AuditError::InvalidConfig {
                key: keys::AUDIT_TABLE,
                reason: format!("{OWNERS_TABLE} is reserved for owner records"),
            });
        }
        Ok(Self {
            path: PathBuf::from(required(config, keys::DATABASE_PATH)?),
            tables,
            names,
            busy_timeout: Duration::from_millis(number(
                config,
                keys::BUSY_TIMEOUT_MS,
                "5000",
                non_negative,
            )?),
            conn: None,
        })
    }

    fn tables(&self) -> &[TableName] {
        &self.tables
    }

    fn ledger(&self) -> Vec<Resource> {
        let at = self.locator();
        let n = &self.names;
        let mut out = vec![
            Resource::created(ResourceKind::Table, n.audit_table.clone(), at.clone()),
            // Shared by every audit connector of the file and dropped with its last
            // row: used, never owned.
            Resource::adopted(ResourceKind::Table, OWNERS_TABLE, at.clone()),
        ];
        for t in &self.tables {
            out.push(Resource::adopted(
                ResourceKind::Table,
                t.name.clone(),
                at.clone(),
            ));
            for op in ['i', 'u', 'd'] {
                out.push(Resource::created(
                    ResourceKind::Trigger,
                    n.trigger(&t.name, op),
                    at.clone(),
                ));
            }
        }
        out
    }

    fn declared(&self, config: &ConfigMap) -> Vec<Resource> {
        let configured = config
            .get(keys::AUDIT_TABLE)
            .is_some_and(|v| !v.trim().is_empty());
        self.ledger()
            .into_iter()
            .take(usize::from(configured))
            .collect()
    }

    async fn still_there(&self, resources: &[Resource]) -> Result<Option<Vec<bool>>, AuditError> {
        let (path, busy) = (self.path.clone(), self.busy_timeout);
        let wanted: Vec<(String, &'static str)> = resources
            .iter()
            .map(|r| {
                let ty = match r.kind {
                    ResourceKind::Trigger => "trigger",
                    _ => "table",
                };
                (r.name.clone(), ty)
            })
            .collect();
        blocking(move || {
            let Some(conn) = open(&path, busy)? else {
                return Ok(None);
            };
            let fail = |step: &'static str| sql_error(step, cleanup_failed);
            let mut there = Vec::with_capacity(wanted.len());
            for (name, ty) in &wanted {
                let n: i64 = conn
                    .query_row(
                        "SELECT count(*) FROM sqlite_master WHERE type = ?1 AND name = ?2 COLLATE NOCASE",
                        rusqlite::params![ty, name],
                        |r| r.get(0),
                    )
                    .map_err(fail("looking up what the cleanup left"))?;
                there.push(n > 0);
            }
            Ok(Some(there))
        })
        .await
    }

    async fn provision(&self, claim: &Claim, adopt: Adopt) -> Result<i64, AuditError> {
        let (job, claim) = (self.job(), claim.clone());
        blocking(move || provision(&job, &claim, adopt)).await
    }

    async fn cleanup(&self, claim: &Claim, scope: Scope<'_>) -> Result<(), AuditError> {
        let (job, claim) = (self.job(), claim.clone());
        let (only, everything) = match scope {
            Scope::Tables(t) => (Some(t.to_vec()), false),
            Scope::Everything => (None, true),
        };
        blocking(move || cleanup(&job, &claim, only.as_deref(), everything)).await
    }

    async fn open(&mut self) -> Result<(), AuditError> {
        let (path, busy) = (self.path.clone(), self.busy_timeout);
        let conn = blocking(move || open_existing(&path, busy)).await?;
        self.conn = Some(Arc::new(Mutex::new(conn)));
        Ok(())
    }

    async fn read_rows(&mut self, after: i64, limit: i64) -> Result<Vec<AuditRow>, AuditError> {
        if self.conn.is_none() {
            self.open().await?;
        }
        let conn = self
            .conn
            .clone()
            .ok_or(AuditError::NotStarted { call: "poll" })?;
        let (audit, tables) = (self.names.audit_table.clone(), self.tables.clone());
        blocking(move || {
            let guard = conn.lock().map_err(|_| AuditError::PollFailed {
                detail: "connection lock poisoned".to_owned(),
            })?;
            read_rows(&guard, &audit, &tables, after, limit)
                .map_err(sql_error("reading the audit table", poll_failed))
        })
        .await
    }

    fn close(&mut self) {
        // Dropping the last handle closes the connection (a cancelled worker may still
        // hold one briefly; it closes when that finishes).
        self.conn = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_backoff_doubles_from_the_first_wait_up_to_the_cap() {
        assert_eq!(busy_backoff(0), Duration::from_millis(BUSY_RETRY_FIRST_MS));
        assert_eq!(
            busy_backoff(1),
            Duration::from_millis(2 * BUSY_RETRY_FIRST_MS)
        );
        assert_eq!(busy_backoff(30), Duration::from_millis(BUSY_RETRY_MAX_MS));
    }
}
