//! `postgres-audit`: the source connector of KIP-883's own example. On start the connector
//! provisions, in one transaction and idempotently, an audit table, a trigger function and
//! an `AFTER INSERT OR UPDATE OR DELETE ... FOR EACH ROW` trigger on every watched table;
//! its tasks read the audit rows of their tables in id order, one record per change.
//!
//! Lifecycle (KIP-883/KIP-901):
//! - `stop_with(false)` (restart, pause, STOPPED, reconfiguration, shutdown) only closes
//!   connections: every database object stays.
//! - a task's `stop_with(true)` drops the triggers on that task's tables;
//! - the connector's `stop_with(true)` drops the triggers still there, the trigger
//!   function and the audit table.
//! - Cleanup is idempotent and tolerates objects already dropped by hand or a start that
//!   never ran; a cleanup-only start provisions nothing.
//! - A connector start with a changed `tables` reconciles the triggers against the
//!   catalog: triggers on tables no longer listed are dropped, new ones created.
//!
//! Ordering: the trigger function takes a per-connector transaction-scoped advisory lock
//! before it takes an audit id, so audited writes commit one at a time per connector and
//! the audit id order is the commit order. A task that resumes after id `n` can therefore
//! never skip a row committed later with a smaller id. The price is that audited writes
//! to the watched tables of one connector are serialized.
//!
//! Records: one per audit row, on `topic`, key = the table in list form, source
//! partition `{"table": "<schema.table>"}`, source offset `{"id": <audit id>}`, value a
//! JSON object `{"id", "table", "schema", "name", "operation": "INSERT"|"UPDATE"|"DELETE",
//! "old": row|null, "new": row|null, "commit_time": RFC 3339 UTC, "commit_time_ms"}` where
//! rows are `to_jsonb` of the table row and the time is the writing transaction's
//! timestamp (`now()`: its start, the closest to a commit time PostgreSQL keeps without
//! `track_commit_timestamp`). A task started with offsets resumes after them, per table.
//!
//! TLS: only `connection.sslmode=disable` is supported for now (no TLS stack is linked).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, NoTls};
use wharf::sdk::{
    ConfigDef, ConfigKey, ConfigMap, ConfigType, Connector, ConnectorContext, Importance, Plugin,
    PluginResult, SourceRecord, SourceTask, TaskContext, TaskFactory,
};

use crate::audit_names::{
    TableName, derived_name, format_table_list, parse_single_table, parse_table_list, quote_ident,
    source_partition, split_tables, stable_hash, validate_single_table, validate_table_list,
};

/// Name of the plugin, used as `connector.class`.
pub const PLUGIN_NAME: &str = "postgres-audit";

/// Longest wait for a TCP connection and the startup handshake, in seconds.
pub const CONNECT_TIMEOUT_SECS: u64 = 10;

/// Schema used for a table listed without one.
pub const DEFAULT_SCHEMA: &str = "public";

/// Config keys.
pub mod keys {
    /// Server host name or IP address.
    pub const HOST: &str = "connection.host";
    /// Server port.
    pub const PORT: &str = "connection.port";
    /// Role to connect as.
    pub const USER: &str = "connection.user";
    /// Password of that role (secret).
    pub const PASSWORD: &str = "connection.password";
    /// Database name.
    pub const DATABASE: &str = "connection.database";
    /// TLS mode; only `disable`.
    pub const SSLMODE: &str = "connection.sslmode";
    /// Watched tables, comma-separated, schema-qualified.
    pub const TABLES: &str = "tables";
    /// Audit table name, optionally schema-qualified.
    pub const AUDIT_TABLE: &str = "audit.table";
    /// Topic the records go to.
    pub const TOPIC: &str = "topic";
    /// Wait between two polls that found nothing, in milliseconds.
    pub const POLL_INTERVAL_MS: &str = "poll.interval.ms";
    /// Most records returned by one poll.
    pub const BATCH_SIZE: &str = "batch.size";
}

