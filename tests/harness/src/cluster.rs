//! Shared by the control-plane end-to-end tests: a real `wharf-control-plane` and real
//! `wharf-executor` processes on 127.0.0.2-4, driven through the typed tonic clients of
//! [`crate::client`].
//!
//! Build the binaries first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

pub use crate::client::{Call, ClientCert, Dial, Watch};
use crate::{KeepOnFailure, Proc, wait_until};

/// Lease the test control plane grants, in milliseconds (short, so lost executors are
/// noticed quickly).
pub const TEST_LEASE_MS: u32 = 2_000;
/// Heartbeat interval the test control plane asks for, in milliseconds.
pub const TEST_HEARTBEAT_INTERVAL_MS: u32 = 200;
/// Upper bound on a wait for the cluster to converge.
pub const CONVERGE: Duration = Duration::from_secs(40);

/// gRPC status codes used by the tests.
pub const INVALID_ARGUMENT: i32 = 3;
/// NOT_FOUND.
pub const NOT_FOUND: i32 = 5;
/// ALREADY_EXISTS.
pub const ALREADY_EXISTS: i32 = 6;
/// PERMISSION_DENIED.
pub const PERMISSION_DENIED: i32 = 7;
/// FAILED_PRECONDITION.
pub const FAILED_PRECONDITION: i32 = 9;
/// UNAUTHENTICATED.
pub const UNAUTHENTICATED: i32 = 16;

/// The flags of a test control plane on 127.0.0.1:`port` (a fixed port, so that a
/// restarted one is found again by its executors) with data dir `cp_dir`,
/// [`TEST_LEASE_MS`] and [`TEST_HEARTBEAT_INTERVAL_MS`].
pub fn control_plane_args(port: u16, cp_dir: &Path) -> Vec<String> {
    control_plane_flags(&format!("127.0.0.1:{port}"), cp_dir, TEST_LEASE_MS)
}

/// `--listen listen --data-dir data_dir --lease-ms lease_ms` and the test heartbeat
/// interval ([`TEST_HEARTBEAT_INTERVAL_MS`]): what every test control plane starts with.
pub fn control_plane_flags(listen: &str, data_dir: &Path, lease_ms: u32) -> Vec<String> {
    vec![
        "--listen".into(),
        listen.into(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--lease-ms".into(),
        lease_ms.to_string(),
        "--heartbeat-interval-ms".into(),
        TEST_HEARTBEAT_INTERVAL_MS.to_string(),
    ]
}

/// A control plane and its executors.
pub struct TestCluster {
    /// Temp dir holding every process's data dir (kept on failure).
    pub dir: KeepOnFailure,
    /// The control plane.
    pub cp: Proc,
    /// Its address, IP:PORT.
    pub addr: String,
    /// Executors, `exec-1` on 127.0.0.2, `exec-2` on 127.0.0.3, ...
    pub executors: Vec<Proc>,
    /// The certificates of a cluster running with mutual TLS; `None`: plaintext.
    pub tls: Option<ClusterCerts>,
}

/// Name of the admin client certificate of an mTLS test cluster (role admin): what
/// [`TestCluster::call`] presents to the control plane.
pub const TEST_ADMIN_NAME: &str = "suite";

/// The certificates of a test cluster with mutual TLS, made in the test by
/// `wharf::certs` (the code behind the `certs` subcommand, docs/security.md): a CA, the
/// control plane's (loopback names), `exec-N`'s with 127.0.0.{N+1}, and an admin client.
#[derive(Debug, Clone)]
pub struct ClusterCerts {
    /// Directory holding `ca.pem` and every leaf as `<leaf>.pem` / `<leaf>.key`.
    pub dir: PathBuf,
}

impl ClusterCerts {
    /// Makes the CA, the control plane's and the admin client's certificates in `dir`.
    pub fn make(dir: &Path) -> Self {
        use wharf::identity::{AdminRole, Identity};
        wharf::certs::init_ca(dir).expect("test CA");
        wharf::certs::issue(dir, &Identity::ControlPlane, &[]).expect("control-plane cert");
        wharf::certs::issue(
            dir,
            &Identity::Admin {
                role: AdminRole::Admin,
                name: TEST_ADMIN_NAME.into(),
            },
            &[],
        )
        .expect("admin cert");
        Self {
            dir: dir.to_owned(),
        }
    }

    /// The CA certificate.
    pub fn ca(&self) -> PathBuf {
        self.dir.join(wharf::certs::CA_CERT)
    }

    /// (certificate, key) of leaf `leaf` (`control-plane`, `executor-exec-1`, `admin-suite`).
    pub fn leaf(&self, leaf: &str) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("{leaf}.pem")),
            self.dir.join(format!("{leaf}.key")),
        )
    }

    /// Issues executor `id`'s certificate (serving `host`) unless it exists; its leaf name.
    pub fn executor(&self, id: &str, host: &str) -> String {
        let identity = wharf::identity::Identity::Executor(id.into());
        let leaf = wharf::certs::leaf_name(&identity);
        if !self.leaf(&leaf).0.exists() {
            wharf::certs::issue(&self.dir, &identity, &[host.to_owned()]).expect("executor cert");
        }
        leaf
    }

    /// `--tls-cert/--tls-key/--tls-ca` for a process presenting `leaf`.
    pub fn flags(&self, leaf: &str) -> Vec<String> {
        let (cert, key) = self.leaf(leaf);
        vec![
            "--tls-cert".into(),
            cert.display().to_string(),
            "--tls-key".into(),
            key.display().to_string(),
            "--tls-ca".into(),
            self.ca().display().to_string(),
        ]
    }

    /// Makes [`call_at`] and [`watch_at`] reach `addr` over TLS presenting `leaf`.
    pub fn register(&self, addr: &str, leaf: &str) {
        let (cert, key) = self.leaf(leaf);
        registered().insert(
            addr.to_owned(),
            Dial::plaintext().with_tls(ClientCert {
                ca: self.ca(),
                identity: Some((cert, key)),
            }),
        );
    }
}

