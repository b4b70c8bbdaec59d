//! The fault-injecting `test-source` / `test-sink` are opt-in: a `wharf-executor` or a
//! `wharf-dev` started without `--enable-test-plugins` (and without
//! `WHARF_ENABLE_TEST_PLUGINS`) does not offer them, so a connector on them cannot be
//! created; an executor started with the flag offers them, and only that one.
//!
//! Build first: `cargo build -p wharf-dev -p wharf-executor-stock`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use wharf::pb::v1::connector_admin_client::ConnectorAdminClient;
use wharf::pb::v1::{CreateConnectorRequest, ListConnectorPluginsRequest};
use wharf_harness::{KeepOnFailure, Proc, wait_until};

/// Upper bound on each wait, in seconds.
const CONVERGE_SECS: u64 = 30;
/// The variable the harness sets for every process; removed here on purpose.
const ENABLE_ENV: &str = "WHARF_ENABLE_TEST_PLUGINS";

/// Starts `program args` like `Proc::spawn`, but without the test-plugin opt-in.
fn spawn_without_opt_in(program: PathBuf, args: Vec<String>, dir: &Path) -> Proc {
    std::fs::create_dir_all(dir).expect("data dir");
    let log = std::fs::File::create(dir.join("process.log")).expect("log file");
    let child = Command::new(&program)
        .args(&args)
        .env_remove(ENABLE_ENV)
        .env(wharf_harness::FILE_ROOT_ENV, wharf_harness::file_root(dir))
        // Two executors (dev mode's and this one) on their own embedded logs.
        .env(wharf_harness::ALLOW_SEPARATE_EMBEDDED_LOGS_ENV, "true")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", program.display()));
    Proc {
        child: Some(child),
        data_dir: dir.to_path_buf(),
        program,
        args,
    }
}

/// Plugin name -> ids of the live executors that offer it.
async fn offered(addr: &str) -> BTreeMap<String, Vec<String>> {
    let mut client = ConnectorAdminClient::connect(format!("http://{addr}"))
        .await
        .expect("connect");
    client
        .list_connector_plugins(ListConnectorPluginsRequest::default())
        .await
        .expect("ListConnectorPlugins")
        .into_inner()
        .plugins
        .into_iter()
        .filter_map(|p| Some((p.plugin?.name, p.executor_ids)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_plugins_are_offered_only_by_processes_that_opt_in() {
    let dir = KeepOnFailure::new();
    let deadline = Duration::from_secs(CONVERGE_SECS);
    let cp_dir = dir.path().join("cp");
    let mut cp = spawn_without_opt_in(
        wharf_harness::bin("wharf-dev"),
        vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--data-dir".into(),
            cp_dir.display().to_string(),
        ],
        &cp_dir,
    );
    let addr = cp.listen_addr().await;
    let control_plane = format!("http://{addr}");
    let executor_args = |id: &str, data: &Path| -> Vec<String> {
        vec![
            "--listen".into(),
            "127.0.0.2:0".into(),
            "--control-plane".into(),
            control_plane.clone(),
            "--data-dir".into(),
            data.display().to_string(),
            "--executor-id".into(),
            id.into(),
        ]
    };
    let prod_dir = dir.path().join("prod");
    let mut prod = spawn_without_opt_in(
        wharf_harness::bin("wharf-executor"),
        executor_args("prod", &prod_dir),
        &prod_dir,
    );
    prod.listen_addr().await;

    let plugins = wait_until("dev and prod to offer file-source", deadline, || {
        let addr = addr.clone();
        async move {
            let p = offered(&addr).await;
            (p.get("file-source").map(Vec::len) == Some(2)).then_some(p)
        }
    })
    .await;
    for name in [
        "file-source",
        "file-sink",
        "postgres-audit",
        "sqlite-audit",
        "rabbitmq-sink",
    ] {
        assert!(plugins.contains_key(name), "{name} offered: {plugins:?}");
    }
    assert!(
        !plugins.contains_key("test-source") && !plugins.contains_key("test-sink"),
        "no process opted in, yet the test plugins are offered: {plugins:?}"
    );
    let mut client = ConnectorAdminClient::connect(control_plane.clone())
        .await
        .expect("connect");
    let refused = client
        .create_connector(CreateConnectorRequest {
            name: "t1".into(),
            config: [("connector.class".to_owned(), "test-source".to_owned())].into(),
            ..Default::default()
        })
        .await
        .expect_err("no executor offers test-source");
    assert!(
        refused.message().contains("test-source"),
        "the refusal names the plugin: {refused:?}"
    );

    let test_dir = dir.path().join("test");
    let mut args = executor_args("with-tests", &test_dir);
    args.push("--enable-test-plugins".into());
    let mut with_tests =
        spawn_without_opt_in(wharf_harness::bin("wharf-executor"), args, &test_dir);
    with_tests.listen_addr().await;
    let plugins = wait_until(
        "the opted-in executor to offer test-source",
        deadline,
        || {
            let addr = addr.clone();
            async move {
                let p = offered(&addr).await;
                p.contains_key("test-source").then_some(p)
            }
        },
    )
    .await;
    assert_eq!(plugins["test-source"], vec!["with-tests".to_owned()]);
    assert_eq!(plugins["test-sink"], vec!["with-tests".to_owned()]);
    assert_eq!(plugins["file-source"].len(), 3, "{plugins:?}");
}
