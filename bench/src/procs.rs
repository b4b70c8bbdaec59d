//! Real Wharf processes on loopback for the benchmarks: a control plane, executors and a
//! test-owned nats-server, each with its own data dir under one temp dir.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tonic::transport::Channel;
use wharf::pb::v1::connector_admin_client::ConnectorAdminClient;
use wharf::pb::v1::{ExecutorState, ListExecutorsRequest};

/// How long a process may take to write `listen.addr`, in milliseconds.
const LISTEN_DEADLINE_MS: u64 = 30_000;
/// How long executors may take to register, in milliseconds.
const ALIVE_DEADLINE_MS: u64 = 30_000;
/// Poll interval while waiting for a process to come up, in milliseconds.
const STARTUP_POLL_MS: u64 = 10;
/// Log filter for the processes under test: warnings only, so logging costs little.
const PROCESS_LOG_FILTER: &str = "warn";

/// A child process, killed (SIGKILL) on drop.
pub struct Proc {
    child: Option<Child>,
    /// Data dir (holds `listen.addr` and `process.log`).
    pub dir: PathBuf,
}

impl Proc {
    /// Starts `program args` with stdout and stderr in `<dir>/process.log`.
    pub fn spawn(program: &Path, args: &[String], dir: &Path) -> anyhow::Result<Self> {
        Self::spawn_logging(program, args, dir, None)
    }

    /// [`Proc::spawn`] with `RUST_LOG` set to `filter` (default: `WHARF_BENCH_LOG`, else
    /// `warn`).
    pub fn spawn_logging(
        program: &Path,
        args: &[String],
        dir: &Path,
        filter: Option<&str>,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let log = std::fs::File::create(dir.join("process.log"))?;
        let filter = filter.map_or_else(
            || std::env::var("WHARF_BENCH_LOG").unwrap_or_else(|_| PROCESS_LOG_FILTER.into()),
            str::to_owned,
        );
        let child = Command::new(program)
            .args(args)
            // The runs use test-source, offered only with this set.
            .env("WHARF_ENABLE_TEST_PLUGINS", "1")
            .env("RUST_LOG", filter)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawn {}", program.display()))?;
        Ok(Self {
            child: Some(child),
            dir: dir.to_path_buf(),
        })
    }

