//! The JVM plugin host and Kafka Connect jars for the suites: the jars' directory
//! (`scripts/setup-services connect`, which `scripts/test` runs), the host built with
//! `jvm-host/build`, and the test plugins (`jvm-host/test-plugins`) compiled into a jar.
//! Each helper fails with a message saying what is missing (Java, the jars) rather than
//! skipping silently.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory of the Connect and Debezium jars: `WHARF_CONNECT_LIBS`, else what
/// `scripts/setup-services connect-libs-path` prints.
pub fn connect_libs() -> PathBuf {
    if let Ok(dir) = std::env::var("WHARF_CONNECT_LIBS") {
        return dir.into();
    }
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

/// Builds the JVM host into `out` with `jvm-host/build`; returns the classpath to give
/// `--jvm-host-classpath` (`out/*`).
pub fn build_host(out: &Path) -> String {
    let status = Command::new(repo().join("jvm-host/build"))
        .arg(out)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("jvm-host/build runs");
    assert!(
        status.success(),
        "jvm-host/build failed (needs javac and jar from a JDK 17, and the Connect jars)"
    );
    format!("{}/*", out.display())
}

/// Compiles the test plugins (`jvm-host/test-plugins`, package `wharf.test`) with javac
/// into the jar `jar`, using `work` for the classes.
pub fn test_plugin_jar(work: &Path, jar: &Path) {
    let libs = connect_libs();
    let cp = ["connect-api-4.3.0.jar", "kafka-clients-4.3.0.jar"]
        .map(|j| libs.join(j).display().to_string())
        .join(":");
    let sources: Vec<PathBuf> = std::fs::read_dir(repo().join("jvm-host/test-plugins/wharf/test"))
        .expect("jvm-host/test-plugins")
        .flatten()
        .map(|e| e.path())
        .collect();
    let classes = work.join("test-plugin-classes");
    let status = Command::new("javac")
        .arg("-d")
        .arg(&classes)
        .arg("-cp")
        .arg(&cp)
        .args(&sources)
        .status()
        .expect("javac runs");
    assert!(status.success(), "javac failed on jvm-host/test-plugins");
    std::fs::create_dir_all(jar.parent().expect("a jar path")).unwrap();
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

/// Links `jars` (file names in [`connect_libs`]) into the plugin location `dir`.
pub fn link_jars(dir: &Path, jars: &[&str]) {
    let libs = connect_libs();
    std::fs::create_dir_all(dir).unwrap();
    for j in jars {
        std::os::unix::fs::symlink(libs.join(j), dir.join(j)).expect("link a jar");
    }
}
