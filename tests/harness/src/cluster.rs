//! Shared by the control-plane end-to-end tests: a real `wharf-control-plane` and real
//! `wharf-executor` processes on 127.0.0.2-4, driven with real `grpcurl`.
//!
//! Build the binaries first: `cargo build -p wharf-control-plane -p wharf-executor`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};

use crate::{KeepOnFailure, Proc, wait_until};

/// Lease the test control plane grants, in milliseconds (short, so lost executors are
/// noticed quickly).
pub const TEST_LEASE_MS: u32 = 2_000;
/// Heartbeat interval the test control plane asks for, in milliseconds.
pub const TEST_HEARTBEAT_INTERVAL_MS: u32 = 200;
/// Upper bound on a wait for the cluster to converge.
pub const CONVERGE: Duration = Duration::from_secs(40);

/// grpcurl's exit code is 64 + the gRPC status code.
pub const GRPCURL_STATUS_BASE: i32 = 64;
/// gRPC status codes used by the tests.
pub const INVALID_ARGUMENT: i32 = 3;
/// NOT_FOUND.
pub const NOT_FOUND: i32 = 5;
/// ALREADY_EXISTS.
pub const ALREADY_EXISTS: i32 = 6;
/// FAILED_PRECONDITION.
pub const FAILED_PRECONDITION: i32 = 9;

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
/// [`TestCluster::call`] and [`grpcurl`] present to the control plane.
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

    /// Makes [`grpcurl`] and [`grpcurl_stream`] reach `addr` over TLS presenting `leaf`.
    pub fn register(&self, addr: &str, leaf: &str) {
        let (cert, key) = self.leaf(leaf);
        grpcurl_tls().insert(
            addr.to_owned(),
            GrpcurlTls {
                ca: self.ca(),
                cert,
                key,
            },
        );
    }
}

/// TLS material grpcurl presents to one address.
#[derive(Debug, Clone)]
struct GrpcurlTls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

/// Addresses of TLS servers started by this test process, with what grpcurl presents to
/// each: the control plane gets the admin client certificate, an executor the control
/// plane's (only the control plane may call an executor). Kept per address so that the
/// suites call [`grpcurl`] alike for plaintext and mTLS clusters.
fn grpcurl_tls() -> std::sync::MutexGuard<'static, std::collections::HashMap<String, GrpcurlTls>> {
    static MAP: std::sync::OnceLock<
        std::sync::Mutex<std::collections::HashMap<String, GrpcurlTls>>,
    > = std::sync::OnceLock::new();
    MAP.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// grpcurl's transport flags and target for `addr` (`IP:PORT`, or an `http(s)://` URL as
/// ListExecutors shows it): `-cacert/-cert/-key` for a registered TLS server (see
/// [`ClusterCerts::register`]), `-plaintext` otherwise.
fn grpcurl_target(addr: &str) -> (Vec<String>, String) {
    let bare = addr
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .to_owned();
    match grpcurl_tls().get(&bare) {
        Some(t) => (
            vec![
                "-cacert".into(),
                t.ca.display().to_string(),
                "-cert".into(),
                t.cert.display().to_string(),
                "-key".into(),
                t.key.display().to_string(),
            ],
            bare,
        ),
        None => (vec!["-plaintext".into()], bare),
    }
}

/// Result of one grpcurl call.
#[derive(Debug)]
pub struct Call {
    /// gRPC status code (0 = OK).
    pub code: i32,
    /// Parsed response (Null on error).
    pub body: Value,
    /// stderr (the error message on failure).
    pub err: String,
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
    /// control plane and executors on `https://`, grpcurl presenting the admin client
    /// certificate ([`TEST_ADMIN_NAME`]).
    pub async fn start_mtls(n: usize) -> Self {
        Self::start_secured(n, Vec::new(), true).await
    }

