//! A test-owned nats-server with JetStream that admits clients only over mutual TLS
//! (`tls { ... verify: true }`) and with a user and password, on a free loopback port;
//! its config file is written here. Killed when dropped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::test_ca::{Leaf, TestCa};
use crate::{Proc, wait_until};

/// Upper bound on nats-server starting to accept connections.
pub const NATS_START_DEADLINE: Duration = Duration::from_secs(20);

/// A running TLS nats-server.
pub struct TlsNats {
    _proc: Proc,
    /// Client URL, `nats://127.0.0.1:PORT` (the server asks for TLS in its INFO).
    pub url: String,
    /// The CA of the server's certificate, which client certificates must chain to too.
    pub ca: PathBuf,
    /// A client certificate signed by that CA.
    pub client: Leaf,
}

/// Starts nats-server under `dir` with a server certificate and a client certificate
/// from a new CA, requiring both and `user`/`password`; waits until it accepts TCP.
pub async fn start_tls_nats(dir: &Path, user: &str, password: &str) -> TlsNats {
    let data = dir.join("nats-tls");
    std::fs::create_dir_all(&data).expect("nats dir");
    let ca = TestCa::new(&data.join("ca"));
    let server = ca.issue("nats-server", &["127.0.0.1", "localhost"]);
    let client = ca.issue("nats-client", &["wharf-executor"]);
    let port = crate::audit::free_port();
    let config = data.join("nats.conf");
    // The quoting of nats-server's config format: JSON-like strings.
    let quoted = |p: &Path| serde_json::Value::String(p.display().to_string()).to_string();
    std::fs::write(
        &config,
        format!(
            "listen: \"127.0.0.1:{port}\"\n\
             jetstream {{ store_dir: {js} }}\n\
             tls {{\n  cert_file: {cert}\n  key_file: {key}\n  ca_file: {ca}\n  verify: true\n  timeout: 5\n}}\n\
             authorization {{\n  user: {user}\n  password: {password}\n}}\n",
            js = quoted(&data.join("js")),
            cert = quoted(&server.cert),
            key = quoted(&server.key),
            ca = quoted(&ca.cert),
            user = serde_json::Value::String(user.into()),
            password = serde_json::Value::String(password.into()),
        ),
    )
    .expect("nats.conf");
    let proc = Proc::spawn(
        crate::audit::nats_server_binary(),
        vec!["-c".into(), config.display().to_string()],
        &data,
    );
    wait_until(
        "the TLS nats-server to listen",
        NATS_START_DEADLINE,
        || async move {
            std::net::TcpStream::connect(("127.0.0.1", port))
                .ok()
                .map(|_| ())
        },
    )
    .await;
    TlsNats {
        _proc: proc,
        url: format!("nats://127.0.0.1:{port}"),
        ca: ca.cert.clone(),
        client,
    }
}
