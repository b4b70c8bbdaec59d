//! `--plugin-path DIR[,DIR...]`, Kafka Connect's `plugin.path`: every connector class
//! found in the jars there runs in the JVM plugin host (`jvm-host/`), one JVM per plugin
//! location, which is Connect's class-loader isolation made a process boundary.
//!
//! A plugin-path directory holds plugin locations, as Connect reads it: each directory
//! in it (its jars at any depth, and its class files) and each jar in it (an uber jar) is
//! one plugin. Each location gets a JVM started with `--scan LOCATION`: the host reads the
//! jars' ServiceLoader manifests and the class files' headers, offers every concrete
//! public `SourceConnector` / `SinkConnector` class under its full name with its
//! `version()`, and says whether the connector and task classes declare a public
//! `stop(boolean)` (`PluginInfo.connector_deletion` / `task_deletion`). A location with no
//! connector (converters or transforms only) is left out, with a log line.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use wharf::pb::v1 as pb;
use wharf::sdk::Plugin;

use super::conn::{Answer, Conn};
use super::{PluginProcess, ProcessSpec, check_described, describe_request, spawn_error};

/// How long a plugin-path JVM may take to scan its location and describe its connectors,
/// in milliseconds: Debezium's 390 jars take about 12 s on a busy 2-core machine.
pub const PLUGIN_PATH_DESCRIBE_TIMEOUT_MS: u64 = 120_000;

/// The JVM host's main class.
pub const HOST_MAIN_CLASS: &str = "wharf.host.PluginHost";

/// The directory beside the executor binary that holds the built host and the Connect
/// jars it runs on (`jvm-host/build` writes it), used when `--jvm-host-classpath` is not
/// given.
pub const HOST_DIR_BESIDE_EXECUTOR: &str = "jvm-host";

/// How the JVM host is started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JvmHost {
    /// The `java` program; a bare name is looked up in PATH.
    pub java: PathBuf,
    /// The host's classpath: its classes and the Connect API, JSON converter, Kafka
    /// clients, protobuf-java and Jackson jars (not the plugins': each JVM loads its
    /// location's jars itself).
    pub classpath: String,
}

impl JvmHost {
    /// `java` from PATH and `classpath`, or the host built beside the executor binary
    /// (`<dir of the executor>/jvm-host/*`) when `classpath` is `None`.
    pub fn new(classpath: Option<String>) -> Self {
        let classpath = classpath.unwrap_or_else(|| {
            let dir = std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(Path::to_path_buf))
                .unwrap_or_default();
            format!("{}/*", dir.join(HOST_DIR_BESIDE_EXECUTOR).display())
        });
        Self {
            java: PathBuf::from("java"),
            classpath,
        }
    }
}

/// The plugin locations of the plugin-path directories, in order (each directory's
/// entries sorted by name): every directory and every `.jar` file directly inside.
///
/// # Errors
/// Text naming the directory that cannot be read (missing, not a directory).
pub fn locations(dirs: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for dir in dirs {
        let entries = std::fs::read_dir(dir)
            .map_err(|e| format!("plugin path entry {}: {e}", dir.display()))?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| is_location(p))
            .collect();
        found.sort();
        out.extend(found);
    }
    Ok(out)
}

/// A directory, or a file whose name ends in `.jar` (symbolic links followed).
fn is_location(path: &Path) -> bool {
    path.is_dir()
        || (path.is_file()
            && path
                .extension()
                .is_some_and(|x| x.eq_ignore_ascii_case("jar")))
}

/// The file of a directory location whose lines are its JVM's options (heap, system
/// properties): Connect runs every plugin in the worker's JVM, whose options
/// (`KAFKA_HEAP_OPTS`, `KAFKA_OPTS`) an operator sets per worker; here each location has
/// a JVM of its own, so its options sit beside its jars.
pub const JVM_OPTIONS_FILE: &str = "jvm.options";