    /// As [`TestCluster::start_with`]; `mtls`: as [`TestCluster::start_mtls`].
    pub async fn start_secured(n: usize, cp_args: Vec<String>, mtls: bool) -> Self {
        let dir = KeepOnFailure::new();
        let cp_dir = dir.path().join("cp");
        let tls = mtls.then(|| ClusterCerts::make(&dir.path().join("certs")));
        let cp_args: Vec<String> = tls
            .iter()
            .flat_map(|t| t.flags("control-plane"))
            .chain(cp_args)
            .collect();
        // A fixed port, so that a restarted control plane is found again by executors.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let mut cp = Proc::spawn(
            crate::bin("wharf-control-plane"),
            vec![
                "--listen".into(),
                format!("127.0.0.1:{port}"),
                "--data-dir".into(),
                cp_dir.display().to_string(),
                "--lease-ms".into(),
                TEST_LEASE_MS.to_string(),
                "--heartbeat-interval-ms".into(),
                TEST_HEARTBEAT_INTERVAL_MS.to_string(),
            ]
            .into_iter()
            .chain(cp_args)
            .collect(),
            &cp_dir,
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

    /// Makes [`grpcurl`] reach the executor serving at `addr` (IP:PORT) as the control
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
        let mut p = Proc::spawn(crate::bin("wharf-executor"), args, &d);
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
        wait_until(&format!("{n} executors alive"), CONVERGE, || async {
            let r = self.call("ListExecutors", json!({}));
            let alive = r.body["executors"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter(|e| e["state"] == "EXECUTOR_STATE_ALIVE")
                        .count()
                })
                .unwrap_or(0);
            (alive == n).then_some(())
        })
        .await;
    }

    /// Calls `wharf.v1.ConnectorAdmin/<method>` with grpcurl.
    pub fn call(&self, method: &str, body: Value) -> Call {
        grpcurl(
            &self.addr,
            &format!("wharf.v1.ConnectorAdmin/{method}"),
            &body,
        )
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
        wait_until(
            &format!("{name}: connector {connector_state}, {tasks} tasks {task_state}"),
            CONVERGE,
            || async {
                let s = self.status(name)?;
                let ts = s["tasks"].as_array().cloned().unwrap_or_default();
                (s["connector"]["state"] == connector_state
                    && ts.len() == tasks
                    && ts.iter().all(|t| t["status"]["state"] == task_state))
                .then_some(s)
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

/// Runs grpcurl against `addr` with `body` on stdin.
/// With mutual TLS (an address registered by [`ClusterCerts::register`]) grpcurl presents
/// the registered certificate, as docs/security.md documents.
pub fn grpcurl(addr: &str, method: &str, body: &Value) -> Call {
    let (transport, target) = grpcurl_target(addr);
    let mut child = Command::new("grpcurl")
        .args(transport)
        .args(["-emit-defaults", "-max-time", "60", "-d", "@"])
        .args([target.as_str(), method])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("grpcurl on PATH");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(body.to_string().as_bytes())
            .expect("write body");
    }
    let out = child.wait_with_output().expect("grpcurl");
    let code = match out.status.code() {
        Some(0) => 0,
        Some(c) if c > GRPCURL_STATUS_BASE => c - GRPCURL_STATUS_BASE,
        other => panic!(
            "grpcurl failed to run ({other:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        ),
    };
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let body = if code == 0 {
        // Streaming calls print several JSON objects; keep them all as an array.
        let mut values = Vec::new();
        for v in serde_json::Deserializer::from_str(&stdout).into_iter::<Value>() {
            values.push(v.expect("grpcurl JSON output"));
        }
        if values.len() == 1 {
            values.pop().unwrap_or(Value::Null)
        } else {
            Value::Array(values)
        }
    } else {
        Value::Null
    };
    Call {
        code,
        body,
        err: String::from_utf8_lossy(&out.stderr).to_string(),
    }
}

/// Reads a whole file as bytes (empty when missing).
pub fn bytes_of(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_default()
}

/// Starts `grpcurl` for a server-streaming call in the background; collect its output
/// with `wait_with_output` (it ends when the stream ends).
pub fn grpcurl_stream(addr: &str, method: &str, body: &Value) -> std::process::Child {
    let (transport, target) = grpcurl_target(addr);
    Command::new("grpcurl")
        .args(transport)
        .args(["-emit-defaults", "-max-time", "60", "-d", &body.to_string()])
        .args([target.as_str(), method])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("grpcurl on PATH")
}
