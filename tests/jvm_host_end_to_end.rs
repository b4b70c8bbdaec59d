//! Kafka Connect's own FileStreamSource and FileStreamSink (connect-file 4.3.0) end to end
//! through Wharf: a real control plane and `wharf-executor` whose `--plugin-processes`
//! runs the JVM plugin host (jvm-host/, compiled here with `javac` against the jars that
//! `scripts/setup-services connect` unpacks). Lines written to a file reach another file
//! through the source, the record log and the sink.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::json;
use wharf_harness::cluster::{CONVERGE, NOT_FOUND, TestCluster};
use wharf_harness::wait_until;

const SOURCE: &str = "org.apache.kafka.connect.file.FileStreamSourceConnector";
const SINK: &str = "org.apache.kafka.connect.file.FileStreamSinkConnector";

/// What the host runs on: the Connect API, JSON converter and file connectors, the
/// Kafka clients, protobuf-java and Jackson, from the Connect jars' directory.
const JARS: [&str; 10] = [
    "connect-api-4.3.0.jar",
    "connect-json-4.3.0.jar",
    "connect-file-4.3.0.jar",
    "kafka-clients-4.3.0.jar",
    "protobuf-java-3.25.5.jar",
    "jackson-core-2.21.2.jar",
    "jackson-databind-2.21.2.jar",
    "jackson-annotations-2.21.jar",
    "jackson-module-blackbird-2.21.2.jar",
    "slf4j-api-2.0.18.jar",
];

fn libs() -> PathBuf {
    if let Ok(dir) = std::env::var("WHARF_CONNECT_LIBS") {
        return dir.into();
    }
    let out = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup-services"))
        .arg("connect-libs-path")
        .output()
        .expect("scripts/setup-services runs");
    assert!(
        out.status.success(),
        "the Connect jars are missing: run scripts/setup-services connect"
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Compiles the host into `dir/classes`; returns its classpath.
fn compile_host(dir: &Path) -> String {
    let libs = libs();
    let jars: Vec<String> = JARS
        .iter()
        .map(|j| libs.join(j).display().to_string())
        .collect();
    let classes = dir.join("classes");
    let sources: Vec<PathBuf> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("jvm-host/src/wharf/host"))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "java"))
            .collect();
    let status = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .arg("-cp")
        .arg(jars.join(":"))
        .args(&sources)
        .status()
        .expect("javac runs");
    assert!(status.success(), "javac failed");
    std::iter::once(classes.display().to_string())
        .chain(jars)
        .collect::<Vec<_>>()
        .join(":")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_stream_source_and_sink_move_lines_through_wharf_in_the_jvm_host() {
    let mut c = TestCluster::start(0).await;
    let dir = c.dir.path().to_path_buf();
    let cp = compile_host(&dir);
    let spec = dir.join("plugin-processes.toml");
    std::fs::write(
        &spec,
        format!(
            "[[process]]\nname = \"connect-file\"\ncommand = \"java\"\nargs = [\"-cp\", {cp:?}, \"wharf.host.PluginHost\", {SOURCE:?}, {SINK:?}]\ndescribe_timeout_ms = 60000\n"
        ),
    )
    .unwrap();
    c.add_executor_with(
        0,
        vec!["--plugin-processes".into(), spec.display().to_string()],
    )
    .await;
    c.wait_alive(1).await;

    let input = dir.join("in.txt");
    let output = dir.join("out.txt");
    std::fs::write(&input, "alpha\nbeta\n").unwrap();
    let began = Instant::now();
    for (name, config) in [
        (
            "fs-source",
            json!({ "connector.class": SOURCE, "tasks.max": "1", "file": input.display().to_string(), "topic": "lines" }),
        ),
        (
            "fs-sink",
            json!({ "connector.class": SINK, "tasks.max": "1", "file": output.display().to_string(), "topics": "lines" }),
        ),
    ] {
        let r = c.call("CreateConnector", json!({ "name": name, "config": config }));
        assert_eq!(r.code, 0, "{name}: {}", r.err);
        c.wait_state(name, "STATE_RUNNING", "STATE_RUNNING", 1)
            .await;
    }
    let read = |want: usize| {
        let output = output.clone();
        async move {
            let text = std::fs::read_to_string(&output).unwrap_or_default();
            (text.lines().count() >= want).then_some(text)
        }
    };
    let text = wait_until("the sink wrote alpha and beta", CONVERGE, || read(2)).await;
    eprintln!(
        "first lines out {} ms after the first create",
        began.elapsed().as_millis()
    );
    assert_eq!(text, "alpha\nbeta\n");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&input)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"gamma\n"))
        .unwrap();
    let text = wait_until("the sink wrote gamma", CONVERGE, || read(3)).await;
    assert_eq!(text, "alpha\nbeta\ngamma\n");

    // Offsets are Connect's own: the source partition is the file, the offset a position.
    let r = c.call("GetOffsets", json!({ "name": "fs-source" }));
    let offsets = r.body["offsets"].as_array().cloned().unwrap_or_default();
    assert!(
        offsets.iter().any(|o| o["partition"]
            .as_str()
            .unwrap_or_default()
            .contains("filename")),
        "{offsets:?}"
    );

    for name in ["fs-source", "fs-sink"] {
        let r = c.call("DeleteConnector", json!({ "name": name }));
        assert_eq!(r.code, 0, "{}", r.err);
        wait_until(&format!("{name} deleted"), CONVERGE, || async {
            (c.call("GetConnector", json!({ "name": name })).code == NOT_FOUND).then_some(())
        })
        .await;
    }
}
