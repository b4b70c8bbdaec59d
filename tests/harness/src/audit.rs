//! Shared by the audit end-to-end tests (`tests/audit_*.rs`, case 01): a real control
//! plane and real executors sharing a test-owned NATS JetStream record log, driven with
//! the typed admin client, plus PostgreSQL helpers.
//!
//! Build the binaries first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use tokio_postgres::{Client, NoTls};

use crate::cluster::{CONVERGE, call_at, dial_for, wait_alive_at};
use crate::{KeepOnFailure, Proc, wait_until};

/// How long an executor may take to stop at SIGTERM, in milliseconds.
pub const GRACEFUL_TIMEOUT_MS: u64 = 5_000;

/// A test-owned nats-server with JetStream on a random port; killed on drop.
pub struct Nats {
    _proc: Proc,
    /// Client URL.
    pub url: String,
}

pub async fn start_nats(dir: &Path) -> Nats {
    let data = dir.join("nats");
    std::fs::create_dir_all(&data).unwrap();
    let proc = Proc::spawn(
        nats_server_binary(),
        vec![
            "-a".into(),
            "127.0.0.1".into(),
            "-p".into(),
            "-1".into(),
            "-js".into(),
            "-sd".into(),
            data.join("js").display().to_string(),
            "--ports_file_dir".into(),
            data.display().to_string(),
        ],
        &data,
    );
    let url = wait_until("nats-server to write its ports file", CONVERGE, || {
        let found = std::fs::read_dir(&data).ok().and_then(|entries| {
            entries
                .flatten()
                .find(|e| e.file_name().to_string_lossy().ends_with(".ports"))
                .and_then(|e| std::fs::read_to_string(e.path()).ok())
                .and_then(|text| serde_json::from_str::<Value>(&text).ok())
                .and_then(|v| v["nats"][0].as_str().map(str::to_owned))
        });
        async move { found }
    })
    .await;
    Nats { _proc: proc, url }
}

/// `$NATS_SERVER`, else `nats-server` from PATH, else Debian's `/usr/sbin/nats-server`.
pub fn nats_server_binary() -> PathBuf {
    if let Ok(p) = std::env::var("NATS_SERVER") {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("nats-server"))
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("/usr/sbin/nats-server"))
}

/// A free TCP port on loopback (bound and released), for a control plane that must come
/// back on the same address after kill -9.
pub fn free_port() -> u16 {
    crate::free_port_on("127.0.0.1")
}

/// A control plane, its executors and their NATS server.
pub struct Cluster {
    /// Temp dir holding every process's data dir (kept on failure).
    pub dir: KeepOnFailure,
    /// The control plane, on a fixed address so that it can come back after kill -9.
    pub cp: Proc,
    /// Its address, IP:PORT.
    pub cp_addr: String,
    /// Executors `exec-1` on 127.0.0.2, `exec-2` on 127.0.0.3, ...
    pub executors: Vec<Proc>,
    _nats: Nats,
}

impl Cluster {
    /// Starts NATS, a control plane and `n` executors; waits until all are ALIVE.
    pub async fn start(n: usize) -> Cluster {
        let dir = KeepOnFailure::new();
        let nats = start_nats(dir.path()).await;
        let cp_dir = dir.path().join("cp");
        let port = free_port();
        let mut cp = Proc::spawn(
            crate::bin("wharf-control-plane"),
            crate::cluster::control_plane_args(port, &cp_dir),
            &cp_dir,
        );
        let cp_addr = cp.listen_addr().await;
        let mut executors = Vec::new();
        for i in 0..n {
            let d = dir.path().join(format!("exec-{}", i + 1));
            let mut p = Proc::spawn(
                crate::bin("wharf-executor"),
                vec![
                    "--listen".into(),
                    format!("127.0.0.{}:0", i + 2),
                    "--control-plane".into(),
                    format!("http://{cp_addr}"),
                    "--data-dir".into(),
                    d.display().to_string(),
                    "--executor-id".into(),
                    format!("exec-{}", i + 1),
                    "--graceful-timeout-ms".into(),
                    GRACEFUL_TIMEOUT_MS.to_string(),
                    "--nats-url".into(),
                    nats.url.clone(),
                ],
                &d,
            );
            p.listen_addr().await;
            executors.push(p);
        }
        let c = Cluster {
            dir,
            cp,
            cp_addr,
            executors,
            _nats: nats,
        };
        c.wait_alive(n).await;
        c
    }