/// Errors of the postgres-audit plugin. Messages never hold the password.
#[derive(Debug, thiserror::Error)]
pub enum PgAuditError {
    /// A config value is missing or wrong.
    #[error("invalid config {key}: {reason}")]
    InvalidConfig {
        /// Offending key.
        key: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Could not connect.
    #[error("cannot connect to postgresql://{user}@{host}:{port}/{database}: {detail}")]
    Connect {
        /// Host.
        host: String,
        /// Port.
        port: u16,
        /// Role.
        user: String,
        /// Database.
        database: String,
        /// Server or network error text.
        detail: String,
    },
    /// A watched table does not exist (or is not an ordinary table).
    #[error("watched table {table} does not exist or is not an ordinary table")]
    TableMissing {
        /// The table, in list form.
        table: String,
    },
    /// `audit.table` names a table this connector did not create.
    #[error("audit table {table} exists but was not created by this connector")]
    AuditTableNotOurs {
        /// The table, in list form.
        table: String,
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
    /// A call came before a successful start.
    #[error("{call} called before a successful start")]
    NotStarted {
        /// The call.
        call: &'static str,
    },
}

/// Text of a driver error, with the server's message and detail when there is one
/// (the driver's own Display says only "db error").
fn pg_detail(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(d) => format!("{} ({}): {d}", db.message(), db.code().code()),
            None => format!("{} ({})", db.message(), db.code().code()),
        },
        None => e.to_string(),
    }
}

