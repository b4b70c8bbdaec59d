//! A test-owned PostgreSQL cluster that admits TCP clients only over TLS: `initdb` in a
//! temp dir, `ssl = on` with a server certificate made here by rcgen (signed by a CA of
//! the test's own), `hostssl` lines only in `pg_hba.conf`, a free loopback port. Stopped
//! (fast shutdown) when dropped.
//!
//! The binaries come from `$WHARF_TEST_PG_BIN` or the newest `/usr/lib/postgresql/*/bin`
//! (Debian's `postgresql` package, installed by `scripts/setup-services`). PostgreSQL
//! refuses to run as root: under root the cluster runs as the `postgres` user.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::Client;

use crate::test_ca::TestCa;
use crate::wait_until;

/// Superuser of the test cluster (trust authentication over TLS).
pub const SUPERUSER: &str = "postgres";
/// Upper bound on the cluster's start (initdb is done before), for `wait_until`.
pub const PG_START_DEADLINE: Duration = Duration::from_secs(60);
/// How long a fast shutdown may take before the server is killed, in milliseconds.
const PG_STOP_TIMEOUT_MS: u64 = 10_000;
/// Pause between two checks of a stopping server, in milliseconds.
const PG_STOP_POLL_MS: u64 = 50;

/// A CA and the server certificate it signed, written by [`write_ca_and_server_cert`].
#[derive(Debug, Clone)]
pub struct CertFiles {
    /// The CA certificate (PEM): what a client's `sslrootcert` names.
    pub ca: PathBuf,
    /// The server certificate (PEM).
    pub cert: PathBuf,
    /// Its key (PEM, mode 0600).
    pub key: PathBuf,
}

/// Makes a CA and a server certificate for `names` (DNS names or IP addresses) under
/// `dir`: `ca.pem`, `server.crt`, `server.key`. Each call makes a new CA, so two calls
/// give certificates that do not trust each other.
pub fn write_ca_and_server_cert(dir: &Path, names: &[&str]) -> CertFiles {
    let ca = TestCa::new(dir);
    let leaf = ca.issue("server", names);
    CertFiles {
        ca: ca.cert,
        cert: leaf.cert,
        key: leaf.key,
    }
}

