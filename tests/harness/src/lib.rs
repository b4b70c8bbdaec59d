//! `wharf-harness`, the test harness of the suites in `tests/*.rs`: real Wharf
//! processes on loopback addresses, each with a temp data dir, plus `wait_until` for
//! condition-based waiting, and typed tonic clients of the Wharf services (`client`).
//! Logs are kept on failure (the temp dir is persisted and its path printed when a test
//! panics).
//!
//! Conventions the binaries follow so that tests can pass port 0:
//! - each binary writes the address it bound, as `IP:PORT`, to `<data-dir>/listen.addr`
//!   (written to a temp name, then renamed) once it serves;
//! - stdout and stderr of each process go to `<data-dir>/process.log`.

pub mod audit;
pub mod auth;
pub mod client;
pub mod cluster;
pub mod etcd;
pub mod fault;
pub mod jvm;
pub mod kafka;
pub mod lifecycle;
pub mod lines;
pub mod logical_postgres;
pub mod nats_tls;
pub mod otlp;
pub mod postgres_tls;
pub mod prometheus;
pub mod rabbitmq;
pub mod rest;
pub mod rng;
pub mod test_ca;

// The crates the suites read stores and databases with, so that the root package needs
// none of them as dev-dependencies.
pub use lapin;
pub use rdkafka;
pub use redb;
pub use rusqlite;
pub use tokio_postgres;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Default upper bound for a wait in tests.
pub const WAIT_DEADLINE: Duration = Duration::from_secs(30);

/// Directory holding the built binaries: `$WHARF_BIN_DIR`, or the cargo target dir
/// this test binary was built into.
pub fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("WHARF_BIN_DIR") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/debug/deps/test-hash -> target/debug
    exe.parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_path_buf()
}

/// Path of a workspace binary; panics with a hint when it was not built.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} not found: build the workspace first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// Runs `wharf-control-plane certs ARGS` as an operator would; its output, whatever the
/// exit code.
pub fn certs_command(args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin("wharf-control-plane"))
        .arg("certs")
        .args(args)
        .output()
        .expect("run wharf-control-plane certs")
}