/// The plugin: name, version, config keys and factories.
pub fn plugin() -> Plugin {
    Plugin {
        name: PLUGIN_NAME.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        config_def: config_def(),
        connector: Arc::new(|| Box::new(PgAuditConnector::default()) as Box<dyn Connector>),
        task: TaskFactory::Source(Arc::new(|| {
            Box::new(PgAuditTask::default()) as Box<dyn SourceTask>
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

fn port(value: &str) -> Result<(), String> {
    match value.trim().parse::<u16>() {
        Ok(n) if n > 0 => Ok(()),
        _ => Err(format!("value {value:?} is not a TCP port (1-65535)")),
    }
}

fn non_empty(value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        Err("value must not be empty".to_owned())
    } else {
        Ok(())
    }
}

/// The plugin's config keys.
pub fn config_def() -> ConfigDef {
    ConfigDef::new()
        .define(
            ConfigKey::new(keys::HOST, ConfigType::String, Importance::High, "PostgreSQL server host name or IP address. Immutable (the audit objects live there): delete the connector and create it again to move.")
                .default_value("127.0.0.1")
                .immutable()
                .validator(non_empty),
        )
        .define(
            ConfigKey::new(keys::PORT, ConfigType::Int, Importance::Medium, "PostgreSQL server TCP port. Immutable, as connection.host.")
                .default_value("5432")
                .immutable()
                .validator(port),
        )
        .define(
            ConfigKey::new(keys::USER, ConfigType::String, Importance::High, "Role to connect as; needs to create tables, functions and triggers on the watched tables.")
                .required()
                .validator(non_empty),
        )
        .define(
            ConfigKey::new(keys::PASSWORD, ConfigType::Password, Importance::High, "Password of that role; empty for trust or peer authentication. Never shown.")
                .default_value(""),
        )
        .define(
            ConfigKey::new(keys::DATABASE, ConfigType::String, Importance::High, "Database holding the watched tables and the audit table. Immutable, as connection.host.")
                .required()
                .immutable()
                .validator(non_empty),
        )
        .define(
            ConfigKey::new(keys::SSLMODE, ConfigType::String, Importance::Medium, "TLS mode; only disable is supported.")
                .default_value("disable")
                .one_of(&["disable"]),
        )
        .define(
            ConfigKey::new(keys::TABLES, ConfigType::List, Importance::High, "Tables to watch, comma-separated, each schema.table (schema public when omitted). Names are taken literally (no case folding); write a part in double quotes when it holds a dot, a comma or a quote (\"\" for a quote). Empty: no tables, no tasks.")
                .default_value("")
                .validator(validate_table_list),
        )
        .define(
            ConfigKey::new(keys::AUDIT_TABLE, ConfigType::String, Importance::Medium, "Audit table, optionally schema-qualified (schema must exist). Default: public.wharf_audit_<connector>_<hash>, derived from the connector name. The trigger function lives in the same schema. Immutable: the deletion's cleanup drops the table and function named here.")
                .immutable()
                .validator(validate_single_table),
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

/// A password that never shows in Debug output.
#[derive(Clone, Default)]
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(wharf::sdk::REDACTED)
    }
}

/// The parsed config, with table names schema-qualified.
#[derive(Debug, Clone)]
struct PgAuditConfig {
    host: String,
    port: u16,
    user: String,
    password: Secret,
    database: String,
    tables: Vec<TableName>,
    topic: String,
    poll_interval: Duration,
    batch_size: i64,
    names: Names,
}

/// Names of everything a connector provisions, all derived from the connector name
/// (and `audit.table` when set), so that two connectors never collide.
#[derive(Debug, Clone)]
struct Names {
    audit_table: TableName,
    function: TableName,
    trigger: String,
    /// Advisory lock serializing provisioning and cleanup of this connector.
    provision_lock: i64,
    /// Advisory lock taken by the trigger function: audit ids in commit order.
    order_lock: i64,
    /// Comment put on the audit table: proves we created it.
    marker: String,
}

impl Names {
    fn derive(connector: &str, audit_table: Option<TableName>) -> Names {
        let audit_table = audit_table
            .unwrap_or_else(|| TableName {
                schema: None,
                name: derived_name("wharf_audit", connector),
            })
            .qualified(DEFAULT_SCHEMA);
        let function = TableName {
            schema: audit_table.schema.clone(),
            name: derived_name("wharf_audit_fn", connector),
        };
        let hash = stable_hash(connector);
        Names {
            audit_table,
            function,
            trigger: derived_name("wharf_audit_trg", connector),
            provision_lock: stable_hash(&format!("wharf-postgres-audit-provision:{connector}"))
                as i64,
            order_lock: stable_hash(&format!("wharf-postgres-audit-order:{connector}")) as i64,
            marker: format!("wharf postgres-audit table of connector {hash:016x}"),
        }
    }
}

fn get<'a>(config: &'a ConfigMap, key: &'static str, default: &'a str) -> &'a str {
    config.get(key).map(String::as_str).unwrap_or(default)
}

fn required(config: &ConfigMap, key: &'static str) -> Result<String, PgAuditError> {
    match config.get(key).map(|v| v.trim()) {
        Some(v) if !v.is_empty() => Ok(v.to_owned()),
        _ => Err(PgAuditError::InvalidConfig {
            key,
            reason: "missing required value".to_owned(),
        }),
    }
}

fn number<T: std::str::FromStr>(
    config: &ConfigMap,
    key: &'static str,
    default: &str,
    check: fn(&str) -> Result<(), String>,
) -> Result<T, PgAuditError> {
    let raw = get(config, key, default);
    let invalid = |reason: String| PgAuditError::InvalidConfig { key, reason };
    check(raw).map_err(invalid)?;
    raw.trim()
        .parse::<T>()
        .map_err(|_| invalid(format!("value {raw:?} is out of range")))
}

impl PgAuditConfig {
    fn parse(connector: &str, config: &ConfigMap) -> Result<Self, PgAuditError> {
        let sslmode = get(config, keys::SSLMODE, "disable");
        if sslmode != "disable" {
            return Err(PgAuditError::InvalidConfig {
                key: keys::SSLMODE,
                reason: format!("value {sslmode:?} is not supported (only disable)"),
            });
        }
        let tables = parse_table_list(get(config, keys::TABLES, ""))
            .map_err(|reason| PgAuditError::InvalidConfig {
                key: keys::TABLES,
                reason,
            })?
            .into_iter()
            .map(|t| t.qualified(DEFAULT_SCHEMA))
            .collect::<Vec<_>>();
        let mut unique = Vec::new();
        for t in tables {
            if !unique.contains(&t) {
                unique.push(t);
            }
        }
        let audit_table = match config.get(keys::AUDIT_TABLE).map(|v| v.trim()) {
            Some(v) if !v.is_empty() => {
                Some(
                    parse_single_table(v).map_err(|reason| PgAuditError::InvalidConfig {
                        key: keys::AUDIT_TABLE,
                        reason,
                    })?,
                )
            }
            _ => None,
        };
        let names = Names::derive(connector, audit_table);
        if unique.contains(&names.audit_table) {
            return Err(PgAuditError::InvalidConfig {
                key: keys::TABLES,
                reason: format!("the audit table {} cannot be watched", names.audit_table),
            });
        }
        Ok(Self {
            host: get(config, keys::HOST, "127.0.0.1").trim().to_owned(),
            port: number(config, keys::PORT, "5432", port)?,
            user: required(config, keys::USER)?,
            password: Secret(get(config, keys::PASSWORD, "").to_owned()),
            database: required(config, keys::DATABASE)?,
            tables: unique,
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

    async fn connect(&self) -> Result<Client, PgAuditError> {
        let mut pg = tokio_postgres::Config::new();
        pg.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.database)
            .ssl_mode(SslMode::Disable)
            .connect_timeout(Duration::from_secs(CONNECT_TIMEOUT_SECS))
            .application_name("wharf-postgres-audit");
        if !self.password.0.is_empty() {
            pg.password(&self.password.0);
        }
        let (client, connection) = pg.connect(NoTls).await.map_err(|e| PgAuditError::Connect {
            host: self.host.clone(),
            port: self.port,
            user: self.user.clone(),
            database: self.database.clone(),
            detail: pg_detail(&e),
        })?;
        // The connection ends when the client is dropped; an error only needs a log line.
        wharf::task::spawn(
            wharf::task::TaskKind::Detached,
            "postgres-audit connection",
            async move {
                if let Err(e) = connection.await {
                    tracing::warn!(error = %e, "postgres-audit connection ended with an error");
                }
            },
        );
        Ok(client)
    }
}

/// Doubles `'` and, when the text holds a backslash, uses the `E''` form with `\`
/// doubled too, so the literal is right whatever `standard_conforming_strings` says.
fn pg_literal(text: &str) -> String {
    if text.contains('\\') {
        format!("E'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
    } else {
        format!("'{}'", text.replace('\'', "''"))
    }
}

/// One of our triggers as found in the catalog.
struct FoundTrigger {
    table: TableName,
    name: String,
    /// Schema of the function it calls.
    function_schema: String,
}

/// Triggers on any table that call a function of ours, in any schema (the function
/// follows the audit table's schema, which a config update may change).
async fn our_triggers(
    tx: &tokio_postgres::Transaction<'_>,
    names: &Names,
) -> Result<Vec<FoundTrigger>, tokio_postgres::Error> {
    let rows = tx
        .query(
            "SELECT tn.nspname, c.relname, t.tgname, pn.nspname
               FROM pg_trigger t
               JOIN pg_class c ON c.oid = t.tgrelid
               JOIN pg_namespace tn ON tn.oid = c.relnamespace
               JOIN pg_proc p ON p.oid = t.tgfoid
               JOIN pg_namespace pn ON pn.oid = p.pronamespace
              WHERE p.proname = $1 AND p.pronargs = 0
              ORDER BY 1, 2, 3",
            &[&names.function.name],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| FoundTrigger {
            table: TableName {
                schema: Some(r.get(0)),
                name: r.get(1),
            },
            name: r.get(2),
            function_schema: r.get(3),
        })
        .collect())
}

/// Our trigger functions, in any schema: `(function, audit table it wrote to as its
/// comment says)`.
async fn our_functions(
    tx: &tokio_postgres::Transaction<'_>,
    names: &Names,
) -> Result<Vec<(TableName, Option<TableName>)>, tokio_postgres::Error> {
    let rows = tx
        .query(
            "SELECT n.nspname, obj_description(p.oid, 'pg_proc')
               FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE p.proname = $1 AND p.pronargs = 0
              ORDER BY 1",
            &[&names.function.name],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| {
            let function = TableName {
                schema: Some(r.get(0)),
                name: names.function.name.clone(),
            };
            let comment: Option<String> = r.get(1);
            let audit = comment
                .and_then(|c| serde_json::from_str::<serde_json::Value>(&c).ok())
                .and_then(|v| {
                    Some(TableName {
                        schema: Some(v["audit_schema"].as_str()?.to_owned()),
                        name: v["audit_table"].as_str()?.to_owned(),
                    })
                });
            (function, audit)
        })
        .collect())
}

/// The comment put on the trigger function: which audit table it writes to, so that a
/// later start or cleanup finds a table left behind by a changed `audit.table`.
fn function_comment(names: &Names) -> String {
    serde_json::json!({
        "wharf": "postgres-audit",
        "audit_schema": names.audit_table.schema.as_deref().unwrap_or(DEFAULT_SCHEMA),
        "audit_table": names.audit_table.name,
    })
    .to_string()
}

/// Drops `table` when its comment is our marker; leaves anything else in place.
async fn drop_audit_table_if_ours(
    tx: &tokio_postgres::Transaction<'_>,
    table: &TableName,
    marker: &str,
) -> Result<(), tokio_postgres::Error> {
    let schema = table.schema.as_deref().unwrap_or(DEFAULT_SCHEMA);
    let existing = tx
        .query_opt(
            "SELECT obj_description(c.oid, 'pg_class')
               FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
              WHERE ns.nspname = $1 AND c.relname = $2",
            &[&schema, &table.name],
        )
        .await?;
    if let Some(row) = existing {
        let comment: Option<String> = row.get(0);
        if comment.as_deref() == Some(marker) {
            tx.batch_execute(&format!("DROP TABLE IF EXISTS {}", table.quoted()))
                .await?;
        } else {
            tracing::warn!(
                table = %table,
                "postgres-audit leaves the audit table in place: it was not created by this connector"
            );
        }
    }
    Ok(())
}

async fn drop_triggers(
    tx: &tokio_postgres::Transaction<'_>,
    triggers: &[FoundTrigger],
) -> Result<(), tokio_postgres::Error> {
    for t in triggers {
        tx.batch_execute(&format!(
            "DROP TRIGGER IF EXISTS {} ON {}",
            quote_ident(&t.name),
            t.table.quoted()
        ))
        .await?;
    }
    Ok(())
}

/// Creates (idempotently) the audit table, the function and the triggers of `cfg`, and
/// drops our triggers on tables no longer listed. One transaction.
async fn provision(client: &mut Client, cfg: &PgAuditConfig) -> Result<(), PgAuditError> {
    let n = &cfg.names;
    let fail = |step: &'static str| {
        move |e: tokio_postgres::Error| PgAuditError::ProvisionFailed {
            step,
            detail: pg_detail(&e),
        }
    };
    let tx = client
        .transaction()
        .await
        .map_err(fail("beginning the transaction"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&n.provision_lock])
        .await
        .map_err(fail("taking the provisioning lock"))?;

    // Refuse to adopt a table somebody else made: cleanup would drop it.
    let audit_schema = n.audit_table.schema.as_deref().unwrap_or(DEFAULT_SCHEMA);
    let existing = tx
        .query_opt(
            "SELECT obj_description(c.oid, 'pg_class')
               FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
              WHERE ns.nspname = $1 AND c.relname = $2",
            &[&audit_schema, &n.audit_table.name],
        )
        .await
        .map_err(fail("looking up the audit table"))?;
    if let Some(row) = existing {
        let comment: Option<String> = row.get(0);
        if comment.as_deref() != Some(n.marker.as_str()) {
            return Err(PgAuditError::AuditTableNotOurs {
                table: n.audit_table.to_string(),
            });
        }
    }
    let audit = n.audit_table.quoted();
    tx.batch_execute(&format!(
        "CREATE TABLE IF NOT EXISTS {audit} (
             id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             table_schema text NOT NULL,
             table_name text NOT NULL,
             operation text NOT NULL,
             old_row jsonb,
             new_row jsonb,
             tx_time timestamptz NOT NULL DEFAULT now());
         COMMENT ON TABLE {audit} IS {marker};",
        marker = pg_literal(&n.marker)
    ))
    .await
    .map_err(fail("creating the audit table"))?;

    let body = format!(
        "BEGIN
           PERFORM pg_catalog.pg_advisory_xact_lock({lock});
           INSERT INTO {audit} (table_schema, table_name, operation, old_row, new_row)
           VALUES (TG_TABLE_SCHEMA, TG_TABLE_NAME, TG_OP,
                   CASE WHEN TG_OP <> 'INSERT' THEN pg_catalog.to_jsonb(OLD) END,
                   CASE WHEN TG_OP <> 'DELETE' THEN pg_catalog.to_jsonb(NEW) END);
           RETURN NULL;
         END",
        lock = n.order_lock
    );
    let previous = our_functions(&tx, n)
        .await
        .map_err(fail("listing the trigger functions"))?;
    tx.batch_execute(&format!(
        "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger
           LANGUAGE plpgsql SET search_path = pg_catalog AS {body};
         COMMENT ON FUNCTION {function}() IS {comment};",
        function = n.function.quoted(),
        body = pg_literal(&body),
        comment = pg_literal(&function_comment(n))
    ))
    .await
    .map_err(fail("creating the trigger function"))?;

    let present = our_triggers(&tx, n)
        .await
        .map_err(fail("listing the triggers"))?;
    let stale: Vec<FoundTrigger> = present
        .into_iter()
        .filter(|t| {
            !cfg.tables.contains(&t.table)
                || t.name != n.trigger
                || Some(t.function_schema.as_str()) != n.function.schema.as_deref()
        })
        .collect();
    drop_triggers(&tx, &stale)
        .await
        .map_err(fail("dropping triggers of tables no longer watched"))?;
    // What an earlier audit.table left: its function (elsewhere) and its audit table.
    for (function, audit) in previous {
        if function != n.function {
            tx.batch_execute(&format!("DROP FUNCTION IF EXISTS {}()", function.quoted()))
                .await
                .map_err(fail(
                    "dropping a trigger function of an earlier audit.table",
                ))?;
        }
        if let Some(audit) = audit.filter(|a| *a != n.audit_table) {
            drop_audit_table_if_ours(&tx, &audit, &n.marker)
                .await
                .map_err(fail("dropping the audit table of an earlier audit.table"))?;
        }
    }

    for table in &cfg.tables {
        let schema = table.schema.as_deref().unwrap_or(DEFAULT_SCHEMA);
        let found = tx
            .query_opt(
                "SELECT c.oid,
                        EXISTS (SELECT 1 FROM pg_trigger t
                                 WHERE t.tgrelid = c.oid AND t.tgname = $3)
                   FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
                  WHERE ns.nspname = $1 AND c.relname = $2 AND c.relkind = 'r'",
                &[&schema, &table.name, &n.trigger],
            )
            .await
            .map_err(fail("looking up a watched table"))?;
        let Some(row) = found else {
            return Err(PgAuditError::TableMissing {
                table: table.to_string(),
            });
        };
        let has_trigger: bool = row.get(1);
        if !has_trigger {
            tx.batch_execute(&format!(
                "CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE OR DELETE ON {table}
                   FOR EACH ROW EXECUTE FUNCTION {function}()",
                trigger = quote_ident(&n.trigger),
                table = table.quoted(),
                function = n.function.quoted()
            ))
            .await
            .map_err(fail("creating a trigger"))?;
        }
    }
    tx.commit()
        .await
        .map_err(fail("committing the transaction"))?;
    Ok(())
}

/// Drops our triggers on `only` (all tables when `None`), and with `everything` also the
/// function and the audit table (when it carries our marker). One transaction; objects
/// already gone are skipped.
async fn cleanup(
    client: &mut Client,
    names: &Names,
    only: Option<&[TableName]>,
    everything: bool,
) -> Result<(), PgAuditError> {
    let fail = |step: &'static str| {
        move |e: tokio_postgres::Error| PgAuditError::CleanupFailed {
            step,
            detail: pg_detail(&e),
        }
    };
    let tx = client
        .transaction()
        .await
        .map_err(fail("beginning the transaction"))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&names.provision_lock])
        .await
        .map_err(fail("taking the provisioning lock"))?;
    let triggers: Vec<FoundTrigger> = our_triggers(&tx, names)
        .await
        .map_err(fail("listing the triggers"))?
        .into_iter()
        .filter(|t| only.is_none_or(|tables| tables.contains(&t.table)))
        .collect();
    drop_triggers(&tx, &triggers)
        .await
        .map_err(fail("dropping triggers"))?;
    if everything {
        let functions = our_functions(&tx, names)
            .await
            .map_err(fail("listing the trigger functions"))?;
        let mut audit_tables = vec![names.audit_table.clone()];
        for (function, audit) in functions {
            tx.batch_execute(&format!("DROP FUNCTION IF EXISTS {}()", function.quoted()))
                .await
                .map_err(fail("dropping the trigger function"))?;
            if let Some(a) = audit.filter(|a| !audit_tables.contains(a)) {
                audit_tables.push(a);
            }
        }
        for table in &audit_tables {
            drop_audit_table_if_ours(&tx, table, &names.marker)
                .await
                .map_err(fail("dropping the audit table"))?;
        }
    }
    tx.commit()
        .await
        .map_err(fail("committing the transaction"))?;
    Ok(())
}

