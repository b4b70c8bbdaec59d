//! Debezium's PostgreSQL connector (`io.debezium.connector.postgresql.PostgresConnector`,
//! run in the JVM plugin host from a `--plugin-path`), made deletion-aware by Wharf on its
//! behalf. Debezium creates a logical replication slot and a publication and never drops
//! them (its classes have no `stop(boolean)`): a forgotten slot keeps WAL until the disk
//! fills. The executor wraps this one well-known class:
//!
//! - at the connector's start (not a cleanup-only one) it records in the connector's
//!   resource ledger the slot (`slot.name`, default `debezium`) and the publication
//!   (`publication.name`, default `dbz_publication`, unless
//!   `publication.autocreate.mode = disabled`: then it is the operator's), located by
//!   `database.hostname:database.port` and `database.dbname`; it also declares them, so a
//!   second connector claiming the same slot is refused at create;
//! - on `stop_with(true)` (the operator deleted the connector; the JVM task has stopped,
//!   the task steps run first), after the Java connector's own stop, it drops them with
//!   the connector's own connection settings (`database.user`, `database.password`):
//!   a slot still held by a walsender (the task's connection closing) is waited for,
//!   then its backend terminated, within [`DROP_DEADLINE_MS`]; each is released in the
//!   ledger, or recorded absent when it was not there;
//! - every other stop (pause, restart, a move, shutdown, a delete with `keep_resources`)
//!   leaves both.
//!
//! Ownership: the publication's comment is the owner mark ([`OwnerMark`] as JSON: the
//! class, the connector and its incarnation), for the publication and the slot together
//! (a slot cannot carry a comment). A task writes it right after Debezium's task started
//! (which creates the publication), on a publication without a comment. Decisions are
//! [`start_step`], [`mark_step`] and [`cleanup_step`]: a start (connector or task) refuses
//! a publication marked by another incarnation or connector, before Debezium can take the
//! slot over; a cleanup leaves what another incarnation marked (a late `stop(true)` of a
//! deleted incarnation must not drop its re-created successor's slot). Without a
//! publication Wharf manages (`publication.autocreate.mode = disabled`, or a decoder other
//! than `pgoutput`) there is nowhere to put the mark: the slot is then taken and dropped
//! by its name alone, as before.
//!
//! TLS: `database.sslmode` as Debezium's JDBC driver reads it (`tls_of`): `disable`,
//! `allow` and `prefer` (the default; both try TLS first here, without checking the
//! certificate, and fall back to plaintext), `require` (encrypted, no certificate check),
//! `verify-ca` and `verify-full` with `database.sslrootcert` (a PEM CA file, required).
//! Client certificates (`database.sslcert`, `database.sslkey`) are not supported: the
//! connection is refused naming the key.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_postgres::NoTls;
use tokio_postgres::config::SslMode as WireSslMode;
use wharf_sdk::{
    ConfigMap, Connector, ConnectorContext, Locator, Plugin, PluginResult, Resource, ResourceKind,
    SourceRecord, SourceTask, TaskContext, TaskFactory,
};

use crate::pg_tls::TlsPlan;

/// The class this module wraps.
pub const CLASS: &str = "io.debezium.connector.postgresql.PostgresConnector";

/// Debezium's default `slot.name`.
pub const DEFAULT_SLOT: &str = "debezium";

/// Debezium's default `publication.name`.
pub const DEFAULT_PUBLICATION: &str = "dbz_publication";

/// Bound on dropping the slot and the publication, in milliseconds: the slot may stay
/// active for a moment after the task's replication connection closed.
pub const DROP_DEADLINE_MS: u64 = 20_000;

/// How long an active slot is waited for before its backend is terminated, in
/// milliseconds.
pub const ACTIVE_GRACE_MS: u64 = 3_000;

/// Pause between two looks at an active slot, in milliseconds.
const ACTIVE_POLL_MS: u64 = 100;

/// Bound on connecting to the database, in seconds.
const CONNECT_TIMEOUT_S: u64 = 10;

/// Config key of the TLS mode.
const SSLMODE: &str = "database.sslmode";

/// Config key of the CA file.
const SSLROOTCERT: &str = "database.sslrootcert";

