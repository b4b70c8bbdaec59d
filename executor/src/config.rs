//! Settings of the `wharf-executor` binary, from flags, `WHARF_*` environment variables
//! and an optional TOML file (`--config FILE`). Precedence: flag > environment > file >
//! default. Every option is documented in `docs/configuration.md`.

use std::net::SocketAddr;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Parser;
use serde::Deserialize;
use wharf::config::flags::{
    ConfigFileArgs, ObservabilityArgs, ObservabilityFile, TlsArgs, TlsFile,
};
use wharf::config::{layer, required};

use crate::app::{
    DEFAULT_GRACEFUL_TIMEOUT_MS, DEFAULT_PLUGIN_THREADS, ExecutorConfig, MAX_PLUGIN_THREADS,
};
use crate::launcher::{PluginSettings, no_plugins};
use crate::log::{LogConfig, LogError, NatsCredentials, NatsSecurity};

/// Wharf executor: runs connector instances and tasks assigned by the control plane and
/// stops them with connector_deleted=true only when their connector was deleted
/// (KIP-883/KIP-901). SIGTERM stops everything with connector_deleted=false and exits 0.
///
/// Plugins offered: those this executor was built with (the stock wharf-executor: file-source,
/// file-sink, postgres-audit, sqlite-audit, rabbitmq-sink; with --enable-test-plugins also
/// the fault-injecting test-source and test-sink).
///
/// Every option can also be set by its WHARF_* environment variable or in the TOML file
/// given with --config (keys as the flag names with '_' for '-'). Precedence: flag >
/// environment > file > default. See docs/configuration.md.
#[derive(Debug, Parser)]
#[command(name = "wharf-executor", version)]
pub struct Cli {
    /// `--config`.
    #[command(flatten)]
    pub config: ConfigFileArgs,
    /// Address to serve the Executor gRPC service on, IP:PORT (port 0 picks one; the
    /// bound address is written to DATA_DIR/listen.addr). Required (flag, env or file).
    #[arg(long, env = "WHARF_LISTEN", value_name = "IP:PORT")]
    pub listen: Option<SocketAddr>,
    /// URL of the control plane's ExecutorRegistry, for example http://127.0.0.1:7000;
    /// with replicas on etcd, several URLs separated by commas (tried in turn when one is
    /// unreachable). Required (flag, env or file).
    #[arg(long, env = "WHARF_CONTROL_PLANE", value_name = "URL[,URL...]")]
    pub control_plane: Option<String>,
    /// Directory for executor.id, listen.addr and the embedded record log. Created if
    /// missing. Required (flag, env or file).
    #[arg(long, env = "WHARF_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// URL the control plane uses to reach this executor. [default: http://BOUND_ADDRESS]
    #[arg(long, env = "WHARF_ADVERTISE", value_name = "URL")]
    pub advertise: Option<String>,
    /// Executor id: 1 to 200 bytes from A-Z a-z 0-9 . _ - (ASCII only), not "." or "..".
    /// [default: with --tls-cert the certificate's; otherwise generated once and kept in
    /// DATA_DIR/executor.id]
    #[arg(long, env = "WHARF_EXECUTOR_ID", value_name = "ID")]
    pub executor_id: Option<String>,
    /// How long the stops at shutdown may take in all, in milliseconds; also the stop
    /// timeout used when a StopTask/StopConnector request says 0. [default: 10000]
    #[arg(
        long,
        env = "WHARF_GRACEFUL_TIMEOUT_MS",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    pub graceful_timeout_ms: Option<u64>,
    /// Worker threads of the plugin runtime, which runs the plugin calls of every
    /// connector instance and task (1 to 1024): how many plugin calls run at the same
    /// moment. A plugin call that blocks its thread holds one of them while it blocks.
    /// [default: 32]
    #[arg(
        long,
        env = "WHARF_PLUGIN_THREADS",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub plugin_threads: Option<usize>,
    /// The record log between source and sink tasks: `embedded` (files in
    /// DATA_DIR/log, for one executor),
    /// `nats://HOST:PORT[,nats://HOST:PORT...][?replicas=N&max_age_s=N&max_bytes=N]`
    /// (NATS JetStream, needed as soon as executors run on several hosts; tls:// for TLS) or
    /// `kafka://HOST:PORT[,HOST:PORT...][?OPTION=V&...]` (Kafka brokers; TLS, SASL, topic creation and client options in docs/kafka.md). Every executor of
    /// a cluster uses the same one. [default: embedded]
    #[arg(long, env = "WHARF_RECORD_LOG", value_name = "SPEC")]
    pub record_log: Option<String>,
    /// Alias of --record-log, for a NATS URL; given with a different --record-log, the
    /// start is refused.
    #[arg(long, env = "WHARF_NATS_URL", value_name = "URL")]
    pub nats_url: Option<String>,
    /// With a NATS record log: PEM CA of the NATS server's certificate; the connection then
    /// requires TLS (a tls:// URL too).
    #[arg(long, env = "WHARF_NATS_CACERT", value_name = "FILE")]
    pub nats_cacert: Option<PathBuf>,
    /// With a NATS record log: PEM client certificate, for a server whose tls block has
    /// `verify: true` (with --nats-key).
    #[arg(long, env = "WHARF_NATS_CERT", value_name = "FILE")]
    pub nats_cert: Option<PathBuf>,
    /// With a NATS record log: PEM private key of --nats-cert.
    #[arg(long, env = "WHARF_NATS_KEY", value_name = "FILE")]
    pub nats_key: Option<PathBuf>,
    /// With a NATS record log: NATS credentials file (JWT and NKey seed, as `nsc` writes it).
    /// Not with --nats-user.
    #[arg(long, env = "WHARF_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// With a NATS record log: NATS user; its password comes from --nats-password-file or the
    /// WHARF_NATS_PASSWORD variable.
    #[arg(long, env = "WHARF_NATS_USER", value_name = "NAME")]
    pub nats_user: Option<String>,
    /// With --nats-user: file whose first line is the password. Read once at start.
    #[arg(long, env = "WHARF_NATS_PASSWORD_FILE", value_name = "FILE")]
    pub nats_password_file: Option<PathBuf>,
    /// The WHARF_NATS_PASSWORD variable (no flag: a flag shows in the process list).
    #[arg(skip = std::env::var("WHARF_NATS_PASSWORD").ok().map(Secret))]
    pub nats_password_env: Option<Secret>,
    /// Also offer the fault-injecting test plugins test-source and test-sink (they fail,
    /// block and ignore cancellation on request; for tests only). `--enable-test-plugins`
    /// alone means true; `--enable-test-plugins=false` turns a file's `true` off.
    /// [default: false]
    #[arg(
        long,
        env = "WHARF_ENABLE_TEST_PLUGINS",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub enable_test_plugins: Option<bool>,

