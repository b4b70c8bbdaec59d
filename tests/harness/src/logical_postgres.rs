//! A test-owned PostgreSQL cluster with `wal_level = logical`, for the change-data-capture
//! suites (Debezium's PostgreSQL connector needs logical decoding; the machine's shared
//! PostgreSQL runs with `replica` and must not be reconfigured): `initdb` in a temp dir,
//! plaintext TCP on a free loopback port, trust authentication (replication included).
//! Stopped (fast shutdown) when dropped. The binaries and the user it runs as are those
//! of [`crate::postgres_tls`].

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio_postgres::{Client, NoTls};

use crate::postgres_tls::{append, chown_tree, command, initdb, pg_bin_dir, run_as};
use crate::wait_until;

/// Superuser of the cluster.
pub const SUPERUSER: &str = "postgres";
/// Upper bound on the cluster's start after initdb.
pub const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long a fast shutdown may take before the server is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause between two checks of a stopping server.
const STOP_POLL: Duration = Duration::from_millis(50);

/// A running PostgreSQL with logical decoding.
pub struct LogicalPostgres {
    child: Option<Child>,
    /// Loopback port (127.0.0.1).
    pub port: u16,
    dir: tempfile::TempDir,
}

impl LogicalPostgres {
    /// Runs initdb and starts the server; returns once it answers.
    pub async fn start() -> LogicalPostgres {
        let dir = tempfile::tempdir().expect("temp dir");
        let owner = run_as();
        let bin = pg_bin_dir();
        let data = dir.path().join("data");
        chown_tree(dir.path(), owner);
        initdb(&bin, owner, &data);
        let port = crate::audit::free_port();
        append(
            &data.join("postgresql.conf"),
            &format!(
                "listen_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{sock}'\n\
                 wal_level = logical\nmax_replication_slots = 8\nmax_wal_senders = 8\n\
                 fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n",
                sock = dir.path().display(),
            ),
        );
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n",
        )
        .expect("pg_hba.conf");
        chown_tree(&data, owner);
        let log_path = dir.path().join("postgres.log");
        let log = std::fs::File::create(&log_path).expect("log");
        chown_tree(&log_path, owner);
        let child = command(bin.join("postgres"), owner)
            .arg("-D")
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("spawn postgres");
        let mut pg = LogicalPostgres {
            child: Some(child),
            port,
            dir,
        };
        wait_until("the logical PostgreSQL to answer", START_DEADLINE, || {
            if let Some(status) = pg.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("postgres exited with {status}; log:\n{}", pg.log());
            }
            let port = pg.port;
            async move { connect(port, "postgres").await.ok() }
        })
        .await;
        pg
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }

    /// A superuser connection to `db`.
    pub async fn client(&self, db: &str) -> Client {
        connect(self.port, db)
            .await
            .unwrap_or_else(|e| panic!("connect to the logical PostgreSQL: {e}"))
    }
}

async fn connect(port: u16, db: &str) -> Result<Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::Config::new()
        .host("127.0.0.1")
        .port(port)
        .user(SUPERUSER)
        .dbname(db)
        .connect(NoTls)
        .await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(client)
}

impl Drop for LogicalPostgres {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGINT is PostgreSQL's fast shutdown.
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + STOP_TIMEOUT;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(STOP_POLL);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