/// The connector instance: provisions at start, cleans up at stop(true), splits tables.
#[derive(Default)]
pub struct PgAuditConnector {
    connector: String,
    config: ConfigMap,
    parsed: Option<PgAuditConfig>,
}

#[async_trait]
impl Connector for PgAuditConnector {
    async fn start(&mut self, ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()> {
        let parsed = PgAuditConfig::parse(&ctx.connector, &config)?;
        self.connector = ctx.connector.clone();
        self.config = config;
        self.parsed = Some(parsed.clone());
        if ctx.cleanup_only {
            return Ok(());
        }
        let mut client = parsed.connect().await?;
        provision(&mut client, &parsed).await?;
        tracing::info!(
            connector = %ctx.connector,
            audit_table = %parsed.names.audit_table,
            tables = parsed.tables.len(),
            "postgres-audit provisioned"
        );
        Ok(())
    }

    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
        let parsed = self.parsed.as_ref().ok_or(PgAuditError::NotStarted {
            call: "task_configs",
        })?;
        Ok(split_tables(&parsed.tables, max_tasks)
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
            // No connection is held between calls: nothing to release, nothing to drop.
            return Ok(());
        }
        let parsed = self.parsed.as_ref().ok_or(PgAuditError::NotStarted {
            call: "stop_with(true)",
        })?;
        let mut client = parsed.connect().await?;
        cleanup(&mut client, &parsed.names, None, true).await?;
        tracing::info!(
            connector = %self.connector,
            audit_table = %parsed.names.audit_table,
            "postgres-audit removed its audit table, trigger function and triggers"
        );
        Ok(())
    }
}

