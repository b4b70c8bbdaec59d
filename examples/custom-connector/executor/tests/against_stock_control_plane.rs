//! The custom executor (`spool-executor`, built from this crate) next to the stock
//! `wharf-control-plane`: it registers with its plugin, a `file-source` -> `spool-sink`
//! pipeline moves lines into the spool directory, and deleting the sink connector
//! removes the directory it provisioned.
//!
//! Needs the stock control plane binary in the same target dir: `scripts/test` builds
//! the workspace first (`cargo build --workspace --bins`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use wharf::pb::v1::connector_admin_client::ConnectorAdminClient;
use wharf::pb::v1::{CreateConnectorRequest, DeleteConnectorRequest, ListConnectorPluginsRequest};

/// Upper bound on each wait, in seconds.
const WAIT_SECS: u64 = 60;
/// Pause between two checks of a condition, in milliseconds.
const CHECK_INTERVAL_MS: u64 = 50;
/// Lines the source file holds.
const LINES: usize = 20;

/// A child process killed when the test ends, its output in `<dir>/process.log`.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn(program: &Path, args: &[&str], dir: &Path) -> Proc {
    std::fs::create_dir_all(dir).unwrap();
    let log = std::fs::File::create(dir.join("process.log")).unwrap();
    let child = Command::new(program)
        .args(args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    Proc(child)
}

/// The stock control plane binary, next to this test's own target dir.
fn stock_control_plane() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().and_then(Path::parent).unwrap();
    let path = dir.join("wharf-control-plane");
    assert!(
        path.exists(),
        "{} not found: build it first (cargo build -p wharf-control-plane)",
        path.display()
    );
    path
}

/// Waits until `check` returns `Some`, panicking with `what` and the logs after
/// [`WAIT_SECS`].
async fn wait_for<T, F, Fut>(what: &str, logs: &Path, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(WAIT_SECS);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() > deadline {
            let mut text = String::new();
            for sub in ["cp", "exec"] {
                let log =
                    std::fs::read_to_string(logs.join(sub).join("process.log")).unwrap_or_default();
                text.push_str(&format!("--- {sub}:\n{log}\n"));
            }
            panic!("timed out waiting for {what}\n{text}");
        }
        tokio::time::sleep(Duration::from_millis(CHECK_INTERVAL_MS)).await;
    }
}

fn config(pairs: &[(&str, String)]) -> std::collections::HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_executor_runs_its_plugin_for_the_stock_control_plane_and_cleans_up_on_delete() {
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path();
    let cp_dir = work.join("cp");
    let _cp = spawn(
        &stock_control_plane(),
        &[
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            cp_dir.to_str().unwrap(),
        ],
        &cp_dir,
    );
    let addr = wait_for("the control plane to listen", work, || {
        let r = std::fs::read_to_string(cp_dir.join("listen.addr")).ok();
        async move { r.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()) }
    })
    .await;
    let url = format!("http://{addr}");
    let exec_dir = work.join("exec");
    let _exec = spawn(
        Path::new(env!("CARGO_BIN_EXE_spool-executor")),
        &[
            "--listen",
            "127.0.0.1:0",
            "--control-plane",
            &url,
            "--data-dir",
            exec_dir.to_str().unwrap(),
            "--executor-id",
            "spool-1",
            // The built-in file-source reads the input under here.
            "--file-root",
            work.to_str().unwrap(),
        ],
        &exec_dir,
    );
    let mut admin = ConnectorAdminClient::connect(url.clone()).await.unwrap();

    // The control plane sees the author's plugin, offered by the custom executor.
    wait_for("spool-sink to be offered", work, || {
        let mut admin = admin.clone();
        async move {
            let plugins = admin
                .list_connector_plugins(ListConnectorPluginsRequest::default())
                .await
                .ok()?
                .into_inner()
                .plugins;
            plugins
                .iter()
                .any(|p| {
                    p.plugin.as_ref().is_some_and(|i| i.name == "spool-sink")
                        && p.executor_ids == ["spool-1"]
                })
                .then_some(())
        }
    })
    .await;

    let input = work.join("input.txt");
    let text: String = (0..LINES).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&input, text).unwrap();
    let spool_root = work.join("spool");
    std::fs::create_dir_all(&spool_root).unwrap();
    admin
        .create_connector(CreateConnectorRequest {
            name: "lines".into(),
            config: config(&[
                ("connector.class", "file-source".into()),
                ("file", input.display().to_string()),
                ("topic", "lines".into()),
            ]),
            ..Default::default()
        })
        .await
        .expect("create file-source");
    admin
        .create_connector(CreateConnectorRequest {
            name: "spooled".into(),
            config: config(&[
                ("connector.class", "spool-sink".into()),
                ("spool.root", spool_root.display().to_string()),
                ("spool.dir", "out".into()),
                ("topics", "lines".into()),
            ]),
            ..Default::default()
        })
        .await
        .expect("create spool-sink");

    let spool = spool_root.join("out");
    wait_for("every line in the spool", work, || {
        let got = std::fs::read_to_string(spool.join("task-0.jsonl")).unwrap_or_default();
        async move { (got.lines().count() >= LINES).then_some(()) }
    })
    .await;
    assert!(
        spool
            .join(wharf_example_custom_connector::OWNER_FILE)
            .exists()
    );

    let deleted = admin
        .delete_connector(DeleteConnectorRequest {
            name: "spooled".into(),
            wait: true,
            wait_timeout_ms: 30_000,
            ..Default::default()
        })
        .await
        .expect("delete spool-sink")
        .into_inner();
    assert!(deleted.deleted, "{deleted:?}");
    assert!(
        !spool.exists(),
        "the deletion's stop(true) removed the spool directory"
    );
    assert!(input.exists(), "the source's file is untouched");
}
