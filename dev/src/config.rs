//! Settings of the `wharf-dev` binary: the control plane's flags that make sense on one
//! machine, plus the example and the test-plugin opt-in, from flags, `WHARF_*`
//! environment variables and an optional TOML file (`--config FILE`). Precedence: flag >
//! environment > file > default (`wharf::config`). Documented in docs/configuration.md.

use std::net::SocketAddr;

use clap::Parser;
use clap::builder::BoolishValueParser;
use serde::Deserialize;
use wharf::config::flags::{ConfigFileArgs, Observability, ObservabilityArgs, ObservabilityFile};
use wharf::config::layer;
use wharf_control_plane::app::Config;
use wharf_control_plane::flags::{ServerArgs, ServerFile};

/// Wharf in dev mode: a control plane and an executor with the built-in plugins
/// (file-source, file-sink, postgres-audit, sqlite-audit, rabbitmq-sink) in one process,
/// on the embedded store and the embedded record log; nothing to install. Not for
/// production: run wharf-control-plane and wharf-executor there.
///
/// Every option can also be set by its WHARF_* environment variable or in the TOML file
/// given with --config (keys as the flag names with '_' for '-'). Precedence: flag >
/// environment > file > default. See docs/configuration.md.
#[derive(Parser, Debug)]
#[command(name = "wharf-dev", version)]
pub struct Args {
    /// `--config`.
    #[command(flatten)]
    pub config: ConfigFileArgs,
    /// `--listen`, `--data-dir`, `--lease-ms`, `--heartbeat-interval-ms`, `--rest-listen`
    /// (every listener loopback only).
    #[command(flatten)]
    pub server: ServerArgs,
    /// Accepted and ignored: `wharf-control-plane --dev` became this binary.
    #[arg(long, hide = true)]
    pub dev: bool,
    /// Create the quickstart example if it is missing: the SQLite database
    /// DATA_DIR/example/shop.db (tables customers and orders), a `sqlite-audit`
    /// connector `shop-audit` on it and a `file-sink` connector `shop-sink` writing
    /// DATA_DIR/example/audit.jsonl. [default: false]
    #[arg(long, env = "WHARF_EXAMPLE", value_parser = BoolishValueParser::new())]
    pub example: bool,
    /// The in-process executor also offers the fault-injecting test plugins test-source
    /// and test-sink (for tests only). `--enable-test-plugins` alone means true.
    /// [default: false]
    #[arg(
        long,
        env = "WHARF_ENABLE_TEST_PLUGINS",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new()
    )]
    pub enable_test_plugins: Option<bool>,
    /// Config providers the in-process executor offers to connector configs, as
    /// `wharf-executor --config-providers`: `file`, `directory`, `env`
    /// (docs/configuration.md, "Config providers"). [default: none]
    #[arg(long, env = "WHARF_CONFIG_PROVIDERS", value_name = "NAME[,NAME...]")]
    pub config_providers: Option<String>,
    /// Directory the file and directory providers read under, as `wharf-executor
    /// --config-provider-root`; keep it outside the data dir, which the file plugins may
    /// read.
    #[arg(long, env = "WHARF_CONFIG_PROVIDER_ROOT", value_name = "DIR")]
    pub config_provider_root: Option<std::path::PathBuf>,
    /// Admit executors on their own embedded record logs beside the in-process one (each
    /// keeps its own records; for tests of placement, never for data), as
    /// `wharf-control-plane --allow-separate-embedded-logs`. [default: false]
    #[arg(
        long,
        env = "WHARF_ALLOW_SEPARATE_EMBEDDED_LOGS",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new(),
        hide = true
    )]
    pub allow_separate_embedded_logs: Option<bool>,
    /// `--metrics-listen`, `--log-format`, `--otlp-endpoint`.
    #[command(flatten)]
    pub observability: ObservabilityArgs,
}

/// REST gateway address of `wharf-dev` when `--rest-listen` is not given (Kafka
/// Connect's port).
pub const DEV_REST_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8083);