    /// Directory the file plugins (file-source, file-sink) are confined to: a connector's
    /// `file` is relative to it or absolute under it; `..` and symbolic links leading
    /// outside are refused. Must exist. [default: none, and then the file plugins are
    /// not offered]
    #[arg(long, env = "WHARF_FILE_ROOT", value_name = "DIR")]
    pub file_root: Option<PathBuf>,
    /// Config providers connector configs may reference (Kafka Connect's
    /// config.providers, KIP-297), comma-separated: `file` (`${file:PATH:KEY}`, a key of a
    /// Java properties file), `directory` (`${directory:DIR:FILE}`, a file's content) and
    /// `env` (`${env:VARIABLE}`, never a WHARF_* variable). A reference is resolved on this
    /// executor just before the plugin's start and never stored, reported or logged; one
    /// that cannot be resolved fails the start naming it. [default: none]
    #[arg(long, env = "WHARF_CONFIG_PROVIDERS", value_name = "NAME[,NAME...]")]
    pub config_providers: Option<String>,
    /// Directory the file and directory providers read under, by --file-root's rules: a
    /// path is relative to it or absolute under it; `..` and symbolic links leading
    /// outside are refused. Must exist; required with either provider.
    #[arg(long, env = "WHARF_CONFIG_PROVIDER_ROOT", value_name = "DIR")]
    pub config_provider_root: Option<PathBuf>,
    /// Converter of record keys for a connector whose config names no `key.converter`
    /// (Kafka Connect's worker `key.converter`): a Connect class name, its simple name or
    /// Wharf's alias (`json`, `string`, `bytes`); docs/pipeline.md. A connector's own
    /// `key.converter` overrides it. [default: ByteArrayConverter, the bytes unchanged]
    #[arg(long, env = "WHARF_KEY_CONVERTER", value_name = "CLASS")]
    pub key_converter: Option<String>,
    /// As --key-converter, for record values (Connect's worker `value.converter`).
    /// [default: ByteArrayConverter]
    #[arg(long, env = "WHARF_VALUE_CONVERTER", value_name = "CLASS")]
    pub value_converter: Option<String>,
    /// As --key-converter, for headers a transform sets (Connect's worker
    /// `header.converter`). [default: SimpleHeaderConverter]
    #[arg(long, env = "WHARF_HEADER_CONVERTER", value_name = "CLASS")]
    pub header_converter: Option<String>,
    /// An option of a default converter, under Connect's worker key:
    /// `value.converter.schemas.enable=false`. Repeatable (in WHARF_CONVERTER_OPTIONS,
    /// comma-separated; in the --config file, the table `converter_options`); a flag's
    /// key wins over the file's. A connector that names its own converter gets only its
    /// own options, as in Connect.
    #[arg(
        long = "converter-option",
        env = "WHARF_CONVERTER_OPTIONS",
        value_name = "KEY=VALUE",
        value_delimiter = ','
    )]
    pub converter_options: Vec<String>,
    /// TOML file listing plugin processes: plugins that run as child processes speaking
    /// the plugin protocol over their stdio (docs/plugins-out-of-process.md). Each is
    /// started and described at start; the plugins it offers are offered beside the
    /// built-in ones. [default: none]
    #[arg(long, env = "WHARF_PLUGIN_PROCESSES", value_name = "FILE")]
    pub plugin_processes: Option<PathBuf>,
    /// Kafka Connect's plugin.path, comma-separated: every connector class found in the
    /// jars there is offered under its class name, run in the JVM plugin host, one JVM
    /// per plugin location (each directory or jar directly inside a DIR;
    /// docs/kafka-connect-connectors.md). Needs `java` in PATH. [default: none]
    #[arg(long, env = "WHARF_PLUGIN_PATH", value_name = "DIR[,DIR...]")]
    pub plugin_path: Option<String>,
    /// Classpath of the JVM plugin host: its classes and the Connect jars it runs on.
    /// [default: `jvm-host/*` beside the executor binary, as `jvm-host/build` writes it]
    #[arg(long, env = "WHARF_JVM_HOST_CLASSPATH", value_name = "CLASSPATH")]
    pub jvm_host_classpath: Option<String>,
    /// `--metrics-listen`, `--log-format`, `--otlp-endpoint`.
    #[command(flatten)]
    pub observability: ObservabilityArgs,
    /// `--tls-cert`, `--tls-key`, `--tls-ca` (docs/security.md). With them the Executor
    /// service accepts only the control plane's certificate, the control plane is reached
    /// over https://, and the executor id defaults to the certificate's.
    #[command(flatten)]
    pub tls: TlsArgs,
    /// Allow a plaintext listener on a non-loopback address (anyone who reaches it can
    /// then stop this executor's work). Warned at start. [default: false]
    #[arg(long, env = "WHARF_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    pub insecure: bool,
}

