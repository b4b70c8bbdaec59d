//! Mutual TLS with identities bound to certificates, with real processes and
//! certificates made in the test (docs/security.md): strangers cannot make an executor
//! clean up, one executor's certificate cannot act as another, TLS and plaintext meeting
//! fail with a message naming the peer, a plaintext non-loopback listener refuses to
//! start, and a certificate replaced on disk is used by new connections.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tonic::transport::Channel;
use wharf::identity::{AdminRole, Identity};
use wharf::pb::v1 as pb;
use wharf::pb::v1::connector_admin_client::ConnectorAdminClient;
use wharf::pb::v1::executor_client::ExecutorClient;
use wharf::pb::v1::executor_registry_client::ExecutorRegistryClient;
use wharf::tls::ClientTls;
use wharf_harness::audit::pg;
use wharf_harness::{KeepOnFailure, Proc, WAIT_DEADLINE, wait_until};

static DB_COUNTER: AtomicU32 = AtomicU32::new(0);

/// Where the test's certificates are.
struct Certs {
    dir: PathBuf,
    other: PathBuf,
}

impl Certs {
    fn make(root: &Path) -> Self {
        let dir = root.join("certs");
        let other = root.join("other-ca");
        wharf::certs::init_ca(&dir).expect("CA");
        wharf::certs::init_ca(&other).expect("other CA");
        wharf::certs::issue(&dir, &Identity::ControlPlane, &[]).expect("cp cert");
        for (id, host) in [("exec-a", "127.0.0.2"), ("exec-b", "127.0.0.3")] {
            wharf::certs::issue(&dir, &Identity::Executor(id.into()), &[host.into()])
                .expect("executor cert");
        }
        wharf::certs::issue(
            &dir,
            &Identity::Admin {
                role: AdminRole::Admin,
                name: "root".into(),
            },
            &[],
        )
        .expect("admin cert");
        // The same identity as exec-a, from a CA the cluster does not trust.
        wharf::certs::issue(&other, &Identity::Executor("exec-a".into()), &[])
            .expect("foreign cert");
        Self { dir, other }
    }

    fn ca(&self) -> PathBuf {
        self.dir.join(wharf::certs::CA_CERT)
    }

    fn flags(&self, leaf: &str) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.dir.join(format!("{leaf}.pem")).display().to_string(),
            "--tls-key".into(),
            self.dir.join(format!("{leaf}.key")).display().to_string(),
            "--tls-ca".into(),
            self.ca().display().to_string(),
        ]
    }

    /// A client config presenting `<dir>/<leaf>` (none: anonymous), trusting our CA.
    fn client(&self, dir: &Path, leaf: Option<&str>) -> ClientTls {
        let paths = leaf.map(|l| (dir.join(format!("{l}.pem")), dir.join(format!("{l}.key"))));
        ClientTls::Fixed(
            wharf::tls::client_config(
                &self.ca(),
                paths.as_ref().map(|(c, k)| (c.as_path(), k.as_path())),
            )
            .expect("client config"),
        )
    }
}

/// Waits for `p` to exit on its own; its exit code.
async fn exit_code(p: &mut Proc) -> Option<i32> {
    p.wait_exit(WAIT_DEADLINE).await
}

fn channel(url: &str, tls: ClientTls) -> Channel {
    let endpoint = wharf::tls::check_url(url, &tls)
        .expect("url")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10));
    wharf::tls::channel(endpoint, tls)
}

fn spawn_cp(root: &Path, extra: Vec<String>) -> Proc {
    let dir = root.join("cp");
    let mut args = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--data-dir".into(),
        dir.display().to_string(),
        "--lease-ms".into(),
        "4000".into(),
        "--heartbeat-interval-ms".into(),
        "500".into(),
    ];
    args.extend(extra);
    Proc::spawn(wharf_harness::bin("wharf-control-plane"), args, &dir)
}

fn spawn_executor(root: &Path, name: &str, ip: &str, cp_url: &str, extra: Vec<String>) -> Proc {
    let dir = root.join(name);
    let mut args = vec![
        "--listen".into(),
        format!("{ip}:0"),
        "--control-plane".into(),
        cp_url.into(),
        "--data-dir".into(),
        dir.display().to_string(),
        "--graceful-timeout-ms".into(),
        "5000".into(),
    ];
    args.extend(extra);
    Proc::spawn(wharf_harness::bin("wharf-executor"), args, &dir)
}