/// `plugin` made deletion-aware when it is Debezium's PostgreSQL connector; `None`
/// for any other plugin.
pub fn adapt(plugin: Plugin) -> Option<Plugin> {
    if plugin.name != CLASS {
        return None;
    }
    let inner = plugin.connector.clone();
    let task = match plugin.task.clone() {
        TaskFactory::Source(inner) => TaskFactory::Source(Arc::new(move || {
            Box::new(DebeziumPostgresTask {
                inner: inner(),
                inner_started: false,
            }) as Box<dyn SourceTask>
        })),
        // Debezium's class is a source: a sink of that name is left as it is.
        sink @ TaskFactory::Sink(_) => sink,
    };
    Some(Plugin {
        connector: Arc::new(move || {
            Box::new(DebeziumPostgres {
                inner: inner(),
                ctx: None,
                config: ConfigMap::new(),
                inner_started: false,
            }) as Box<dyn Connector>
        }),
        task,
        ..plugin
    })
}

/// The slot and the publication a config makes Debezium create, as ledger resources.
/// Pure.
///
/// # Errors
/// Text naming the key: `database.hostname` or `database.dbname` missing, a bad
/// `database.port`.
pub fn resources_of(config: &ConfigMap) -> Result<Vec<Resource>, String> {
    let conn = Address::of(config)?;
    let locator = Locator::default()
        .host(format!("{}:{}", conn.host, conn.port))
        .database(conn.dbname.clone());
    let mut out = vec![Resource::created(
        ResourceKind::ReplicationSlot,
        slot_name(config),
        locator.clone(),
    )];
    if publication_autocreated(config) {
        out.push(Resource::created(
            ResourceKind::Publication,
            publication_name(config),
            locator,
        ));
    }
    Ok(out)
}

fn slot_name(config: &ConfigMap) -> String {
    non_empty(config, "slot.name")
        .unwrap_or(DEFAULT_SLOT)
        .to_owned()
}

fn publication_name(config: &ConfigMap) -> String {
    non_empty(config, "publication.name")
        .unwrap_or(DEFAULT_PUBLICATION)
        .to_owned()
}

/// Debezium creates the publication unless `publication.autocreate.mode = disabled`.
fn publication_autocreated(config: &ConfigMap) -> bool {
    !non_empty(config, "publication.autocreate.mode")
        .is_some_and(|m| m.eq_ignore_ascii_case("disabled"))
}

fn non_empty<'a>(config: &'a ConfigMap, key: &str) -> Option<&'a str> {
    config.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// Where the database is.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Address {
    host: String,
    port: u16,
    dbname: String,
}

impl Address {
    fn of(config: &ConfigMap) -> Result<Self, String> {
        let host = non_empty(config, "database.hostname")
            .ok_or("config[database.hostname] is missing")?
            .to_owned();
        let dbname = non_empty(config, "database.dbname")
            .ok_or("config[database.dbname] is missing")?
            .to_owned();
        let port = match non_empty(config, "database.port") {
            None => 5432,
            Some(p) => p
                .parse::<u16>()
                .map_err(|_| "config[database.port] is not a port number".to_owned())?,
        };
        Ok(Self { host, port, dbname })
    }
}

/// How the connection does TLS: the driver's mode and what the certificate is checked
/// against.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tls {
    wire: WireSslMode,
    plan: TlsPlan,
}

/// The TLS of a connection as Debezium's JDBC driver makes it from `database.sslmode` and
/// `database.sslrootcert`. Pure.
///
/// # Errors
/// Text naming the key: an unknown mode, `verify-ca`/`verify-full` without a CA file, a
/// relative CA path, a client certificate (not supported).
fn tls_of(config: &ConfigMap) -> Result<Tls, String> {
    for key in ["database.sslcert", "database.sslkey"] {
        if non_empty(config, key).is_some() {
            return Err(format!(
                "config[{key}]: Wharf's drop of Debezium's slot does not present a client certificate; drop the slot by hand or delete with keep_resources"
            ));
        }
    }
    let root = match non_empty(config, SSLROOTCERT) {
        None => None,
        Some(path) => {
            crate::pg_tls::root_path(path)
                .map_err(|why| format!("config[{SSLROOTCERT}]: {why}"))?;
            Some(PathBuf::from(path))
        }
    };
    let need_root = |mode: &str| {
        root.clone().ok_or_else(|| {
            format!("config[{SSLROOTCERT}] is required with {SSLMODE} {mode} (a PEM file of the CA that signed the server's certificate)")
        })
    };
    // Debezium's default is prefer.
    let mode = non_empty(config, SSLMODE).unwrap_or("prefer");
    let (wire, plan) = match mode {
        "disable" => (WireSslMode::Disable, TlsPlan::Plain),
        // The driver has no allow (plaintext first): prefer reaches the same servers.
        "allow" | "prefer" => (WireSslMode::Prefer, TlsPlan::EncryptOnly),
        // The JDBC driver's require does not check the certificate, even with a CA file.
        "require" => (WireSslMode::Require, TlsPlan::EncryptOnly),
        "verify-ca" => (WireSslMode::Require, TlsPlan::VerifyChain(need_root(mode)?)),
        "verify-full" => (WireSslMode::Require, TlsPlan::VerifyFull(need_root(mode)?)),
        _ => {
            return Err(format!(
                "config[{SSLMODE}]: value is not one of disable, allow, prefer, require, verify-ca, verify-full"
            ));
        }
    };
    Ok(Tls { wire, plan })
}