/// The `--config` file: every key optional; unknown keys are an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// See `--listen`.
    pub listen: Option<SocketAddr>,
    /// See `--control-plane`.
    pub control_plane: Option<String>,
    /// See `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// See `--advertise`.
    pub advertise: Option<String>,
    /// See `--executor-id`.
    pub executor_id: Option<String>,
    /// See `--graceful-timeout-ms`.
    pub graceful_timeout_ms: Option<u64>,
    /// See `--plugin-threads`.
    pub plugin_threads: Option<usize>,
    /// See `--record-log`.
    pub record_log: Option<String>,
    /// See `--nats-url` (an alias of `record_log`).
    pub nats_url: Option<String>,
    /// See `--nats-cacert`.
    pub nats_cacert: Option<PathBuf>,
    /// See `--nats-cert`.
    pub nats_cert: Option<PathBuf>,
    /// See `--nats-key`.
    pub nats_key: Option<PathBuf>,
    /// See `--nats-creds`.
    pub nats_creds: Option<PathBuf>,
    /// See `--nats-user`.
    pub nats_user: Option<String>,
    /// See `--nats-password-file`.
    pub nats_password_file: Option<PathBuf>,
    /// See `--enable-test-plugins`.
    pub enable_test_plugins: Option<bool>,
    /// See `--file-root`.
    pub file_root: Option<PathBuf>,
    /// See `--config-providers`.
    pub config_providers: Option<String>,
    /// See `--config-provider-root`.
    pub config_provider_root: Option<PathBuf>,
    /// See `--key-converter`.
    pub key_converter: Option<String>,
    /// See `--value-converter`.
    pub value_converter: Option<String>,
    /// See `--header-converter`.
    pub header_converter: Option<String>,
    /// See `--converter-option`: a table of Connect's worker keys, such as
    /// `"value.converter.schemas.enable" = "false"`.
    pub converter_options: Option<std::collections::BTreeMap<String, String>>,
    /// See `--plugin-processes`.
    pub plugin_processes: Option<PathBuf>,
    /// See `--plugin-path`.
    pub plugin_path: Option<String>,
    /// See `--jvm-host-classpath`.
    pub jvm_host_classpath: Option<String>,
    /// `metrics_listen`, `log_format`, `otlp_endpoint`.
    #[serde(flatten)]
    pub observability: ObservabilityFile,
    /// `tls_cert`, `tls_key`, `tls_ca`.
    #[serde(flatten)]
    pub tls: TlsFile,
    /// See `--insecure`.
    pub insecure: Option<bool>,
}

/// `--executor-id` (flag, `WHARF_EXECUTOR_ID` or the file's `executor_id`) checked by
/// the rule the control plane registers executors by ([`wharf::ids::check_executor_id`]),
/// so that a bad id stops the start instead of being refused at every registration
/// attempt.
///
/// # Errors
/// [`ConfigError::Invalid`] naming the setting, quoting the value and stating the rule.
fn executor_id_setting(id: String) -> Result<String, ConfigError> {
    match wharf::ids::check_executor_id(&id) {
        Ok(()) => Ok(id),
        Err(e) => Err(ConfigError::Invalid {
            field: "--executor-id (WHARF_EXECUTOR_ID, executor_id in the --config file)",
            reason: format!("{id:?} {e}"),
        }),
    }
}

/// Why the settings could not be assembled (shared by every binary).
pub type ConfigError = wharf::config::SettingsError;

impl Cli {
    /// Merges flags/env (merged by clap), the `--config` file and the defaults;
    /// destructures both sources so that no option can be ignored.
    ///
    /// # Errors
    /// [`ConfigError`].
    /// Offers no plugins ([`no_plugins`]).
    pub fn build(self) -> Result<ExecutorConfig, ConfigError> {
        self.build_with(no_plugins)
    }

