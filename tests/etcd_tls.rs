//! The etcd store over TLS with etcd user authentication (docs/security.md): a
//! test-owned etcd with `--client-cert-auth --trusted-ca-file --cert-file --key-file`,
//! auth enabled (root, and a `wharf` user whose role may read and write the cluster's
//! prefix only), certificates made here by a CA of the test's own.
//!
//! - With the CA, a client certificate and the password (from a file), the control plane
//!   stores its state there: an executor registers, a connector runs, its record is under
//!   the prefix in etcd; the password is in no log line.
//! - A wrong password, the CA of another authority, or no client certificate: the
//!   control plane exits non-zero at start with a message naming etcd and the cause, and
//!   never echoes the password.
//!
//! Needs the `etcd` binary (Debian `etcd-server`, scripts/setup-services).
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::path::Path;

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, TestCluster};
use wharf_harness::etcd::{EtcdAuth, EtcdServerTls, TestEtcd, enable_auth, tls_client};
use wharf_harness::test_ca::{Leaf, TestCa};
use wharf_harness::{KeepOnFailure, Proc, wait_until};

const PREFIX: &str = "/wharf-tls/";
const USER: &str = "wharf";
/// Distinctive, so that a leak into a log is found by a substring search.
const PASSWORD: &str = "etcd-pw-5b1f0c9e";
const ROOT_PASSWORD: &str = "etcd-root-pw-77d2";
const WRONG_PASSWORD: &str = "not-the-pw-31c4";

/// Control-plane flags for the secured etcd.
fn etcd_args(
    endpoint: &str,
    ca: &Path,
    client: Option<&Leaf>,
    password_file: &Path,
) -> Vec<String> {
    let mut args = vec![
        "--store".into(),
        "etcd".into(),
        "--etcd-endpoints".into(),
        endpoint.into(),
        "--etcd-prefix".into(),
        PREFIX.into(),
        "--etcd-election-ttl-secs".into(),
        "3".into(),
        "--etcd-cacert".into(),
        ca.display().to_string(),
        "--etcd-user".into(),
        USER.into(),
        "--etcd-password-file".into(),
        password_file.display().to_string(),
    ];
    if let Some(leaf) = client {
        args.extend([
            "--etcd-cert".into(),
            leaf.cert.display().to_string(),
            "--etcd-key".into(),
            leaf.key.display().to_string(),
        ]);
    }
    args
}

/// Starts a control plane with `args`, waits until it exits, returns (code, log).
async fn failed_start(dir: &Path, name: &str, args: Vec<String>) -> (i32, String) {
    let d = dir.join(name);
    let mut p = Proc::spawn(
        wharf_harness::bin("wharf-control-plane"),
        [
            "--listen".to_owned(),
            "127.0.0.1:0".to_owned(),
            "--data-dir".to_owned(),
            d.display().to_string(),
        ]
        .into_iter()
        .chain(args)
        .collect(),
        &d,
    );
    let mut child = p.child.take().expect("spawned");
    let status = wait_until(&format!("{name} to exit"), CONVERGE, || {
        let r = child.try_wait().ok().flatten();
        async move { r }
    })
    .await;
    (status.code().unwrap_or(-1), p.log())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_keeps_its_state_in_an_etcd_that_requires_tls_certificates_and_a_password()
 {
    let dir = KeepOnFailure::new();
    let ca = TestCa::new(&dir.path().join("etcd-ca"));
    let server = ca.issue("etcd-server", &["127.0.0.1", "localhost"]);
    let client = ca.issue("wharf-client", &[USER]);
    let etcd = TestEtcd::start_secure(EtcdServerTls {
        cert: server.cert.clone(),
        key: server.key.clone(),
        client_ca: ca.cert.clone(),
    });
    let auth = EtcdAuth {
        root_password: ROOT_PASSWORD.into(),
        user: USER.into(),
        password: PASSWORD.into(),
        prefix: PREFIX.into(),
    };
    enable_auth(&etcd.endpoint, &ca.cert, (&client.cert, &client.key), &auth).await;
    let password_file = dir.path().join("etcd.password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).expect("password file");

    // Refused starts first (the working control plane would hold the leadership).
    let wrong_password = dir.path().join("wrong.password");
    std::fs::write(&wrong_password, WRONG_PASSWORD).expect("password file");
    let (code, log) = failed_start(
        dir.path(),
        "cp-wrong-password",
        etcd_args(&etcd.endpoint, &ca.cert, Some(&client), &wrong_password),
    )
    .await;
    assert_ne!(code, 0, "{log}");
    assert!(
        log.contains("etcd") && log.contains("authentication failed"),
        "{log}"
    );
    assert!(
        !log.contains(WRONG_PASSWORD),
        "the password is echoed: {log}"
    );

    let other_ca = TestCa::new(&dir.path().join("other-ca"));
    let (code, log) = failed_start(
        dir.path(),
        "cp-wrong-ca",
        etcd_args(
            &etcd.endpoint,
            &other_ca.cert,
            Some(&client),
            &password_file,
        ),
    )
    .await;
    assert_ne!(code, 0, "{log}");
    assert!(
        log.contains("etcd") && (log.contains("UnknownIssuer") || log.contains("unknown issuer")),
        "{log}"
    );

    let (code, log) = failed_start(
        dir.path(),
        "cp-no-client-cert",
        etcd_args(&etcd.endpoint, &ca.cert, None, &password_file),
    )
    .await;
    assert_ne!(code, 0, "{log}");
    assert!(log.contains("etcd"), "{log}");

    // The real thing: CA, client certificate, password.
    let c = TestCluster::start_with(
        1,
        etcd_args(&etcd.endpoint, &ca.cert, Some(&client), &password_file),
    )
    .await;
    let r = c.call(
        "CreateConnector",
        json!({ "name": "tls-src", "config": c.source_config("tls-src", 1) }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    c.wait_state("tls-src", "STATE_RUNNING", "STATE_RUNNING", 1)
        .await;

    let mut root = tls_client(
        &etcd.endpoint,
        &ca.cert,
        (&client.cert, &client.key),
        Some(("root", ROOT_PASSWORD)),
    )
    .await
    .expect("root client");
    let stored = root
        .get(format!("{PREFIX}connectors/tls-src"), None)
        .await
        .expect("get");
    assert_eq!(stored.kvs().len(), 1, "the connector's record is in etcd");
    let executor = root
        .get(format!("{PREFIX}executors/exec-1"), None)
        .await
        .expect("get");
    assert_eq!(executor.kvs().len(), 1, "the executor's record is in etcd");

    let log = c.cp_log();
    assert!(!log.contains(PASSWORD), "the password is in the log: {log}");
}