/// The connector's own connection settings.
#[derive(Clone, PartialEq, Eq)]
struct Connection {
    address: Address,
    user: String,
    password: Option<String>,
    tls: Tls,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("Connection")
            .field("address", &self.address)
            .field("user", &self.user)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

impl Connection {
    fn of(config: &ConfigMap) -> Result<Self, String> {
        Ok(Self {
            address: Address::of(config)?,
            user: non_empty(config, "database.user")
                .unwrap_or("postgres")
                .to_owned(),
            password: config.get("database.password").cloned(),
            tls: tls_of(config)?,
        })
    }

    /// Connects; `why` says what for, in the error.
    async fn connect(&self, why: &str) -> Result<tokio_postgres::Client, String> {
        let Address { host, port, dbname } = &self.address;
        let mut pg = tokio_postgres::Config::new();
        pg.host(host)
            .port(*port)
            .user(&self.user)
            .dbname(dbname)
            .application_name("wharf-debezium-postgres")
            .ssl_mode(self.tls.wire)
            .connect_timeout(Duration::from_secs(CONNECT_TIMEOUT_S));
        if let Some(p) = &self.password {
            pg.password(p);
        }
        let failed = |e: tokio_postgres::Error| {
            let detail = match e.as_db_error() {
                Some(db) => format!("{} ({})", db.message(), db.code().code()),
                // The driver's Display leaves the cause out ("error performing TLS handshake").
                None => wharf::tls::error_chain(&e),
            };
            format!("cannot connect to {host}:{port} database {dbname} {why}: {detail}")
        };
        let client = match crate::pg_tls::client_config(&self.tls.plan, SSLROOTCERT)
            .map_err(|e| format!("config[{}]: {}", e.key, e.reason))?
        {
            None => {
                let (client, connection) = pg.connect(NoTls).await.map_err(failed)?;
                spawn_connection(connection);
                client
            }
            Some(tls) => {
                let (client, connection) = pg
                    .connect(tokio_postgres_rustls::MakeRustlsConnect::new(tls))
                    .await
                    .map_err(failed)?;
                spawn_connection(connection);
                client
            }
        };
        Ok(client)
    }
}

fn spawn_connection<F>(connection: F)
where
    F: std::future::Future<Output = Result<(), tokio_postgres::Error>> + Send + 'static,
{
    // The connection ends when the client is dropped; an error only needs a log line.
    wharf::task::spawn(
        wharf::task::TaskKind::Detached,
        "debezium-postgres cleanup connection",
        async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "debezium-postgres connection ended with an error");
            }
        },
    );
}

/// The owner mark: the publication's comment, as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerMark {
    /// The class whose resources these are ([`CLASS`]).
    pub wharf: String,
    /// The connector that owns them.
    pub connector: String,
    /// Its incarnation.
    pub incarnation: String,
}

impl OwnerMark {
    fn of(connector: &str, incarnation: &str) -> Self {
        Self {
            wharf: CLASS.to_owned(),
            connector: connector.to_owned(),
            incarnation: incarnation.to_owned(),
        }
    }

    fn is(&self, me: &OwnerMark) -> bool {
        self == me
    }
}

/// What the catalog holds at the publication's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// No such publication (or none Wharf manages: `publication.autocreate.mode = disabled`).
    Absent,
    /// A publication without a comment: a start of ours that has not marked it yet, or
    /// one made before Wharf marked publications.
    Bare,
    /// A publication whose comment is not an owner mark (somebody's note).
    Commented,
    /// A publication with this owner mark.
    Marked(OwnerMark),
}

/// What a start (the connector's or a task's) does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartStep {
    /// Go on: nothing, or ours, or nobody's mark.
    Proceed,
    /// Another incarnation of this connector kept them (deleted with `keep_resources`).
    RefuseKept {
        /// That incarnation.
        incarnation: String,
    },
    /// Another connector (or class) owns them.
    RefuseClaimed {
        /// That connector.
        connector: String,
    },
}