impl std::fmt::Debug for PgAuditConnector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The raw config holds the password: show only the parsed (redacting) form.
        f.debug_struct("PgAuditConnector")
            .field("connector", &self.connector)
            .field("config", &self.parsed)
            .finish_non_exhaustive()
    }
}

/// A task: reads the audit rows of its tables.
#[derive(Default)]
pub struct PgAuditTask {
    connector: String,
    task: u32,
    parsed: Option<PgAuditConfig>,
    client: Option<Client>,
    /// Last audit id emitted per table (from the committed offset at start).
    last: HashMap<TableName, i64>,
    /// Every audit id up to this one has been read already.
    scanned: i64,
}

impl std::fmt::Debug for PgAuditTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgAuditTask")
            .field("connector", &self.connector)
            .field("task", &self.task)
            .field("config", &self.parsed)
            .field("connected", &self.client.is_some())
            .field("scanned", &self.scanned)
            .finish_non_exhaustive()
    }
}

impl PgAuditTask {
    async fn read_batch(&mut self) -> Result<Vec<SourceRecord>, PgAuditError> {
        let parsed = self
            .parsed
            .as_ref()
            .ok_or(PgAuditError::NotStarted { call: "poll" })?;
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(parsed.connect().await?);
        }
        let client = self
            .client
            .as_ref()
            .ok_or(PgAuditError::NotStarted { call: "poll" })?;
        let schemas: Vec<&str> = parsed
            .tables
            .iter()
            .map(|t| t.schema.as_deref().unwrap_or(DEFAULT_SCHEMA))
            .collect();
        let names: Vec<&str> = parsed.tables.iter().map(|t| t.name.as_str()).collect();
        let sql = format!(
            "SELECT id, table_schema, table_name, operation, old_row::text, new_row::text,
                    (extract(epoch FROM tx_time) * 1000)::bigint,
                    to_char(tx_time AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
               FROM {audit}
              WHERE id > $1
                AND (table_schema, table_name) IN
                    (SELECT * FROM unnest($2::text[], $3::text[]))
              ORDER BY id
              LIMIT $4",
            audit = parsed.names.audit_table.quoted()
        );
        let rows = client
            .query(&sql, &[&self.scanned, &schemas, &names, &parsed.batch_size])
            .await
            .map_err(|e| {
                if e.is_closed() {
                    self.client = None;
                }
                PgAuditError::PollFailed {
                    detail: pg_detail(&e),
                }
            })?;
        let mut records = Vec::with_capacity(rows.len());
        let mut scanned = self.scanned;
        let mut last = self.last.clone();
        for row in &rows {
            let id: i64 = row.get(0);
            scanned = scanned.max(id);
            let table = TableName {
                schema: Some(row.get(1)),
                name: row.get(2),
            };
            if last.get(&table).is_some_and(|l| *l >= id) {
                continue;
            }
            last.insert(table.clone(), id);
            let json = |text: Option<String>| {
                text.and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                    .unwrap_or(serde_json::Value::Null)
            };
            let operation: String = row.get(3);
            let commit_ms: i64 = row.get(6);
            let commit_time: String = row.get(7);
            let value = serde_json::json!({
                "id": id,
                "table": table.to_string(),
                "schema": table.schema,
                "name": table.name,
                "operation": operation,
                "old": json(row.get(4)),
                "new": json(row.get(5)),
                "commit_time": commit_time,
                "commit_time_ms": commit_ms,
            });
            records.push(SourceRecord {
                topic: parsed.topic.clone(),
                key: Some(table.to_string().into_bytes()),
                value: value.to_string().into_bytes(),
                headers: Vec::new(),
                timestamp_ms: Some(commit_ms),
                source_partition: source_partition(&table),
                source_offset: serde_json::json!({ "id": id }),
            });
        }
        // State changes only here, after the last await: a cancelled poll loses nothing.
        self.scanned = scanned;
        self.last = last;
        Ok(records)
    }
}

