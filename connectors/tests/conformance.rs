//! The built-in audit sources pass the conformance kit (`wharf-testkit`), each check its
//! own test: sqlite-audit against real SQLite files, postgres-audit against the real
//! PostgreSQL on 127.0.0.1:5432 (scripts/setup-services); file-sink passes the kit's
//! ledger checks against a real file (its file is adopted: kept by a deletion).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use tokio_postgres::NoTls;
use wharf_connectors::audit_names::{derived_name, quote_ident};
use wharf_connectors::{postgres_audit, sqlite_audit};
use wharf_sdk::ConfigMap;
use wharf_testkit::{Kit, Probe};

/// Watched tables every kit connector uses: the user's, never to be removed.
const TABLES: [&str; 2] = ["orders", "items"];

// ---- file-sink --------------------------------------------------------------------

/// file-sink owns nothing outside: its file is the user's output, adopted in its ledger
/// and kept by a deletion, so the probe lists nothing owned (the kit's ledger checks take
/// a plugin that only adopts).
struct FileProbe;

#[async_trait]
impl Probe for FileProbe {
    async fn owned(
        &self,
        _connector: &str,
        _config: &ConfigMap,
    ) -> Result<BTreeSet<String>, String> {
        Ok(BTreeSet::new())
    }
}

fn file_sink_kit() -> (tempfile::TempDir, Kit<FileProbe>) {
    let dir = tempfile::tempdir().unwrap();
    let root = wharf_connectors::file::FileRoot::new(dir.path()).unwrap();
    let kit = Kit::new(
        wharf_connectors::file::sink_plugin(root),
        |name| {
            [
                ("file", format!("{name}.jsonl")),
                ("topics", "t".to_owned()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
        },
        FileProbe,
    )
    .ledger_required();
    (dir, kit)
}

#[tokio::test]
async fn file_sink_declares_its_file_before_opening_it() {
    file_sink_kit()
        .1
        .ledger_declares_before_creating()
        .await
        .unwrap();
}

#[tokio::test]
async fn file_sink_plain_stop_releases_nothing() {
    file_sink_kit()
        .1
        .plain_stop_releases_nothing()
        .await
        .unwrap();
}

#[tokio::test]
async fn file_sink_delete_keeps_and_never_releases_its_adopted_file() {
    let (dir, kit) = file_sink_kit();
    kit.delete_releases_every_created_entry().await.unwrap();
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert!(!left.is_empty(), "the deletion kept the sink's output");
}

// ---- sqlite-audit ---------------------------------------------------------------

struct SqliteProbe {
    path: PathBuf,
}

impl SqliteProbe {
    fn objects(&self) -> Result<Vec<(String, String)>, String> {
        let conn = rusqlite::Connection::open(&self.path).map_err(|e| e.to_string())?;
        let mut stmt = conn
            .prepare("SELECT type, name FROM sqlite_master ORDER BY type, name")
            .map_err(|e| e.to_string())?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(|e| e.to_string())?
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())
    }
}

#[async_trait]
impl Probe for SqliteProbe {
    async fn owned(
        &self,
        connector: &str,
        _config: &ConfigMap,
    ) -> Result<BTreeSet<String>, String> {
        let audit = derived_name("wharf_audit", connector);
        let triggers = derived_name("wharf_audit_trg", connector);
        Ok(self
            .objects()?
            .into_iter()
            .filter(|(ty, name)| {
                (ty == "table" && *name == audit)
                    || (ty == "trigger" && name.starts_with(&triggers))
            })
            .map(|(ty, name)| format!("{ty} {name}"))
            .collect())
    }

    async fn pre_existing(&self, _config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        Ok(self
            .objects()?
            .into_iter()
            .filter(|(ty, name)| ty == "table" && TABLES.contains(&name.as_str()))
            .map(|(ty, name)| format!("{ty} {name}"))
            .collect())
    }

    async fn remove(&self, resource: &str) -> Result<bool, String> {
        let Some((ty, name)) = resource.split_once(' ') else {
            return Ok(false);
        };
        let conn = rusqlite::Connection::open(&self.path).map_err(|e| e.to_string())?;
        let kind = if ty == "trigger" { "TRIGGER" } else { "TABLE" };
        conn.execute_batch(&format!("DROP {kind} IF EXISTS {}", quote_ident(name)))
            .map_err(|e| e.to_string())?;
        Ok(true)
    }
}

fn sqlite_kit() -> (tempfile::TempDir, Kit<SqliteProbe>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let conn = rusqlite::Connection::open(&path).unwrap();
    for t in TABLES {
        conn.execute_batch(&format!(
            "CREATE TABLE {t} (id INTEGER PRIMARY KEY, v TEXT)"
        ))
        .unwrap();
    }
    let p = path.display().to_string();
    let kit = Kit::new(
        sqlite_audit::plugin(),
        move |_name| {
            [
                (sqlite_audit::keys::DATABASE_PATH, p.as_str()),
                (sqlite_audit::keys::TABLES, "orders,items"),
                (sqlite_audit::keys::TOPIC, "audit"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
        },
        SqliteProbe { path },
    )
    .ledger_required();
    (dir, kit)
}

#[tokio::test]
async fn sqlite_audit_declares_its_resources_before_creating_them() {
    sqlite_kit()
        .1
        .ledger_declares_before_creating()
        .await
        .unwrap();
}

#[tokio::test]
async fn sqlite_audit_plain_stop_releases_nothing() {
    sqlite_kit().1.plain_stop_releases_nothing().await.unwrap();
}

#[tokio::test]
async fn sqlite_audit_delete_releases_every_created_entry() {
    sqlite_kit()
        .1
        .delete_releases_every_created_entry()
        .await
        .unwrap();
}

#[tokio::test]
async fn sqlite_audit_plain_stops_keep_resources() {
    sqlite_kit().1.plain_stops_keep_resources().await.unwrap();
}

#[tokio::test]
async fn sqlite_audit_lower_tasks_max_keeps_resources() {
    sqlite_kit()
        .1
        .lower_tasks_max_keeps_resources()
        .await
        .unwrap();
}

#[tokio::test]
async fn sqlite_audit_delete_removes_everything() {
    sqlite_kit().1.delete_removes_everything().await.unwrap();
}

#[tokio::test]
async fn sqlite_audit_repeated_cleanup_is_a_no_op() {
    sqlite_kit().1.repeated_cleanup_is_a_no_op().await.unwrap();
}

#[tokio::test]
async fn sqlite_audit_cleanup_without_start_succeeds() {
    sqlite_kit()
        .1
        .cleanup_without_start_succeeds()
        .await
        .unwrap();
}

#[tokio::test]
async fn sqlite_audit_cleanup_after_half_start_succeeds() {
    sqlite_kit()
        .1
        .cleanup_after_half_start_succeeds()
        .await
        .unwrap();
}

#[tokio::test]
async fn sqlite_audit_deleting_one_connector_leaves_another() {
    sqlite_kit()
        .1
        .deleting_one_connector_leaves_another()
        .await
        .unwrap();
}

#[tokio::test]
async fn sqlite_audit_pre_existing_resources_survive() {
    sqlite_kit()
        .1
        .pre_existing_resources_survive()
        .await
        .unwrap();
}

// ---- postgres-audit -------------------------------------------------------------

static COUNTER: AtomicU32 = AtomicU32::new(0);

async fn pg(db: &str) -> Result<tokio_postgres::Client, String> {
    let (client, conn) = tokio_postgres::Config::new()
        .host("127.0.0.1")
        .port(5432)
        .user("postgres")
        .dbname(db)
        .connect(NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

/// A database of its own per test, dropped at the end (also on panic, from a thread).
struct PgProbe {
    db: String,
}

impl Drop for PgProbe {
    fn drop(&mut self) {
        let db = self.db.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let c = pg("postgres").await.ok()?;
                c.batch_execute(&format!(
                    "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                    quote_ident(&db)
                ))
                .await
                .ok()
            })
        })
        .join();
    }
}

impl PgProbe {
    async fn rows(
        &self,
        sql: &str,
        args: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<BTreeSet<String>, String> {
        let c = pg(&self.db).await?;
        let rows = c.query(sql, args).await.map_err(|e| e.to_string())?;
        Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
    }
}

#[async_trait]
impl Probe for PgProbe {
    async fn owned(
        &self,
        connector: &str,
        _config: &ConfigMap,
    ) -> Result<BTreeSet<String>, String> {
        let audit = derived_name("wharf_audit", connector);
        let function = derived_name("wharf_audit_fn", connector);
        let trigger = derived_name("wharf_audit_trg", connector);
        let mut out = self
            .rows(
                "SELECT 'table public.' || relname FROM pg_class WHERE relname = $1",
                &[&audit],
            )
            .await?;
        out.extend(
            self.rows(
                "SELECT 'function public.' || proname FROM pg_proc WHERE proname = $1",
                &[&function],
            )
            .await?,
        );
        out.extend(
            self.rows(
                "SELECT 'trigger ' || t.tgname || ' on ' || c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE t.tgname = $1",
                &[&trigger],
            )
            .await?,
        );
        Ok(out)
    }

    async fn pre_existing(&self, _config: &ConfigMap) -> Result<BTreeSet<String>, String> {
        self.rows(
            "SELECT 'table public.' || relname FROM pg_class WHERE relkind = 'r' AND relname = ANY($1)",
            &[&TABLES.to_vec()],
        )
        .await
    }

    async fn remove(&self, resource: &str) -> Result<bool, String> {
        let words: Vec<&str> = resource.split(' ').collect();
        let sql = match words.as_slice() {
            ["table", name] => format!("DROP TABLE IF EXISTS {name}"),
            ["function", name] => format!("DROP FUNCTION IF EXISTS {name}() CASCADE"),
            ["trigger", name, "on", table] => format!(
                "DROP TRIGGER IF EXISTS {} ON {}",
                quote_ident(name),
                quote_ident(table)
            ),
            _ => return Ok(false),
        };
        pg(&self.db)
            .await?
            .batch_execute(&sql)
            .await
            .map_err(|e| e.to_string())?;
        Ok(true)
    }
}

async fn pg_kit() -> Kit<PgProbe> {
    let db = format!(
        "wharf_kit_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let admin = pg("postgres").await.expect("PostgreSQL on 127.0.0.1:5432");
    admin
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .unwrap();
    let c = pg(&db).await.unwrap();
    for t in TABLES {
        c.batch_execute(&format!("CREATE TABLE {t} (id int PRIMARY KEY, v text)"))
            .await
            .unwrap();
    }
    let name = db.clone();
    Kit::new(
        postgres_audit::plugin(),
        move |_connector| {
            [
                (postgres_audit::keys::HOST, "127.0.0.1"),
                (postgres_audit::keys::USER, "postgres"),
                (postgres_audit::keys::DATABASE, name.as_str()),
                (postgres_audit::keys::TABLES, "public.orders,public.items"),
                (postgres_audit::keys::TOPIC, "audit"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
        },
        PgProbe { db },
    )
    .ledger_required()
}

#[tokio::test]
async fn postgres_audit_declares_its_resources_before_creating_them() {
    pg_kit()
        .await
        .ledger_declares_before_creating()
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres_audit_plain_stop_releases_nothing() {
    pg_kit().await.plain_stop_releases_nothing().await.unwrap();
}

#[tokio::test]
async fn postgres_audit_delete_releases_every_created_entry() {
    pg_kit()
        .await
        .delete_releases_every_created_entry()
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres_audit_plain_stops_keep_resources() {
    pg_kit().await.plain_stops_keep_resources().await.unwrap();
}

#[tokio::test]
async fn postgres_audit_lower_tasks_max_keeps_resources() {
    pg_kit()
        .await
        .lower_tasks_max_keeps_resources()
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres_audit_delete_removes_everything() {
    pg_kit().await.delete_removes_everything().await.unwrap();
}

#[tokio::test]
async fn postgres_audit_repeated_cleanup_is_a_no_op() {
    pg_kit().await.repeated_cleanup_is_a_no_op().await.unwrap();
}

#[tokio::test]
async fn postgres_audit_cleanup_without_start_succeeds() {
    pg_kit()
        .await
        .cleanup_without_start_succeeds()
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres_audit_cleanup_after_half_start_succeeds() {
    pg_kit()
        .await
        .cleanup_after_half_start_succeeds()
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres_audit_deleting_one_connector_leaves_another() {
    pg_kit()
        .await
        .deleting_one_connector_leaves_another()
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres_audit_pre_existing_resources_survive() {
    pg_kit()
        .await
        .pre_existing_resources_survive()
        .await
        .unwrap();
}

#[tokio::test]
async fn sqlite_audit_late_cleanup_leaves_a_re_created_connector() {
    sqlite_kit()
        .1
        .late_cleanup_leaves_a_re_created_connector()
        .await
        .unwrap();
}

#[tokio::test]
async fn sqlite_audit_start_refuses_what_another_incarnation_kept() {
    sqlite_kit()
        .1
        .start_refuses_what_another_incarnation_kept()
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres_audit_late_cleanup_leaves_a_re_created_connector() {
    pg_kit()
        .await
        .late_cleanup_leaves_a_re_created_connector()
        .await
        .unwrap();
}

#[tokio::test]
async fn postgres_audit_start_refuses_what_another_incarnation_kept() {
    pg_kit()
        .await
        .start_refuses_what_another_incarnation_kept()
        .await
        .unwrap();
}