/// The ownership decision at a start. Pure.
pub fn start_step(found: &Found, me: &OwnerMark) -> StartStep {
    match found {
        Found::Absent | Found::Bare | Found::Commented => StartStep::Proceed,
        Found::Marked(m) if m.is(me) => StartStep::Proceed,
        Found::Marked(m) if m.wharf == me.wharf && m.connector == me.connector => {
            StartStep::RefuseKept {
                incarnation: m.incarnation.clone(),
            }
        }
        Found::Marked(m) => StartStep::RefuseClaimed {
            connector: m.connector.clone(),
        },
    }
}

/// What a task does after Debezium's task started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkStep {
    /// Write our mark on the publication.
    Write,
    /// Nothing to write: no publication, ours already, or a comment that is not ours to
    /// replace.
    Nothing,
}

/// Whether to mark the publication. Pure.
pub fn mark_step(found: &Found) -> MarkStep {
    match found {
        Found::Bare => MarkStep::Write,
        Found::Absent | Found::Commented | Found::Marked(_) => MarkStep::Nothing,
    }
}

/// What a deletion drops.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CleanupStep {
    /// The slot and the publication: ours, or nobody's mark (a start that did not get to
    /// mark them).
    Drop,
    /// Nothing: another incarnation or connector marked them.
    Leave {
        /// The mark found.
        owner: OwnerMark,
    },
}

/// The ownership decision at a deletion. Pure.
pub fn cleanup_step(found: &Found, me: &OwnerMark) -> CleanupStep {
    match found {
        Found::Absent | Found::Bare | Found::Commented => CleanupStep::Drop,
        Found::Marked(m) if m.is(me) => CleanupStep::Drop,
        Found::Marked(m) => CleanupStep::Leave { owner: m.clone() },
    }
}

/// Reads the publication's owner mark; [`Found::Absent`] when Wharf does not manage the
/// publication of `config`.
async fn find_mark(client: &tokio_postgres::Client, config: &ConfigMap) -> Result<Found, String> {
    if !publication_autocreated(config) {
        return Ok(Found::Absent);
    }
    let publication = publication_name(config);
    let row = client
        .query_opt(
            "SELECT obj_description(oid, 'pg_publication') FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(|e| format!("cannot read pg_publication: {e}"))?;
    Ok(match row.map(|r| r.get::<_, Option<String>>(0)) {
        None => Found::Absent,
        Some(None) => Found::Bare,
        Some(Some(text)) => match serde_json::from_str::<OwnerMark>(&text) {
            Ok(mark) => Found::Marked(mark),
            Err(_) => Found::Commented,
        },
    })
}

/// Writes `mark` as the comment of the publication of `config`.
async fn write_mark(
    client: &tokio_postgres::Client,
    config: &ConfigMap,
    mark: &OwnerMark,
) -> Result<(), String> {
    let publication = publication_name(config);
    let text = serde_json::to_string(mark).map_err(|e| format!("owner mark: {e}"))?;
    // COMMENT takes no parameters: the server quotes both.
    let statement: String = client
        .query_one(
            "SELECT format('COMMENT ON PUBLICATION %I IS %L', $1::text, $2::text)",
            &[&publication, &text],
        )
        .await
        .map_err(|e| format!("cannot mark publication {publication}: {e}"))?
        .get(0);
    client
        .batch_execute(&statement)
        .await
        .map_err(|e| format!("cannot mark publication {publication}: {e}"))
}

/// The error of a refused start, naming the slot, the publication and the owner.
fn refusal(config: &ConfigMap, step: &StartStep, me: &OwnerMark) -> Option<String> {
    let what = format!(
        "replication slot {} and publication {}",
        slot_name(config),
        publication_name(config)
    );
    match step {
        StartStep::Proceed => None,
        StartStep::RefuseKept { incarnation } => Some(format!(
            "{what} belong to incarnation {incarnation} of connector {} (deleted with keep_resources), not to this one ({}): Debezium would take them over, and a later deletion of either would drop what the other uses; drop them by hand (pg_drop_replication_slot, DROP PUBLICATION), or to take them over clear the owner mark (COMMENT ON PUBLICATION ... IS NULL; the next start marks them for this incarnation), or name another slot.name and publication.name",
            me.connector, me.incarnation
        )),
        StartStep::RefuseClaimed { connector } => Some(format!(
            "{what} belong to connector {connector}: name another slot.name and publication.name"
        )),
    }
}

/// Refuses a start over what another incarnation or connector marked.
async fn check_start(config: &ConfigMap, me: &OwnerMark) -> PluginResult<()> {
    if !publication_autocreated(config) {
        return Ok(());
    }
    let client = Connection::of(config)?
        .connect("to check the owner of Debezium's slot")
        .await?;
    let found = find_mark(&client, config).await?;
    match refusal(config, &start_step(&found, me), me) {
        None => Ok(()),
        Some(why) => Err(why.into()),
    }
}

/// What dropping one resource found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dropped {
    /// It was there and is gone now.
    Removed,
    /// It was not there.
    Absent,
}
/// What to do about a slot, from what `pg_replication_slots` says of it. Pure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotStep {
    /// Not there: nothing to drop.
    Absent,
    /// Inactive: drop it now.
    Drop,
    /// Held by a walsender: wait a little for it to go.
    Wait,
    /// Held past the grace time: terminate that backend, then look again.
    Terminate(i32),
}