/// Metrics listener address of `wharf-dev` when `--metrics-listen` is not given (the
/// port conventionally used by OpenTelemetry's Prometheus exporter).
pub const DEV_METRICS_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9464);

/// The `--config` file: every key optional; unknown keys are an error.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `listen`, `data_dir`, `lease_ms`, `heartbeat_interval_ms`, `rest_listen`.
    #[serde(flatten)]
    pub server: ServerFile,
    /// Accepted as `--dev` (a `wharf-control-plane --dev` file works unchanged); `false`
    /// is refused, since this binary is dev mode.
    pub dev: Option<bool>,
    /// See `--example`.
    pub example: Option<bool>,
    /// See `--enable-test-plugins`.
    pub enable_test_plugins: Option<bool>,
    /// See `--config-providers`.
    pub config_providers: Option<String>,
    /// See `--config-provider-root`.
    pub config_provider_root: Option<std::path::PathBuf>,
    /// `metrics_listen`, `log_format`, `otlp_endpoint`.
    #[serde(flatten)]
    pub observability: ObservabilityFile,
}

/// What the binary runs.
#[derive(Debug)]
pub struct Settings {
    /// The control plane's settings (its data dir is the dev data dir).
    pub config: Config,
    /// Create the quickstart example.
    pub example: bool,
    /// The in-process executor also offers `test-source` / `test-sink`.
    pub enable_test_plugins: bool,
    /// The config providers of the in-process executor.
    pub config_providers: wharf_executor::providers::ConfigProviders,
    /// Metrics listener (`metrics_defaulted`: a failed bind is logged, not fatal), log
    /// format and span export.
    pub observability: Observability,
}

/// Why the settings could not be assembled (shared by every binary).
pub type ConfigError = wharf::config::SettingsError;

impl Args {
    /// Merges flags/env (already merged by clap), the `--config` file and the defaults;
    /// destructures both sources so that no option can be ignored.
    ///
    /// # Errors
    /// [`ConfigError`].
    pub fn build(self) -> Result<Settings, ConfigError> {
        let Args {
            config,
            server,
            dev: _,
            example,
            enable_test_plugins,
            config_providers,
            config_provider_root,
            allow_separate_embedded_logs,
            observability,
        } = self;
        let FileConfig {
            server: file_server,
            dev: file_dev,
            example: file_example,
            enable_test_plugins: file_enable_test_plugins,
            config_providers: file_config_providers,
            config_provider_root: file_config_provider_root,
            observability: file_observability,
        } = config.read()?;
        if file_dev == Some(false) {
            return Err(ConfigError::Invalid {
                field: "dev",
                reason: "wharf-dev always runs dev mode; drop `dev = false` from the file (run wharf-control-plane and wharf-executor for production)".into(),
            });
        }
        let server = server.layer(file_server, Some(DEV_REST_LISTEN))?;
        let observability = observability.layer(file_observability, Some(DEV_METRICS_LISTEN))?;
        // Dev mode has no TLS and no admin authentication: anyone who reached a
        // non-loopback address would be an admin and could act as an executor.
        for (field, addr) in [
            ("listen", Some(server.listen)),
            ("rest-listen", server.rest_listen),
            ("metrics-listen", observability.metrics_listen),
        ] {
            if let Some(addr) = addr {
                loopback_only(field, addr)?;
            }
        }
        Ok(Settings {
            config: Config {
                rest_listen: server.rest_listen,
                // Only the default address may be taken (parallel dev runs); an
                // asked-for one must bind.
                rest_optional: server.rest_defaulted,
                separate_embedded_logs: allow_separate_embedded_logs.unwrap_or(false),
                // Dev mode is loopback-only and open: every caller is `anonymous`, admin.
                auth: Default::default(),
                listen: server.listen,
                data_dir: server.data_dir,
                lease: server.lease,
                // Dev mode is loopback, no certificates (docs/security.md): a
                // non-loopback --listen is refused like a plaintext control plane's.
                tls: None,
            },
            example: example || file_example.unwrap_or(false),
            enable_test_plugins: layer(enable_test_plugins, file_enable_test_plugins, || false),
            config_providers: wharf_executor::providers::ConfigProviders::parse(
                &config_providers
                    .or(file_config_providers)
                    .unwrap_or_default(),
                config_provider_root
                    .or(file_config_provider_root)
                    .as_deref(),
            )
            .map_err(|(field, reason)| ConfigError::Invalid { field, reason })?,
            observability,
        })
    }
}