    /// OS process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Waits for `<dir>/listen.addr` and returns it (`IP:PORT`).
    pub async fn listen_addr(&mut self) -> anyhow::Result<String> {
        let path = self.dir.join("listen.addr");
        let start = Instant::now();
        loop {
            if let Ok(s) = std::fs::read_to_string(&path) {
                let s = s.trim();
                if !s.is_empty() {
                    return Ok(s.to_owned());
                }
            }
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                bail!(
                    "{} exited with {status}: {}",
                    self.dir.display(),
                    std::fs::read_to_string(self.dir.join("process.log")).unwrap_or_default()
                );
            }
            if start.elapsed() > Duration::from_millis(LISTEN_DEADLINE_MS) {
                bail!("{} did not listen in time", self.dir.display());
            }
            tokio::time::sleep(Duration::from_millis(STARTUP_POLL_MS)).await;
        }
    }

    /// True once the process has exited (or was killed).
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_none_or(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM (a graceful stop, as `systemctl restart` sends), then waits until the
    /// process exited; SIGKILL after `deadline`. Returns whether it exited by itself.
    pub async fn terminate(&mut self, deadline: Duration) -> bool {
        let Some(c) = self.child.as_mut() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < deadline {
            if matches!(c.try_wait(), Ok(Some(_))) {
                self.child = None;
                return true;
            }
            tokio::time::sleep(Duration::from_millis(STARTUP_POLL_MS)).await;
        }
        self.kill9();
        false
    }

    /// Resident set size in KiB (VmRSS), 0 when the process is gone.
    pub fn rss_kib(&self) -> u64 {
        rss_kib(self.pid())
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// VmRSS of `pid` in KiB from /proc, 0 when unreadable.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system) `pid` has used so far, in milliseconds, from /proc (clock
/// ticks, so 10 ms resolution at the usual 100 Hz); 0 when unreadable.
pub fn cpu_ms(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces), from field 3 (state) on:
    // utime and stime are fields 14 and 15.
    let Some(rest) = stat.rsplit_once(") ").map(|(_, r)| r) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = [11, 12]
        .iter()
        .filter_map(|i| f.get(*i).and_then(|v| v.parse::<f64>().ok()))
        .sum();
    // sysconf(_SC_CLK_TCK) is 100 on every Linux this runs on.
    ticks * 10.0
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Options of a cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Number of executor processes.
    pub executors: usize,
    /// Executor lease, milliseconds.
    pub lease_ms: u32,
    /// Heartbeat interval, milliseconds.
    pub heartbeat_ms: u32,
    /// JetStream URL for the executors' record log; embedded when None.
    pub nats_url: Option<String>,
    /// Any other `--record-log` of the executors (`kafka://...`); wins over `nats_url`.
    pub record_log: Option<String>,
    /// Metrics listeners on every process and span export to this OTLP endpoint (the
    /// "on" runs); neither when None.
    pub otlp_endpoint: Option<String>,
    /// Mutual TLS between every process (certificates made under the cluster's root with
    /// `wharf::certs`, as `wharf-control-plane certs` does; docs/security.md).
    pub mtls: bool,
    /// More arguments of every executor (`--plugin-processes FILE`).
    pub executor_args: Vec<String>,
}

impl ClusterOptions {
    /// `executors` executor processes with a 10 s lease and a 1 s heartbeat (long enough
    /// that no lease expires by accident during a measurement), embedded record log,
    /// plaintext, observability off.
    pub fn plain(executors: usize) -> Self {
        Self {
            executors,
            lease_ms: 10_000,
            heartbeat_ms: 1_000,
            nats_url: None,
            record_log: None,
            otlp_endpoint: None,
            mtls: false,
            executor_args: Vec::new(),
        }
    }
}

/// Where the certificates of an mTLS cluster are.
#[derive(Debug, Clone)]
pub struct Pki {
    /// Directory of `ca.pem` and the leaves.
    pub dir: PathBuf,
}

impl Pki {
    fn make(dir: &Path, executors: usize) -> anyhow::Result<Self> {
        use wharf::identity::{AdminRole, Identity};
        wharf::certs::init_ca(dir)?;
        wharf::certs::issue(dir, &Identity::ControlPlane, &[])?;
        wharf::certs::issue(
            dir,
            &Identity::Admin {
                role: AdminRole::Admin,
                name: "bench".into(),
            },
            &[],
        )?;
        for i in 0..executors {
            Self::issue_executor(dir, i)?;
        }
        Ok(Self {
            dir: dir.to_owned(),
        })
    }

    fn issue_executor(dir: &Path, i: usize) -> anyhow::Result<()> {
        let id = wharf::identity::Identity::Executor(format!("exec-{}", i + 1));
        if !dir
            .join(format!("{}.pem", wharf::certs::leaf_name(&id)))
            .exists()
        {
            wharf::certs::issue(dir, &id, &[format!("127.0.0.{}", i + 2)])?;
        }
        Ok(())
    }

    /// `--tls-cert/--tls-key/--tls-ca` presenting `leaf`.
    fn flags(&self, leaf: &str) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.dir.join(format!("{leaf}.pem")).display().to_string(),
            "--tls-key".into(),
            self.dir.join(format!("{leaf}.key")).display().to_string(),
            "--tls-ca".into(),
            self.dir.join(wharf::certs::CA_CERT).display().to_string(),
        ]
    }

    /// A client presenting `leaf` (`admin-bench`, `control-plane`), trusting the CA.
    pub fn client(&self, leaf: &str) -> anyhow::Result<wharf::tls::ClientTls> {
        let (cert, key) = (
            self.dir.join(format!("{leaf}.pem")),
            self.dir.join(format!("{leaf}.key")),
        );
        Ok(wharf::tls::ClientTls::Fixed(wharf::tls::client_config(
            &self.dir.join(wharf::certs::CA_CERT),
            Some((&cert, &key)),
        )?))
    }
}

