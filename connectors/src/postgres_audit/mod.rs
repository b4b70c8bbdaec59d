//! `postgres-audit`: the source connector of KIP-883's own example, a backend of the
//! audit core ([`crate::audit`]: lifecycle, records and ownership rules). On start the connector
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
//! Ownership: the audit table's comment is its owner record ([`crate::audit::OwnerRecord`]
//! as JSON: plugin, connector, incarnation), read and checked inside every provisioning
//! and cleanup transaction.
//!
//! TLS: `connection.sslmode` disable / require / verify-full with `connection.sslrootcert`
//! for a private CA, as libpq's settings of those names ([`crate::pg_tls`]).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, NoTls, Socket};
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
    TableName, derived_name, parse_single_table, parse_table_list, quote_ident, stable_hash,
    validate_single_table, validate_table_list,
};
use crate::pg_tls::{SslMode, TlsPlan};

mod catalog;
use catalog::*;

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
    /// TLS mode: `disable`, `require` or `verify-full` (libpq's meanings).
    pub const SSLMODE: &str = "connection.sslmode";
    /// Absolute path of a PEM file of the CA(s) the server's certificate must lead to.
    pub const SSLROOTCERT: &str = "connection.sslrootcert";
    pub use crate::audit::keys::*;
}

/// Errors of the postgres-audit plugin (the audit core's). Messages never hold the
/// password.
pub type PgAuditError = AuditError;

/// The postgres-audit connector instance.
pub type PgAuditConnector = AuditConnector<Postgres>;

/// A postgres-audit task.
pub type PgAuditTask = AuditTask<Postgres>;

/// Text of a driver error, with the server's message and detail when there is one
/// (the driver's own Display says only "db error").
fn pg_detail(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => match db.detail() {
            Some(d) => format!("{} ({}): {d}", db.message(), db.code().code()),
            None => format!("{} ({})", db.message(), db.code().code()),
        },
        // The driver's Display leaves the cause out ("error performing TLS handshake").
        None => wharf::tls::error_chain(e),
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

fn port(value: &str) -> Result<(), String> {
    match value.trim().parse::<u16>() {
        Ok(n) if n > 0 => Ok(()),
        _ => Err("value is not a TCP port (1-65535)".to_owned()),
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
            ConfigKey::new(keys::SSLMODE, ConfigType::String, Importance::Medium, "TLS mode, as libpq's sslmode: disable (plaintext), require (encrypted; the certificate is checked against connection.sslrootcert only when that is set), verify-full (encrypted; the certificate must lead to connection.sslrootcert and name connection.host).")
                .default_value("disable")
                .one_of(&SslMode::NAMES),
        )
        .define(
            ConfigKey::new(keys::SSLROOTCERT, ConfigType::String, Importance::Medium, "Absolute path, on the executor's host, of a PEM file with the CA certificate(s) the server's certificate must lead to. Required with verify-full. Read at each connect (a replaced file is used without a restart).")
                .required_when(keys::SSLMODE, &["verify-full"])
                .validator(crate::pg_tls::root_path),
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
        .merged(&crate::audit::shared_config_def())
}

/// A password that never shows in Debug output.
#[derive(Clone, Default)]
struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(wharf_sdk::REDACTED)
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
    tls: TlsPlan,
    tables: Vec<TableName>,
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
        Names {
            audit_table,
            function,
            trigger: derived_name("wharf_audit_trg", connector),
            provision_lock: stable_hash(&format!("wharf-postgres-audit-provision:{connector}"))
                as i64,
            order_lock: stable_hash(&format!("wharf-postgres-audit-order:{connector}")) as i64,
        }
    }
}

fn get<'a>(config: &'a ConfigMap, key: &'static str, default: &'a str) -> &'a str {
    config.get(key).map(String::as_str).unwrap_or(default)
}

