//! The executor as a library: [`Executor::builder`] takes a connector author's plugins
//! next to (or instead of) the built-in ones and runs with exactly the flags, `WHARF_*`
//! environment variables and `--config` file of `wharf-executor`, which is itself built
//! with it. See docs/connector-guide.md.
//!
//! ```no_run
//! use std::process::ExitCode;
//! # fn my_plugin() -> wharf::sdk::Plugin { wharf_connectors::sqlite_audit::plugin() }
//!
//! fn main() -> ExitCode {
//!     wharf_executor::Executor::builder()
//!         .name("my-executor")
//!         .plugin(my_plugin())
//!         .run_from_args()
//! }
//! ```

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches};
use wharf::sdk::Plugin;

use crate::app::{AppError, ExecutorApp, ExecutorConfig};
use crate::config::Cli;

/// Worker threads of the executor's own runtime (gRPC service, heartbeats, reports, the
/// tasks' work loops). Plugin calls run on the plugin runtime instead (`runtime.rs`,
/// `--plugin-threads`), so that a plugin that blocks its thread cannot starve these.
pub const RUNTIME_WORKER_THREADS: usize = 4;

/// Most blocking threads of the executor's own runtime (the embedded record log's redb
/// calls run there). Its appends take turns on redb's one writer, so more threads would
/// only wait: without this bound 200 tasks appending at once held about 140 threads.
pub const RUNTIME_MAX_BLOCKING_THREADS: usize = 64;

/// How long exit waits for background work after the graceful stops, in milliseconds.
pub const RUNTIME_SHUTDOWN_TIMEOUT_MS: u64 = 500;

/// Exit code for bad settings (flags, environment, config file, plugin list).
pub const EXIT_BAD_CONFIG: u8 = 2;

/// Entry point of the executor library; see [`Executor::builder`].
#[derive(Debug, Clone, Copy)]
pub struct Executor;

impl Executor {
    /// A builder that offers the built-in plugins (file-source, file-sink,
    /// postgres-audit, sqlite-audit) and no others until [`ExecutorBuilder::plugin`] adds
    /// some.
    pub fn builder() -> ExecutorBuilder {
        ExecutorBuilder {
            name: "wharf-executor",
            builtins: true,
            plugins: Vec::new(),
        }
    }
}

/// Why a builder's plugin list was refused.
#[derive(Debug, thiserror::Error)]
pub enum BuilderError {
    /// Two plugins share a name: `connector.class` would be ambiguous.
    #[error(
        "plugin {name:?} is offered twice (names must be unique: they are connector.class values)"
    )]
    DuplicatePlugin {
        /// The name.
        name: String,
    },
    /// A plugin without a name.
    #[error("a plugin has an empty name")]
    EmptyName,
}

/// Builds a custom executor: which plugins it offers and what its binary is called.
#[derive(Debug)]
pub struct ExecutorBuilder {
    name: &'static str,
    builtins: bool,
    plugins: Vec<Plugin>,
}

impl ExecutorBuilder {
    /// Adds a plugin, advertised to the control plane under [`Plugin::name`] next to the
    /// others; its name MUST differ from every other plugin's (built-in ones included).
    pub fn plugin(mut self, plugin: Plugin) -> Self {
        self.plugins.push(plugin);
        self
    }

    /// Adds several plugins (see [`ExecutorBuilder::plugin`]).
    pub fn plugins(mut self, plugins: impl IntoIterator<Item = Plugin>) -> Self {
        self.plugins.extend(plugins);
        self
    }

    /// Offers only the plugins added with [`ExecutorBuilder::plugin`], not the built-in
    /// ones (`--enable-test-plugins` still adds the test plugins).
    pub fn without_builtin_plugins(mut self) -> Self {
        self.builtins = false;
        self
    }

    /// Names the binary in `--help`, `--version` and error messages.
    pub fn name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    fn command(&self) -> clap::Command {
        Cli::command().name(self.name).bin_name(self.name)
    }