/// A connected channel to `addr` (`IP:PORT`): `http://`, or `https://` presenting
/// `leaf` of `pki`. Connections are made once and reused by every call.
pub async fn connect(addr: &str, tls: Option<(&Pki, &str)>) -> anyhow::Result<Channel> {
    let Some((pki, leaf)) = tls else {
        return Ok(Channel::from_shared(format!("http://{addr}"))?
            .connect()
            .await?);
    };
    let client = pki.client(leaf)?;
    let endpoint = wharf::tls::check_url(&format!("https://{addr}"), &client)?;
    let ch = wharf::tls::channel(endpoint, client);
    // Lazy: make the connection (and its one handshake) now, not in the first timed call.
    tonic_health::pb::health_client::HealthClient::new(ch.clone())
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map_err(|s| anyhow::anyhow!("TLS connection to {addr}: {s}"))?;
    Ok(ch)
}

/// One control plane and its executors.
pub struct Cluster {
    /// The control plane.
    pub cp: Proc,
    /// Its `IP:PORT`.
    pub cp_addr: String,
    /// Executor processes, with their `IP:PORT`.
    pub executors: Vec<(Proc, String)>,
    /// Admin client.
    pub admin: ConnectorAdminClient<Channel>,
    /// Channel to the control plane.
    pub cp_channel: Channel,
    /// Certificates, with mutual TLS.
    pub pki: Option<Pki>,
    /// Metrics listeners (`IP:PORT`) of every process, when observability is on.
    pub metrics: Vec<String>,
    /// The control plane's program and arguments, for [`Cluster::restart_cp`].
    cp_command: (PathBuf, Vec<String>),
}

/// The flags that turn metrics and span export on, with the metrics address on `ip`.
fn observe_args(ip: &str, otlp: Option<&String>) -> anyhow::Result<(Vec<String>, Option<String>)> {
    let Some(endpoint) = otlp else {
        return Ok((Vec::new(), None));
    };
    let port = std::net::TcpListener::bind(format!("{ip}:0"))?
        .local_addr()?
        .port();
    let addr = format!("{ip}:{port}");
    // WHARF_BENCH_OBSERVE=metrics or =traces turns on only one of the two, to tell their
    // costs apart; =none neither, so that an "on" cluster is an "off" one and the pairing's
    // own bias shows (bench/NOTES.md); unset or anything else: both.
    let only = std::env::var("WHARF_BENCH_OBSERVE").unwrap_or_default();
    let metrics = !matches!(only.as_str(), "traces" | "none");
    let traces = !matches!(only.as_str(), "metrics" | "none");
    let mut args = Vec::new();
    if metrics {
        args.extend(["--metrics-listen".to_owned(), addr.clone()]);
    }
    if traces {
        args.extend(["--otlp-endpoint".to_owned(), endpoint.clone()]);
    }
    Ok((args, metrics.then_some(addr)))
}