/// Triggers and tables a postgres-audit connector provisioned, as pg_catalog says.
async fn provisioned(db: &str) -> BTreeSet<String> {
    let c = pg(db).await;
    let mut out = BTreeSet::new();
    for row in c
        .query(
            "SELECT 'trigger ' || tgname FROM pg_trigger WHERE NOT tgisinternal
             UNION ALL SELECT 'table ' || schemaname || '.' || tablename FROM pg_tables
             WHERE schemaname NOT IN ('pg_catalog', 'information_schema')",
            &[],
        )
        .await
        .expect("catalog")
    {
        out.insert(row.get::<_, String>(0));
    }
    out
}

async fn executor_info(
    admin: &mut ConnectorAdminClient<Channel>,
    id: &str,
) -> Option<pb::ExecutorInfo> {
    admin
        .list_executors(pb::ListExecutorsRequest::default())
        .await
        .ok()?
        .into_inner()
        .executors
        .into_iter()
        .find(|e| e.id == id)
}

/// The committed offsets of `name`, as GetOffsets returns them.
async fn committed_offsets(
    admin: &mut ConnectorAdminClient<Channel>,
    name: &str,
) -> Vec<pb::SourceOffset> {
    admin
        .get_offsets(pb::GetOffsetsRequest { name: name.into() })
        .await
        .expect("offsets")
        .into_inner()
        .offsets
}