    /// The plugins this executor offers, built-in ones first (the file plugins only
    /// with a `file_root`, see `--file-root`).
    ///
    /// # Errors
    /// [`BuilderError`] when two share a name or one has none.
    pub fn plugin_list(
        &self,
        file_root: Option<&wharf_connectors::file::FileRoot>,
    ) -> Result<Vec<Plugin>, BuilderError> {
        let mut all = if self.builtins {
            wharf_connectors::builtin_plugins(file_root)
        } else {
            Vec::new()
        };
        all.extend(self.plugins.iter().cloned());
        for (i, p) in all.iter().enumerate() {
            if p.name.is_empty() {
                return Err(BuilderError::EmptyName);
            }
            if all[..i].iter().any(|q| q.name == p.name) {
                return Err(BuilderError::DuplicatePlugin {
                    name: p.name.clone(),
                });
            }
        }
        Ok(all)
    }

    /// The settings `args` (the program name first, as `std::env::args_os`) give, with
    /// this builder's plugins, as `wharf-executor` reads them: flags, then `WHARF_*`
    /// environment variables, then the `--config` file.
    ///
    /// # Errors
    /// The message to print, and whether it is help/version output rather than an error.
    pub fn config_from(
        &self,
        args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    ) -> Result<ExecutorConfig, String> {
        let matches = self
            .command()
            .try_get_matches_from(args)
            .map_err(|e| e.render().to_string())?;
        let cli = Cli::from_arg_matches(&matches).map_err(|e| e.render().to_string())?;
        cli.build_with(|root| self.plugin_list(root).map_err(|e| e.to_string()))
            .map_err(|e| format!("{e}\n(see --help and docs/configuration.md)"))
    }

    /// Parses the process's arguments and environment, runs the executor until SIGTERM
    /// or Ctrl-C, and returns the exit code: 0 after a clean shutdown (every instance
    /// stopped with `connector_deleted = false`), 2 for bad settings, 1 otherwise.
    pub fn run_from_args(self) -> ExitCode {
        self.run_with_args(std::env::args_os())
    }

    /// As [`ExecutorBuilder::run_from_args`] with explicit arguments (program name
    /// first).
    pub fn run_with_args(
        self,
        args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    ) -> ExitCode {
        let matches = match self.command().try_get_matches_from(args) {
            Ok(m) => m,
            // --help and --version print and exit 0; a bad flag prints and exits 2.
            Err(e) => {
                let _ = e.print();
                return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(EXIT_BAD_CONFIG));
            }
        };
        let built = Cli::from_arg_matches(&matches)
            .map_err(|e| e.to_string())
            .and_then(|cli| {
                cli.build_with(|root| self.plugin_list(root).map_err(|e| e.to_string()))
                    .map_err(|e| e.to_string())
            });
        let config = match built {
            Ok(c) => c,
            Err(e) => {
                eprintln!("{}: {e}\n(see --help and docs/configuration.md)", self.name);
                return ExitCode::from(EXIT_BAD_CONFIG);
            }
        };
        run_config(self.name, config)
    }
}

/// Runs an executor with `config` on its own runtime until a shutdown signal.
fn run_config(name: &str, config: ExecutorConfig) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(RUNTIME_WORKER_THREADS)
        .max_blocking_threads(RUNTIME_MAX_BLOCKING_THREADS)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // After the settings (they name the format and the endpoint); inside the runtime,
    // which the span exporter runs on. Their errors go to stderr as text.
    let otlp = wharf::telemetry::Otlp::when_given(
        config.otlp_endpoint.as_deref(),
        "wharf-executor",
        || crate::app::planned_executor_id(&config).unwrap_or_else(|| config.listen.to_string()),
    );
    let telemetry = {
        let _entered = runtime.enter();
        wharf::telemetry::init_traced(config.log_format, otlp.as_ref())
    };
    let export = match telemetry {
        Ok(t) => t.split().1,
        Err(e) => {
            eprintln!("{name}: {e}\n(see --help and docs/configuration.md)");
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
    };
    let result = runtime.block_on(async move {
        let result = run(config).await;
        export.shutdown().await;
        result
    });
    // An abandoned plugin may still hold a worker thread: do not wait for it to exit.
    runtime.shutdown_timeout(Duration::from_millis(RUNTIME_SHUTDOWN_TIMEOUT_MS));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The error chain: each layer names its step, the last one the cause.
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("{name}: {text}");
            if let Some(hint) = e.hint() {
                eprintln!("hint: {hint}");
            }
            ExitCode::FAILURE
        }
    }
}