/// Refuses a non-loopback address for `field`: every wharf-dev listener is plaintext
/// and unauthenticated (docs/security.md).
fn loopback_only(field: &'static str, addr: SocketAddr) -> Result<(), ConfigError> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    Err(ConfigError::Invalid {
        field,
        reason: format!(
            "{addr} is not a loopback address; wharf-dev serves only loopback (no TLS, no authentication). For other hosts run wharf-control-plane and wharf-executor with --tls-* (docs/security.md)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wharf_control_plane::app;

    fn parse(args: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("wharf-dev").chain(args.iter().copied()))
            .expect("flags parse")
    }

    #[test]
    fn a_negative_number_is_refused_naming_its_flag() {
        wharf::config::assert_negative_numbers_name_their_flag::<Args>(
            "wharf-dev",
            &["--lease-ms", "--heartbeat-interval-ms"],
        );
    }

    #[test]
    fn test_plugins_are_off_by_default_and_the_flag_wins_over_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("dev.toml");
        std::fs::write(&file, "data_dir = \"/tmp/x\"\nenable_test_plugins = true\n")
            .expect("write");
        let path = file.to_str().expect("utf8");
        let default = parse(&["--data-dir", "/tmp/x"]).build().expect("builds");
        assert!(!default.enable_test_plugins);
        let from_file = parse(&["--config", path]).build().expect("builds");
        assert!(from_file.enable_test_plugins);
        let flag_off = parse(&["--config", path, "--enable-test-plugins=false"])
            .build()
            .expect("builds");
        assert!(!flag_off.enable_test_plugins);
        let flag_on = parse(&["--data-dir", "/tmp/x", "--enable-test-plugins"])
            .build()
            .expect("builds");
        assert!(flag_on.enable_test_plugins);
    }

    #[test]
    fn the_old_dev_flag_is_accepted_and_the_file_fills_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("dev.toml");
        std::fs::write(
            &file,
            "data_dir = \"/tmp/x\"\nexample = true\nlease_ms = 5000\n",
        )
        .expect("write");
        let s = parse(&["--dev", "--config", file.to_str().expect("utf8")])
            .build()
            .expect("builds");
        assert!(s.example);
        assert_eq!(s.config.lease.lease_ms, 5000);
        assert_eq!(s.config.listen, app::DEFAULT_LISTEN);
    }

    #[test]
    fn missing_data_dir_says_how_to_set_it() {
        let err = parse(&[]).build().expect_err("missing");
        assert!(err.to_string().contains("--data-dir"), "{err}");
    }

    #[test]
    fn every_listener_of_dev_mode_is_loopback_only() {
        for flag in ["--rest-listen", "--metrics-listen"] {
            let err = parse(&["--data-dir", "/tmp/x", flag, "0.0.0.0:9420"])
                .build()
                .expect_err(flag);
            let text = err.to_string();
            assert!(
                text.contains(&flag[2..]) && !text.contains("--insecure"),
                "{text}"
            );
            assert!(
                parse(&["--data-dir", "/tmp/x", flag, "127.0.0.1:9420"])
                    .build()
                    .is_ok()
            );
        }
    }

    #[test]
    fn a_non_loopback_listen_is_refused_naming_the_production_binaries() {
        let err = parse(&["--data-dir", "/tmp/x", "--listen", "0.0.0.0:7000"])
            .build()
            .expect_err("dev mode is loopback only");
        let text = err.to_string();
        assert!(
            text.contains("listen") && text.contains("wharf-control-plane"),
            "{text}"
        );
        assert!(
            !text.contains("--insecure"),
            "no flag wharf-dev lacks: {text}"
        );
    }
}
