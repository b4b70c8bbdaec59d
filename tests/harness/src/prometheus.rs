//! A test-owned Prometheus server (Debian's `prometheus`, installed by
//! `scripts/setup-services`): scrapes the targets a test names every
//! [`SCRAPE_INTERVAL_MS`] and answers PromQL over its HTTP API, queried with curl as an
//! operator would. Killed when dropped.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How often the test server scrapes, in milliseconds (Prometheus' floor is 1 s in
/// practice; shorter makes the lookback window noisy).
pub const SCRAPE_INTERVAL_MS: u64 = 1_000;
/// How long Prometheus gets to become ready, in milliseconds.
pub const PROMETHEUS_START_TIMEOUT_MS: u64 = 30_000;

/// A running Prometheus.
pub struct TestPrometheus {
    child: Child,
    /// Its HTTP API, `http://127.0.0.1:PORT`.
    pub url: String,
    dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    crate::free_port_on("127.0.0.1")
}

/// One sample of an instant query: its labels and value.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Label set, `__name__` included.
    pub labels: serde_json::Map<String, Value>,
    /// The value.
    pub value: f64,
}

impl TestPrometheus {
    /// Starts Prometheus scraping `targets` (`IP:PORT` of metrics listeners, path
    /// `/metrics`) and waits until it reports ready.
    pub fn start(targets: &[String]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let url = format!("http://127.0.0.1:{port}");
        let list = targets
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(", ");
        let config = format!(
            "global:\n  scrape_interval: {SCRAPE_INTERVAL_MS}ms\n  scrape_timeout: {SCRAPE_INTERVAL_MS}ms\n\
             scrape_configs:\n  - job_name: wharf\n    static_configs:\n      - targets: [{list}]\n"
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("write prometheus.yml");
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log");
        let child = Command::new(
            std::env::var("WHARF_TEST_PROMETHEUS").unwrap_or_else(|_| "prometheus".into()),
        )
        .arg(format!("--config.file={}", config_path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn prometheus (install it: scripts/setup-services)");
        let p = Self { child, url, dir };
        let deadline = Instant::now() + Duration::from_millis(PROMETHEUS_START_TIMEOUT_MS);
        while !p.ready() {
            assert!(
                Instant::now() < deadline,
                "prometheus did not become ready; log:\n{}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        p
    }

    fn ready(&self) -> bool {
        Command::new("curl")
            .args(["-sf", "-o", "/dev/null", &format!("{}/-/ready", self.url)])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Prometheus' own log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// Runs the instant query `promql` (`GET /api/v1/query` with curl) and returns its
    /// samples; panics when Prometheus answers with an error.
    pub fn query(&self, promql: &str) -> Vec<Sample> {
        let out = Command::new("curl")
            .args(["-sf", "-G", &format!("{}/api/v1/query", self.url)])
            .arg("--data-urlencode")
            .arg(format!("query={promql}"))
            .output()
            .expect("run curl");
        assert!(
            out.status.success(),
            "query {promql} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let body: Value = serde_json::from_slice(&out.stdout).expect("JSON answer");
        assert_eq!(body["status"], "success", "{body}");
        body["data"]["result"]
            .as_array()
            .map(|rs| {
                rs.iter()
                    .map(|r| Sample {
                        labels: r["metric"].as_object().cloned().unwrap_or_default(),
                        value: r["value"][1]
                            .as_str()
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(f64::NAN),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The single value of `promql`, `None` when it has no sample (or several).
    pub fn value(&self, promql: &str) -> Option<f64> {
        match self.query(promql).as_slice() {
            [one] => Some(one.value),
            _ => None,
        }
    }
}

impl Drop for TestPrometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free `IP:PORT` on `ip` for a `--metrics-listen` (bound, read, released).
pub fn free_addr(ip: &str) -> String {
    format!("{ip}:{}", crate::free_port_on(ip))
}

/// `curl -s -m 10 -w '%{http_code}' http://ADDR/PATH`: (HTTP status, body); status 0 when
/// nothing answered.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args([
            "-s",
            "-m",
            "10",
            "-w",
            "\n%{http_code}",
            &format!("http://{addr}{path}"),
        ])
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// What `grpc.health.v1.Health/Check` (the overall service) on `addr` answers:
/// `SERVING`, `NOT_SERVING`, ..., or empty when the call failed.
pub fn grpc_health(addr: &str) -> String {
    let r = crate::cluster::call_at(addr, "grpc.health.v1.Health/Check", &serde_json::json!({}));
    r.body["status"].as_str().unwrap_or("").to_owned()
}

/// Waits (at most [`crate::cluster::CONVERGE`]) until Prometheus' answer to `promql` is
/// the single value `want`.
pub async fn wait_value(prom: &TestPrometheus, promql: &str, want: f64) {
    crate::wait_until(
        &format!("Prometheus: {promql} == {want}"),
        crate::cluster::CONVERGE,
        || async { (prom.value(promql) == Some(want)).then_some(()) },
    )
    .await;
}