    /// As [`Cli::build`], offering what `plugins` returns for the settings it reads
    /// (`--file-root`, `--enable-test-plugins`; see [`PluginSettings`]).
    ///
    /// # Errors
    /// [`ConfigError`], an error of `plugins` included.
    pub fn build_with(
        self,
        plugins: impl FnOnce(&PluginSettings) -> Result<Vec<wharf::sdk::Plugin>, ConfigError>,
    ) -> Result<ExecutorConfig, ConfigError> {
        let Cli {
            config,
            listen,
            control_plane,
            data_dir,
            advertise,
            executor_id,
            graceful_timeout_ms,
            plugin_threads,
            record_log,
            nats_url,
            nats_cacert,
            nats_cert,
            nats_key,
            nats_creds,
            nats_user,
            nats_password_file,
            nats_password_env,
            enable_test_plugins,
            file_root,
            config_providers,
            config_provider_root,
            key_converter,
            value_converter,
            header_converter,
            converter_options,
            plugin_processes,
            plugin_path,
            jvm_host_classpath,
            observability,
            tls,
            insecure,
        } = self;
        let FileConfig {
            listen: file_listen,
            control_plane: file_control_plane,
            data_dir: file_data_dir,
            advertise: file_advertise,
            executor_id: file_executor_id,
            graceful_timeout_ms: file_graceful_timeout_ms,
            plugin_threads: file_plugin_threads,
            record_log: file_record_log,
            nats_url: file_nats_url,
            nats_cacert: file_nats_cacert,
            nats_cert: file_nats_cert,
            nats_key: file_nats_key,
            nats_creds: file_nats_creds,
            nats_user: file_nats_user,
            nats_password_file: file_nats_password_file,
            enable_test_plugins: file_enable_test_plugins,
            file_root: file_file_root,
            config_providers: file_config_providers,
            config_provider_root: file_config_provider_root,
            key_converter: file_key_converter,
            value_converter: file_value_converter,
            header_converter: file_header_converter,
            converter_options: file_converter_options,
            plugin_processes: file_plugin_processes,
            plugin_path: file_plugin_path,
            jvm_host_classpath: file_jvm_host_classpath,
            observability: file_observability,
            tls: file_tls,
            insecure: file_insecure,
        } = config.read()?;
        let tls = tls.layer(file_tls)?;
        let insecure = insecure || file_insecure.unwrap_or(false);
        let plugin_settings = PluginSettings {
            file_root: file_root.or(file_file_root),
            test_plugins: layer(enable_test_plugins, file_enable_test_plugins, || false),
        };
        let plugins = plugins(&plugin_settings)?;
        let listen = required(listen, file_listen, ("--listen", "WHARF_LISTEN", "listen"))?;
        let control_plane = required(
            control_plane,
            file_control_plane,
            ("--control-plane", "WHARF_CONTROL_PLANE", "control_plane"),
        )?;
        check_control_plane_urls(&control_plane, tls.is_some())?;
        let data_dir = required(
            data_dir,
            file_data_dir,
            ("--data-dir", "WHARF_DATA_DIR", "data_dir"),
        )?;
        let mut out = ExecutorConfig::new(listen, control_plane, data_dir);
        out.advertise = advertise.or(file_advertise);
        out.executor_id = executor_id
            .or(file_executor_id)
            .map(executor_id_setting)
            .transpose()?;
        out.graceful_timeout =
            Duration::from_millis(layer(graceful_timeout_ms, file_graceful_timeout_ms, || {
                DEFAULT_GRACEFUL_TIMEOUT_MS
            }));
        out.plugin_threads =
            plugin_threads_setting(layer(plugin_threads, file_plugin_threads, || {
                DEFAULT_PLUGIN_THREADS.get()
            }))?;
        let password = match (
            nats_password_file.or(file_nats_password_file),
            nats_password_env,
        ) {
            (Some(path), None) => Some(read_password(&path)?),
            (None, Some(Secret(p))) => Some(p),
            (None, None) => None,
            (Some(_), Some(_)) => {
                return Err(ConfigError::Invalid {
                    field: "--nats-password-file",
                    reason: "and WHARF_NATS_PASSWORD are both set: give the password one way"
                        .into(),
                });
            }
        };
        let nats = nats_security(NatsSettings {
            ca: nats_cacert.or(file_nats_cacert),
            cert: nats_cert.or(file_nats_cert),
            key: nats_key.or(file_nats_key),
            creds: nats_creds.or(file_nats_creds),
            user: nats_user.or(file_nats_user),
            password,
        })?;
        out.record_log = record_log_setting(
            record_log.or(file_record_log),
            nats_url.or(file_nats_url),
            &out.data_dir,
            nats,
        )?;
        out.converter_defaults = converter_defaults_setting(
            [
                ("key.converter", key_converter.or(file_key_converter)),
                ("value.converter", value_converter.or(file_value_converter)),
                (
                    "header.converter",
                    header_converter.or(file_header_converter),
                ),
            ],
            file_converter_options.unwrap_or_default(),
            &converter_options,
        )?;
        out.plugins = plugins;
        // Last, once every other setting is known to be good: this starts processes.
        if let Some(path) = plugin_processes.or(file_plugin_processes) {
            out.plugin_processes = process_plugins(&path)?;
            out.plugins
                .extend(out.plugin_processes.iter().flat_map(|p| p.plugins()));
            crate::launcher::check_names(&out.plugins).map_err(|e| ConfigError::Invalid {
                field: "--plugin-processes",
                reason: e.to_string(),
            })?;
        }
        if let Some(dirs) = plugin_path.or(file_plugin_path) {
            let host = crate::process::plugin_path::JvmHost::new(
                jvm_host_classpath.or(file_jvm_host_classpath),
            );
            let found = plugin_path_processes(&dirs, &host)?;
            out.plugins.extend(found.iter().flat_map(|p| p.plugins()));
            out.plugin_processes.extend(found);
            crate::launcher::check_names(&out.plugins).map_err(|e| ConfigError::Invalid {
                field: "--plugin-path",
                reason: e.to_string(),
            })?;
        }
        // The source checked the root; the start log line shows it resolved.
        out.file_root = plugin_settings
            .file_root
            .map(|dir| std::fs::canonicalize(&dir).unwrap_or(dir));
        out.config_providers = crate::providers::ConfigProviders::parse(
            &config_providers
                .or(file_config_providers)
                .unwrap_or_default(),
            config_provider_root
                .or(file_config_provider_root)
                .as_deref(),
        )
        .map_err(|(field, reason)| ConfigError::Invalid { field, reason })?;
        out.tls = tls;
        out.insecure = insecure;
        let observability = observability.layer(file_observability, None)?;
        out.metrics_listen = observability.metrics_listen;
        out.log_format = observability.log_format;
        out.otlp_endpoint = observability.otlp_endpoint;
        Ok(out)
    }
}

/// The executor's default converters: the classes (flag > environment > file) and the
/// options (the file's table, then `--converter-option`'s `KEY=VALUE`s, a later key
/// winning), checked as a connector's converter keys are.
///
/// # Errors
/// [`ConfigError::Invalid`] naming the flag of the first bad setting
/// (`--value-converter`, `--converter-option`, ...) and the key.
fn converter_defaults_setting(
    classes: [(&'static str, Option<String>); 3],
    file_options: std::collections::BTreeMap<String, String>,
    flag_options: &[String],
) -> Result<crate::pipeline::ConverterDefaults, ConfigError> {
    let mut settings: wharf::sdk::ConfigMap = file_options.into_iter().collect();
    for option in flag_options.iter().filter(|o| !o.trim().is_empty()) {
        let Some((key, value)) = option.split_once('=') else {
            return Err(ConfigError::Invalid {
                field: "--converter-option",
                reason: format!(
                    "{option:?} is not KEY=VALUE (for example value.converter.schemas.enable=false)"
                ),
            });
        };
        settings.insert(key.trim().to_owned(), value.trim().to_owned());
    }
    for (key, class) in classes {
        if let Some(class) = class {
            settings.insert(key.to_owned(), class);
        }
    }
    crate::pipeline::ConverterDefaults::parse(settings).map_err(|problems| {
        let (key, why) = problems.into_iter().next().unwrap_or_default();
        let field = match key.as_str() {
            "key.converter" => "--key-converter",
            "value.converter" => "--value-converter",
            "header.converter" => "--header-converter",
            _ => "--converter-option",
        };
        ConfigError::Invalid {
            field,
            reason: format!("{key}: {why}"),
        }
    })
}

/// Reads the `--plugin-processes` file, starts and describes each process, and returns
/// them.
///
/// # Errors
/// [`ConfigError::Invalid`] naming `--plugin-processes`: the file cannot be read or is
/// wrong, or a process cannot be started or described.
fn process_plugins(
    path: &Path,
) -> Result<Vec<std::sync::Arc<crate::process::PluginProcess>>, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        field: "--plugin-processes",
        reason,
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    let base = path.parent().unwrap_or(Path::new("."));
    let specs = crate::process::spec::parse(&text, base)
        .map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    crate::process::start_processes(specs).map_err(invalid)
}

/// Starts the JVMs of `--plugin-path` (comma-separated directories).
///
/// # Errors
/// [`ConfigError::Invalid`] naming `--plugin-path`: no directory given, one cannot be
/// read, or a location's JVM cannot be started or described.
fn plugin_path_processes(
    dirs: &str,
    host: &crate::process::plugin_path::JvmHost,
) -> Result<Vec<std::sync::Arc<crate::process::PluginProcess>>, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        field: "--plugin-path",
        reason,
    };
    let dirs: Vec<PathBuf> = dirs
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect();
    if dirs.is_empty() {
        return Err(invalid("names no directory".into()));
    }
    crate::process::plugin_path::start(&dirs, host).map_err(invalid)
}

