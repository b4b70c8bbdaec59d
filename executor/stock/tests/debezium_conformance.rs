//! Debezium's PostgreSQL connector passes the conformance kit's resource-ledger checks
//! (`Kit::ledger_required`), run as the stock `wharf-executor` runs it: in the JVM plugin
//! host (`--plugin-path` with the Connect and Debezium jars), wrapped by
//! `wharf_connectors::debezium_postgres::adapt` (what `ExecutorBuilder::adapt_plugins`
//! applies). The database is a test-owned PostgreSQL with `wal_level = logical`; the probe
//! reads `pg_replication_slots` and `pg_publication`. The kit checks that the slot and the
//! publication are in the connector's ledger, intent before confirmation; that
//! `stop(false)` releases nothing and leaves the slot; that a deletion leaves no created
//! entry unaccounted and neither the slot nor the publication in the database. The kit's
//! cleanup checks run too, and the two on incarnations (the owner mark on the
//! publication: a late cleanup spares a re-created connector's slot, a start refuses a
//! kept one). A last test runs Debezium and the adapter's drop over TLS only
//! (`database.sslmode = verify-full`), on a PostgreSQL that admits no plaintext client.
//!
//! Needs Java (a JDK: `java`, `javac`, `jar`) and the Connect/Debezium jars
//! (`scripts/setup-services connect`, which `scripts/test` runs); without them each test
//! says so on stderr and passes without checking anything.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use wharf_connectors::debezium_postgres::{self, CLASS};
use wharf_executor::process::plugin_path::{self, JvmHost};
use wharf_harness::jvm;
use wharf_harness::logical_postgres::LogicalPostgres;
use wharf_harness::postgres_tls::TlsPostgres;
use wharf_harness::tokio_postgres::Client;
use wharf_sdk::{
    ConfigMap, ConnectorContext, EntryState, MemoryLedger, ResourceKind, ResourceOwner, Resources,
};
use wharf_testkit::{Kit, Probe};

/// Bound on one plugin call of the kit: Debezium's task start opens a replication
/// connection and creates the slot, which waits for the transactions running then.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Bound on a deletion-aware stop: the JVM task's stop, then the adapter's drop, which may
/// wait up to its own `DROP_DEADLINE_MS` for the walsender to let go of the slot.
const CLEANUP_TIMEOUT: Duration =
    Duration::from_millis(debezium_postgres::DROP_DEADLINE_MS + 30_000);

/// Why the JVM side cannot run here (Java or the jars missing), or `None`.
fn missing_jvm_parts() -> Option<String> {
    for tool in ["java", "javac", "jar"] {
        let ran = Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !ran.is_ok_and(|s| s.success()) {
            return Some(format!(
                "`{tool} --version` does not run: a JDK 17 is needed (scripts/setup-services connect)"
            ));
        }
    }
    let libs = match std::env::var("WHARF_CONNECT_LIBS") {
        Ok(dir) => PathBuf::from(dir),
        Err(_) => {
            let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            let out = Command::new(repo.join("scripts/setup-services"))
                .arg("connect-libs-path")
                .output();
            match out {
                Ok(o) if o.status.success() => {
                    PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
                }
                _ => {
                    return Some(
                        "the Connect jars are missing: run scripts/setup-services connect".into(),
                    );
                }
            }
        }
    };
    let has_debezium = std::fs::read_dir(&libs)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("debezium-connector-postgres-")
        });
    (!has_debezium).then(|| {
        format!(
            "no debezium-connector-postgres jar in {}: run scripts/setup-services connect",
            libs.display()
        )
    })
}