async fn run(config: ExecutorConfig) -> Result<(), AppError> {
    let running = ExecutorApp::start(config).await?;
    wharf::server::shutdown_signal().await;
    running.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(plugins: &[Plugin]) -> Vec<&str> {
        plugins.iter().map(|p| p.name.as_str()).collect()
    }

    fn root() -> (tempfile::TempDir, wharf_connectors::file::FileRoot) {
        let dir = tempfile::tempdir().unwrap();
        let root = wharf_connectors::file::FileRoot::new(dir.path()).unwrap();
        (dir, root)
    }

    #[test]
    fn an_authors_plugin_is_offered_next_to_the_builtin_ones() {
        let (_dir, root) = root();
        let mut mine = wharf_connectors::file::sink_plugin(root);
        mine.name = "my-sink".to_owned();
        let list = Executor::builder()
            .plugin(mine.clone())
            .plugin_list(None)
            .unwrap();
        assert!(names(&list).contains(&"sqlite-audit"));
        assert_eq!(names(&list).last(), Some(&"my-sink"));
        let only = Executor::builder()
            .without_builtin_plugins()
            .plugin(mine)
            .plugin_list(None)
            .unwrap();
        assert_eq!(names(&only), ["my-sink"]);
    }

    #[test]
    fn a_plugin_named_like_a_builtin_one_is_refused() {
        let (_dir, root) = root();
        let err = Executor::builder()
            .plugin(wharf_connectors::file::sink_plugin(root.clone()))
            .plugin_list(Some(&root))
            .unwrap_err();
        assert!(
            err.to_string().contains("\"file-sink\" is offered twice"),
            "{err}"
        );
    }

    #[test]
    fn the_builder_reads_the_same_flags_as_wharf_executor() {
        let (dir, root) = root();
        let mut mine = wharf_connectors::file::sink_plugin(root);
        mine.name = "my-sink".to_owned();
        let config = Executor::builder()
            .name("my-executor")
            .plugin(mine)
            .config_from([
                "my-executor",
                "--listen",
                "127.0.0.1:0",
                "--control-plane",
                "http://127.0.0.1:7000",
                "--data-dir",
                "/tmp/x",
                "--enable-test-plugins",
                "--file-root",
                &dir.path().display().to_string(),
            ])
            .unwrap();
        let n = names(&config.plugins);
        assert!(n.contains(&"my-sink") && n.contains(&"test-source") && n.contains(&"file-source"));
        let no_root = Executor::builder()
            .config_from([
                "my-executor",
                "--listen",
                "127.0.0.1:0",
                "--control-plane",
                "http://127.0.0.1:7000",
                "--data-dir",
                "/tmp/x",
            ])
            .unwrap();
        let n = names(&no_root.plugins);
        assert!(
            !n.contains(&"file-source") && !n.contains(&"file-sink") && n.contains(&"sqlite-audit"),
            "without --file-root no file plugin: {n:?}"
        );
        let err = Executor::builder()
            .name("my-executor")
            .config_from(["my-executor", "--listen", "127.0.0.1:0"])
            .err()
            .expect("a missing --control-plane is an error");
        assert!(err.contains("--control-plane"), "{err}");
    }
}
