//! The executor as a library: [`Executor::builder`] takes a connector author's plugins
//! and runs with exactly the flags, `WHARF_*` environment variables and `--config` file
//! of `wharf-executor`. The library links no plugin: the stock `wharf-executor` binary
//! (crate `wharf-executor-stock`) is this builder with the built-in plugins added through
//! [`ExecutorBuilder::plugins_from`]. See docs/connector-guide.md.
//!
//! ```no_run
//! use std::process::ExitCode;
//! # fn my_plugin() -> wharf_sdk::Plugin { unimplemented!() }
//!
//! fn main() -> ExitCode {
//!     wharf_executor::Executor::builder()
//!         .name("my-executor")
//!         .plugin(my_plugin())
//!         .run_from_args()
//! }
//! ```

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches};
use wharf::sdk::Plugin;

use crate::app::{AppError, ExecutorApp, ExecutorConfig};
use crate::config::{Cli, ConfigError};

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
    /// A builder that offers no plugin until [`ExecutorBuilder::plugin`] adds some (or
    /// [`ExecutorBuilder::plugins_from`] a source of them).
    pub fn builder() -> ExecutorBuilder {
        ExecutorBuilder {
            name: "wharf-executor",
            source: no_plugins,
            plugins: Vec::new(),
            transforms: Vec::new(),
            adapter: None,
        }
    }
}

/// Makes a plugin deletion-aware on its behalf, or says it does not concern it
/// (`None`): the stock executor adapts Debezium's PostgreSQL connector, whose slot and
/// publication it drops on deletion. Applied to every plugin once the settings are read
/// (those of `--plugin-path` and `--plugin-processes` included).
pub type PluginAdapter = fn(Plugin) -> Option<Plugin>;

/// What an executor's settings say about the plugins that depend on them, read like
/// every other setting (flag, `WHARF_*` variable, `--config` file) and handed to the
/// builder's [`PluginSource`]: the built-in file plugins need a root, the fault-injecting
/// test plugins an opt-in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginSettings {
    /// `--file-root` as given, not checked yet: the directory file plugins are confined
    /// to.
    pub file_root: Option<PathBuf>,
    /// `--enable-test-plugins`: also offer the fault-injecting test plugins.
    pub test_plugins: bool,
}

/// Makes the plugins that depend on the settings (the stock binary passes
/// `wharf_executor_stock::builtin_plugins`). An error names the setting it refuses.
pub type PluginSource = fn(&PluginSettings) -> Result<Vec<Plugin>, ConfigError>;

/// The source of an executor built without one: it offers nothing, and refuses the
/// settings only a source reads rather than ignore them. Pure.
///
/// # Errors
/// [`ConfigError::Invalid`] naming `--file-root` or `--enable-test-plugins` when set.
pub fn no_plugins(settings: &PluginSettings) -> Result<Vec<Plugin>, ConfigError> {
    let PluginSettings {
        file_root,
        test_plugins,
    } = settings;
    if let Some(dir) = file_root {
        return Err(ConfigError::Invalid {
            field: "--file-root",
            reason: format!(
                "{} is given, but this executor offers no file plugins (it is built without the built-in ones)",
                dir.display()
            ),
        });
    }
    if *test_plugins {
        return Err(ConfigError::Invalid {
            field: "--enable-test-plugins",
            reason: "this executor offers no test plugins (it is built without the built-in ones)"
                .to_owned(),
        });
    }
    Ok(Vec::new())
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
    source: PluginSource,
    plugins: Vec<Plugin>,
    transforms: Vec<wharf::sdk::TransformPlugin>,
    adapter: Option<PluginAdapter>,
}

impl ExecutorBuilder {
    /// Adapts the plugins `adapter` concerns, once the settings are read (see
    /// [`PluginAdapter`]); their connectors are advertised as deletion-aware.
    pub fn adapt_plugins(mut self, adapter: PluginAdapter) -> Self {
        self.adapter = Some(adapter);
        self
    }

    /// Adds a plugin, advertised to the control plane under [`Plugin::name`] next to the
    /// others; its name MUST differ from every other plugin's (those of the source
    /// included).
    pub fn plugin(mut self, plugin: Plugin) -> Self {
        self.plugins.push(plugin);
        self
    }