/// The options of a `jvm.options` text: one per line, trimmed; blank lines and lines
/// starting with `#` skipped. Pure.
///
/// # Errors
/// Text naming the line of an option that is not one (not starting with `-`): a class
/// or jar there would replace the host's main class.
pub fn parse_jvm_options(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if !line.starts_with('-') {
            return Err(format!(
                "line {}: {line:?} is not a JVM option (options start with -)",
                i + 1
            ));
        }
        out.push(line.to_owned());
    }
    Ok(out)
}

/// The JVM options of `location`: its `jvm.options` when it is a directory holding one,
/// else none.
///
/// # Errors
/// Text naming the file that cannot be read or holds something other than options.
pub fn location_jvm_options(location: &Path) -> Result<Vec<String>, String> {
    let file = location.join(JVM_OPTIONS_FILE);
    if !location.is_dir() || !file.is_file() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    parse_jvm_options(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// The plugin process of one location, its JVM started with `options`. Pure.
pub fn spec(location: &Path, host: &JvmHost, options: Vec<String>) -> ProcessSpec {
    let name = location.file_name().map_or_else(
        || location.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    ProcessSpec {
        name: format!("plugin-path:{name}"),
        command: host.java.clone(),
        args: options
            .into_iter()
            .chain([
                "-cp".to_owned(),
                host.classpath.clone(),
                HOST_MAIN_CLASS.to_owned(),
                "--scan".to_owned(),
                location.display().to_string(),
            ])
            .collect(),
        working_dir: None,
        env: Default::default(),
        describe_timeout: Duration::from_millis(PLUGIN_PATH_DESCRIBE_TIMEOUT_MS),
        max_memory_mb: None,
    }
}

/// Starts one JVM per plugin location of `dirs`, all at once, and returns those that
/// offer at least one connector.
///
/// # Errors
/// Text naming the directory or the location whose JVM could not be started or
/// described.
pub fn start(dirs: &[PathBuf], host: &JvmHost) -> Result<Vec<Arc<PluginProcess>>, String> {
    let specs: Vec<ProcessSpec> = locations(dirs)?
        .iter()
        .map(|l| Ok(spec(l, host, location_jvm_options(l)?)))
        .collect::<Result<_, String>>()?;
    let started: Vec<Result<Option<Arc<PluginProcess>>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = specs
            .into_iter()
            .map(|spec| s.spawn(move || start_location(spec)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("the start of a plugin location panicked".into()))
            })
            .collect()
    });
    let mut out = Vec::new();
    for s in started {
        out.extend(s?);
    }
    Ok(out)
}

/// Starts and describes one location's JVM; `None` (the JVM stopped) when it offers no
/// connector.
fn start_location(spec: ProcessSpec) -> Result<Option<Arc<PluginProcess>>, String> {
    let conn = Conn::spawn(&spec).map_err(|e| spawn_error(&spec, &e))?;
    let answer = conn.call_blocking(describe_request(), spec.describe_timeout);
    if let Ok(Answer::Describe(d)) = &answer
        && d.plugins.is_empty()
    {
        conn.kill();
        tracing::info!(plugin_process = %spec.name, "no connector class in this plugin location");
        return Ok(None);
    }
    let offered = match check_described(answer) {
        Ok(o) => o,
        Err(e) => {
            conn.kill();
            return Err(format!("plugin process {}: {e}", spec.name));
        }
    };
    tracing::info!(plugin_process = %spec.name,
        connectors = ?offered.iter().map(|o| o.name.as_str()).collect::<Vec<_>>(),
        "plugin location described");
    Ok(Some(Arc::new(PluginProcess {
        spec,
        offered,
        current: tokio::sync::Mutex::new(Some(conn)),
    })))
}

