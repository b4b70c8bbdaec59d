//! A test-owned etcd: the `etcd` binary on free loopback ports with a temp data dir,
//! killed when dropped. Install it with `scripts/setup-services` (Debian `etcd-server`).
//! [`TestEtcd::start_secure`] serves clients over TLS and asks them for a certificate
//! (`--client-cert-auth`); [`enable_auth`] turns on etcd's user authentication.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long etcd gets to answer after spawning, in milliseconds.
pub const ETCD_START_TIMEOUT_MS: u64 = 20_000;
/// Pause between two health probes, in milliseconds.
const ETCD_PROBE_INTERVAL_MS: u64 = 50;
/// Bound on one read of [`TestEtcd::leader_revision`], in milliseconds.
pub const ETCD_PROBE_TIMEOUT_MS: u64 = 1_000;

/// The files of an etcd that serves clients over TLS.
#[derive(Debug, Clone)]
pub struct EtcdServerTls {
    /// Server certificate (PEM) and its key.
    pub cert: PathBuf,
    /// Key of `cert`.
    pub key: PathBuf,
    /// CA (PEM) that client certificates must chain to.
    pub client_ca: PathBuf,
}

/// A running etcd.
pub struct TestEtcd {
    child: Option<Child>,
    /// Client URL, `http://127.0.0.1:PORT` (`https://` with TLS).
    pub endpoint: String,
    tls: Option<EtcdServerTls>,
    peer_url: String,
    client_port: u16,
    _dir: tempfile::TempDir,
}

fn free_port() -> u16 {
    crate::free_port_on("127.0.0.1")
}

impl TestEtcd {
    /// Starts etcd and waits until it accepts a TCP connection on its client port.
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// Starts etcd serving clients over TLS only, with `--client-cert-auth`: a client
    /// needs a certificate signed by `tls.client_ca`.
    pub fn start_secure(tls: EtcdServerTls) -> Self {
        Self::start_with(Some(tls))
    }

    fn start_with(tls: Option<EtcdServerTls>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let (client, peer) = (free_port(), free_port());
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut etcd = Self {
            child: None,
            endpoint: format!("{scheme}://127.0.0.1:{client}"),
            tls,
            peer_url: format!("http://127.0.0.1:{peer}"),
            client_port: client,
            _dir: dir,
        };
        etcd.start_again();
        etcd
    }

    /// Kills etcd (its data dir and ports stay, for [`TestEtcd::start_again`]).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A control plane's flags for this etcd (plaintext, default prefix) with an election
    /// TTL of `election_ttl_secs`, to add to a [`crate::cluster::TestCluster`]'s.
    pub fn store_flags(&self, election_ttl_secs: u32) -> Vec<String> {
        vec![
            "--store".into(),
            "etcd".into(),
            "--etcd-endpoints".into(),
            self.endpoint.clone(),
            "--etcd-election-ttl-secs".into(),
            election_ttl_secs.to_string(),
        ]
    }

    /// Freezes etcd (SIGSTOP) and waits until every thread of it stopped: its port still
    /// accepts connections, but no call is answered, so a client waits for its own
    /// timeout (a stopped etcd refuses at once instead). [`TestEtcd::thaw`] resumes it.
    pub async fn freeze(&self) {
        let pid = self.signal("STOP");
        crate::wait_until("every thread of etcd stopped", crate::WAIT_DEADLINE, || {
            let stopped = crate::all_threads_stopped(pid);
            async move { stopped.then_some(()) }
        })
        .await;
    }

    /// The `create_revision` of `<prefix>leader`, the key the elected control-plane
    /// replica created (plaintext etcd only); `None` when no replica leads, or when etcd
    /// gives no answer within [`ETCD_PROBE_TIMEOUT_MS`].
    pub async fn leader_revision(&self, prefix: &str) -> Option<i64> {
        let bound = Duration::from_millis(ETCD_PROBE_TIMEOUT_MS);
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(bound)
            .with_timeout(bound);
        let read = async {
            let mut client = etcd_client::Client::connect([self.endpoint.as_str()], Some(options))
                .await
                .ok()?;
            let got = client.get(format!("{prefix}leader"), None).await.ok()?;
            got.kvs()
                .first()
                .map(etcd_client::KeyValue::create_revision)
        };
        tokio::time::timeout(bound, read).await.ok().flatten()
    }

    /// Resumes an etcd frozen by [`TestEtcd::freeze`] (SIGCONT).
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    /// Sends `signal` with kill(1) to the running etcd; returns its pid.
    fn signal(&self, signal: &str) -> i32 {
        let pid = self
            .child
            .as_ref()
            .map(|c| c.id() as i32)
            .expect("etcd running");
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} {pid} failed");
        pid
    }

    /// Starts etcd again on the same ports and data, after [`TestEtcd::stop`]; waits
    /// until it accepts a TCP connection.
    pub fn start_again(&mut self) {
        self.stop();
        let dir = self._dir.path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("etcd.log"))
            .expect("etcd log");
        let mut command =
            Command::new(std::env::var("WHARF_TEST_ETCD").unwrap_or_else(|_| "etcd".into()));
        if let Some(tls) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key)
                .arg("--trusted-ca-file")
                .arg(&tls.client_ca)
                .arg("--client-cert-auth");
        }
        let child = command
            .args(["--name", "wharf-test"])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &self.endpoint])
            .args(["--advertise-client-urls", &self.endpoint])
            .args(["--listen-peer-urls", &self.peer_url])
            .args(["--initial-advertise-peer-urls", &self.peer_url])
            .args([
                "--initial-cluster",
                &format!("wharf-test={}", self.peer_url),
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn etcd (install etcd-server: scripts/setup-services)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_millis(ETCD_START_TIMEOUT_MS);
        loop {
            if std::net::TcpStream::connect(("127.0.0.1", self.client_port)).is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "etcd did not start in time");
            std::thread::sleep(Duration::from_millis(ETCD_PROBE_INTERVAL_MS));
        }
    }
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Who may do what once [`enable_auth`] ran.
#[derive(Debug, Clone)]
pub struct EtcdAuth {
    /// Password of `root` (etcd's superuser, required to enable auth).
    pub root_password: String,
    /// The user Wharf connects as.
    pub user: String,
    /// Its password.
    pub password: String,
    /// The key prefix the user's role may read and write (and nothing else).
    pub prefix: String,
}