/// Debezium's plugin from a plugin location holding every jar of the Connect/Debezium
/// directory (one JVM, as tests/debezium_postgres_end_to_end.rs runs it), adapted as the
/// stock executor adapts it.
async fn adapted_debezium(dir: &Path) -> wharf_sdk::Plugin {
    let classpath = jvm::build_host(&dir.join("jvm-host"));
    let libs = jvm::connect_libs();
    let jars: Vec<String> = std::fs::read_dir(&libs)
        .expect("the Connect jars' directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".jar"))
        .collect();
    let plugins = dir.join("plugins");
    jvm::link_jars(
        &plugins.join("debezium"),
        &jars.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let host = JvmHost {
        java: "java".into(),
        classpath,
    };
    // Blocks for the JVM's scan and describe (bounded by PLUGIN_PATH_DESCRIBE_TIMEOUT_MS).
    let processes = tokio::task::spawn_blocking(move || plugin_path::start(&[plugins], &host))
        .await
        .expect("the plugin path's start")
        .expect("the Debezium location's JVM starts and describes");
    let plugin = processes
        .iter()
        .flat_map(|p| p.plugins())
        .find(|p| p.name == CLASS)
        .unwrap_or_else(|| panic!("{CLASS} is offered"));
    debezium_postgres::adapt(plugin).expect("the stock executor adapts Debezium's class")
}

/// `name` as a replication slot name (lower case letters, digits, underscores).
fn slot_of(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Debezium's config for connector `name` on the test's PostgreSQL: a slot and a
/// publication named after the connector, streaming only (no snapshot to wait for).
fn config_for(port: u16) -> impl Fn(&str) -> ConfigMap + Send + Sync + 'static {
    move |name| {
        let slot = slot_of(name);
        [
            ("database.hostname", "127.0.0.1".to_owned()),
            ("database.port", port.to_string()),
            ("database.user", "postgres".to_owned()),
            ("database.dbname", "postgres".to_owned()),
            ("topic.prefix", slot.clone()),
            ("table.include.list", "public.items".to_owned()),
            ("plugin.name", "pgoutput".to_owned()),
            ("snapshot.mode", "no_data".to_owned()),
            ("publication.name", format!("{slot}_pub")),
            ("slot.name", slot),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }
}

/// What a Debezium connector owns in the database: its slot and its publication, as
/// `pg_replication_slots` and `pg_publication` list them.
struct SlotProbe {
    db: Client,
}

impl SlotProbe {
    async fn slot_exists(&self, slot: &str) -> Result<bool, String> {
        self.db
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .map(|r| r.is_some())
            .map_err(|e| format!("cannot read pg_replication_slots: {e}"))
    }

    async fn publication_exists(&self, publication: &str) -> Result<bool, String> {
        self.db
            .query_opt(
                "SELECT 1 FROM pg_publication WHERE pubname = $1",
                &[&publication],
            )
            .await
            .map(|r| r.is_some())
            .map_err(|e| format!("cannot read pg_publication: {e}"))
    }
}

#[async_trait]
impl Probe for SlotProbe {
    async fn owned(
        &self,
        _connector: &str,
        config: &ConfigMap,
    ) -> Result<BTreeSet<String>, String> {
        let mut out = BTreeSet::new();
        let slot = &config["slot.name"];
        if self.slot_exists(slot).await? {
            out.insert(format!("replication slot {slot}"));
        }
        let publication = &config["publication.name"];
        if self.publication_exists(publication).await? {
            out.insert(format!("publication {publication}"));
        }
        Ok(out)
    }

    /// The watched table is the user's: a deletion must leave it.
    async fn pre_existing(&self, _config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        let found = self
            .db
            .query_opt(
                "SELECT 1 FROM pg_tables WHERE schemaname = 'public' AND tablename = 'items'",
                &[],
            )
            .await
            .map_err(|e| format!("cannot read pg_tables: {e}"))?;
        Ok(found
            .map(|_| "table public.items".to_owned())
            .into_iter()
            .collect())
    }

    /// Drops the publication or the slot behind the plugin's back (the state a start that
    /// failed between the two leaves).
    async fn remove(&self, resource: &str) -> Result<bool, String> {
        if let Some(publication) = resource.strip_prefix("publication ") {
            self.db
                .batch_execute(&format!("DROP PUBLICATION \"{publication}\""))
                .await
                .map_err(|e| format!("cannot drop publication {publication}: {e}"))?;
            return Ok(true);
        }
        if let Some(slot) = resource.strip_prefix("replication slot ") {
            self.db
                .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
                .await
                .map_err(|e| format!("cannot drop replication slot {slot}: {e}"))?;
            return Ok(true);
        }
        Ok(false)
    }
}

/// The adapter records the slot and the publication at the connector's start, before
/// Debezium's task (which creates them) has started: in the ledger, neither in the
/// database yet. A plain stop then releases nothing.
async fn ledger_is_written_before_the_slot_exists(
    plugin: &wharf_sdk::Plugin,
    probe: &SlotProbe,
    port: u16,
) {
    let config = {
        let mut c = config_for(port)("dbz-early");
        c.insert("connector.class".into(), CLASS.into());
        c.insert("tasks.max".into(), "1".into());
        c
    };
    let ledger = Arc::new(MemoryLedger::default());
    let ctx = ConnectorContext::new("dbz-early", "incarnation-1", false, "test", Arc::new(|| {}))
        .with_resources(Resources::new(ledger.clone(), ResourceOwner::Connector));
    let mut connector = (plugin.connector)();
    tokio::time::timeout(CALL_TIMEOUT, connector.start(ctx, config.clone()))
        .await
        .expect("the connector's start within its bound")
        .expect("the connector starts");
    let mut recorded: Vec<(ResourceKind, String, EntryState)> = ledger
        .entries()
        .into_iter()
        .map(|e| (e.resource.kind, e.resource.name, e.state))
        .collect();
    recorded.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(
        recorded,
        [
            (
                ResourceKind::ReplicationSlot,
                "dbz_early".to_owned(),
                EntryState::Confirmed
            ),
            (
                ResourceKind::Publication,
                "dbz_early_pub".to_owned(),
                EntryState::Confirmed
            ),
        ]
    );
    assert!(
        probe.owned("dbz-early", &config).await.unwrap().is_empty(),
        "no task ran: neither the slot nor the publication exists yet"
    );
    let changes = ledger.changes().len();
    tokio::time::timeout(CALL_TIMEOUT, connector.stop_with(false))
        .await
        .expect("the connector's stop within its bound")
        .expect("the connector stops");
    assert_eq!(
        ledger.changes().len(),
        changes,
        "stop(false) records nothing"
    );
}

/// The test's PostgreSQL, Debezium's adapted plugin and the probe; `None` (said on stderr)
/// when Java or the jars are missing.
struct Setup {
    pg: LogicalPostgres,
    /// The JVM host's build and the plugin location, for as long as the plugin runs.
    dir: tempfile::TempDir,
    plugin: wharf_sdk::Plugin,
    probe: SlotProbe,
}

async fn setup(test: &str) -> Option<Setup> {
    if let Some(why) = missing_jvm_parts() {
        eprintln!("skipped {test}: {why}");
        return None;
    }
    let pg = LogicalPostgres::start().await;
    let db = pg.client("postgres").await;
    db.batch_execute("CREATE TABLE items (id bigint PRIMARY KEY, name text)")
        .await
        .expect("the watched table");
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = adapted_debezium(dir.path()).await;
    Some(Setup {
        pg,
        dir,
        plugin,
        probe: SlotProbe { db },
    })
}

/// The kit for Debezium; the server and the directory the plugin runs from are given back
/// to be kept while it runs.
fn kit(s: Setup) -> (LogicalPostgres, tempfile::TempDir, Kit<SlotProbe>) {
    let kit = Kit::new(s.plugin, config_for(s.pg.port), s.probe)
        .name_prefix("dbz")
        // Debezium's PostgreSQL connector runs one task.
        .tasks_max(1)
        .call_timeout(CALL_TIMEOUT)
        .cleanup_timeout(CLEANUP_TIMEOUT)
        .ledger_required();
    (s.pg, s.dir, kit)
}

/// Runs `checks` of `kit`; panics naming every one that failed, with the server's log.
async fn pass(kit: &Kit<SlotProbe>, log: impl Fn() -> String, checks: &[&str]) {
    let mut failed = Vec::new();
    for check in checks {
        if let Err(e) = kit.run(check).await {
            failed.push(e.to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{}\npostgres log:\n{}",
        failed.join("\n"),
        log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_postgres_in_the_jvm_host_passes_the_kits_ledger_and_cleanup_checks() {
    let Some(s) =
        setup("debezium_postgres_in_the_jvm_host_passes_the_kits_ledger_and_cleanup_checks").await
    else {
        return;
    };
    ledger_is_written_before_the_slot_exists(&s.plugin, &s.probe, s.pg.port).await;
    let (pg, _dir, kit) = kit(s);
    pass(
        &kit,
        || pg.log(),
        &[
            "ledger_declares_before_creating",
            "plain_stop_releases_nothing",
            "delete_releases_every_created_entry",
            "delete_removes_everything",
            "repeated_cleanup_is_a_no_op",
            "cleanup_without_start_succeeds",
            "cleanup_after_half_start_succeeds",
            "plain_stops_keep_resources",
            "deleting_one_connector_leaves_another",
            "pre_existing_resources_survive",
        ],
    )
    .await;
}

/// The owner mark on the publication: a late cleanup of a deleted incarnation leaves the
/// slot and the publication of the connector created again under the same name, and a
/// start of a new incarnation refuses what a deletion with `keep_resources` kept (the
/// ledger's second-claim refusal is the control plane's, which the kit does not run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_postgres_in_the_jvm_host_spares_and_refuses_another_incarnations_slot() {
    let Some(s) =
        setup("debezium_postgres_in_the_jvm_host_spares_and_refuses_another_incarnations_slot")
            .await
    else {
        return;
    };
    let (pg, _dir, kit) = kit(s);
    pass(
        &kit,
        || pg.log(),
        &[
            "late_cleanup_leaves_a_re_created_connector",
            "start_refuses_what_another_incarnation_kept",
        ],
    )
    .await;
}

/// Debezium and the adapter over TLS only: the server admits no plaintext client, the
/// connector verifies the server's certificate (`verify-full` with the test's CA); the
/// adapter's check at start, its mark and its drop on deletion connect the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debezium_postgres_in_the_jvm_host_drops_its_slot_over_tls() {
    if let Some(why) = missing_jvm_parts() {
        eprintln!("skipped debezium_postgres_in_the_jvm_host_drops_its_slot_over_tls: {why}");
        return;
    }
    let pg = TlsPostgres::start_logical(&["127.0.0.1"]).await;
    let db = pg.client("127.0.0.1", "postgres").await;
    db.batch_execute("CREATE TABLE items (id bigint PRIMARY KEY, name text)")
        .await
        .expect("the watched table");
    let dir = tempfile::tempdir().expect("temp dir");
    let plugin = adapted_debezium(dir.path()).await;
    let (port, ca) = (pg.port, pg.certs.ca.display().to_string());
    let plain = config_for(port);
    let over_tls = move |name: &str| {
        let mut c = plain(name);
        c.insert("database.sslmode".into(), "verify-full".into());
        c.insert("database.sslrootcert".into(), ca.clone());
        c
    };
    let kit = Kit::new(plugin, over_tls, SlotProbe { db })
        .name_prefix("dbz-tls")
        .tasks_max(1)
        .call_timeout(CALL_TIMEOUT)
        .cleanup_timeout(CLEANUP_TIMEOUT)
        .ledger_required();
    pass(
        &kit,
        || pg.log(),
        &[
            "delete_releases_every_created_entry",
            "delete_removes_everything",
            "plain_stops_keep_resources",
        ],
    )
    .await;
}