#[async_trait]
impl SourceTask for PgAuditTask {
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        let parsed = PgAuditConfig::parse(&ctx.connector, &config)?;
        self.connector = ctx.connector.clone();
        self.task = ctx.task;
        let mut last = HashMap::new();
        for table in &parsed.tables {
            let id = ctx
                .offset(&source_partition(table))
                .and_then(|o| o.get("id"))
                .and_then(serde_json::Value::as_i64)
                .unwrap_or(0);
            last.insert(table.clone(), id);
        }
        self.scanned = last.values().copied().min().unwrap_or(0);
        self.last = last;
        if !ctx.cleanup_only {
            self.client = Some(parsed.connect().await?);
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
        // Close the polling connection in every case.
        self.client = None;
        if !connector_deleted {
            return Ok(());
        }
        let parsed = self.parsed.as_ref().ok_or(PgAuditError::NotStarted {
            call: "stop_with(true)",
        })?;
        if parsed.tables.is_empty() {
            return Ok(());
        }
        let mut client = parsed.connect().await?;
        cleanup(&mut client, &parsed.names, Some(&parsed.tables), false).await?;
        tracing::info!(
            connector = %self.connector,
            task = self.task,
            tables = parsed.tables.len(),
            "postgres-audit task dropped its triggers"
        );
        Ok(())
    }
}

