//! The custom executor (`spool-executor`, built from this crate) next to the stock
//! `wharf-control-plane`: it registers with its plugin, a `file-source` -> `spool-sink`
//! pipeline moves lines into the spool directory, and deleting the sink connector
//! removes the directory it provisioned. Its custom transform and predicate are listed by
//! the control plane's Kafka Connect REST gateway (`GET
//! /connector-plugins?connectorsOnly=false`, with the built-in ones), accepted by its
//! validate, described by `GET /connector-plugins/{class}/config`, and applied to the
//! sink's records.
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

/// One HTTP/1.1 request to the REST gateway at `addr` on a fresh connection: the status
/// and the JSON body.
async fn http(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<&serde_json::Value>,
) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\naccept: application/json\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let text = String::from_utf8_lossy(&answer);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // The gateway answers with a length or chunks; a chunked body is one chunk here.
    let json_text = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        rest.split_once("\r\n")
            .map_or("", |(_, r)| r)
            .rsplit_once("\r\n0\r\n")
            .map_or("", |(b, _)| b)
    } else {
        rest
    };
    (
        status,
        serde_json::from_str(json_text).unwrap_or(serde_json::Value::Null),
    )
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
            "--rest-listen",
            "127.0.0.1:0",
        ],
        &cp_dir,
    );
    let addr = wait_for("the control plane to listen", work, || {
        let r = std::fs::read_to_string(cp_dir.join("listen.addr")).ok();
        async move { r.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()) }
    })
    .await;
    let url = format!("http://{addr}");
    let rest = std::fs::read_to_string(cp_dir.join("rest.addr"))
        .unwrap()
        .trim()
        .to_owned();
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

    // Connect's plugin list: the custom transform and predicate beside the built-in ones.
    let (status, listed) = http(
        &rest,
        "GET",
        "/connector-plugins?connectorsOnly=false",
        None,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    let types: Vec<(String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["class"].as_str().unwrap_or_default().to_owned(),
                p["type"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for (class, kind) in [
        (wharf_example_custom_connector::UPPER_CASE, "transformation"),
        (wharf_example_custom_connector::VALUE_CONTAINS, "predicate"),
        (
            "org.apache.kafka.connect.transforms.MaskField$Value",
            "transformation",
        ),
        (
            "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
            "predicate",
        ),
        ("spool-sink", "sink"),
    ] {
        assert!(
            types.contains(&(class.to_owned(), kind.to_owned())),
            "{class} ({kind}) not listed: {listed}"
        );
    }
    // KIP-769: the custom predicate's keys, as its executor registered them.
    let (status, keys) = http(
        &rest,
        "GET",
        &format!(
            "/connector-plugins/{}/config",
            wharf_example_custom_connector::VALUE_CONTAINS
        ),
        None,
    )
    .await;
    assert_eq!(status, 200, "{keys}");
    let text = keys
        .as_array()
        .and_then(|k| k.iter().find(|k| k["name"] == "text"))
        .unwrap_or_else(|| panic!("text listed: {keys}"));
    assert_eq!(
        (&text["type"], &text["required"], &text["importance"]),
        (
            &serde_json::json!("STRING"),
            &serde_json::json!(true),
            &serde_json::json!("HIGH")
        ),
        "{text}"
    );
    let (_, connectors_only) = http(&rest, "GET", "/connector-plugins", None).await;
    assert!(
        !connectors_only
            .to_string()
            .contains(wharf_example_custom_connector::UPPER_CASE),
        "{connectors_only}"
    );

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
    // The sink upper-cases the lines that contain "5", with the custom transform and
    // predicate: validate accepts them (and names a missing predicate key), then the
    // connector is created through REST.
    let sink = serde_json::json!({
        "connector.class": "spool-sink",
        "spool.root": spool_root.display().to_string(),
        "spool.dir": "out",
        "topics": "lines",
        "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        "transforms": "up",
        "transforms.up.type": wharf_example_custom_connector::UPPER_CASE,
        "transforms.up.predicate": "five",
        "predicates": "five",
        "predicates.five.type": wharf_example_custom_connector::VALUE_CONTAINS,
        "predicates.five.text": "5",
    });
    let (status, v) = http(
        &rest,
        "PUT",
        "/connector-plugins/spool-sink/config/validate",
        Some(&sink),
    )
    .await;
    assert_eq!((status, v["error_count"].as_u64()), (200, Some(0)), "{v}");
    let mut missing = sink.clone();
    missing
        .as_object_mut()
        .unwrap()
        .remove("predicates.five.text");
    let (_, v) = http(
        &rest,
        "PUT",
        "/connector-plugins/spool-sink/config/validate",
        Some(&missing),
    )
    .await;
    assert_eq!(v["error_count"].as_u64(), Some(1), "{v}");
    assert!(v.to_string().contains("predicates.five.text"), "{v}");
    let (status, created) = http(
        &rest,
        "POST",
        "/connectors",
        Some(&serde_json::json!({ "name": "spooled", "config": sink })),
    )
    .await;
    assert_eq!(status, 201, "{created}");

    let spool = spool_root.join("out");
    let got = wait_for("every line in the spool", work, || {
        let got = std::fs::read_to_string(spool.join("task-0.jsonl")).unwrap_or_default();
        async move { (got.lines().count() >= LINES).then_some(got) }
    })
    .await;
    let values: Vec<String> = got
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|l| l["value"].as_str().map(str::to_owned))
        .collect();
    assert!(values.contains(&"LINE 5".to_owned()), "{values:?}");
    assert!(values.contains(&"LINE 15".to_owned()), "{values:?}");
    assert!(values.contains(&"line 4".to_owned()), "{values:?}");
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