/// A client of a TLS etcd presenting `client` (certificate, key), trusting `ca`, as
/// `user` (name, password) when given.
pub async fn tls_client(
    endpoint: &str,
    ca: &Path,
    client: (&Path, &Path),
    user: Option<(&str, &str)>,
) -> Result<etcd_client::Client, etcd_client::Error> {
    let read = |p: &Path| std::fs::read(p).expect("read a TLS file");
    let tls = etcd_client::TlsOptions::new()
        .ca_certificate(etcd_client::Certificate::from_pem(read(ca)))
        .identity(etcd_client::Identity::from_pem(
            read(client.0),
            read(client.1),
        ));
    let mut options = etcd_client::ConnectOptions::new().with_tls(tls);
    if let Some((name, password)) = user {
        options = options.with_user(name, password);
    }
    etcd_client::Client::connect([endpoint], Some(options)).await
}

/// Turns on etcd's user authentication: `root` with its role, and `auth.user` with a
/// role that may read and write `auth.prefix` only. Waits (bounded) until etcd answers.
pub async fn enable_auth(endpoint: &str, ca: &Path, client: (&Path, &Path), auth: &EtcdAuth) {
    let mut c = crate::wait_until("the TLS etcd to answer", crate::WAIT_DEADLINE, || async {
        let mut c = tls_client(endpoint, ca, client, None).await.ok()?;
        c.get("probe", None).await.ok()?;
        Some(c)
    })
    .await;
    c.user_add("root", auth.root_password.as_str(), None)
        .await
        .expect("add root");
    c.role_add("root").await.expect("add role root");
    c.user_grant_role("root", "root").await.expect("grant root");
    c.role_add(auth.user.as_str()).await.expect("add role");
    c.role_grant_permission(
        auth.user.as_str(),
        etcd_client::Permission::read_write(auth.prefix.as_str()).with_prefix(),
    )
    .await
    .expect("grant the prefix");
    c.user_add(auth.user.as_str(), auth.password.as_str(), None)
        .await
        .expect("add user");
    c.user_grant_role(auth.user.as_str(), auth.user.as_str())
        .await
        .expect("grant role");
    c.auth_enable().await.expect("enable auth");
}

/// Election lease TTL of test control-plane replicas, in seconds (etcd's shortest is 2).
pub const TEST_ELECTION_TTL_SECS: u32 = 2;

/// Starts control-plane replica `name` (data dir `<dir>/<name>`, 127.0.0.1 port 0) on the
/// etcd at `endpoints` under `prefix`, sealing with `key` as every replica of one store
/// must (docs/state.md), with executor lease `lease_ms`, the test heartbeat interval and
/// [`TEST_ELECTION_TTL_SECS`]; `extra` appended to its flags.
pub fn control_plane_replica(
    dir: &Path,
    name: &str,
    endpoints: &str,
    prefix: &str,
    key: &[u8],
    lease_ms: u32,
    extra: &[String],
) -> crate::Proc {
    control_plane_replica_with_ttl(
        dir,
        name,
        endpoints,
        prefix,
        key,
        lease_ms,
        TEST_ELECTION_TTL_SECS,
        extra,
    )
}

/// As [`control_plane_replica`], with an election lease TTL of `election_ttl_secs`
/// seconds: after a kill -9 of the leader, another replica leads between two thirds of
/// the TTL and four thirds of it later (the lease expires at most a renewal interval,
/// TTL / 3, early; the follower campaigns every TTL / 3), which a test sets apart from
/// the executor lease when it needs one of the two to end first.
#[allow(clippy::too_many_arguments)]
pub fn control_plane_replica_with_ttl(
    dir: &Path,
    name: &str,
    endpoints: &str,
    prefix: &str,
    key: &[u8],
    lease_ms: u32,
    election_ttl_secs: u32,
    extra: &[String],
) -> crate::Proc {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).expect("replica dir");
    std::fs::write(d.join("store.key"), key).expect("store key");
    let mut args = crate::cluster::control_plane_flags("127.0.0.1:0", &d, lease_ms);
    args.extend([
        "--store".into(),
        "etcd".into(),
        "--etcd-endpoints".into(),
        endpoints.into(),
        "--etcd-prefix".into(),
        prefix.into(),
        "--etcd-election-ttl-secs".into(),
        election_ttl_secs.to_string(),
    ]);
    args.extend(extra.iter().cloned());
    crate::Proc::spawn(crate::bin("wharf-control-plane"), args, &d)
}
