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
//! The connection is plaintext (`database.sslmode` other than `disable` is refused at
//! the drop, naming the key): TLS for it is not there yet.

use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::NoTls;
use wharf_sdk::{
    ConfigMap, Connector, ConnectorContext, Locator, Plugin, PluginResult, Resource, ResourceKind,
};

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

/// `plugin` made deletion-aware when it is Debezium's PostgreSQL connector; `None`
/// for any other plugin.
pub fn adapt(plugin: Plugin) -> Option<Plugin> {
    if plugin.name != CLASS {
        return None;
    }
    let inner = plugin.connector.clone();
    Some(Plugin {
        connector: std::sync::Arc::new(move || {
            Box::new(DebeziumPostgres {
                inner: inner(),
                ctx: None,
                config: ConfigMap::new(),
            }) as Box<dyn Connector>
        }),
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
    let conn = Connection::of(config)?;
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

/// The connector's own connection settings.
#[derive(Clone, PartialEq, Eq)]
struct Connection {
    host: String,
    port: u16,
    user: String,
    password: Option<String>,
    dbname: String,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("Connection")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("dbname", &self.dbname)
            .finish_non_exhaustive()
    }
}

impl Connection {
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
        Ok(Self {
            host,
            port,
            user: non_empty(config, "database.user")
                .unwrap_or("postgres")
                .to_owned(),
            password: config.get("database.password").cloned(),
            dbname,
        })
    }

    async fn connect(&self) -> Result<tokio_postgres::Client, String> {
        let mut pg = tokio_postgres::Config::new();
        pg.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .connect_timeout(Duration::from_secs(CONNECT_TIMEOUT_S));
        if let Some(p) = &self.password {
            pg.password(p);
        }
        let (client, connection) = pg.connect(NoTls).await.map_err(|e| {
            format!(
                "cannot connect to {}:{} database {} to drop Debezium's slot: {e}",
                self.host, self.port, self.dbname
            )
        })?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
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
}

/// Drops the slot and the publication of `config` and accounts for them in the ledger of
/// `ctx`.
async fn clean_up(config: &ConfigMap, ctx: Option<&ConnectorContext>) -> PluginResult<()> {
    let resources = resources_of(config)?;
    if non_empty(config, "database.sslmode").is_some_and(|m| m != "disable") {
        return Err(
            "config[database.sslmode]: Wharf drops Debezium's slot over plaintext only; drop it by hand"
                .into(),
        );
    }
    let client = Connection::of(config)?.connect().await?;
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
        self.config = config.clone();
        self.ctx = Some(ctx.clone());
        if !ctx.cleanup_only {
            // Recorded before Debezium's task can create them (the task starts after).
            for r in resources_of(&config)? {
                ctx.resources().intend(&r).await?;
                ctx.resources().confirm(&r).await?;
            }
        }
        self.inner.start(ctx, config).await
    }

    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
        self.inner.task_configs(max_tasks).await
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        // The Java connector gets its stop() either way (it has no stop(boolean)).
        let stopped = self.inner.stop_with(connector_deleted).await;
        if connector_deleted {
            clean_up(&self.config, self.ctx.as_ref()).await?;
        }
        stopped
    }

    fn declared_resources(&self, config: &ConfigMap) -> PluginResult<Vec<Resource>> {
        Ok(resources_of(config)?)
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
}