impl PgAuditConfig {
    fn parse(connector: &str, config: &ConfigMap) -> Result<Self, PgAuditError> {
        let mode = SslMode::parse(get(config, keys::SSLMODE, "disable")).map_err(|reason| {
            PgAuditError::InvalidConfig {
                key: keys::SSLMODE,
                reason,
            }
        })?;
        let root = match config.get(keys::SSLROOTCERT).map(|v| v.trim()) {
            Some(v) if !v.is_empty() => {
                crate::pg_tls::root_path(v).map_err(|reason| PgAuditError::InvalidConfig {
                    key: keys::SSLROOTCERT,
                    reason,
                })?;
                Some(std::path::PathBuf::from(v))
            }
            _ => None,
        };
        let tls = crate::pg_tls::plan(mode, root, keys::SSLROOTCERT).map_err(tls_error)?;
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
            tls,
            tables: unique,
            names,
        })
    }

    async fn connect(&self) -> Result<Client, PgAuditError> {
        let mut pg = tokio_postgres::Config::new();
        pg.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.database)
            .connect_timeout(Duration::from_secs(CONNECT_TIMEOUT_SECS))
            .application_name("wharf-postgres-audit");
        if !self.password.0.is_empty() {
            pg.password(&self.password.0);
        }
        match crate::pg_tls::client_config(&self.tls, keys::SSLROOTCERT).map_err(tls_error)? {
            None => {
                pg.ssl_mode(tokio_postgres::config::SslMode::Disable);
                self.connect_with(&pg, NoTls).await
            }
            Some(tls) => {
                pg.ssl_mode(tokio_postgres::config::SslMode::Require);
                self.connect_with(&pg, tokio_postgres_rustls::MakeRustlsConnect::new(tls))
                    .await
            }
        }
    }

    async fn connect_with<T>(
        &self,
        pg: &tokio_postgres::Config,
        tls: T,
    ) -> Result<Client, PgAuditError>
    where
        T: MakeTlsConnect<Socket>,
        T::Stream: Send + 'static,
        T::TlsConnect: Send,
        <T::TlsConnect as TlsConnect<Socket>>::Future: Send,
    {
        let (client, connection) = pg.connect(tls).await.map_err(|e| {
            let mut detail = pg_detail(&e);
            if let Some(db) = e.as_db_error()
                && let Some(hint) =
                    crate::pg_tls::plaintext_refused_hint(&self.tls, db.code().code(), db.message())
            {
                detail = format!("{detail}; {hint}");
            }
            PgAuditError::Connect {
                target: format!(
                    "postgresql://{}@{}:{}/{}",
                    self.user, self.host, self.port, self.database
                ),
                detail,
            }
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

fn tls_error(e: crate::pg_tls::TlsConfigError) -> PgAuditError {
    PgAuditError::InvalidConfig {
        key: e.key,
        reason: e.reason,
    }
}

/// The PostgreSQL backend: the parsed config and a task's connection.
pub struct Postgres {
    cfg: PgAuditConfig,
    client: Option<Client>,
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The config's Debug redacts the password.
        f.debug_struct("Postgres")
            .field("config", &self.cfg)
            .field("connected", &self.client.is_some())
            .finish()
    }
}

/// A catalog object of the ledger, to look up in `pg_catalog`: (schema, name), or for a
/// trigger (trigger, schema, table).
enum PgObject {
    Table(String, String),
    Function(String, String),
    Trigger(String, String, String),
}

impl Postgres {
    /// The ledger's resources with how to look each up: the audit table and the trigger
    /// function (created), then per watched table the table (adopted) and its trigger
    /// (created, named `TRIGGER on SCHEMA.TABLE`). Located at `host:port` and the
    /// database, never the user or password.
    fn checks(&self) -> Vec<(Resource, PgObject)> {
        let at = Locator::default()
            .host(format!("{}:{}", self.cfg.host, self.cfg.port))
            .database(self.cfg.database.clone());
        let n = &self.cfg.names;
        let schema_of = |t: &TableName| {
            t.schema
                .clone()
                .unwrap_or_else(|| DEFAULT_SCHEMA.to_owned())
        };
        let audit = n.audit_table.qualified(DEFAULT_SCHEMA);
        let function = n.function.qualified(DEFAULT_SCHEMA);
        let mut out = vec![
            (
                Resource::created(ResourceKind::Table, audit.to_string(), at.clone()),
                PgObject::Table(schema_of(&audit), audit.name.clone()),
            ),
            (
                Resource::created(ResourceKind::Function, function.to_string(), at.clone()),
                PgObject::Function(schema_of(&function), function.name.clone()),
            ),
        ];
        for t in &self.cfg.tables {
            let t = t.qualified(DEFAULT_SCHEMA);
            out.push((
                Resource::adopted(ResourceKind::Table, t.to_string(), at.clone()),
                PgObject::Table(schema_of(&t), t.name.clone()),
            ));
            out.push((
                Resource::created(
                    ResourceKind::Trigger,
                    format!("{} on {t}", n.trigger),
                    at.clone(),
                ),
                PgObject::Trigger(n.trigger.clone(), schema_of(&t), t.name.clone()),
            ));
        }
        out
    }
}

#[async_trait]
impl AuditBackend for Postgres {
    const PLUGIN: &'static str = PLUGIN_NAME;

    fn parse(connector: &str, config: &ConfigMap) -> Result<Self, AuditError> {
        Ok(Self {
            cfg: PgAuditConfig::parse(connector, config)?,
            client: None,
        })
    }

    fn tables(&self) -> &[TableName] {
        &self.cfg.tables
    }

    fn ledger(&self) -> Vec<Resource> {
        self.checks().into_iter().map(|(r, _)| r).collect()
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
        let client = self.cfg.connect().await?;
        let checks = self.checks();
        let mut there = Vec::with_capacity(resources.len());
        for r in resources {
            let Some((_, check)) = checks.iter().find(|(c, _)| c.same_as(r)) else {
                there.push(true);
                continue;
            };
            let (sql, args): (&str, Vec<&str>) = match check {
                PgObject::Table(schema, name) => (
                    "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2)",
                    vec![schema.as_str(), name.as_str()],
                ),
                PgObject::Function(schema, name) => (
                    "SELECT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 AND p.proname = $2)",
                    vec![schema.as_str(), name.as_str()],
                ),
                PgObject::Trigger(trigger, schema, table) => (
                    "SELECT EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.tgname = $1 AND n.nspname = $2 AND c.relname = $3)",
                    vec![trigger.as_str(), schema.as_str(), table.as_str()],
                ),
            };
            let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = args
                .iter()
                .map(|a| a as &(dyn tokio_postgres::types::ToSql + Sync))
                .collect();
            let row =
                client
                    .query_one(sql, &params)
                    .await
                    .map_err(|e| PgAuditError::CleanupFailed {
                        step: "looking up what the cleanup left",
                        detail: pg_detail(&e),
                    })?;
            there.push(row.get::<_, bool>(0));
        }
        Ok(Some(there))
    }

    async fn provision(&self, claim: &Claim, adopt: Adopt) -> Result<i64, AuditError> {
        let mut client = self.cfg.connect().await?;
        provision(&mut client, &self.cfg, claim, adopt).await
    }

    async fn cleanup(&self, claim: &Claim, scope: Scope<'_>) -> Result<(), AuditError> {
        let mut client = self.cfg.connect().await?;
        let (only, everything) = match scope {
            Scope::Tables(t) => (Some(t), false),
            Scope::Everything => (None, true),
        };
        cleanup(&mut client, &self.cfg.names, claim, only, everything).await
    }

    async fn open(&mut self) -> Result<(), AuditError> {
        self.client = Some(self.cfg.connect().await?);
        Ok(())
    }

    async fn read_rows(&mut self, after: i64, limit: i64) -> Result<Vec<AuditRow>, AuditError> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(self.cfg.connect().await?);
        }
        let client = self
            .client
            .as_ref()
            .ok_or(AuditError::NotStarted { call: "poll" })?;
        let tables = &self.cfg.tables;
        let schemas: Vec<&str> = tables
            .iter()
            .map(|t| t.schema.as_deref().unwrap_or(DEFAULT_SCHEMA))
            .collect();
        let names: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
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
            audit = self.cfg.names.audit_table.quoted()
        );
        let rows = match client
            .query(&sql, &[&after, &schemas, &names, &limit])
            .await
        {
            Ok(rows) => rows,
            Err(e) => {
                if e.is_closed() {
                    self.client = None;
                }
                return Err(AuditError::PollFailed {
                    detail: pg_detail(&e),
                });
            }
        };
        Ok(rows
            .iter()
            .map(|row| AuditRow {
                id: row.get(0),
                table: TableName {
                    schema: Some(row.get(1)),
                    name: row.get(2),
                },
                operation: row.get(3),
                old: row.get(4),
                new: row.get(5),
                commit_ms: row.get(6),
                commit_time: Some(row.get(7)),
            })
            .collect())
    }

    fn close(&mut self) {
        self.client = None;
    }
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