/// The wire form of `plugin` as the executor advertises it: a plugin process's plugin
/// carries what the process described of its deletion support; any other plugin's is
/// its definition alone ([`wharf::wire::plugin_info`]). With `cleaned_by_executor` the
/// executor cleans up the connector's deletion on the plugin's behalf: its connector is
/// deletion-aware whatever its class says.
pub fn advertised_info(
    plugin: &Plugin,
    processes: &[Arc<PluginProcess>],
    cleaned_by_executor: bool,
) -> pb::PluginInfo {
    let mut info = wharf::wire::plugin_info(plugin);
    if let Some(d) = processes
        .iter()
        .find_map(|p| p.offered.iter().find(|o| o.name == plugin.name))
    {
        info.connector_deletion = d.connector_deletion;
        info.task_deletion = d.task_deletion;
    }
    if cleaned_by_executor {
        info.connector_deletion = pb::DeletionSupport::Declared as i32;
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_directory_and_jar_of_a_plugin_path_directory_is_a_location() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::create_dir(d.join("debezium")).unwrap();
        std::fs::write(d.join("uber.jar"), b"").unwrap();
        std::fs::write(d.join("README.txt"), b"").unwrap();
        let other = tempfile::tempdir().unwrap();
        std::fs::write(other.path().join("b.JAR"), b"").unwrap();
        let found = locations(&[d.to_path_buf(), other.path().to_path_buf()]).unwrap();
        assert_eq!(
            found,
            [
                d.join("debezium"),
                d.join("uber.jar"),
                other.path().join("b.JAR")
            ]
        );
    }

    #[test]
    fn a_missing_plugin_path_directory_is_named() {
        let err = locations(&[PathBuf::from("/no/such/dir")]).unwrap_err();
        assert!(err.contains("plugin path entry /no/such/dir"), "{err}");
    }

    #[test]
    fn a_location_runs_the_host_scanning_it() {
        let host = JvmHost {
            java: "java".into(),
            classpath: "/opt/wharf/jvm-host/*".into(),
        };
        let s = spec(Path::new("/plugins/debezium-postgres"), &host, Vec::new());
        assert_eq!(s.name, "plugin-path:debezium-postgres");
        assert_eq!(
            s.args,
            [
                "-cp",
                "/opt/wharf/jvm-host/*",
                HOST_MAIN_CLASS,
                "--scan",
                "/plugins/debezium-postgres"
            ]
        );
        assert_eq!(
            s.describe_timeout,
            Duration::from_millis(PLUGIN_PATH_DESCRIBE_TIMEOUT_MS)
        );
    }

    #[test]
    fn a_locations_jvm_options_come_before_the_classpath() {
        let host = JvmHost {
            java: "java".into(),
            classpath: "cp".into(),
        };
        let s = spec(
            Path::new("/plugins/p"),
            &host,
            vec!["-Xmx256m".into(), "-Da=b".into()],
        );
        assert_eq!(
            s.args,
            [
                "-Xmx256m",
                "-Da=b",
                "-cp",
                "cp",
                HOST_MAIN_CLASS,
                "--scan",
                "/plugins/p"
            ]
        );
    }

    #[test]
    fn jvm_options_are_one_per_line_without_blanks_and_comments() {
        assert_eq!(
            parse_jvm_options("# heap\n-Xmx1g\n\n  -Dx=a b  \n").unwrap(),
            ["-Xmx1g", "-Dx=a b"]
        );
    }

    #[test]
    fn a_jvm_options_line_that_is_not_an_option_is_refused_naming_it() {
        let err = parse_jvm_options("-Xmx1g\nsome.Main\n").unwrap_err();
        assert_eq!(
            err,
            "line 2: \"some.Main\" is not a JVM option (options start with -)"
        );
    }

    #[test]
    fn the_default_host_classpath_is_beside_the_executor() {
        let host = JvmHost::new(None);
        assert!(
            host.classpath.ends_with("/jvm-host/*"),
            "{}",
            host.classpath
        );
        assert_eq!(JvmHost::new(Some("x".into())).classpath, "x");
    }
}