    /// Calls `wharf.v1.ConnectorAdmin/<method>`; panics unless it answers OK.
    pub fn call(&self, method: &str, body: Value) -> Value {
        let r = call_at(
            &self.cp_addr,
            &format!("wharf.v1.ConnectorAdmin/{method}"),
            &body,
        );
        assert_eq!(r.code, 0, "{method} {body}: {}", r.err);
        r.body
    }

    /// GetConnectorStatus body, or None when it fails (not found, unreachable).
    pub fn try_status(&self, name: &str) -> Option<Value> {
        let r = call_at(
            &self.cp_addr,
            "wharf.v1.ConnectorAdmin/GetConnectorStatus",
            &json!({ "name": name }),
        );
        (r.code == 0).then(|| r.body["status"].clone())
    }

    /// Waits until exactly `n` executors are ALIVE.
    pub async fn wait_alive(&self, n: usize) {
        wait_alive_at(&self.cp_addr, &dial_for(&self.cp_addr), n).await;
    }

    /// Waits until the connector and exactly `tasks` tasks are in `state`, every task
    /// generation above the one in `newer_than` (when given); returns the status.
    pub async fn wait_state(
        &self,
        name: &str,
        connector_state: &str,
        task_state: &str,
        tasks: usize,
        newer_than: Option<&Value>,
    ) -> Value {
        let old = newer_than.map(generations).unwrap_or_default();
        wait_until(
            &format!("{name}: connector {connector_state}, {tasks} tasks {task_state}"),
            CONVERGE,
            || async {
                let s = self.try_status(name)?;
                crate::cluster::state_reached(&s, connector_state, task_state, tasks, &old)
                    .then_some(s)
            },
        )
        .await
    }
}

/// Task number to generation, from a status body.
pub fn generations(status: &Value) -> BTreeMap<u64, u64> {
    status["tasks"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| {
                    let g = t["status"]["generation"]
                        .as_str()
                        .and_then(|g| g.parse().ok())
                        .or_else(|| t["status"]["generation"].as_u64())
                        .unwrap_or(0);
                    (t["task"].as_u64().unwrap_or(0), g)
                })
                .collect()
        })
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// PostgreSQL.

/// A connection to `db` on the test PostgreSQL (127.0.0.1:5432, user postgres).
pub async fn pg(db: &str) -> Client {
    let (client, conn) = tokio_postgres::Config::new()
        .host("127.0.0.1")
        .port(5432)
        .user("postgres")
        .dbname(db)
        .connect(NoTls)
        .await
        .expect("connect to the test PostgreSQL");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

/// The test's database, dropped with FORCE when the guard goes.
pub struct PgDb {
    /// Database name.
    pub name: String,
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async {
                let _ = pg("postgres")
                    .await
                    .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .await;
            });
        })
        .join();
    }
}

impl PgDb {
    /// Creates a fresh database called `name` (dropping a leftover of that name).
    pub async fn create(name: String) -> PgDb {
        let admin = pg("postgres").await;
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
            .unwrap();
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        PgDb { name }
    }
}

/// Host of task `task` in a status body.
pub fn task_host(status: &Value, task: u64) -> Option<String> {
    status["tasks"]
        .as_array()?
        .iter()
        .find(|t| t["task"].as_u64().unwrap_or(0) == task)?["status"]["executorId"]
        .as_str()
        .map(str::to_owned)
}

/// Index into [`Cluster::executors`] of executor `id` (`exec-<i+1>`).
pub fn executor_index(id: &str) -> usize {
    id.strip_prefix("exec-")
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|n| n.checked_sub(1))
        .unwrap_or_else(|| panic!("unknown executor id {id:?}"))
}