/// The newest PostgreSQL server binaries on this machine.
pub fn pg_bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("WHARF_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .expect("no /usr/lib/postgresql/*/bin/initdb: install postgresql (scripts/setup-services)")
}

/// `(uid, gid)` to run PostgreSQL as: the `postgres` user under root, else none.
pub(crate) fn run_as() -> Option<(u32, u32)> {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the process's effective user.
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok()?;
    if uid != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("/etc/passwd");
    let user = passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.first() == Some(&"postgres") && f.len() > 3)
        .expect("running as root needs a postgres user (Debian's postgresql package makes it)");
    Some((
        user[2].parse().expect("postgres uid"),
        user[3].parse().expect("postgres gid"),
    ))
}

pub(crate) fn chown_tree(path: &Path, owner: Option<(u32, u32)>) {
    let Some((uid, gid)) = owner else { return };
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).expect("chown");
    if path.is_dir() {
        for entry in std::fs::read_dir(path).expect("read dir").flatten() {
            chown_tree(&entry.path(), owner);
        }
    }
}

/// Runs `initdb` into `data` as `owner`: superuser `SUPERUSER`, trust auth, UTF8; panics
/// with initdb's stderr when it fails.
pub(crate) fn initdb(bin: &Path, owner: Option<(u32, u32)>, data: &Path) {
    let out = command(bin.join("initdb"), owner)
        .arg("-D")
        .arg(data)
        .args(["-U", SUPERUSER, "--auth=trust", "--no-sync", "-E", "UTF8"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("spawn initdb");
    assert!(
        out.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub(crate) fn command(program: PathBuf, owner: Option<(u32, u32)>) -> Command {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(program);
    if let Some((uid, gid)) = owner {
        c.uid(uid).gid(gid);
    }
    c
}

/// A running PostgreSQL that requires TLS on TCP.
pub struct TlsPostgres {
    child: Option<Child>,
    /// Loopback port it listens on (127.0.0.1).
    pub port: u16,
    /// The CA and server certificate it uses.
    pub certs: CertFiles,
    dir: tempfile::TempDir,
}

impl TlsPostgres {
    /// Starts a cluster whose certificate names `names` (for example
    /// `["localhost", "127.0.0.1"]`), and waits until it answers a verify-full client.
    pub async fn start(names: &[&str]) -> TlsPostgres {
        Self::start_with(names, false).await
    }

    /// [`TlsPostgres::start`] with `wal_level = logical` and replication connections
    /// admitted over TLS, for change-data-capture clients (Debezium).
    pub async fn start_logical(names: &[&str]) -> TlsPostgres {
        Self::start_with(names, true).await
    }

    async fn start_with(names: &[&str], logical: bool) -> TlsPostgres {
        let dir = tempfile::tempdir().expect("temp dir");
        let owner = run_as();
        let bin = pg_bin_dir();
        let data = dir.path().join("data");
        let certs = write_ca_and_server_cert(&dir.path().join("certs"), names);
        chown_tree(dir.path(), owner);
        // The temp dir is 0700: the server's user must be able to enter it.
        initdb(&bin, owner, &data);
        let port = crate::audit::free_port();
        let conf = format!(
            "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{sock}'\n\
             ssl = on\nssl_cert_file = '{cert}'\nssl_key_file = '{key}'\n\
             fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n",
            sock = dir.path().display(),
            cert = certs.cert.display(),
            key = certs.key.display(),
        );
        append(&data.join("postgresql.conf"), &conf);
        let mut hba = String::from(
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n",
        );
        if logical {
            append(
                &data.join("postgresql.conf"),
                "wal_level = logical\nmax_replication_slots = 8\nmax_wal_senders = 8\n",
            );
            hba.push_str("hostssl replication all 127.0.0.1/32 trust\n");
        }
        // TCP only over TLS; the local socket (unused by the tests) trusts.
        std::fs::write(data.join("pg_hba.conf"), hba).expect("pg_hba.conf");
        chown_tree(&data, owner);
        let log = std::fs::File::create(dir.path().join("postgres.log")).expect("log");
        chown_tree(&dir.path().join("postgres.log"), owner);
        let child = command(bin.join("postgres"), owner)
            .arg("-D")
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn postgres");
        let mut pg = TlsPostgres {
            child: Some(child),
            port,
            certs,
            dir,
        };
        let host = names.first().copied().unwrap_or("127.0.0.1").to_owned();
        wait_until("the TLS PostgreSQL to answer", PG_START_DEADLINE, || {
            let exited = pg.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
            if let Some(status) = exited {
                panic!("postgres exited with {status}; log:\n{}", pg.log());
            }
            let (ca, port, host) = (pg.certs.ca.clone(), pg.port, host.clone());
            async move { connect_tls(&host, port, &ca, "postgres").await.ok() }
        })
        .await;
        pg
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }

    /// A superuser connection to `db` over TLS, verified against the cluster's CA with
    /// `host` as the name the certificate must carry.
    pub async fn client(&self, host: &str, db: &str) -> Client {
        connect_tls(host, self.port, &self.certs.ca, db)
            .await
            .unwrap_or_else(|e| panic!("connect to the TLS PostgreSQL: {e}"))
    }

    /// Creates database `name` and returns a connection to it.
    pub async fn create_db(&self, host: &str, name: &str) -> Client {
        self.client(host, "postgres")
            .await
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create database");
        self.client(host, name).await
    }
}

pub(crate) fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(path)
        .expect("open postgresql.conf");
    f.write_all(text.as_bytes())
        .expect("append postgresql.conf");
}

/// A verify-full TLS connection as [`SUPERUSER`]; the error's text with its causes.
pub async fn connect_tls(host: &str, port: u16, ca: &Path, db: &str) -> Result<Client, String> {
    let roots = wharf::tls::read_roots(ca).map_err(|e| e.to_string())?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let (client, conn) = tokio_postgres::Config::new()
        .host(host)
        .port(port)
        .user(SUPERUSER)
        .dbname(db)
        .ssl_mode(tokio_postgres::config::SslMode::Require)
        .connect(tokio_postgres_rustls::MakeRustlsConnect::new(config))
        .await
        .map_err(|e| wharf::tls::error_chain(&e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

impl Drop for TlsPostgres {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGINT is PostgreSQL's fast shutdown: backends end, nothing is left in memory.
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_millis(PG_STOP_TIMEOUT_MS);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(PG_STOP_POLL_MS));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