impl Cluster {
    /// Starts the processes under `root` and waits until every executor is ALIVE.
    pub async fn start(bin_dir: &Path, root: &Path, opts: &ClusterOptions) -> anyhow::Result<Self> {
        let cp_dir = root.join("cp");
        let pki = if opts.mtls {
            Some(Pki::make(&root.join("pki"), opts.executors)?)
        } else {
            None
        };
        let (extra, cp_metrics) = observe_args("127.0.0.1", opts.otlp_endpoint.as_ref())?;
        let mut cp_args: Vec<String> = vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            cp_dir.display().to_string(),
            "--lease-ms".into(),
            opts.lease_ms.to_string(),
            "--heartbeat-interval-ms".into(),
            opts.heartbeat_ms.to_string(),
        ];
        cp_args.extend(pki.iter().flat_map(|p| p.flags("control-plane")));
        if opts.nats_url.is_none() && opts.record_log.is_none() {
            // Each executor on its own embedded log: admitted beside each other
            // (placement and lifecycle benchmarks; records stay on their executor).
            cp_args.push("--allow-separate-embedded-logs".into());
        }
        cp_args.extend(extra);
        let cp_program = bin_dir.join("wharf-control-plane");
        let mut cp = Proc::spawn(&cp_program, &cp_args, &cp_dir)?;
        let cp_addr = cp.listen_addr().await?;
        // A restart listens where the executors and the admin channel expect it.
        if let Some(i) = cp_args.iter().position(|a| a == "--listen") {
            cp_args[i + 1].clone_from(&cp_addr);
        }
        let cp_channel = connect(&cp_addr, pki.as_ref().map(|p| (p, "admin-bench"))).await?;
        let mut c = Self {
            pki,
            cp,
            cp_addr,
            executors: Vec::new(),
            admin: ConnectorAdminClient::new(cp_channel.clone())
                .max_decoding_message_size(usize::MAX),
            cp_channel,
            metrics: cp_metrics.into_iter().collect(),
            cp_command: (cp_program, cp_args),
        };
        let mut started = Vec::new();
        for i in 0..opts.executors {
            started.push(c.spawn_executor(bin_dir, root, i, opts)?);
        }
        for mut p in started {
            let addr = p.listen_addr().await?;
            c.executors.push((p, addr));
        }
        c.wait_alive(opts.executors).await?;
        Ok(c)
    }

    fn spawn_executor(
        &mut self,
        bin_dir: &Path,
        root: &Path,
        i: usize,
        opts: &ClusterOptions,
    ) -> anyhow::Result<Proc> {
        let d = root.join(format!("exec-{}", i + 1));
        let scheme = if self.pki.is_some() { "https" } else { "http" };
        let mut args = vec![
            "--listen".into(),
            format!("127.0.0.{}:0", i + 2),
            "--control-plane".into(),
            format!("{scheme}://{}", self.cp_addr),
            "--data-dir".into(),
            d.display().to_string(),
            "--executor-id".into(),
            format!("exec-{}", i + 1),
            "--graceful-timeout-ms".into(),
            "3000".into(),
            // The benchmark's files are next to the cluster's directory.
            "--file-root".into(),
            root.parent().unwrap_or(root).display().to_string(),
        ];
        if let Some(log) = &opts.record_log {
            args.push("--record-log".into());
            args.push(log.clone());
        } else if let Some(url) = &opts.nats_url {
            args.push("--nats-url".into());
            args.push(url.clone());
        }
        if let Some(pki) = &self.pki {
            Pki::issue_executor(&pki.dir, i)?;
            args.extend(pki.flags(&format!("executor-exec-{}", i + 1)));
        }
        let (extra, metrics) =
            observe_args(&format!("127.0.0.{}", i + 2), opts.otlp_endpoint.as_ref())?;
        args.extend(extra);
        args.extend(opts.executor_args.iter().cloned());
        self.metrics.extend(metrics);
        Proc::spawn(&bin_dir.join("wharf-executor"), &args, &d)
    }

    /// Restarts the control plane on the same store and address: SIGTERM, wait for the
    /// exit (at most `stop_deadline`), start it again logging with `filter`. Returns how
    /// long the old process took to exit and when the new one was started; the caller
    /// waits for what it measures (the admin channel reconnects by itself).
    pub async fn restart_cp(
        &mut self,
        stop_deadline: Duration,
        filter: &str,
    ) -> anyhow::Result<(Duration, Instant)> {
        let t = Instant::now();
        if !self.cp.terminate(stop_deadline).await {
            bail!("the control plane did not exit within {stop_deadline:?} of SIGTERM");
        }
        let stopped = t.elapsed();
        let dir = self.cp.dir.clone();
        // The old log is kept beside the new one; the address file is written again.
        let _ = std::fs::rename(
            dir.join("process.log"),
            dir.join("process-before-restart.log"),
        );
        let _ = std::fs::remove_file(dir.join("listen.addr"));
        let (program, args) = &self.cp_command;
        let spawned = Instant::now();
        self.cp = Proc::spawn_logging(program, args, &dir, Some(filter))?;
        Ok((stopped, spawned))
    }

    /// Starts one more executor (`exec-{n+1}`) and waits until it is ALIVE.
    pub async fn add_executor(
        &mut self,
        bin_dir: &Path,
        root: &Path,
        opts: &ClusterOptions,
    ) -> anyhow::Result<()> {
        let i = self.executors.len();
        let mut p = self.spawn_executor(bin_dir, root, i, opts)?;
        let addr = p.listen_addr().await?;
        self.executors.push((p, addr));
        self.wait_alive(i + 1).await
    }

    /// Waits until `n` executors are ALIVE.
    pub async fn wait_alive(&self, n: usize) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            let alive = self
                .admin
                .clone()
                .list_executors(ListExecutorsRequest {})
                .await?
                .into_inner()
                .executors
                .iter()
                .filter(|e| e.state == ExecutorState::Alive as i32)
                .count();
            if alive >= n {
                return Ok(());
            }
            if start.elapsed() > Duration::from_millis(ALIVE_DEADLINE_MS) {
                bail!("only {alive} of {n} executors alive");
            }
            tokio::time::sleep(Duration::from_millis(STARTUP_POLL_MS)).await;
        }
    }

    /// CPU time used so far by the control plane and every executor, milliseconds.
    pub fn cpu_ms(&self) -> f64 {
        cpu_ms(self.cp.pid())
            + self
                .executors
                .iter()
                .map(|(p, _)| cpu_ms(p.pid()))
                .sum::<f64>()
    }

    /// Sum of the executors' RSS in KiB.
    pub fn executors_rss_kib(&self) -> u64 {
        self.executors.iter().map(|(p, _)| p.rss_kib()).sum()
    }
}

