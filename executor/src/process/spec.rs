//! The `--plugin-processes` file: which plugin processes an executor starts and how.
//!
//! ```toml
//! [[process]]
//! name = "python-plugins"            # how logs and errors call it
//! command = "/usr/bin/python3"
//! args = ["/opt/plugins/dir_plugin.py"]
//! working_dir = "/opt/plugins"       # default: the executor's
//! env = { PYTHONUNBUFFERED = "1" }   # added to PATH, HOME, LANG, LC_ALL, TZ, TMPDIR
//! describe_timeout_ms = 30000        # default DEFAULT_DESCRIBE_TIMEOUT_MS
//! max_memory_mb = 512                # address space limit (RLIMIT_AS); default none
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// How long a plugin process may take to answer `describe` after it was started, in
/// milliseconds, when its entry does not say: a JVM loading a plugin path takes seconds.
pub const DEFAULT_DESCRIBE_TIMEOUT_MS: u64 = 30_000;

/// The only variables of the executor's environment a plugin process inherits: the
/// executor's own secrets (`WHARF_NATS_PASSWORD`, ...) never reach a plugin.
pub const INHERITED_ENV: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// One plugin process as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessSpec {
    /// Name for logs and errors (not a plugin name: the process says which plugins it
    /// offers when described).
    pub name: String,
    /// Program to run.
    pub command: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Working directory; `None` keeps the executor's.
    pub working_dir: Option<PathBuf>,
    /// Variables set for the process, beside [`INHERITED_ENV`].
    pub env: BTreeMap<String, String>,
    /// Bound on the describe answer after a start.
    pub describe_timeout: Duration,
    /// Limit on the process's address space (`RLIMIT_AS`), in MiB; `None`: none. A JVM
    /// reserves far more address space than it uses: bound its heap with `-Xmx` instead.
    pub max_memory_mb: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    process: Vec<Entry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    command: PathBuf,
    #[serde(default)]
    args: Vec<String>,
    working_dir: Option<PathBuf>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    describe_timeout_ms: Option<u64>,
    max_memory_mb: Option<u64>,
}

/// Reads a `--plugin-processes` file's text; relative `command` and `working_dir` paths
/// are taken relative to `base` (the file's directory). Pure.
///
/// # Errors
/// Text naming the entry and field: a TOML error, an empty or repeated name, an empty
/// command, a zero describe timeout.
pub fn parse(text: &str, base: &Path) -> Result<Vec<ProcessSpec>, String> {
    let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut out: Vec<ProcessSpec> = Vec::new();
    for (i, e) in file.process.into_iter().enumerate() {
        let Entry {
            name,
            command,
            args,
            working_dir,
            env,
            describe_timeout_ms,
            max_memory_mb,
        } = e;
        if name.trim().is_empty() {
            return Err(format!("process[{i}].name is empty"));
        }
        if out.iter().any(|p| p.name == name) {
            return Err(format!("process[{i}].name {name:?} is given twice"));
        }
        if command.as_os_str().is_empty() {
            return Err(format!("process[{i}].command ({name}) is empty"));
        }
        let describe_timeout_ms = describe_timeout_ms.unwrap_or(DEFAULT_DESCRIBE_TIMEOUT_MS);
        if describe_timeout_ms == 0 {
            return Err(format!(
                "process[{i}].describe_timeout_ms ({name}) is 0: give a bound in milliseconds"
            ));
        }
        if max_memory_mb == Some(0) {
            return Err(format!(
                "process[{i}].max_memory_mb ({name}) is 0: give a limit in MiB, or leave it out"
            ));
        }
        // A bare program name is looked up in PATH, as a shell would.
        let command = if command.components().count() > 1 {
            base.join(command)
        } else {
            command
        };
        out.push(ProcessSpec {
            name,
            command,
            args,
            working_dir: working_dir.map(|d| base.join(d)),
            env,
            describe_timeout: Duration::from_millis(describe_timeout_ms),
            max_memory_mb,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_with_its_defaults_and_paths_relative_to_the_file() {
        let specs = parse(
            "[[process]]\nname = \"py\"\ncommand = \"python3\"\nargs = [\"p/dir.py\"]\nworking_dir = \"p\"\nenv = { A = \"1\" }\n\n[[process]]\nname = \"local\"\ncommand = \"./bin/plugin\"\ndescribe_timeout_ms = 5\n",
            Path::new("/etc/wharf"),
        )
        .unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].command, PathBuf::from("python3"));
        assert_eq!(specs[0].args, ["p/dir.py"]);
        assert_eq!(specs[0].working_dir, Some(PathBuf::from("/etc/wharf/p")));
        assert_eq!(specs[0].env["A"], "1");
        assert_eq!(
            specs[0].describe_timeout,
            Duration::from_millis(DEFAULT_DESCRIBE_TIMEOUT_MS)
        );
        assert_eq!(specs[1].command, PathBuf::from("/etc/wharf/./bin/plugin"));
        assert_eq!(specs[1].describe_timeout, Duration::from_millis(5));
        assert_eq!(specs[0].max_memory_mb, None);
    }

    #[test]
    fn bad_entries_are_refused_naming_the_field() {
        let base = Path::new("/");
        let cases = [
            (
                "[[process]]\nname = \"\"\ncommand = \"x\"\n",
                "process[0].name",
            ),
            (
                "[[process]]\nname = \"a\"\ncommand = \"x\"\n[[process]]\nname = \"a\"\ncommand = \"y\"\n",
                "process[1].name \"a\" is given twice",
            ),
            (
                "[[process]]\nname = \"a\"\ncommand = \"\"\n",
                "process[0].command",
            ),
            (
                "[[process]]\nname = \"a\"\ncommand = \"x\"\ndescribe_timeout_ms = 0\n",
                "describe_timeout_ms",
            ),
            (
                "[[process]]\nname = \"a\"\ncommand = \"x\"\nmemory = 3\n",
                "unknown field",
            ),
            (
                "[[process]]\nname = \"a\"\ncommand = \"x\"\nmax_memory_mb = 0\n",
                "process[0].max_memory_mb (a) is 0",
            ),
            ("[[process]]\nname = \"a\"\n", "command"),
        ];
        for (text, expected) in cases {
            let err = parse(text, base).unwrap_err();
            assert!(err.contains(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn an_empty_file_offers_no_process() {
        assert!(parse("", Path::new("/")).unwrap().is_empty());
    }
}
