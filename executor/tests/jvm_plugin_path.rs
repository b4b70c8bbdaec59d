//! `--plugin-path` (Kafka Connect's plugin.path): the JVM host, built by `jvm-host/build`,
//! scans each plugin location for connector classes and offers them under their class
//! names and versions, one JVM per location; each says whether its connector and task
//! classes declare a public `stop(boolean)` (KIP-883/KIP-901), and the executor
//! advertises that. Needs Java and the Connect jars (`scripts/setup-services connect`,
//! which `scripts/test` runs): without them this test fails saying so.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use wharf::pb::v1 as pb;
use wharf_executor::process::PluginProcess;
use wharf_executor::process::plugin_path::{self, JvmHost};

const SOURCE: &str = "org.apache.kafka.connect.file.FileStreamSourceConnector";
const SINK: &str = "org.apache.kafka.connect.file.FileStreamSinkConnector";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Connect jars' directory.
fn libs() -> PathBuf {
    let out = Command::new(repo().join("scripts/setup-services"))
        .arg("connect-libs-path")
        .output()
        .expect("scripts/setup-services runs");
    assert!(
        out.status.success(),
        "the Connect jars are missing: run scripts/setup-services connect"
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// Builds the host into `dir/host` with `jvm-host/build`; its classpath.
fn build_host(dir: &Path) -> JvmHost {
    let out = dir.join("host");
    let status = Command::new(repo().join("jvm-host/build"))
        .arg(&out)
        .status()
        .expect("jvm-host/build runs");
    assert!(
        status.success(),
        "jvm-host/build failed (java and javac needed)"
    );
    JvmHost {
        java: "java".into(),
        classpath: format!("{}/*", out.display()),
    }
}

/// Compiles the test plugins (jvm-host/test-plugins) into `jar`.
fn test_plugin_jar(dir: &Path, jar: &Path) {
    let libs = libs();
    let cp = ["connect-api-4.3.0.jar", "kafka-clients-4.3.0.jar"]
        .map(|j| libs.join(j).display().to_string())
        .join(":");
    let sources: Vec<PathBuf> = std::fs::read_dir(repo().join("jvm-host/test-plugins/wharf/test"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    let classes = dir.join("test-classes");
    let status = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .arg("-cp")
        .arg(&cp)
        .args(&sources)
        .status()
        .expect("javac runs");
    assert!(status.success(), "javac failed");
    std::fs::create_dir_all(jar.parent().unwrap()).unwrap();
    let status = Command::new("jar")
        .arg("--create")
        .arg("--file")
        .arg(jar)
        .arg("-C")
        .arg(&classes)
        .arg(".")
        .status()
        .expect("jar runs");
    assert!(status.success(), "jar failed");
}

fn info(processes: &[Arc<PluginProcess>], name: &str) -> pb::PluginInfo {
    processes
        .iter()
        .flat_map(|p| p.plugins())
        .find(|p| p.name == name)
        .map(|p| plugin_path::advertised_info(&p, processes, false))
        .unwrap_or_else(|| panic!("{name} is offered"))
}

#[test]
fn every_connector_class_of_a_plugin_path_is_offered_one_jvm_per_location() {
    let tmp = tempfile::tempdir().unwrap();
    let host = build_host(tmp.path());
    let path = tmp.path().join("plugins");
    // An uber jar (Connect's file connectors) and a directory of jars (the test plugins),
    // and a directory without any connector.
    std::fs::create_dir_all(path.join("nothing-here")).unwrap();
    std::os::unix::fs::symlink(
        libs().join("connect-file-4.3.0.jar"),
        path.join("connect-file-4.3.0.jar"),
    )
    .unwrap();
    test_plugin_jar(tmp.path(), &path.join("wharf-test").join("wharf-test.jar"));

    let processes = plugin_path::start(std::slice::from_ref(&path), &host)
        .expect("the plugin path's JVMs start and describe");
    assert_eq!(processes.len(), 2, "one JVM per location with connectors");
    let names = |p: &Arc<PluginProcess>| {
        let mut n: Vec<String> = p.plugins().into_iter().map(|p| p.name).collect();
        n.sort();
        n
    };
    assert_eq!(names(&processes[0]), [SINK, SOURCE]);
    assert_eq!(
        names(&processes[1]),
        [
            "wharf.test.ContextSink",
            "wharf.test.DeletionAwareSource",
            "wharf.test.HeaderSink",
            "wharf.test.HeaderSource",
            "wharf.test.PlainSource",
            "wharf.test.PrivateStopSource"
        ]
    );

    let source = info(&processes, SOURCE);
    assert_eq!(source.version, "4.3.0", "Connect's version() of the class");
    assert_eq!(source.kind, pb::PluginKind::Source as i32);
    assert_eq!(info(&processes, SINK).kind, pb::PluginKind::Sink as i32);
    assert!(source.config_defs.iter().any(|k| k.name == "topic"));

    // KIP-883/KIP-901 as the registration carries it: only a public stop(boolean) counts.
    let none = pb::DeletionSupport::None as i32;
    let declared = pb::DeletionSupport::Declared as i32;
    for (name, connector, task) in [
        (SOURCE, none, none),
        ("wharf.test.DeletionAwareSource", declared, declared),
        ("wharf.test.PlainSource", none, none),
        ("wharf.test.PrivateStopSource", none, none),
    ] {
        let i = info(&processes, name);
        assert_eq!(
            (i.connector_deletion, i.task_deletion),
            (connector, task),
            "{name}"
        );
    }
}

#[test]
fn a_missing_plugin_path_directory_is_refused_naming_it() {
    let host = JvmHost {
        java: "java".into(),
        classpath: String::new(),
    };
    let err = plugin_path::start(&[PathBuf::from("/no/such/plugins")], &host).unwrap_err();
    assert!(err.contains("/no/such/plugins"), "{err}");
}