    /// Adds several plugins (see [`ExecutorBuilder::plugin`]).
    pub fn plugins(mut self, plugins: impl IntoIterator<Item = Plugin>) -> Self {
        self.plugins.extend(plugins);
        self
    }

    /// Offers, before those added with [`ExecutorBuilder::plugin`], what `source` makes
    /// from the settings (`--file-root`, `--enable-test-plugins`): an author's executor
    /// that should also offer the built-in plugins passes
    /// `wharf_executor_stock::builtin_plugins`. Without it those two settings are refused.
    pub fn plugins_from(mut self, source: PluginSource) -> Self {
        self.source = source;
        self
    }

    /// Adds a custom transform or predicate (Kafka Connect's transformation plugins):
    /// a connector config names it by [`TransformPlugin::name`](wharf::sdk::TransformPlugin)
    /// in `transforms.<alias>.type` or `predicates.<alias>.type`, after the built-in ones
    /// (docs/pipeline.md).
    pub fn transform(mut self, transform: wharf::sdk::TransformPlugin) -> Self {
        self.transforms.push(transform);
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

    /// The plugins this executor offers under `settings`: the source's first, then those
    /// added with [`ExecutorBuilder::plugin`].
    ///
    /// # Errors
    /// The source's [`ConfigError`]; `Invalid { field: "plugins" }` with a
    /// [`BuilderError`] when two plugins share a name or one has none.
    pub fn plugin_list(&self, settings: &PluginSettings) -> Result<Vec<Plugin>, ConfigError> {
        let mut all = (self.source)(settings)?;
        all.extend(self.plugins.iter().cloned());
        check_names(&all).map_err(|e| ConfigError::Invalid {
            field: "plugins",
            reason: e.to_string(),
        })?;
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
        cli.build_with(|settings| self.plugin_list(settings))
            .map(|c| self.with_transforms(c))
            .map_err(|e| format!("{e}\n(see --help and docs/configuration.md)"))
    }

    /// `config` with this builder's custom transforms, and its plugins adapted.
    fn with_transforms(&self, mut config: ExecutorConfig) -> ExecutorConfig {
        config.transforms.clone_from(&self.transforms);
        if let Some(adapt) = self.adapter {
            config.plugins = std::mem::take(&mut config.plugins)
                .into_iter()
                .map(|p| match adapt(p.clone()) {
                    Some(adapted) => {
                        config.cleaned_by_executor.push(adapted.name.clone());
                        adapted
                    }
                    None => p,
                })
                .collect();
        }
        config
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
                cli.build_with(|settings| self.plugin_list(settings))
                    .map(|c| self.with_transforms(c))
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

/// Refuses a plugin list where two plugins share a name (`connector.class` would be
/// ambiguous) or one has none. Pure.
///
/// # Errors
/// The first [`BuilderError`] in list order.
pub(crate) fn check_names(all: &[Plugin]) -> Result<(), BuilderError> {
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
    Ok(())
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
            ExitCode::from(e.exit_code())
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
    use std::sync::Arc;

    use async_trait::async_trait;
    use wharf::sdk::{
        ConfigDef, ConfigMap, Connector, ConnectorContext, PluginResult, SinkRecord, SinkTask,
        TaskContext, TaskFactory,
    };

    use super::*;

    struct Idle;

    #[async_trait]
    impl Connector for Idle {
        async fn start(&mut self, _: ConnectorContext, _: ConfigMap) -> PluginResult<()> {
            Ok(())
        }
        async fn task_configs(&mut self, _: u32) -> PluginResult<Vec<ConfigMap>> {
            Ok(Vec::new())
        }
    }

    #[async_trait]
    impl SinkTask for Idle {
        async fn start(&mut self, _: TaskContext, _: ConfigMap) -> PluginResult<()> {
            Ok(())
        }
        async fn put(&mut self, _: Vec<SinkRecord>) -> PluginResult<()> {
            Ok(())
        }
    }

    /// A plugin that does nothing, named `name`.
    fn idle(name: &str) -> Plugin {
        Plugin {
            name: name.to_owned(),
            version: "1".to_owned(),
            config_def: ConfigDef::new(),
            connector: Arc::new(|| Box::new(Idle)),
            task: TaskFactory::Sink(Arc::new(|| Box::new(Idle))),
        }
    }

    /// A source that says what it was given: `root` with a file root, `test` with the
    /// test plugins.
    fn echo(settings: &PluginSettings) -> Result<Vec<Plugin>, ConfigError> {
        let mut out = vec![idle("from-source")];
        if settings.file_root.is_some() {
            out.push(idle("root"));
        }
        if settings.test_plugins {
            out.push(idle("test"));
        }
        Ok(out)
    }

    fn names(plugins: &[Plugin]) -> Vec<&str> {
        plugins.iter().map(|p| p.name.as_str()).collect()
    }

    const FLAGS: [&str; 7] = [
        "my-executor",
        "--listen",
        "127.0.0.1:0",
        "--control-plane",
        "http://127.0.0.1:7000",
        "--data-dir",
        "/tmp/x",
    ];

    #[test]
    fn an_authors_plugin_is_offered_after_the_sources_and_alone_without_one() {
        let settings = PluginSettings::default();
        let list = Executor::builder()
            .plugins_from(echo)
            .plugin(idle("my-sink"))
            .plugin_list(&settings)
            .unwrap();
        assert_eq!(names(&list), ["from-source", "my-sink"]);
        let only = Executor::builder()
            .plugin(idle("my-sink"))
            .plugin_list(&settings)
            .unwrap();
        assert_eq!(names(&only), ["my-sink"]);
    }

    #[test]
    fn a_plugin_named_like_another_or_unnamed_is_refused() {
        let settings = PluginSettings::default();
        let err = Executor::builder()
            .plugins_from(echo)
            .plugin(idle("from-source"))
            .plugin_list(&settings)
            .unwrap_err();
        assert!(
            err.to_string().contains("\"from-source\" is offered twice"),
            "{err}"
        );
        let err = Executor::builder()
            .plugin(idle(""))
            .plugin_list(&settings)
            .unwrap_err();
        assert!(err.to_string().contains("empty name"), "{err}");
    }

    #[test]
    fn without_a_source_no_plugin_is_offered_and_its_settings_are_refused() {
        assert!(no_plugins(&PluginSettings::default()).unwrap().is_empty());
        let root = PluginSettings {
            file_root: Some("/srv/files".into()),
            test_plugins: false,
        };
        let err = no_plugins(&root).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    field: "--file-root",
                    ..
                }
            ) && err.to_string().contains("/srv/files"),
            "{err}"
        );
        let test = PluginSettings {
            file_root: None,
            test_plugins: true,
        };
        let err = no_plugins(&test).unwrap_err();
        assert!(
            matches!(
                err,
                ConfigError::Invalid {
                    field: "--enable-test-plugins",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn the_builder_reads_the_same_flags_as_wharf_executor() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().display().to_string();
        let args = FLAGS
            .into_iter()
            .chain(["--enable-test-plugins", "--file-root", &root]);
        let config = Executor::builder()
            .name("my-executor")
            .plugins_from(echo)
            .plugin(idle("my-sink"))
            .config_from(args)
            .unwrap();
        assert_eq!(
            names(&config.plugins),
            ["from-source", "root", "test", "my-sink"]
        );
        assert_eq!(
            config.file_root,
            Some(std::fs::canonicalize(dir.path()).unwrap())
        );
        let plain = Executor::builder()
            .plugins_from(echo)
            .config_from(FLAGS)
            .unwrap();
        assert_eq!(names(&plain.plugins), ["from-source"]);
        let err = Executor::builder()
            .config_from(FLAGS.into_iter().chain(["--enable-test-plugins"]))
            .err()
            .expect("no source reads --enable-test-plugins");
        assert!(err.contains("--enable-test-plugins"), "{err}");
        let err = Executor::builder()
            .name("my-executor")
            .config_from(["my-executor", "--listen", "127.0.0.1:0"])
            .err()
            .expect("a missing --control-plane is an error");
        assert!(err.contains("--control-plane"), "{err}");
    }
}
