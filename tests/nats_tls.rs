//! The JetStream record log over mutual TLS with NATS credentials (docs/security.md): a
//! test-owned nats-server whose config (written by the harness) has `tls { ... verify:
//! true }` and a user with a password, certificates from a CA of the test's own.
//!
//! - An executor with `--nats-cacert`, `--nats-cert`, `--nats-key`, `--nats-user` and
//!   `--nats-password-file`: records flow from a file-source through JetStream to a
//!   file-sink; the password is in no log line.
//! - An executor without any TLS setting (a plaintext client) is refused: its log says it
//!   cannot connect to NATS, why, and which flag to set.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::path::Path;

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, TestCluster};
use wharf_harness::nats_tls::{TlsNats, start_tls_nats};
use wharf_harness::{Proc, wait_until};

const USER: &str = "wharf";
/// Distinctive, so that a leak into a log is found by a substring search.
const PASSWORD: &str = "nats-pw-9e21d4a7";
const TOPIC: &str = "tls-lines";
const LINES: usize = 20;

fn executor(c: &TestCluster, id: &str, ip: &str, nats: &TlsNats, secure: Option<&Path>) -> Proc {
    let d = c.dir.path().join(id);
    let mut args = vec![
        "--listen".to_owned(),
        format!("{ip}:0"),
        "--control-plane".into(),
        format!("http://{}", c.addr),
        "--data-dir".into(),
        d.display().to_string(),
        "--executor-id".into(),
        id.into(),
        "--nats-url".into(),
        nats.url.clone(),
    ];
    if let Some(password_file) = secure {
        args.extend([
            "--nats-cacert".into(),
            nats.ca.display().to_string(),
            "--nats-cert".into(),
            nats.client.cert.display().to_string(),
            "--nats-key".into(),
            nats.client.key.display().to_string(),
            "--nats-user".into(),
            USER.into(),
            "--nats-password-file".into(),
            password_file.display().to_string(),
        ]);
    }
    Proc::spawn(wharf_harness::bin("wharf-executor"), args, &d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_flow_through_a_nats_that_requires_mutual_tls_and_a_password_and_plaintext_is_refused()
 {
    let mut c = TestCluster::start(0).await;
    let nats = start_tls_nats(c.dir.path(), USER, PASSWORD).await;
    let password_file = c.dir.path().join("nats.password");
    std::fs::write(&password_file, format!("{PASSWORD}\n")).expect("password file");

    let mut exec = executor(&c, "exec-1", "127.0.0.2", &nats, Some(&password_file));
    exec.listen_addr().await;
    c.executors.push(exec);
    c.wait_alive(1).await;

    let lines = c.dir.path().join("lines.txt");
    let text: String = (0..LINES).map(|i| format!("line-{i}\n")).collect();
    std::fs::write(&lines, text).expect("lines");
    let out = c.dir.path().join("out.txt");
    for (name, config) in [
        (
            "tls-source",
            json!({ "connector.class": "file-source", "tasks.max": "1",
                    "file": lines.display().to_string(), "topic": TOPIC }),
        ),
        (
            "tls-sink",
            json!({ "connector.class": "file-sink", "tasks.max": "1",
                    "file": out.display().to_string(), "topics": TOPIC }),
        ),
    ] {
        let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
        assert_eq!(r.code, 0, "{name}: {}", r.err);
    }
    wait_until("every line in the sink's file", CONVERGE, || async {
        let got = std::fs::read_to_string(&out).unwrap_or_default();
        (0..LINES)
            .all(|i| got.contains(&format!("line-{i}")))
            .then_some(())
    })
    .await;

    // A plaintext client: no CA, no certificate, no credentials.
    let mut plain = executor(&c, "exec-plain", "127.0.0.3", &nats, None);
    plain.listen_addr().await;
    let log = wait_until("the plaintext executor to report NATS", CONVERGE, || {
        let log = plain.log();
        async move { log.contains("connect to NATS").then_some(log) }
    })
    .await;
    assert!(log.contains("--nats-cacert"), "{log}");

    let secure_log = c.executors[0].log();
    assert!(
        !secure_log.contains(PASSWORD) && !plain.log().contains(PASSWORD),
        "the NATS password is in a log"
    );
}