/// A secret from the environment; Debug prints a placeholder.
#[derive(Clone)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(wharf::sdk::REDACTED)
    }
}

/// Reads a password file: its first line.
fn read_password(path: &std::path::Path) -> Result<String, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Invalid {
        field: "--nats-password-file",
        reason: format!("{}: {e}", path.display()),
    })?;
    Ok(text.lines().next().unwrap_or_default().to_owned())
}

/// The NATS link options as given (flag, env or file), before they are checked.
#[derive(Default)]
struct NatsSettings {
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    creds: Option<PathBuf>,
    user: Option<String>,
    password: Option<String>,
}

/// The record log: `--record-log` or its alias `--nats-url` (each flag > environment >
/// file), read by [`LogConfig::parse`] with the NATS link's TLS and credentials; neither
/// given, the embedded log in `data_dir`.
///
/// # Errors
/// [`ConfigError::Invalid`] naming the flag whose value is wrong, or both flags when they
/// are given with different values.
fn record_log_setting(
    record_log: Option<String>,
    nats_url: Option<String>,
    data_dir: &Path,
    nats: NatsSecurity,
) -> Result<LogConfig, ConfigError> {
    let (spec, field) = match (record_log, nats_url) {
        (Some(spec), Some(alias)) if spec.trim() != alias.trim() => {
            return Err(ConfigError::Invalid {
                field: "--record-log",
                reason: format!(
                    "{spec:?} and --nats-url {alias:?} (its alias) are both given and differ: give the record log once, with --record-log"
                ),
            });
        }
        (Some(spec), _) => (spec, "--record-log"),
        (None, Some(alias)) => (alias, "--nats-url"),
        (None, None) => ("embedded".to_owned(), "--record-log"),
    };
    let config = LogConfig::parse(&spec, data_dir, nats).map_err(|e| invalid_log(field, e))?;
    // The alias names NATS: another backend given through it is a mistake, not a choice.
    if field == "--nats-url" && !matches!(config, LogConfig::Nats(_)) {
        return Err(ConfigError::Invalid {
            field,
            reason: format!("{spec:?} is not a NATS URL: give other record logs with --record-log"),
        });
    }
    Ok(config)
}

/// A record log setting the log refused, as a settings error naming `field`.
fn invalid_log(field: &'static str, err: LogError) -> ConfigError {
    let reason = match err {
        LogError::InvalidConfig(reason) => reason,
        other => other.to_string(),
    };
    ConfigError::Invalid { field, reason }
}

/// Decides the NATS link's TLS and credentials: a certificate comes with its key; a
/// creds file or a user with its password, not both. Whether the record log takes them
/// is [`LogConfig::parse`]'s decision.
fn nats_security(given: NatsSettings) -> Result<NatsSecurity, ConfigError> {
    let NatsSettings {
        ca,
        cert,
        key,
        creds,
        user,
        password,
    } = given;
    let invalid = |field, reason: &str| ConfigError::Invalid {
        field,
        reason: reason.into(),
    };
    let client_cert = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        (Some(_), None) => return Err(invalid("--nats-key", "is required with --nats-cert")),
        (None, Some(_)) => return Err(invalid("--nats-cert", "is required with --nats-key")),
    };
    let credentials = match (creds, user, password) {
        (None, None, None) => None,
        (Some(path), None, None) => Some(NatsCredentials::CredsFile(path)),
        (None, Some(_), Some(p)) if p.is_empty() => {
            return Err(invalid("--nats-password-file", "holds an empty password"));
        }
        (None, Some(user), Some(password)) => {
            Some(NatsCredentials::UserPassword { user, password })
        }
        (None, Some(_), None) => {
            return Err(invalid(
                "--nats-user",
                "needs a password: --nats-password-file (or WHARF_NATS_PASSWORD_FILE, nats_password_file) or WHARF_NATS_PASSWORD",
            ));
        }
        (None, None, Some(_)) => {
            return Err(invalid("--nats-user", "is required with a NATS password"));
        }
        (Some(_), _, _) => {
            return Err(invalid(
                "--nats-creds",
                "and --nats-user are both given: use one way to authenticate",
            ));
        }
    };
    Ok(NatsSecurity {
        ca,
        client_cert,
        credentials,
    })
}

/// Checks `--plugin-threads`: at least one worker, and at most [`MAX_PLUGIN_THREADS`]
/// (more would bring back the thread count the pool exists to bound).
fn plugin_threads_setting(n: usize) -> Result<NonZeroUsize, ConfigError> {
    NonZeroUsize::new(n)
        .filter(|n| n.get() <= MAX_PLUGIN_THREADS)
        .ok_or_else(|| ConfigError::Invalid {
            field: "--plugin-threads",
            reason: format!(
                "{n} is out of range: give 1 to {MAX_PLUGIN_THREADS} worker threads (default {DEFAULT_PLUGIN_THREADS})"
            ),
        })
}