async fn running_status(
    admin: &mut ConnectorAdminClient<Channel>,
    name: &str,
) -> Option<pb::ConnectorStatus> {
    let s = admin
        .get_connector_status(pb::GetConnectorStatusRequest { name: name.into() })
        .await
        .ok()?
        .into_inner()
        .status?;
    let running = |i: &Option<pb::InstanceStatus>| {
        i.as_ref()
            .is_some_and(|i| i.state == pb::State::Running as i32)
    };
    (running(&s.connector) && s.tasks.len() == 1 && s.tasks.iter().all(|t| running(&t.status)))
        .then_some(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_and_other_executors_are_refused_and_nothing_is_cleaned_up() {
    let root = KeepOnFailure::new();
    let certs = Certs::make(root.path());
    let mut cp = spawn_cp(root.path(), certs.flags("control-plane"));
    let cp_url = format!("https://{}", cp.listen_addr().await);
    let mut exec_a = spawn_executor(
        root.path(),
        "exec-a",
        "127.0.0.2",
        &cp_url,
        certs.flags("executor-exec-a"),
    );
    exec_a.listen_addr().await;
    let mut admin = ConnectorAdminClient::new(channel(
        &cp_url,
        certs.client(&certs.dir, Some("admin-root")),
    ));
    let a = wait_until("exec-a registered over TLS", WAIT_DEADLINE, || {
        let mut admin = admin.clone();
        async move {
            executor_info(&mut admin, "exec-a")
                .await
                .filter(|e| e.state == pb::ExecutorState::Alive as i32)
        }
    })
    .await;
    assert!(a.address.starts_with("https://127.0.0.2:"), "{}", a.address);

    let db = format!(
        "wharf_tls_{}_{}",
        std::process::id(),
        DB_COUNTER.fetch_add(1, Ordering::SeqCst)
    );
    let pgadmin = pg("postgres").await;
    pgadmin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .await
        .expect("drop db");
    pgadmin
        .batch_execute(&format!("CREATE DATABASE {db}"))
        .await
        .expect("create db");
    pg(&db)
        .await
        .batch_execute("CREATE TABLE t1 (id int primary key, v text)")
        .await
        .expect("table");
    let before_create = provisioned(&db).await;
    let config = [
        ("connector.class", "postgres-audit"),
        ("tasks.max", "1"),
        ("connection.host", "127.0.0.1"),
        ("connection.user", "postgres"),
        ("connection.password", "unused-with-trust"),
        ("connection.database", db.as_str()),
        ("tables", "public.t1"),
        ("topic", "audit"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    admin
        .create_connector(pb::CreateConnectorRequest {
            name: "pg-audit".into(),
            config,
            ..Default::default()
        })
        .await
        .expect("create");
    let status = wait_until("pg-audit RUNNING", WAIT_DEADLINE, || {
        let mut admin = admin.clone();
        async move { running_status(&mut admin, "pg-audit").await }
    })
    .await;
    let provisioned_before = provisioned(&db).await;
    assert!(
        provisioned_before.len() > before_create.len(),
        "postgres-audit provisioned nothing: {provisioned_before:?}"
    );
    let task_generation = status.tasks[0].status.as_ref().expect("task").generation;
    let connector_generation = status.connector.as_ref().expect("connector").generation;

    // Strangers call StopTask / StopConnector with connector_deleted = true and the
    // current generation: without a certificate, with another CA's, with an executor's.
    let stranger_tls = [
        (
            "no certificate",
            certs.client(&certs.dir, None),
            Some(tonic::Code::Unauthenticated),
        ),
        (
            "another CA",
            certs.client(&certs.other, Some("executor-exec-a")),
            None,
        ),
        (
            "executor certificate",
            certs.client(&certs.dir, Some("executor-exec-b")),
            Some(tonic::Code::PermissionDenied),
        ),
    ];
    for (who, tls, want) in stranger_tls {
        let mut ex = ExecutorClient::new(channel(&a.address, tls));
        let task = ex
            .stop_task(pb::StopTaskRequest {
                task: Some(pb::TaskId {
                    connector: "pg-audit".into(),
                    task: 0,
                }),
                connector_deleted: true,
                generation: task_generation,
                timeout_ms: 1000,
                ..Default::default()
            })
            .await
            .expect_err(who);
        let conn = ex
            .stop_connector(pb::ExecutorStopConnectorRequest {
                connector: "pg-audit".into(),
                connector_deleted: true,
                generation: connector_generation,
                timeout_ms: 1000,
                ..Default::default()
            })
            .await
            .expect_err(who);
        if let Some(code) = want {
            assert_eq!(task.code(), code, "{who}: {task}");
            assert_eq!(conn.code(), code, "{who}: {conn}");
        }
    }
    // Plaintext to the TLS executor: refused, and the error says why.
    let mut plain = ExecutorClient::new(channel(
        &a.address.replace("https://", "http://"),
        ClientTls::None,
    ));
    let err = plain
        .stop_task(pb::StopTaskRequest {
            task: Some(pb::TaskId {
                connector: "pg-audit".into(),
                task: 0,
            }),
            connector_deleted: true,
            generation: task_generation,
            timeout_ms: 1000,
            ..Default::default()
        })
        .await
        .expect_err("plaintext");
    // Refused. (The message naming the peer is asserted on a real executor process in
    // tls_and_plaintext_meeting_fail_with_a_message_naming_the_peer; a single in-process
    // call may see only hyper's "connection closed".)
    let _ = wharf::tls::error_chain(&err);

    // exec-b's certificate acting as exec-a: registration (with rogue plugin
    // definitions), heartbeat, offset commit: all PERMISSION_DENIED.
    let mut rogue = ExecutorRegistryClient::new(channel(
        &cp_url,
        certs.client(&certs.dir, Some("executor-exec-b")),
    ));
    let err = rogue
        .register_executor(pb::RegisterExecutorRequest {
            executor_id: "exec-a".into(),
            advertised_address: "https://127.0.0.3:1".into(),
            plugins: Vec::new(),
            ..Default::default()
        })
        .await
        .expect_err("impersonating registration");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    let err = rogue
        .heartbeat(pb::HeartbeatRequest {
            executor_id: "exec-a".into(),
            epoch: a.epoch,
            ..Default::default()
        })
        .await
        .expect_err("impersonating heartbeat");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    let err = rogue
        .commit_offsets(pb::CommitOffsetsRequest {
            executor_id: "exec-a".into(),
            epoch: a.epoch,
            task: Some(pb::TaskId {
                connector: "pg-audit".into(),
                task: 0,
            }),
            generation: task_generation,
            offsets: Vec::new(),
        })
        .await
        .expect_err("forged commit");
    assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    let log = cp.log();
    assert!(log.contains("registry call refused: identity"), "{log}");

    // exec-b as itself (its own certificate, registered, holding an epoch) commits
    // offsets for exec-a's task at the current generation: refused, offsets unchanged.
    let offsets_before = committed_offsets(&mut admin, "pg-audit").await;
    let b = rogue
        .register_executor(pb::RegisterExecutorRequest {
            executor_id: "exec-b".into(),
            advertised_address: "https://127.0.0.3:1".into(),
            plugins: Vec::new(),
            ..Default::default()
        })
        .await
        .expect("exec-b registers as itself")
        .into_inner();
    for (what, offset) in [
        ("a valid offset", r#"{"lsn":"0/FFFFFFFF"}"#),
        ("an offset that is not JSON", r#"{"pos":1010""#),
    ] {
        let err = rogue
            .commit_offsets(pb::CommitOffsetsRequest {
                executor_id: "exec-b".into(),
                epoch: b.epoch,
                task: Some(pb::TaskId {
                    connector: "pg-audit".into(),
                    task: 0,
                }),
                generation: task_generation,
                offsets: vec![pb::SourceOffset {
                    partition: r#"{"table":"public.t1"}"#.into(),
                    offset: offset.into(),
                }],
            })
            .await
            .expect_err(what);
        assert_eq!(err.code(), tonic::Code::PermissionDenied, "{what}: {err}");
    }
    let offsets_after = committed_offsets(&mut admin, "pg-audit").await;
    assert_eq!(
        offsets_after, offsets_before,
        "another executor's commit moved offsets"
    );

    // Nothing changed: the audit objects are in pg_catalog, the connector RUNNING on
    // exec-a, whose epoch, address and plugins are what they were.
    assert_eq!(provisioned(&db).await, provisioned_before);
    let now = running_status(&mut admin, "pg-audit")
        .await
        .expect("still RUNNING");
    assert_eq!(
        now.tasks[0].status.as_ref().expect("task").executor_id,
        "exec-a"
    );
    let a_now = executor_info(&mut admin, "exec-a").await.expect("exec-a");
    assert_eq!(
        (a_now.epoch, &a_now.address, &a_now.plugins),
        (a.epoch, &a.address, &a.plugins)
    );

    // The control plane's own deletion still cleans up (it holds the right certificate).
    admin
        .delete_connector(pb::DeleteConnectorRequest {
            name: "pg-audit".into(),
            ..Default::default()
        })
        .await
        .expect("delete");
    wait_until("deletion removed the audit objects", WAIT_DEADLINE, || {
        let db = db.clone();
        let want = before_create.clone();
        async move { (provisioned(&db).await == want).then_some(()) }
    })
    .await;
    drop(exec_a);
    drop(cp);
    let _ = pgadmin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_plaintext_meeting_fail_with_a_message_naming_the_peer() {
    let root = KeepOnFailure::new();
    let certs = Certs::make(root.path());
    // A TLS executor given https:// to a plaintext control plane.
    let plain_root = root.path().join("plain");
    let mut plain_cp = spawn_cp(&plain_root, Vec::new());
    let plain_addr = plain_cp.listen_addr().await;
    let e1 = spawn_executor(
        root.path(),
        "e1",
        "127.0.0.2",
        &format!("https://{plain_addr}"),
        certs.flags("executor-exec-a"),
    );
    let want = format!("TLS handshake with {plain_addr} failed");
    wait_until("the https-to-plaintext message", WAIT_DEADLINE, || {
        let log = e1.log();
        let want = want.clone();
        async move { log.contains(&want).then_some(()) }
    })
    .await;
    // A plaintext executor given http:// to a TLS control plane.
    let tls_root = root.path().join("tls");
    let mut tls_cp = spawn_cp(&tls_root, certs.flags("control-plane"));
    let tls_addr = tls_cp.listen_addr().await;
    let e2 = spawn_executor(
        root.path(),
        "e2",
        "127.0.0.3",
        &format!("http://{tls_addr}"),
        Vec::new(),
    );
    let want = format!("{tls_addr} speaks TLS");
    wait_until("the plaintext-to-TLS message", WAIT_DEADLINE, || {
        let log = e2.log();
        let want = want.clone();
        async move { log.contains(&want).then_some(()) }
    })
    .await;
    // An https:// URL with no TLS configured: refuses to start.
    let mut e3 = spawn_executor(
        root.path(),
        "e3",
        "127.0.0.4",
        &format!("https://{tls_addr}"),
        Vec::new(),
    );
    let code = exit_code(&mut e3).await;
    assert_ne!(code, Some(0), "{}", e3.log());
    assert!(e3.log().contains("no TLS is configured"), "{}", e3.log());
    // The reverse: TLS configured and an http:// URL: refuses to start too.
    let mut e4 = spawn_executor(
        root.path(),
        "e4",
        "127.0.0.5",
        &format!("http://{tls_addr}"),
        certs.flags("executor-exec-a"),
    );
    let code = exit_code(&mut e4).await;
    assert_ne!(code, Some(0), "{}", e4.log());
    assert!(
        e4.log().contains("is an http:// URL but TLS is configured")
            && e4.log().contains("--control-plane"),
        "{}",
        e4.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_non_loopback_listener_refuses_to_start() {
    let root = KeepOnFailure::new();
    let cp_dir = root.path().join("cp");
    let mut cp = Proc::spawn(
        wharf_harness::bin("wharf-control-plane"),
        vec![
            "--listen".into(),
            "0.0.0.0:0".into(),
            "--data-dir".into(),
            cp_dir.display().to_string(),
        ],
        &cp_dir,
    );
    let code = exit_code(&mut cp).await;
    assert!(matches!(code, Some(c) if c != 0), "{code:?}: {}", cp.log());
    assert!(cp.log().contains("--insecure"), "{}", cp.log());
    let mut ex = spawn_executor(
        root.path(),
        "ex",
        "0.0.0.0",
        "http://127.0.0.1:1",
        Vec::new(),
    );
    let code = exit_code(&mut ex).await;
    assert!(matches!(code, Some(c) if c != 0), "{code:?}: {}", ex.log());
    assert!(ex.log().contains("--insecure"), "{}", ex.log());
}

/// The leaf certificate a TLS server at `addr` presents to a new connection.
async fn presented_cert(addr: &str, certs: &Certs) -> Vec<u8> {
    let ClientTls::Fixed(config) = certs.client(&certs.dir, Some("control-plane")) else {
        unreachable!("fixed config")
    };
    let (host, _) = addr.rsplit_once(':').expect("host:port");
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls_pki_types::ServerName::try_from(host.to_owned()).expect("name");
    let tls = tokio_rustls::TlsConnector::from(Arc::clone(&config))
        .connect(name, tcp)
        .await
        .expect("handshake");
    tls.get_ref().1.peer_certificates().expect("certs")[0].to_vec()
}

fn pem_der(path: &Path) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject;
    rustls_pki_types::CertificateDer::from_pem_file(path)
        .expect("pem")
        .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_replaced_on_disk_is_used_by_new_connections_without_a_restart() {
    let root = KeepOnFailure::new();
    let certs = Certs::make(root.path());
    let mut cp = spawn_cp(root.path(), certs.flags("control-plane"));
    let cp_url = format!("https://{}", cp.listen_addr().await);
    let mut exec_a = spawn_executor(
        root.path(),
        "exec-a",
        "127.0.0.2",
        &cp_url,
        certs.flags("executor-exec-a"),
    );
    let addr = exec_a.listen_addr().await;
    let pid = exec_a.pid();
    let old = pem_der(&certs.dir.join("executor-exec-a.pem"));
    assert_eq!(presented_cert(&addr, &certs).await, old);
    let mut admin = ConnectorAdminClient::new(channel(
        &cp_url,
        certs.client(&certs.dir, Some("admin-root")),
    ));
    let before = wait_until("exec-a alive", WAIT_DEADLINE, || {
        let mut admin = admin.clone();
        async move {
            executor_info(&mut admin, "exec-a")
                .await
                .filter(|e| e.state == pb::ExecutorState::Alive as i32)
        }
    })
    .await;

    // Rotate: a new key and certificate for the same identity, written over the old.
    wharf::certs::issue(
        &certs.dir,
        &Identity::Executor("exec-a".into()),
        &["127.0.0.2".into()],
    )
    .expect("re-issue");
    let new = pem_der(&certs.dir.join("executor-exec-a.pem"));
    assert_ne!(new, old);
    wait_until(
        "the executor presents the new certificate",
        WAIT_DEADLINE,
        || {
            let addr = addr.clone();
            let certs = &certs;
            let new = new.clone();
            async move { (presented_cert(&addr, certs).await == new).then_some(()) }
        },
    )
    .await;
    assert!(
        exec_a.log().contains("TLS certificate reloaded"),
        "{}",
        exec_a.log()
    );
    // Nothing restarted: the same process, the same registration.
    assert_eq!(exec_a.pid(), pid);
    let after = executor_info(&mut admin, "exec-a").await.expect("exec-a");
    assert_eq!((after.epoch, after.state), (before.epoch, before.state));
    drop(exec_a);
    drop(cp);
}

/// The value of `wharf_peers_refused_total{reason="REASON"}` on the metrics page `page`.
fn refused(page: &str, reason: &str) -> u64 {
    let series = format!("wharf_peers_refused_total{{reason=\"{reason}\"}} ");
    page.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{series} on the page:\n{page}"))
}

/// How many lines of `log` contain `text`.
fn lines_with(log: &str, text: &str) -> usize {
    log.lines().filter(|l| l.contains(text)).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_strangers_is_counted_and_logged_once_a_minute() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let root = KeepOnFailure::new();
    let certs = Certs::make(root.path());
    let cp_metrics = wharf_harness::prometheus::free_addr("127.0.0.1");
    let mut extra = certs.flags("control-plane");
    extra.extend(["--metrics-listen".into(), cp_metrics.clone()]);
    let mut cp = spawn_cp(root.path(), extra);
    let cp_addr = cp.listen_addr().await;
    let cp_url = format!("https://{cp_addr}");
    let ex_metrics = wharf_harness::prometheus::free_addr("127.0.0.2");
    let mut extra = certs.flags("executor-exec-a");
    extra.extend(["--metrics-listen".into(), ex_metrics.clone()]);
    let mut exec_a = spawn_executor(root.path(), "exec-a", "127.0.0.2", &cp_url, extra);
    let ex_addr = exec_a.listen_addr().await;

    const N: u64 = 300;
    // Bad TLS hellos and plaintext requests to the control plane's port, one connection
    // each, as an outsider's loop sends them.
    for i in 0..N {
        let mut tcp = tokio::net::TcpStream::connect(&cp_addr)
            .await
            .expect("connect");
        let hello: &[u8] = if i % 2 == 0 {
            b"\x16\x03\x01\x00\x05hello, not a ClientHello at all"
        } else {
            b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"
        };
        tcp.write_all(hello).await.expect("send");
        let mut sink = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut sink)).await;
    }
    // Executor calls with a verified certificate that is not the control plane's.
    let mut stranger = ExecutorClient::new(channel(
        &format!("https://{ex_addr}"),
        certs.client(&certs.dir, Some("executor-exec-b")),
    ));
    for _ in 0..N {
        let err = stranger
            .stop_task(pb::StopTaskRequest {
                task: Some(pb::TaskId {
                    connector: "victim".into(),
                    task: 0,
                }),
                connector_deleted: true,
                generation: 1,
                timeout_ms: 1000,
                ..Default::default()
            })
            .await
            .expect_err("a stranger's StopTask");
        assert_eq!(err.code(), tonic::Code::PermissionDenied, "{err}");
    }

    // Every refusal is counted; each kind got one line.
    let page = wait_until(
        "the control plane counts every refusal",
        WAIT_DEADLINE,
        || {
            let (_, page) = wharf_harness::prometheus::http_get(&cp_metrics, "/metrics");
            async move {
                (refused(&page, "handshake_failed") == N / 2
                    && refused(&page, "plaintext") == N / 2)
                    .then_some(page)
            }
        },
    )
    .await;
    assert_eq!(refused(&page, "handshake_timed_out"), 0, "{page}");
    let page = wait_until("the executor counts every refusal", WAIT_DEADLINE, || {
        let (_, page) = wharf_harness::prometheus::http_get(&ex_metrics, "/metrics");
        async move { (refused(&page, "identity") == N).then_some(page) }
    })
    .await;
    assert!(page.contains("# HELP wharf_peers_refused_total "), "{page}");
    let log = cp.log();
    assert_eq!(lines_with(&log, "TLS handshake failed"), 1, "{log}");
    assert_eq!(
        lines_with(&log, "plaintext client on a TLS listener refused"),
        1,
        "{log}"
    );
    let log = exec_a.log();
    assert_eq!(
        lines_with(&log, "Executor call refused: not the control plane"),
        1,
        "{log}"
    );
    drop(exec_a);
    drop(cp);
}

/// Runs `wharf-control-plane certs ARGS`; panics when it fails.
fn certs_ok(args: &[&str]) {
    let out = wharf_harness::certs_command(args);
    assert!(
        out.status.success(),
        "certs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `--tls-cert/--tls-key` of `<dir>/<leaf>` with `--tls-ca ca`.
fn flags_with_ca(dir: &Path, leaf: &str, ca: &Path) -> Vec<String> {
    vec![
        "--tls-cert".into(),
        dir.join(format!("{leaf}.pem")).display().to_string(),
        "--tls-key".into(),
        dir.join(format!("{leaf}.key")).display().to_string(),
        "--tls-ca".into(),
        ca.display().to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_not_signed_by_the_ca_refuses_the_start_and_is_not_reloaded() {
    let root = KeepOnFailure::new();
    // Two CAs made as an operator would; each issues a control plane and an executor.
    let (a, b) = (root.path().join("ca-a"), root.path().join("ca-b"));
    for d in [&a, &b] {
        let d = d.display().to_string();
        certs_ok(&["init", "--dir", &d]);
        certs_ok(&["control-plane", "--dir", &d]);
        certs_ok(&[
            "executor",
            "--dir",
            &d,
            "--id",
            "exec-a",
            "--host",
            "127.0.0.2",
        ]);
    }
    let (ca_a, ca_b) = (a.join("ca.pem"), b.join("ca.pem"));
    let not_signed = |cert: &Path, ca: &Path| {
        format!(
            "--tls-cert {} is not signed by --tls-ca {}",
            cert.display(),
            ca.display()
        )
    };

    // A's certificates with B's CA: neither process starts.
    let mut cp = spawn_cp(
        &root.path().join("cp-mixed"),
        flags_with_ca(&a, "control-plane", &ca_b),
    );
    assert_eq!(exit_code(&mut cp).await, Some(1), "{}", cp.log());
    let want = not_signed(&a.join("control-plane.pem"), &ca_b);
    assert!(cp.log().contains(&want), "{want}: {}", cp.log());
    let mut ex = spawn_executor(
        root.path(),
        "ex-mixed",
        "127.0.0.2",
        "https://127.0.0.1:1",
        flags_with_ca(&a, "executor-exec-a", &ca_b),
    );
    assert_eq!(exit_code(&mut ex).await, Some(1), "{}", ex.log());
    let want = not_signed(&a.join("executor-exec-a.pem"), &ca_b);
    assert!(ex.log().contains(&want), "{want}: {}", ex.log());

    // A good pair, then B's certificate and key written over it: the reload is refused
    // and the control plane keeps presenting A's.
    let live = root.path().join("live");
    std::fs::create_dir_all(&live).expect("dir");
    for f in ["control-plane.pem", "control-plane.key"] {
        std::fs::copy(a.join(f), live.join(f)).expect("copy");
    }
    let mut cp = spawn_cp(
        &root.path().join("cp"),
        flags_with_ca(&live, "control-plane", &ca_a),
    );
    let addr = cp.listen_addr().await;
    let config = wharf::tls::client_config(&ca_a, None).expect("client config");
    let presented = || {
        let config = config.clone();
        let addr = addr.clone();
        async move {
            let tcp = tokio::net::TcpStream::connect(&addr)
                .await
                .expect("connect");
            let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .expect("handshake with the old certificate");
            tls.get_ref().1.peer_certificates().expect("certs")[0].to_vec()
        }
    };
    let old = pem_der(&live.join("control-plane.pem"));
    assert_eq!(presented().await, old);
    for f in ["control-plane.pem", "control-plane.key"] {
        std::fs::copy(b.join(f), live.join(f)).expect("replace");
    }
    let want = not_signed(&live.join("control-plane.pem"), &ca_a);
    wait_until("the refused reload in the log", WAIT_DEADLINE, || {
        let log = cp.log();
        let want = want.clone();
        async move {
            (log.contains(&want) && log.contains("the previous certificate stays in use"))
                .then_some(())
        }
    })
    .await;
    assert_eq!(presented().await, old, "still A's certificate");
    let child = cp.child.as_mut().expect("spawned");
    assert!(child.try_wait().expect("wait").is_none(), "still running");
}