/// The offsets a [`TaskContext`] expects, from `(table, last id)` pairs: keyed by the
/// canonical JSON text of the source partition. For tests and tools.
pub fn offsets_for(pairs: &[(TableName, i64)]) -> BTreeMap<String, serde_json::Value> {
    pairs
        .iter()
        .map(|(t, id)| {
            (
                source_partition(t).to_string(),
                serde_json::json!({ "id": id }),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_is_not_in_debug_output() {
        let config: ConfigMap = [
            (keys::USER, "u"),
            (keys::PASSWORD, "hunter2-secret"),
            (keys::DATABASE, "d"),
            (keys::TOPIC, "t"),
        ]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
        let parsed = PgAuditConfig::parse("c", &config).unwrap();
        assert!(!format!("{parsed:?}").contains("hunter2"));
    }

    #[test]
    fn keys_saying_where_the_objects_live_are_immutable() {
        let immutable: Vec<_> = config_def()
            .keys
            .into_iter()
            .filter(|k| k.immutable)
            .map(|k| k.name)
            .collect();
        // Not the password (it may rotate) nor tables (start reconciles the triggers).
        assert_eq!(
            immutable,
            [keys::HOST, keys::PORT, keys::DATABASE, keys::AUDIT_TABLE]
        );
    }
}