/// Checks `--control-plane`: one or more http(s) URLs separated by commas, each fitting
/// the TLS setting ([`plaintext_url_with_tls`]).
///
/// # Errors
/// [`ConfigError::Invalid`] naming `--control-plane` and quoting the bad entry.
fn check_control_plane_urls(urls: &str, tls: bool) -> Result<(), ConfigError> {
    for url in urls.split(',').map(str::trim) {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(ConfigError::Invalid {
                field: "--control-plane",
                reason: format!(
                    "{url:?} is not a URL; write it like http://127.0.0.1:7000 (several: separated by commas)"
                ),
            });
        }
        if let Some(reason) = plaintext_url_with_tls(url, tls) {
            return Err(ConfigError::Invalid {
                field: "--control-plane",
                reason,
            });
        }
    }
    Ok(())
}

/// Why a control-plane URL does not fit the TLS setting: an `http://` URL with TLS
/// configured would send the executor's registration (and receive task configs with
/// secrets) in plaintext; refused at start like its reverse, an `https://` URL without
/// TLS ([`wharf::tls::TlsError::HttpsWithoutTls`]). `None`: it fits.
fn plaintext_url_with_tls(url: &str, tls: bool) -> Option<String> {
    (tls && url.starts_with("http://")).then(|| {
        format!(
            "{url} is an http:// URL but TLS is configured (--tls-cert, --tls-key, --tls-ca): the control plane must be reached over https://"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_number_is_refused_naming_its_flag() {
        wharf::config::assert_negative_numbers_name_their_flag::<Cli>(
            "wharf-executor",
            &["--graceful-timeout-ms", "--plugin-threads"],
        );
    }

    #[test]
    fn a_plaintext_control_plane_url_with_tls_is_refused() {
        let reason =
            plaintext_url_with_tls("http://10.0.0.1:7000", true).expect("http:// with TLS");
        assert!(
            reason.contains("http://10.0.0.1:7000") && reason.contains("https://"),
            "{reason}"
        );
        assert_eq!(plaintext_url_with_tls("https://10.0.0.1:7000", true), None);
        assert_eq!(plaintext_url_with_tls("http://127.0.0.1:7000", false), None);
    }

    #[test]
    fn a_bad_executor_id_is_refused_naming_the_setting_the_value_and_the_rule() {
        for (bad, why) in [
            ("", "is empty"),
            ("bad id/ü", "non-ASCII"),
            ("a/b", "outside A-Z a-z 0-9 . _ -"),
        ] {
            let text = executor_id_setting(bad.into()).expect_err(bad).to_string();
            assert!(
                text.contains("--executor-id")
                    && text.contains("WHARF_EXECUTOR_ID")
                    && text.contains(&format!("{bad:?}"))
                    && text.contains(why)
                    && text.contains("1 to 200 bytes"),
                "{bad:?}: {text}"
            );
        }
    }

    #[test]
    fn a_valid_executor_id_is_kept_as_given() {
        assert_eq!(
            executor_id_setting("exec-7.host_a".into()).expect("valid"),
            "exec-7.host_a"
        );
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("ex.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.2:7070\"\ncontrol_plane = \"http://127.0.0.1:7000\"\ndata_dir = \"/tmp/e\"\nexecutor_id = \"from-file\"\nnats_url = \"nats://127.0.0.1:4222\"\n",
        )
        .expect("write");
        let cli = Cli::try_parse_from([
            "wharf-executor",
            "--config",
            file.to_str().expect("utf8"),
            "--executor-id",
            "from-flag",
        ])
        .expect("parses");
        let config = cli.build().expect("builds");
        assert_eq!(config.listen.to_string(), "127.0.0.2:7070");
        assert_eq!(config.executor_id.as_deref(), Some("from-flag"));
        assert_eq!(
            config.record_log,
            LogConfig::Nats(crate::log::NatsConfig::new(["nats://127.0.0.1:4222"])),
            "nats_url in the file is the record log"
        );
        assert_eq!(
            config.graceful_timeout,
            Duration::from_millis(DEFAULT_GRACEFUL_TIMEOUT_MS)
        );
    }

    #[test]
    fn default_converters_come_from_flags_and_the_file_and_bad_ones_name_their_flag() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("ex.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.2:7070\"\ncontrol_plane = \"http://127.0.0.1:7000\"\ndata_dir = \"/tmp/e\"\nvalue_converter = \"string\"\nkey_converter = \"json\"\n[converter_options]\n\"key.converter.schemas.enable\" = \"true\"\n",
        )
        .expect("write");
        let build = |extra: &[&str]| {
            let mut args = vec!["wharf-executor", "--config", file.to_str().expect("utf8")];
            args.extend_from_slice(extra);
            Cli::try_parse_from(args).expect("parses").build()
        };
        let config = build(&[
            "--value-converter",
            "json",
            "--converter-option",
            "value.converter.schemas.enable=false",
            "--converter-option",
            "key.converter.schemas.enable=false",
        ])
        .expect("builds");
        let expected = crate::pipeline::ConverterDefaults::parse(
            [
                ("key.converter", "json"),
                ("key.converter.schemas.enable", "false"),
                ("value.converter", "json"),
                ("value.converter.schemas.enable", "false"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        )
        .expect("valid");
        assert_eq!(config.converter_defaults, expected);
        for (extra, field) in [
            (vec!["--value-converter", "avro"], "--value-converter"),
            (
                vec!["--converter-option", "schemas.enable"],
                "--converter-option",
            ),
            (
                vec!["--converter-option", "value.converter.schemas.enable=false"],
                "--converter-option",
            ),
        ] {
            let Err(e) = build(&extra) else {
                panic!("{extra:?} accepted");
            };
            let e = e.to_string();
            assert!(e.contains(field), "{extra:?}: {e}");
        }
    }

    #[test]
    fn plugin_threads_come_from_flag_file_or_default_and_an_absurd_count_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("ex.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.2:7070\"\ncontrol_plane = \"http://127.0.0.1:7000\"\ndata_dir = \"/tmp/e\"\nplugin_threads = 8\n",
        )
        .expect("write");
        let path = file.to_str().expect("utf8");
        let base = [
            "wharf-executor",
            "--listen",
            "127.0.0.2:7070",
            "--control-plane",
            "http://127.0.0.1:7000",
            "--data-dir",
            "/tmp/e",
        ];
        let default = Cli::try_parse_from(base)
            .expect("parses")
            .build()
            .expect("builds");
        assert_eq!(default.plugin_threads, DEFAULT_PLUGIN_THREADS);
        let from_file = Cli::try_parse_from(["wharf-executor", "--config", path])
            .expect("parses")
            .build()
            .expect("builds");
        assert_eq!(from_file.plugin_threads.get(), 8);
        let flag =
            Cli::try_parse_from(["wharf-executor", "--config", path, "--plugin-threads", "4"])
                .expect("parses")
                .build()
                .expect("builds");
        assert_eq!(flag.plugin_threads.get(), 4, "the flag wins over the file");
        for absurd in ["0", "1025", "1000000"] {
            let Err(err) =
                Cli::try_parse_from(base.iter().copied().chain(["--plugin-threads", absurd]))
                    .expect("parses")
                    .build()
            else {
                panic!("--plugin-threads {absurd} is refused");
            };
            let text = err.to_string();
            assert!(
                text.contains("--plugin-threads") && text.contains(absurd),
                "{text}"
            );
        }
    }

    #[test]
    fn a_missing_required_setting_names_flag_env_and_key() {
        let err = Cli {
            config: Default::default(),
            listen: None,
            control_plane: None,
            data_dir: None,
            advertise: None,
            executor_id: None,
            graceful_timeout_ms: None,
            plugin_threads: None,
            record_log: None,
            nats_url: None,
            nats_cacert: None,
            nats_cert: None,
            nats_key: None,
            nats_creds: None,
            nats_user: None,
            nats_password_file: None,
            nats_password_env: None,
            enable_test_plugins: None,
            file_root: None,
            config_providers: None,
            config_provider_root: None,
            key_converter: None,
            value_converter: None,
            header_converter: None,
            converter_options: Vec::new(),
            plugin_processes: None,
            plugin_path: None,
            jvm_host_classpath: None,
            observability: Default::default(),
            tls: Default::default(),
            insecure: false,
        }
        .build()
        .err()
        .expect("a missing --listen is an error");
        let text = err.to_string();
        assert!(
            text.contains("--listen") && text.contains("WHARF_LISTEN"),
            "{text}"
        );
    }

    #[test]
    fn nats_tls_and_credentials_need_a_nats_url() {
        let ca = nats_security(NatsSettings {
            ca: Some("/ca.pem".into()),
            ..NatsSettings::default()
        })
        .expect("a CA alone");
        let err = record_log_setting(None, None, Path::new("/data"), ca).expect_err("no url");
        assert!(err.to_string().contains("--nats-url"), "{err}");
        let none = nats_security(NatsSettings::default()).expect("nothing given");
        assert!(!none.tls() && none.credentials.is_none());
    }

    fn record_log(
        record_log: Option<&str>,
        nats_url: Option<&str>,
    ) -> Result<LogConfig, ConfigError> {
        record_log_setting(
            record_log.map(str::to_owned),
            nats_url.map(str::to_owned),
            Path::new("/data"),
            NatsSecurity::default(),
        )
    }

    fn nats_log(url: &str) -> LogConfig {
        LogConfig::Nats(crate::log::NatsConfig::new([url]))
    }

    #[test]
    fn without_a_record_log_setting_the_log_is_embedded_in_the_data_dir() {
        assert_eq!(
            record_log(None, None).expect("default"),
            LogConfig::embedded(Path::new("/data"))
        );
    }

    #[test]
    fn record_log_takes_embedded_or_a_nats_url() {
        assert_eq!(
            record_log(Some("embedded"), None).expect("embedded"),
            LogConfig::embedded(Path::new("/data"))
        );
        assert_eq!(
            record_log(Some("nats://n:4222"), None).expect("nats"),
            nats_log("nats://n:4222")
        );
    }

    #[test]
    fn nats_url_alone_is_the_record_log() {
        assert_eq!(
            record_log(None, Some("nats://n:4222")).expect("alias"),
            nats_log("nats://n:4222")
        );
    }

    #[test]
    fn record_log_and_nats_url_may_both_give_the_same_log() {
        assert_eq!(
            record_log(Some("nats://n:4222"), Some(" nats://n:4222")).expect("same"),
            nats_log("nats://n:4222")
        );
    }

    #[test]
    fn record_log_and_nats_url_that_differ_are_refused_naming_both() {
        for (spec, alias) in [
            ("embedded", "nats://n:4222"),
            ("nats://a:4222", "nats://b:4222"),
        ] {
            let err = record_log(Some(spec), Some(alias)).expect_err("they differ");
            let text = err.to_string();
            assert!(
                matches!(err, ConfigError::Invalid { .. })
                    && text.contains("--record-log")
                    && text.contains("--nats-url")
                    && text.contains(spec)
                    && text.contains(alias),
                "{text}"
            );
        }
    }

    #[test]
    fn a_bad_record_log_is_refused_naming_the_flag_and_the_accepted_forms() {
        let text = record_log(Some("pulsar://k:6650"), None)
            .expect_err("not a backend")
            .to_string();
        assert!(
            text.contains("--record-log")
                && text.contains("pulsar://k:6650")
                && text.contains(crate::log::RECORD_LOG_FORMS),
            "{text}"
        );
    }

    #[test]
    fn a_record_log_other_than_nats_given_as_nats_url_is_refused() {
        for spec in ["kafka://127.0.0.1:9092", "embedded"] {
            let err = record_log(None, Some(spec)).expect_err(spec).to_string();
            assert!(
                err.contains("--nats-url") && err.contains("--record-log"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_bad_nats_url_is_refused_naming_the_alias() {
        let text = record_log(None, Some("nats://n:4222?replicas=9"))
            .expect_err("replicas out of range")
            .to_string();
        assert!(
            text.contains("--nats-url") && text.contains("replicas"),
            "{text}"
        );
    }

    #[test]
    fn the_record_log_comes_from_the_file_and_the_flag_wins() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("ex.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.2:7070\"\ncontrol_plane = \"http://127.0.0.1:7000\"\ndata_dir = \"/tmp/e\"\nrecord_log = \"nats://f:4222\"\n",
        )
        .expect("write");
        let path = file.to_str().expect("utf8");
        let from_file = Cli::try_parse_from(["wharf-executor", "--config", path])
            .expect("parses")
            .build()
            .expect("builds");
        assert_eq!(from_file.record_log, nats_log("nats://f:4222"));
        let flag = Cli::try_parse_from([
            "wharf-executor",
            "--config",
            path,
            "--record-log",
            "embedded",
        ])
        .expect("parses")
        .build()
        .expect("builds");
        assert_eq!(
            flag.record_log,
            LogConfig::embedded(Path::new("/tmp/e")),
            "the flag wins over the file"
        );
    }

    #[test]
    fn a_nats_client_certificate_needs_its_key_and_the_reverse() {
        let err = nats_security(NatsSettings {
            cert: Some("/c".into()),
            ..NatsSettings::default()
        })
        .expect_err("no key");
        assert!(err.to_string().contains("--nats-key"), "{err}");
        let err = nats_security(NatsSettings {
            key: Some("/k".into()),
            ..NatsSettings::default()
        })
        .expect_err("no cert");
        assert!(err.to_string().contains("--nats-cert"), "{err}");
        let ok = nats_security(NatsSettings {
            ca: Some("/ca".into()),
            cert: Some("/c".into()),
            key: Some("/k".into()),
            ..NatsSettings::default()
        })
        .expect("mutual TLS");
        assert!(ok.tls() && ok.client_cert.is_some());
    }

    #[test]
    fn nats_credentials_are_a_creds_file_or_a_user_with_a_password() {
        let creds = nats_security(NatsSettings {
            creds: Some("/w.creds".into()),
            ..NatsSettings::default()
        })
        .expect("creds");
        assert!(matches!(
            creds.credentials,
            Some(crate::log::NatsCredentials::CredsFile(_))
        ));
        let both = nats_security(NatsSettings {
            creds: Some("/w.creds".into()),
            user: Some("u".into()),
            password: Some("p".into()),
            ..NatsSettings::default()
        })
        .expect_err("both");
        assert!(both.to_string().contains("--nats-creds"), "{both}");
        let no_pw = nats_security(NatsSettings {
            user: Some("u".into()),
            ..NatsSettings::default()
        })
        .expect_err("no password");
        assert!(no_pw.to_string().contains("password"), "{no_pw}");
        let no_user = nats_security(NatsSettings {
            password: Some("p".into()),
            ..NatsSettings::default()
        })
        .expect_err("no user");
        assert!(no_user.to_string().contains("--nats-user"), "{no_user}");
        let empty = nats_security(NatsSettings {
            user: Some("u".into()),
            password: Some(String::new()),
            ..NatsSettings::default()
        })
        .expect_err("empty");
        assert!(empty.to_string().contains("empty"), "{empty}");
        let user = nats_security(NatsSettings {
            user: Some("u".into()),
            password: Some("nats-s3cret".into()),
            ..NatsSettings::default()
        })
        .expect("user");
        assert!(!format!("{user:?}").contains("nats-s3cret"), "{user:?}");
    }

    #[test]
    fn the_metrics_listener_is_off_by_default_and_flag_env_file_set_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("ex.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.2:7070\"\ncontrol_plane = \"http://127.0.0.1:7000\"\ndata_dir = \"/tmp/e\"\nmetrics_listen = \"127.0.0.2:9464\"\nlog_format = \"json\"\n",
        )
        .expect("write");
        let base = [
            "wharf-executor",
            "--listen",
            "127.0.0.2:7070",
            "--control-plane",
            "http://127.0.0.1:7000",
            "--data-dir",
            "/tmp/e",
        ];
        let plain = Cli::try_parse_from(base)
            .expect("parses")
            .build()
            .expect("builds");
        assert_eq!(plain.metrics_listen, None);
        assert_eq!(plain.log_format, wharf::telemetry::LogFormat::Text);
        let path = file.to_str().expect("utf8");
        let from_file = Cli::try_parse_from(["wharf-executor", "--config", path])
            .expect("parses")
            .build()
            .expect("builds");
        assert_eq!(
            from_file.metrics_listen.map(|a| a.to_string()).as_deref(),
            Some("127.0.0.2:9464")
        );
        assert_eq!(from_file.log_format, wharf::telemetry::LogFormat::Json);
        let off = Cli::try_parse_from([
            "wharf-executor",
            "--config",
            path,
            "--metrics-listen",
            "off",
        ])
        .expect("parses")
        .build()
        .expect("builds");
        assert_eq!(off.metrics_listen, None, "the flag wins over the file");
        let Err(err) =
            Cli::try_parse_from(base.iter().copied().chain(["--metrics-listen", "9464"]))
                .expect("parses")
                .build()
        else {
            panic!("a port without an address is refused");
        };
        assert!(err.to_string().contains("--metrics-listen"), "{err}");
        let Err(err) = Cli::try_parse_from(base.iter().copied().chain(["--log-format", "xml"]))
            .expect("parses")
            .build()
        else {
            panic!("an unknown log format is refused");
        };
        assert!(
            err.to_string().contains("--log-format") && err.to_string().contains("xml"),
            "{err}"
        );
    }

    #[test]
    fn several_control_plane_urls_are_accepted_and_a_bad_one_is_named() {
        let args = |urls: &'static str| {
            [
                "wharf-executor",
                "--listen",
                "127.0.0.2:7070",
                "--control-plane",
                urls,
                "--data-dir",
                "/tmp/e",
            ]
        };
        let ok = Cli::try_parse_from(args("http://10.0.0.1:7000, http://10.0.0.2:7000"))
            .expect("parses")
            .build()
            .expect("a list of URLs builds");
        assert_eq!(
            ok.control_plane,
            "http://10.0.0.1:7000, http://10.0.0.2:7000"
        );

        let Err(err) = Cli::try_parse_from(args("http://10.0.0.1:7000,10.0.0.2:7000"))
            .expect("parses")
            .build()
        else {
            panic!("an entry without a scheme is refused");
        };
        let text = err.to_string();
        assert!(
            text.contains("--control-plane") && text.contains("\"10.0.0.2:7000\""),
            "{text}"
        );
    }
}