fn slot_step(found: Option<Option<i32>>, waited: Duration) -> SlotStep {
    match found {
        None => SlotStep::Absent,
        Some(None) => SlotStep::Drop,
        Some(Some(pid)) if waited >= Duration::from_millis(ACTIVE_GRACE_MS) => {
            SlotStep::Terminate(pid)
        }
        Some(Some(_)) => SlotStep::Wait,
    }
}

async fn drop_slot(client: &tokio_postgres::Client, slot: &str) -> Result<Dropped, String> {
    let began = tokio::time::Instant::now();
    let deadline = began + Duration::from_millis(DROP_DEADLINE_MS);
    let mut removed = false;
    loop {
        let row = client
            .query_opt(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .map_err(|e| format!("cannot read pg_replication_slots: {e}"))?;
        let found = row.map(|r| r.get::<_, Option<i32>>(0));
        match slot_step(found, began.elapsed()) {
            SlotStep::Absent => {
                return Ok(if removed {
                    Dropped::Removed
                } else {
                    Dropped::Absent
                });
            }
            SlotStep::Drop => {
                match client
                    .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
                    .await
                {
                    Ok(_) => removed = true,
                    // Taken again between the look and the drop: look again.
                    Err(e) if tokio::time::Instant::now() < deadline => {
                        tracing::debug!(slot, error = %e, "slot drop raced; retrying");
                    }
                    Err(e) => return Err(format!("cannot drop replication slot {slot}: {e}")),
                }
            }
            SlotStep::Terminate(pid) => {
                tracing::warn!(
                    slot,
                    pid,
                    "replication slot still active after the task stopped; terminating its backend"
                );
                client
                    .execute("SELECT pg_terminate_backend($1)", &[&pid])
                    .await
                    .map_err(|e| {
                        format!("cannot terminate backend {pid} holding slot {slot}: {e}")
                    })?;
            }
            SlotStep::Wait => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "replication slot {slot} still exists after {DROP_DEADLINE_MS} ms"
            ));
        }
        tokio::time::sleep(Duration::from_millis(ACTIVE_POLL_MS)).await;
    }
}

/// `name` as a quoted SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

async fn drop_publication(
    client: &tokio_postgres::Client,
    publication: &str,
) -> Result<Dropped, String> {
    let exists = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(|e| format!("cannot read pg_publication: {e}"))?
        .is_some();
    if !exists {
        return Ok(Dropped::Absent);
    }
    client
        .batch_execute(&format!(
            "DROP PUBLICATION IF EXISTS {}",
            quote_ident(publication)
        ))
        .await
        .map_err(|e| format!("cannot drop publication {publication}: {e}"))?;
    Ok(Dropped::Removed)
}

/// Debezium's connector with Wharf's cleanup around it.
struct DebeziumPostgres {
    inner: Box<dyn Connector>,
    ctx: Option<ConnectorContext>,
    config: ConfigMap,
    /// Whether the Java connector got its start (a refused start never calls it).
    inner_started: bool,
}

/// Drops the slot and the publication of `config` unless another incarnation or
/// connector marked them, and accounts for them in the ledger of `ctx`.
async fn clean_up(config: &ConfigMap, ctx: Option<&ConnectorContext>) -> PluginResult<()> {
    let resources = resources_of(config)?;
    let client = Connection::of(config)?
        .connect("to drop Debezium's slot")
        .await?;
    let found = find_mark(&client, config).await?;
    // Without a context (no start) nobody's mark is ours.
    let me = ctx.map_or_else(
        || OwnerMark::of("", ""),
        |c| OwnerMark::of(&c.connector, &c.incarnation),
    );
    match cleanup_step(&found, &me) {
        CleanupStep::Drop => {}
        CleanupStep::Leave { owner } => {
            // Not ours: nothing dropped, nothing recorded (the ledger keeps the entries
            // and the deletion names them if they are this incarnation's).
            tracing::warn!(
                slot = %slot_name(config),
                publication = %publication_name(config),
                owner_connector = %owner.connector,
                owner_incarnation = %owner.incarnation,
                "Debezium's slot and publication belong to another connector incarnation; left in place"
            );
            return Ok(());
        }
    }
    for r in &resources {
        let dropped = match r.kind {
            ResourceKind::ReplicationSlot => drop_slot(&client, &r.name).await?,
            _ => drop_publication(&client, &r.name).await?,
        };
        tracing::info!(kind = r.kind.as_str(), name = %r.name, ?dropped,
            "Debezium resource dropped by Wharf on the connector's deletion");
        if let Some(ctx) = ctx {
            match dropped {
                Dropped::Removed => ctx.resources().release(r).await?,
                Dropped::Absent => ctx.resources().absent(r).await?,
            }
        }
    }
    Ok(())
}

