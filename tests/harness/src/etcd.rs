//! A test-owned etcd: the `etcd` binary on free loopback ports with a temp data dir,
//! killed when dropped. Install it with `scripts/setup-services` (Debian `etcd-server`).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long etcd gets to answer after spawning, in milliseconds.
pub const ETCD_START_TIMEOUT_MS: u64 = 20_000;
/// Pause between two health probes, in milliseconds.
const ETCD_PROBE_INTERVAL_MS: u64 = 50;

/// A running etcd.
pub struct TestEtcd {
    child: Child,
    /// Client URL, `http://127.0.0.1:PORT`.
    pub endpoint: String,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl TestEtcd {
    /// Starts etcd and waits until it accepts a TCP connection on its client port.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let (client, peer) = (free_port(), free_port());
        let endpoint = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = std::fs::File::create(dir.path().join("etcd.log")).expect("etcd log");
        let child =
            Command::new(std::env::var("WHARF_TEST_ETCD").unwrap_or_else(|_| "etcd".into()))
                .args(["--name", "wharf-test"])
                .arg("--data-dir")
                .arg(dir.path().join("data"))
                .args(["--listen-client-urls", &endpoint])
                .args(["--advertise-client-urls", &endpoint])
                .args(["--listen-peer-urls", &peer_url])
                .args(["--initial-advertise-peer-urls", &peer_url])
                .args(["--initial-cluster", &format!("wharf-test={peer_url}")])
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn etcd (install etcd-server: scripts/setup-services)");
        let deadline = Instant::now() + Duration::from_millis(ETCD_START_TIMEOUT_MS);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", client)).is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "etcd did not start in time");
            std::thread::sleep(Duration::from_millis(ETCD_PROBE_INTERVAL_MS));
        }
        Self {
            child,
            endpoint,
            _dir: dir,
        }
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