/// Addresses of TLS servers started by this test process, with how a client reaches
/// each: the control plane with the admin client certificate, an executor with the
/// control plane's (only the control plane may call an executor). Kept per address so
/// that the suites call [`call_at`] alike for plaintext and mTLS clusters.
fn registered() -> std::sync::MutexGuard<'static, std::collections::HashMap<String, Dial>> {
    static MAP: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, Dial>>> =
        std::sync::OnceLock::new();
    MAP.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How a client reaches `addr` (`IP:PORT`, or an `http(s)://` URL as ListExecutors shows
/// it): the TLS registered for it by [`ClusterCerts::register`], plaintext otherwise.
pub fn dial_for(addr: &str) -> Dial {
    let bare = addr
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    registered().get(bare).cloned().unwrap_or_default()
}

impl TestCluster {
    /// Starts a control plane and `n` executors and waits until all are ALIVE.
    pub async fn start(n: usize) -> Self {
        Self::start_with(n, Vec::new()).await
    }

    /// As [`TestCluster::start`], with `cp_args` appended to the control plane's flags
    /// (e.g. `--metrics-listen 127.0.0.1:PORT`).
    pub async fn start_with(n: usize, cp_args: Vec<String>) -> Self {
        Self::start_secured(n, cp_args, false).await
    }

    /// As [`TestCluster::start`], with mutual TLS: certificates made in the test, the
    /// control plane and executors on `https://`, the clients presenting the admin client
    /// certificate ([`TEST_ADMIN_NAME`]).
    pub async fn start_mtls(n: usize) -> Self {
        Self::start_secured(n, Vec::new(), true).await
    }

    /// As [`TestCluster::start_with`]; `mtls`: as [`TestCluster::start_mtls`].
    pub async fn start_secured(n: usize, cp_args: Vec<String>, mtls: bool) -> Self {
        Self::start_secured_with_env(n, cp_args, mtls, &[]).await
    }

    /// As [`TestCluster::start_secured`], with `cp_env` added to the control plane's
    /// environment on its first start only (a [`TestCluster::restart_control_plane`]
    /// runs it without: how the fault suites arm a crash point once).
    pub async fn start_secured_with_env(
        n: usize,
        cp_args: Vec<String>,
        mtls: bool,
        cp_env: &[(&str, &str)],
    ) -> Self {
        let dir = KeepOnFailure::new();
        let cp_dir = dir.path().join("cp");
        let tls = mtls.then(|| ClusterCerts::make(&dir.path().join("certs")));
        let cp_args: Vec<String> = tls
            .iter()
            .flat_map(|t| t.flags("control-plane"))
            .chain(cp_args)
            .collect();
        // A fixed port, so that a restarted control plane is found again by executors.
        let port = crate::audit::free_port();
        let mut cp = Proc::spawn_with_env(
            crate::bin("wharf-control-plane"),
            control_plane_args(port, &cp_dir)
                .into_iter()
                .chain(cp_args)
                .collect(),
            &cp_dir,
            cp_env,
        );
        let addr = cp.listen_addr().await;
        if let Some(t) = &tls {
            t.register(&addr, &format!("admin-{TEST_ADMIN_NAME}"));
        }
        let mut c = Self {
            dir,
            cp,
            addr,
            executors: Vec::new(),
            tls,
        };
        for i in 0..n {
            c.add_executor(i).await;
        }
        c.wait_alive(n).await;
        c
    }

    /// The control plane's URL as an executor dials it (`https://` with mutual TLS).
    pub fn cp_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// `--tls-*` flags for an executor `id` serving on `host` (certificate issued on
    /// first use); empty for a plaintext cluster.
    pub fn executor_tls_flags(&self, id: &str, host: &str) -> Vec<String> {
        self.tls
            .as_ref()
            .map(|t| t.flags(&t.executor(id, host)))
            .unwrap_or_default()
    }

    /// Makes [`call_at`] reach the executor serving at `addr` (IP:PORT) as the control
    /// plane does (with mutual TLS only the control plane's certificate may call it).
    pub fn register_executor_addr(&self, addr: &str) {
        if let Some(t) = &self.tls {
            t.register(addr, "control-plane");
        }
    }

    /// Starts executor `exec-{i+1}` on 127.0.0.{i+2}.
    pub async fn add_executor(&mut self, i: usize) {
        self.add_executor_with(i, Vec::new()).await;
    }

    /// As [`TestCluster::add_executor`], with `extra` appended to the executor's flags
    /// (e.g. `--metrics-listen 127.0.0.2:PORT`).
    pub async fn add_executor_with(&mut self, i: usize, extra: Vec<String>) {
        self.add_executor_with_env(i, extra, &[]).await;
    }

    /// As [`TestCluster::add_executor_with`], with `env` set for the executor's process
    /// (e.g. `RUST_LOG=debug` for this executor only).
    pub async fn add_executor_with_env(
        &mut self,
        i: usize,
        extra: Vec<String>,
        env: &[(&str, &str)],
    ) {
        let id = format!("exec-{}", i + 1);
        let host = format!("127.0.0.{}", i + 2);
        let d = self.dir.path().join(&id);
        let mut args = vec![
            "--listen".into(),
            format!("{host}:0"),
            "--control-plane".into(),
            self.cp_url(),
            "--data-dir".into(),
            d.display().to_string(),
            "--executor-id".into(),
            id.clone(),
            "--graceful-timeout-ms".into(),
            "3000".into(),
        ];
        args.extend(self.executor_tls_flags(&id, &host));
        args.extend(extra);
        let mut p = Proc::spawn_with_env(crate::bin("wharf-executor"), args, &d, env);
        let addr = p.listen_addr().await;
        self.register_executor_addr(&addr);
        if self.executors.len() <= i {
            self.executors.push(p);
        } else {
            self.executors[i] = p;
        }
    }

    /// kill -9 of the control plane, then a start on the same data dir and port.
    pub async fn restart_control_plane(&mut self) {
        self.cp.restart();
        self.addr = self.cp.listen_addr().await;
    }

    /// Waits until `n` executors are ALIVE.
    pub async fn wait_alive(&self, n: usize) {
        wait_alive_at(&self.addr, &self.dial(), n).await;
    }

    /// The highest committed `seq` offset of connector `name` (the test source writes
    /// `{"seq": N}`), from `GetOffsets`; `None` before its first commit.
    pub fn committed_seq(&self, name: &str) -> Option<u64> {
        let r = self.call("GetOffsets", json!({ "name": name }));
        r.body["offsets"].as_array()?.iter().find_map(|o| {
            let offset: Value = serde_json::from_str(o["offset"].as_str()?).ok()?;
            offset["seq"].as_u64()
        })
    }

    /// The first executor's `(epoch, state)` as `ListExecutors` shows them (empty strings
    /// when there is none).
    pub fn first_executor_epoch_and_state(&self) -> (String, String) {
        let r = self.call("ListExecutors", json!({}));
        let e = &r.body["executors"][0];
        (
            e["epoch"].as_str().unwrap_or_default().to_owned(),
            e["state"].as_str().unwrap_or_default().to_owned(),
        )
    }

    /// Calls `wharf.v1.ConnectorAdmin/<method>` with the typed client ([`call_at`]).
    pub fn call(&self, method: &str, body: Value) -> Call {
        call_at(
            &self.addr,
            &format!("wharf.v1.ConnectorAdmin/{method}"),
            &body,
        )
    }

    /// How a client reaches the control plane (the admin certificate with mutual TLS).
    pub fn dial(&self) -> Dial {
        dial_for(&self.addr)
    }

    /// A typed admin client of the control plane, as [`TestCluster::call`] reaches it
    /// (made on the caller's runtime).
    pub fn admin(&self) -> crate::client::Admin {
        crate::client::admin(&self.addr, &self.dial())
    }

    /// Starts `WatchConnector` for connector `name` (see [`crate::client::watch`]).
    pub fn watch(&self, name: &str) -> Watch {
        watch_at(&self.addr, &json!({ "name": name }))
    }

    /// The lifecycle file path for connector `name`.
    pub fn lifecycle_path(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("lifecycle-{name}.jsonl"))
    }

    /// A test-source config.
    pub fn source_config(&self, name: &str, tasks_max: u32) -> Value {
        json!({
            "connector.class": "test-source",
            "tasks.max": tasks_max.to_string(),
            "lifecycle.path": self.lifecycle_path(name).display().to_string(),
            "test.poll.block.ms": "50",
        })
    }

    /// GetConnectorStatus body, or None when not found.
    pub fn status(&self, name: &str) -> Option<Value> {
        let r = self.call("GetConnectorStatus", json!({ "name": name }));
        (r.code == 0).then(|| r.body["status"].clone())
    }

    /// Waits until the connector and exactly `tasks` tasks are in `state` (e.g. "STATE_RUNNING").
    pub async fn wait_state(
        &self,
        name: &str,
        connector_state: &str,
        task_state: &str,
        tasks: usize,
    ) -> Value {
        self.wait_state_newer(name, connector_state, task_state, tasks, &Value::Null)
            .await
    }

    /// As [`TestCluster::wait_state`], and every task that `older` (an earlier status
    /// body) shows has a newer generation: a change that restarts the tasks was applied,
    /// not only the old instances still reported.
    pub async fn wait_state_newer(
        &self,
        name: &str,
        connector_state: &str,
        task_state: &str,
        tasks: usize,
        older: &Value,
    ) -> Value {
        let old = crate::audit::generations(older);
        wait_until(
            &format!("{name}: connector {connector_state}, {tasks} tasks {task_state}"),
            CONVERGE,
            || async {
                let s = self.status(name)?;
                state_reached(&s, connector_state, task_state, tasks, &old).then_some(s)
            },
        )
        .await
    }

    /// Host of each task, from a status body.
    pub fn hosts(status: &Value) -> Vec<String> {
        status["tasks"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|t| t["status"]["executorId"].as_str().unwrap_or("").to_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The store file of the control plane.
    pub fn store_file(&self) -> PathBuf {
        self.dir.path().join("cp").join("state.redb")
    }

    /// The control plane's process log.
    pub fn cp_log(&self) -> String {
        self.cp.log()
    }
}

/// Calls `method` (`package.Service/Method`) on `addr` with the typed client and the
/// TLS registered for `addr` ([`dial_for`]); see [`crate::client::rpc`].
pub fn call_at(addr: &str, method: &str, body: &Value) -> Call {
    crate::client::rpc(addr, &dial_for(addr), method, body)
}

/// Whether status body `s` shows the connector in `connector_state` with exactly `tasks`
/// tasks, all in `task_state`, each task in `old` (task to generation) at a newer
/// generation.
pub fn state_reached(
    s: &Value,
    connector_state: &str,
    task_state: &str,
    tasks: usize,
    old: &std::collections::BTreeMap<u64, u64>,
) -> bool {
    let ts = s["tasks"].as_array().cloned().unwrap_or_default();
    let gens = crate::audit::generations(s);
    s["connector"]["state"] == connector_state
        && ts.len() == tasks
        && ts.iter().all(|t| t["status"]["state"] == task_state)
        && old.iter().all(|(t, g)| gens.get(t).is_none_or(|n| n > g))
}

/// Waits (at most [`CONVERGE`]) until ListExecutors on the control plane at `addr`,
/// reached by `dial`, answers with exactly `n` executors ALIVE.
pub async fn wait_alive_at(addr: &str, dial: &Dial, n: usize) {
    wait_until(&format!("{n} executors alive"), CONVERGE, || async {
        let r = crate::client::rpc(
            addr,
            dial,
            "wharf.v1.ConnectorAdmin/ListExecutors",
            &json!({}),
        );
        let alive = r.body["executors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter(|e| e["state"] == "EXECUTOR_STATE_ALIVE")
                    .count()
            })
            .unwrap_or(0);
        (r.code == 0 && alive == n).then_some(())
    })
    .await;
}

/// Starts `WatchConnector` with `body` on `addr` (see [`crate::client::watch`]).
pub fn watch_at(addr: &str, body: &Value) -> Watch {
    crate::client::watch(addr, &dial_for(addr), body)
}

/// Reads a whole file as bytes (empty when missing).
pub fn bytes_of(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_default()
}