/// A test-owned `nats-server -js` on a free loopback port with its store in `dir`.
pub struct NatsServer {
    /// The process.
    pub _proc: Proc,
    /// `nats://127.0.0.1:PORT`.
    pub url: String,
}

impl NatsServer {
    /// Starts it and waits until it accepts connections.
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let program = ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .context("nats-server not found in /usr/sbin or /usr/bin")?;
        let port = free_port()?;
        let store = dir.join("store");
        let proc = Proc::spawn(
            &program,
            &[
                "-a".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
                "-js".into(),
                "-sd".into(),
                store.display().to_string(),
            ],
            dir,
        )?;
        let url = format!("nats://127.0.0.1:{port}");
        let start = Instant::now();
        loop {
            if async_nats::connect(&url).await.is_ok() {
                break;
            }
            if start.elapsed() > Duration::from_millis(LISTEN_DEADLINE_MS) {
                bail!("nats-server on {url} did not start");
            }
            tokio::time::sleep(Duration::from_millis(STARTUP_POLL_MS * 5)).await;
        }
        Ok(Self { _proc: proc, url })
    }
}

/// A tansu broker (the Kafka-protocol broker `scripts/setup-services` installs) on a free
/// loopback port with in-memory storage; killed when dropped.
pub struct Tansu {
    /// The process.
    pub _proc: Proc,
    /// `127.0.0.1:PORT`.
    pub broker: String,
}

impl Tansu {
    /// Starts it (the binary `scripts/setup-services tansu-path` prints, or `WHARF_TANSU`)
    /// and waits until it accepts connections.
    pub async fn start(dir: &Path) -> anyhow::Result<Self> {
        let program = match std::env::var("WHARF_TANSU") {
            Ok(p) => PathBuf::from(p),
            Err(_) => {
                let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/setup-services");
                let out = std::process::Command::new(script)
                    .arg("tansu-path")
                    .output()
                    .with_context(|| format!("run {script} tansu-path"))?;
                let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if !out.status.success() || path.is_empty() {
                    bail!("no tansu broker: run scripts/setup-services (or set WHARF_TANSU)");
                }
                PathBuf::from(path)
            }
        };
        let port = free_port()?;
        let url = format!("tcp://127.0.0.1:{port}");
        let proc = Proc::spawn(
            &program,
            &[
                "broker".into(),
                "--listener-url".into(),
                url.clone(),
                "--advertised-listener-url".into(),
                url,
                "--storage-engine".into(),
                "memory://tansu/".into(),
            ],
            dir,
        )?;
        let broker = format!("127.0.0.1:{port}");
        let start = Instant::now();
        while std::net::TcpStream::connect(&broker).is_err() {
            if start.elapsed() > Duration::from_millis(LISTEN_DEADLINE_MS) {
                bail!("tansu on {broker} did not start");
            }
            tokio::time::sleep(Duration::from_millis(STARTUP_POLL_MS)).await;
        }
        Ok(Self {
            _proc: proc,
            broker,
        })
    }
}
