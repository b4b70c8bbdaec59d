//! A test-owned RabbitMQ node: `rabbitmq-server` (Debian's, installed by
//! scripts/setup-services) on free loopback ports with its database and logs under the
//! test's temp dir, so a test can stop and restart the broker without touching the shared
//! one on 5672. Starting takes a few seconds (Erlang boot); a restart keeps the durable
//! queues and persistent messages (the node's Mnesia and message store stay in the dir).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};

use crate::audit::free_port;
use crate::wait_until;

/// Upper bound on a node coming up (a cold Erlang boot takes about 5 to 10 s here).
pub const BROKER_START: Duration = Duration::from_secs(45);

/// Upper bound on a node shutting down after SIGTERM.
pub const BROKER_STOP: Duration = Duration::from_secs(20);

/// Upper bound on one client connection attempt.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A RabbitMQ node of the test's own. Killed (SIGKILL to its process group) on drop.
pub struct TestRabbit {
    dir: PathBuf,
    /// AMQP port on 127.0.0.1.
    pub port: u16,
    dist_port: u16,
    nodename: String,
    child: Option<Child>,
}

/// `$RABBITMQ_SERVER`, else Debian's unwrapped script (the `/usr/sbin` wrapper switches
/// to the `rabbitmq` user, who cannot write the test's dir), else `rabbitmq-server`.
fn server_binary() -> PathBuf {
    if let Ok(p) = std::env::var("RABBITMQ_SERVER") {
        return PathBuf::from(p);
    }
    let debian = PathBuf::from("/usr/lib/rabbitmq/bin/rabbitmq-server");
    if debian.exists() {
        debian
    } else {
        PathBuf::from("rabbitmq-server")
    }
}

impl TestRabbit {
    /// Starts a node under `<dir>/rabbitmq` and waits until it accepts AMQP logins
    /// (guest/guest, loopback only).
    pub async fn start(dir: &Path) -> TestRabbit {
        let mut r = TestRabbit::spawn(dir);
        r.wait_ready().await;
        r
    }

    /// Starts a node without waiting (call [`TestRabbit::wait_ready`]), so other
    /// processes can start meanwhile.
    pub fn spawn(dir: &Path) -> TestRabbit {
        let port = free_port();
        let mut dist_port = free_port();
        while dist_port == port {
            dist_port = free_port();
        }
        let mut r = TestRabbit {
            dir: dir.join("rabbitmq"),
            port,
            dist_port,
            nodename: format!("wharf-test-{}-{port}@localhost", std::process::id()),
            child: None,
        };
        r.launch();
        r
    }

    fn launch(&mut self) {
        std::fs::create_dir_all(&self.dir).expect("rabbitmq dir");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("process.log"))
            .expect("log file");
        let d = &self.dir;
        let child = Command::new(server_binary())
            .env("HOME", d)
            .env("RABBITMQ_NODENAME", &self.nodename)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", d.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", d.join("log"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d.join("enabled_plugins"))
            .env("RABBITMQ_CONFIG_FILE", d.join("rabbitmq"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", d.join("advanced.config"))
            .env("RABBITMQ_PID_FILE", d.join("rabbitmq.pid"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            // Its own process group: the script starts beam.smp (and epmd) below it.
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn rabbitmq-server ({e}): run scripts/setup-services"));
        self.child = Some(child);
    }

    /// AMQP URI without credentials (rabbitmq-sink's `rabbitmq.uri`).
    pub fn uri(&self) -> String {
        format!("amqp://127.0.0.1:{}/%2f", self.port)
    }

    /// AMQP URI with guest/guest, for the test's own clients.
    pub fn login_uri(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// A client connection.
    ///
    /// # Errors
    /// The client's text when the node does not answer.
    pub async fn connect(&self) -> Result<Connection, String> {
        // Bounded: a connect made while the node boots can otherwise hang forever, and
        // wait_until checks its deadline only between attempts.
        let uri = self.login_uri();
        let connect = Connection::connect(&uri, ConnectionProperties::default());
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(r) => r.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no AMQP handshake within {CONNECT_TIMEOUT:?}")),
        }
    }

    /// Waits until the node accepts a login; panics with the node's log when it exited
    /// or took longer than [`BROKER_START`].
    pub async fn wait_ready(&mut self) {
        let log = self.dir.join("process.log");
        let mut child = self.child.take();
        wait_until(
            "the test's RabbitMQ node to accept logins",
            BROKER_START,
            || {
                if let Some(status) = child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                    panic!(
                        "rabbitmq-server exited with {status}; log:\n{}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
                async {
                    let conn = self.connect().await.ok()?;
                    let _ = conn.close(200, "ready".into()).await;
                    Some(())
                }
            },
        )
        .await;
        self.child = child;
    }

    fn signal_group(&self, signal: &str) {
        if let Some(c) = &self.child {
            let _ = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg("--")
                .arg(format!("-{}", c.id()))
                .status();
        }
    }

    /// Stops the node cleanly (SIGTERM to its process group) and waits until it exited
    /// and its port is closed.
    pub async fn stop(&mut self) {
        self.signal_group("TERM");
        let mut child = self.child.take().expect("running");
        let port = self.port;
        wait_until("the test's RabbitMQ node to stop", BROKER_STOP, || {
            let exited = child.try_wait().ok().flatten().is_some();
            let closed = std::net::TcpStream::connect(("127.0.0.1", port)).is_err();
            async move { (exited && closed).then_some(()) }
        })
        .await;
    }

    /// Starts the stopped node again with the same ports, name and data, and waits until
    /// it accepts logins.
    pub async fn restart(&mut self) {
        if self.child.is_some() {
            self.stop().await;
        }
        self.launch();
        self.wait_ready().await;
    }

    /// Whether queue `name` exists (a passive declare on a fresh channel).
    ///
    /// # Errors
    /// The client's text when the node does not answer.
    pub async fn queue_exists(&self, name: &str) -> Result<bool, String> {
        let conn = self.connect().await?;
        let ch = conn.create_channel().await.map_err(|e| e.to_string())?;
        let found = ch
            .queue_declare(
                name.into(),
                QueueDeclareOptions::default().passive(),
                FieldTable::default(),
            )
            .await
            .is_ok();
        let _ = conn.close(200, "done".into()).await;
        Ok(found)
    }

    /// The node's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("process.log")).unwrap_or_default()
    }
}

impl Drop for TestRabbit {
    fn drop(&mut self) {
        self.signal_group("KILL");
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
    }
}