#[async_trait]
impl Connector for DebeziumPostgres {
    async fn start(&mut self, ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()> {
        // Kept first: a refused start's deletion still knows where to look.
        self.config = config.clone();
        self.ctx = Some(ctx.clone());
        if !ctx.cleanup_only {
            check_start(&config, &OwnerMark::of(&ctx.connector, &ctx.incarnation)).await?;
            // Recorded before Debezium's task can create them (the task starts after).
            for r in resources_of(&config)? {
                ctx.resources().intend(&r).await?;
                ctx.resources().confirm(&r).await?;
            }
        }
        self.inner_started = true;
        self.inner.start(ctx, config).await
    }

    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
        self.inner.task_configs(max_tasks).await
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        // The Java connector gets its stop() either way (it has no stop(boolean)).
        let stopped = if self.inner_started {
            self.inner.stop_with(connector_deleted).await
        } else {
            Ok(())
        };
        if connector_deleted {
            clean_up(&self.config, self.ctx.as_ref()).await?;
        }
        stopped
    }

    fn declared_resources(&self, config: &ConfigMap) -> PluginResult<Vec<Resource>> {
        Ok(resources_of(config)?)
    }
}

/// Debezium's task with the owner check before it and the mark after it.
struct DebeziumPostgresTask {
    inner: Box<dyn SourceTask>,
    /// Whether Debezium's task got its start (a refused start never calls it).
    inner_started: bool,
}

/// The config that says where the database is: the connector's (the task's copy when the
/// context has none).
fn database_config<'a>(ctx: &'a TaskContext, config: &'a ConfigMap) -> &'a ConfigMap {
    if ctx.connector_config.contains_key("database.hostname") {
        &ctx.connector_config
    } else {
        config
    }
}