/// A loopback port on `ip` that nothing listens on now and that this test process has not
/// handed out before: the OS may give a just-released port again, and two picks of one
/// test (a control plane's `--listen` and its `--metrics-listen`) must not collide.
pub fn free_port_on(ip: &str) -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    loop {
        let port = std::net::TcpListener::bind(format!("{ip}:0"))
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Polls `check` every 20 ms until it returns `Some`, or panics after `deadline` with
/// `what` in the message.
pub async fn wait_until<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < deadline,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The executor's `--file-root` environment variable.
pub const FILE_ROOT_ENV: &str = "WHARF_FILE_ROOT";

/// The control plane's `--allow-separate-embedded-logs` environment variable.
pub const ALLOW_SEPARATE_EMBEDDED_LOGS_ENV: &str = "WHARF_ALLOW_SEPARATE_EMBEDDED_LOGS";

/// The file root a test's executor gets: the parent of its data dir (the test's temp
/// dir), or the data dir itself when it has none.
pub fn file_root(data_dir: &Path) -> PathBuf {
    data_dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(data_dir)
        .to_path_buf()
}

/// A running Wharf process. Killed (SIGKILL) on drop.
pub struct Proc {
    /// The child process.
    pub child: Option<Child>,
    /// Its data dir.
    pub data_dir: PathBuf,
    /// Program path.
    pub program: PathBuf,
    /// Arguments it was started with (to start it again).
    pub args: Vec<String>,
}

impl Proc {
    /// Starts `program args...`, logging into `<data_dir>/process.log`.
    pub fn spawn(program: PathBuf, args: Vec<String>, data_dir: &Path) -> Self {
        Self::spawn_with_env(program, args, data_dir, &[])
    }

    /// As [`Proc::spawn`], with `env` added to the environment of this start only
    /// ([`Proc::restart`] runs without it).
    pub fn spawn_with_env(
        program: PathBuf,
        args: Vec<String>,
        data_dir: &Path,
        env: &[(&str, &str)],
    ) -> Self {
        std::fs::create_dir_all(data_dir).expect("data dir");
        let _ = std::fs::remove_file(data_dir.join("listen.addr"));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(data_dir.join("process.log"))
            .expect("log file");
        let child = Command::new(&program)
            .args(&args)
            // Every Wharf process a test starts may host the fault-injecting test plugins.
            .env("WHARF_ENABLE_TEST_PLUGINS", "1")
            // An executor's file plugins may touch the test's temp dir (the parent of
            // its data dir, where the tests put their files) and nothing else.
            .env(FILE_ROOT_ENV, file_root(data_dir))
            // The suites start several executors on their own embedded logs to test
            // placement and lifecycle; a test of the one-log rule sets it back to false.
            .env(ALLOW_SEPARATE_EMBEDDED_LOGS_ENV, "true")
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
        Self {
            child: Some(child),
            data_dir: data_dir.to_path_buf(),
            program,
            args,
        }
    }

    /// Waits until the process wrote `listen.addr` and returns it (`IP:PORT`).
    pub async fn listen_addr(&mut self) -> String {
        let path = self.data_dir.join("listen.addr");
        let log = self.data_dir.join("process.log");
        let mut child = self.child.take();
        let addr = wait_until(
            &format!("{} to listen", self.program.display()),
            WAIT_DEADLINE,
            || {
                let exited = child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                if let Some(status) = exited {
                    panic!(
                        "{} exited with {status} before listening; log:\n{}",
                        self.program.display(),
                        std::fs::read_to_string(&log).unwrap_or_default()
                    );
                }
                let r = std::fs::read_to_string(&path)
                    .ok()
                    .map(|s| s.trim().to_owned());
                async move { r.filter(|s| !s.is_empty()) }
            },
        )
        .await;
        self.child = child;
        addr
    }

    /// OS process id.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).expect("running")
    }

    /// Sends `signal` (for example "TERM", "KILL", "STOP", "CONT") with kill(1).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid().to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Freezes the process with SIGSTOP and waits until every thread of it is stopped.
    /// kill(1) returns once the signal is queued: a request sent before the threads
    /// stopped would still be served, which a test of a frozen host must rule out.
    pub async fn freeze(&self) {
        self.signal("STOP");
        let pid = self.pid();
        wait_until("every thread of the process stopped", WAIT_DEADLINE, || {
            let stopped = all_threads_stopped(pid);
            async move { stopped.then_some(()) }
        })
        .await;
    }

    /// Resumes a process frozen by [`Proc::freeze`] (SIGCONT).
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM, then wait up to `deadline` for exit; returns the exit code.
    pub async fn terminate(&mut self, deadline: Duration) -> Option<i32> {
        self.signal("TERM");
        self.wait_exit(deadline).await
    }

    /// Waits up to `deadline` for the process to exit (panics after it); its exit code
    /// (`None` when a signal ended it).
    pub async fn wait_exit(&mut self, deadline: Duration) -> Option<i32> {
        let mut child = self.child.take().expect("running");
        let status = wait_until("the process to exit", deadline, || {
            let r = child.try_wait().ok().flatten();
            async move { r }
        })
        .await;
        status.code()
    }

    /// Starts the same program with the same arguments again (same data dir).
    pub fn restart(&mut self) {
        self.kill9();
        let mut again = Proc::spawn(self.program.clone(), self.args.clone(), &self.data_dir);
        self.child = again.child.take();
    }

    /// The process log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("process.log")).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A temp dir that is kept (and its path printed) when the test panics, so that the
/// process logs inside it can be read.
pub struct KeepOnFailure(pub Option<tempfile::TempDir>);

impl KeepOnFailure {
    /// A new temp dir.
    pub fn new() -> Self {
        Self(Some(
            tempfile::Builder::new()
                .prefix("wharf-test-")
                .tempdir()
                .expect("tempdir"),
        ))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        self.0.as_ref().expect("dir").path()
    }
}

impl Default for KeepOnFailure {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for KeepOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.0.take()
        {
            eprintln!("test failed; logs kept in {}", dir.keep().display());
        }
    }
}

/// True when `/proc/PID/task` lists at least one thread and every one is in state `T`
/// (stopped by a signal).
pub(crate) fn all_threads_stopped(pid: i32) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let states: Vec<Option<char>> = dir
        .flatten()
        .map(|t| thread_state(&t.path().join("stat")))
        .collect();
    !states.is_empty() && states.iter().all(|s| *s == Some('T'))
}

/// The state letter of a `/proc/.../stat` line: the field after the command name, which
/// is in parentheses and may itself hold spaces and parentheses.
fn thread_state(stat: &Path) -> Option<char> {
    let line = std::fs::read_to_string(stat).ok()?;
    line.rsplit_once(") ")?.1.chars().next()
}