#[async_trait]
impl SourceTask for DebeziumPostgresTask {
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        if ctx.cleanup_only || !publication_autocreated(database_config(&ctx, &config)) {
            self.inner_started = true;
            return self.inner.start(ctx, config).await;
        }
        let db = database_config(&ctx, &config).clone();
        let me = OwnerMark::of(&ctx.connector, &ctx.incarnation);
        let client = Connection::of(&db)?
            .connect("to check the owner of Debezium's slot")
            .await?;
        // Before Debezium's task, which would take over a slot that is there.
        if let Some(why) = refusal(&db, &start_step(&find_mark(&client, &db).await?, &me), &me) {
            return Err(why.into());
        }
        self.inner_started = true;
        self.inner.start(ctx, config).await?;
        // Debezium's task start made the publication (pgoutput): mark it ours.
        if mark_step(&find_mark(&client, &db).await?) == MarkStep::Write {
            write_mark(&client, &db, &me).await?;
        }
        Ok(())
    }

    async fn poll(&mut self) -> PluginResult<Vec<SourceRecord>> {
        self.inner.poll().await
    }

    async fn commit(&mut self) -> PluginResult<()> {
        self.inner.commit().await
    }

    async fn stop(&mut self) -> PluginResult<()> {
        if !self.inner_started {
            return Ok(());
        }
        self.inner.stop().await
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        if !self.inner_started {
            return Ok(());
        }
        self.inner.stop_with(connector_deleted).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> ConfigMap {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_defaults_name_debeziums_slot_and_publication() {
        let r = resources_of(&config(&[
            ("database.hostname", "db"),
            ("database.dbname", "shop"),
        ]))
        .unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].kind.clone(), r[0].name.as_str()),
            (ResourceKind::ReplicationSlot, DEFAULT_SLOT)
        );
        assert_eq!(
            (r[1].kind.clone(), r[1].name.as_str()),
            (ResourceKind::Publication, DEFAULT_PUBLICATION)
        );
        assert_eq!(r[0].locator.host, "db:5432");
        assert_eq!(r[0].locator.database, "shop");
    }

    #[test]
    fn named_slot_and_publication_are_used_and_a_disabled_publication_is_not_recorded() {
        let r = resources_of(&config(&[
            ("database.hostname", "db"),
            ("database.port", "5433"),
            ("database.dbname", "shop"),
            ("slot.name", "orders_slot"),
            ("publication.name", "orders_pub"),
        ]))
        .unwrap();
        assert_eq!(r[0].name, "orders_slot");
        assert_eq!(r[1].name, "orders_pub");
        assert_eq!(r[1].locator.host, "db:5433");
        let r = resources_of(&config(&[
            ("database.hostname", "db"),
            ("database.dbname", "shop"),
            ("publication.autocreate.mode", "disabled"),
        ]))
        .unwrap();
        assert_eq!(r.len(), 1);
    }

    #[test]
    fn a_config_without_a_database_is_refused_naming_the_key() {
        for (pairs, key) in [
            (vec![("database.dbname", "x")], "database.hostname"),
            (vec![("database.hostname", "x")], "database.dbname"),
            (
                vec![
                    ("database.hostname", "x"),
                    ("database.dbname", "x"),
                    ("database.port", "port"),
                ],
                "database.port",
            ),
        ] {
            let err = resources_of(&config(&pairs)).unwrap_err();
            assert!(err.contains(key), "{err}");
        }
    }

    #[test]
    fn an_active_slot_is_waited_for_then_its_backend_terminated() {
        let short = Duration::from_millis(10);
        let long = Duration::from_millis(ACTIVE_GRACE_MS);
        assert_eq!(slot_step(None, short), SlotStep::Absent);
        assert_eq!(slot_step(Some(None), long), SlotStep::Drop);
        assert_eq!(slot_step(Some(Some(7)), short), SlotStep::Wait);
        assert_eq!(slot_step(Some(Some(7)), long), SlotStep::Terminate(7));
    }

    #[test]
    fn the_password_never_shows_in_debug() {
        let c = Connection::of(&config(&[
            ("database.hostname", "db"),
            ("database.dbname", "shop"),
            ("database.password", "hunter2"),
        ]))
        .unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn only_debeziums_class_is_adapted() {
        let other = crate::test_plugin::source_plugin();
        assert!(adapt(other).is_none());
        let mut named = crate::test_plugin::source_plugin();
        named.name = CLASS.to_owned();
        assert!(adapt(named).is_some());
    }

    #[test]
    fn identifiers_are_quoted() {
        assert_eq!(quote_ident("dbz"), "\"dbz\"");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
    }

    fn db(extra: &[(&str, &str)]) -> ConfigMap {
        let mut c = config(&[("database.hostname", "db"), ("database.dbname", "shop")]);
        for (k, v) in extra {
            c.insert((*k).to_owned(), (*v).to_owned());
        }
        c
    }

    #[test]
    fn no_sslmode_is_debeziums_prefer() {
        let t = tls_of(&db(&[])).unwrap();
        assert_eq!(
            (t.wire, t.plan),
            (WireSslMode::Prefer, TlsPlan::EncryptOnly)
        );
    }

    #[test]
    fn disable_is_plaintext_even_with_a_ca_file() {
        let t = tls_of(&db(&[
            ("database.sslmode", "disable"),
            (SSLROOTCERT, "/ca.pem"),
        ]))
        .unwrap();
        assert_eq!((t.wire, t.plan), (WireSslMode::Disable, TlsPlan::Plain));
    }

    #[test]
    fn allow_and_prefer_try_tls_first_without_checking_the_certificate() {
        for mode in ["allow", "prefer"] {
            let t = tls_of(&db(&[("database.sslmode", mode)])).unwrap();
            assert_eq!(
                (t.wire, t.plan),
                (WireSslMode::Prefer, TlsPlan::EncryptOnly),
                "{mode}"
            );
        }
    }

    #[test]
    fn require_encrypts_without_checking_the_certificate_as_the_jdbc_driver_does() {
        let t = tls_of(&db(&[
            ("database.sslmode", "require"),
            (SSLROOTCERT, "/ca.pem"),
        ]))
        .unwrap();
        assert_eq!(
            (t.wire, t.plan),
            (WireSslMode::Require, TlsPlan::EncryptOnly)
        );
    }

    #[test]
    fn verify_ca_checks_the_chain_to_the_ca_file() {
        let t = tls_of(&db(&[
            ("database.sslmode", "verify-ca"),
            (SSLROOTCERT, "/ca.pem"),
        ]))
        .unwrap();
        assert_eq!(
            (t.wire, t.plan),
            (WireSslMode::Require, TlsPlan::VerifyChain("/ca.pem".into()))
        );
    }

    #[test]
    fn verify_full_checks_chain_and_host_name() {
        let t = tls_of(&db(&[
            ("database.sslmode", "verify-full"),
            (SSLROOTCERT, "/ca.pem"),
        ]))
        .unwrap();
        assert_eq!(
            (t.wire, t.plan),
            (WireSslMode::Require, TlsPlan::VerifyFull("/ca.pem".into()))
        );
    }

    #[test]
    fn verifying_modes_without_a_ca_file_name_the_key() {
        for mode in ["verify-ca", "verify-full"] {
            let err = tls_of(&db(&[("database.sslmode", mode)])).unwrap_err();
            assert!(err.contains(SSLROOTCERT) && err.contains(mode), "{err}");
        }
    }

    #[test]
    fn an_unknown_sslmode_names_the_key_and_the_accepted_values() {
        let err = tls_of(&db(&[("database.sslmode", "verify_full")])).unwrap_err();
        assert!(
            err.contains("database.sslmode") && err.contains("verify-full"),
            "{err}"
        );
    }

    #[test]
    fn a_relative_ca_path_or_a_client_certificate_is_refused_naming_the_key() {
        let err = tls_of(&db(&[
            ("database.sslmode", "verify-ca"),
            (SSLROOTCERT, "ca.pem"),
        ]))
        .unwrap_err();
        assert!(err.contains(SSLROOTCERT), "{err}");
        for key in ["database.sslcert", "database.sslkey"] {
            let err = tls_of(&db(&[(key, "/c.pem")])).unwrap_err();
            assert!(err.contains(key), "{err}");
        }
    }

    fn mark(connector: &str, incarnation: &str) -> OwnerMark {
        OwnerMark::of(connector, incarnation)
    }

    #[test]
    fn a_start_proceeds_over_nothing_its_own_mark_or_no_mark() {
        let me = mark("c", "i1");
        for found in [
            Found::Absent,
            Found::Bare,
            Found::Commented,
            Found::Marked(me.clone()),
        ] {
            assert_eq!(start_step(&found, &me), StartStep::Proceed, "{found:?}");
        }
    }

    #[test]
    fn a_start_refuses_what_another_incarnation_kept() {
        assert_eq!(
            start_step(&Found::Marked(mark("c", "i1")), &mark("c", "i2")),
            StartStep::RefuseKept {
                incarnation: "i1".into()
            }
        );
    }

    #[test]
    fn a_start_refuses_what_another_connector_marked() {
        assert_eq!(
            start_step(&Found::Marked(mark("other", "i1")), &mark("c", "i1")),
            StartStep::RefuseClaimed {
                connector: "other".into()
            }
        );
    }

    #[test]
    fn only_a_publication_without_a_comment_gets_the_mark() {
        assert_eq!(mark_step(&Found::Bare), MarkStep::Write);
        for found in [
            Found::Absent,
            Found::Commented,
            Found::Marked(mark("c", "i1")),
        ] {
            assert_eq!(mark_step(&found), MarkStep::Nothing, "{found:?}");
        }
    }

    #[test]
    fn a_cleanup_drops_its_own_or_unmarked_resources() {
        let me = mark("c", "i1");
        for found in [
            Found::Absent,
            Found::Bare,
            Found::Commented,
            Found::Marked(me.clone()),
        ] {
            assert_eq!(cleanup_step(&found, &me), CleanupStep::Drop, "{found:?}");
        }
    }

    #[test]
    fn a_late_cleanup_leaves_what_another_incarnation_or_connector_marked() {
        for other in [mark("c", "i2"), mark("other", "i1")] {
            assert_eq!(
                cleanup_step(&Found::Marked(other.clone()), &mark("c", "i1")),
                CleanupStep::Leave { owner: other }
            );
        }
    }

    #[test]
    fn a_refusal_names_the_slot_the_publication_and_the_other_incarnation() {
        let c = db(&[("slot.name", "s1"), ("publication.name", "p1")]);
        let why = refusal(
            &c,
            &StartStep::RefuseKept {
                incarnation: "i1".into(),
            },
            &mark("c", "i2"),
        )
        .unwrap();
        assert!(
            why.contains("replication slot s1")
                && why.contains("publication p1")
                && why.contains("incarnation i1"),
            "{why}"
        );
        assert!(refusal(&c, &StartStep::Proceed, &mark("c", "i2")).is_none());
    }

    #[test]
    fn the_owner_mark_round_trips_as_json() {
        let m = mark("c", "i1");
        let text = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<OwnerMark>(&text).unwrap(), m);
        assert!(serde_json::from_str::<OwnerMark>("orders feed").is_err());
    }
}
