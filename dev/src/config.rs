//! Settings of the `wharf-dev` binary: the control plane's flags that make sense on one
//! machine, plus the example and the test-plugin opt-in, from flags, `WHARF_*`
//! environment variables and an optional TOML file (`--config FILE`). Precedence: flag >
//! environment > file > default (`wharf::config`). Documented in docs/configuration.md.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use clap::builder::BoolishValueParser;
use serde::Deserialize;
use wharf::config::{layer, required};
use wharf_control_plane::app::{self, Config};
use wharf_control_plane::reconcile::LeaseConfig;

/// Wharf in dev mode: a control plane and an executor with the built-in plugins
/// (file-source, file-sink, postgres-audit, sqlite-audit) in one process, on the embedded
/// store and the embedded record log; nothing to install. Not for production: run
/// wharf-control-plane and wharf-executor there.
///
/// Every option can also be set by its WHARF_* environment variable or in the TOML file
/// given with --config (keys as the flag names with '_' for '-'). Precedence: flag >
/// environment > file > default. See docs/configuration.md.
#[derive(Parser, Debug)]
#[command(name = "wharf-dev", version)]
pub struct Args {
    /// TOML file with settings (keys: listen, data_dir, lease_ms, heartbeat_interval_ms,
    /// example, enable_test_plugins, rest_listen, metrics_listen, log_format).
    #[arg(long, env = "WHARF_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address of the admin API, IP:PORT (port 0 picks a free port; the bound address is
    /// written to <data-dir>/listen.addr). [default: 127.0.0.1:7000]
    #[arg(long, env = "WHARF_LISTEN", value_name = "IP:PORT")]
    pub listen: Option<SocketAddr>,
    /// Directory for the control plane's store and the executor's data (in
    /// <data-dir>/dev-executor). Created if missing. Required (flag, env or file).
    #[arg(long, env = "WHARF_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Executor lease in milliseconds. [default: 10000]
    #[arg(long, env = "WHARF_LEASE_MS", value_name = "MS")]
    pub lease_ms: Option<u32>,
    /// Heartbeat interval handed to the executor, in milliseconds (shorter than the
    /// lease). [default: 2000]
    #[arg(long, env = "WHARF_HEARTBEAT_INTERVAL_MS", value_name = "MS")]
    pub heartbeat_interval_ms: Option<u32>,
    /// Accepted and ignored: `wharf-control-plane --dev` became this binary.
    #[arg(long, hide = true)]
    pub dev: bool,
    /// Create the quickstart example if it is missing: the SQLite database
    /// <data-dir>/example/shop.db (tables customers and orders), a `sqlite-audit`
    /// connector `shop-audit` on it and a `file-sink` connector `shop-sink` writing
    /// <data-dir>/example/audit.jsonl. [default: false]
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
    /// Address of the Kafka Connect REST gateway (docs/rest.md), IP:PORT, or `off`.
    /// When not given and 127.0.0.1:8083 is taken, dev mode runs without it (and says so).
    /// [default: 127.0.0.1:8083]
    #[arg(long, env = "WHARF_REST_LISTEN", value_name = "IP:PORT|off")]
    pub rest_listen: Option<String>,
    /// Address of the metrics listener (Prometheus text at /metrics, /health, /ready;
    /// docs/observability.md), IP:PORT, or `off`. When not given and 127.0.0.1:9464 is
    /// taken, dev mode runs without it (and says so). [default: 127.0.0.1:9464]
    #[arg(long, env = "WHARF_METRICS_LISTEN", value_name = "IP:PORT|off")]
    pub metrics_listen: Option<String>,
    /// How log events are written to stderr: `text` (one readable line each) or `json`
    /// (one JSON object per line with the span fields; docs/observability.md).
    /// [default: text]
    #[arg(long, env = "WHARF_LOG_FORMAT", value_name = "text|json")]
    pub log_format: Option<String>,
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
    /// See `--listen`.
    pub listen: Option<SocketAddr>,
    /// See `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// See `--lease-ms`.
    pub lease_ms: Option<u32>,
    /// See `--heartbeat-interval-ms`.
    pub heartbeat_interval_ms: Option<u32>,
    /// Accepted as `--dev` (a `wharf-control-plane --dev` file works unchanged); `false`
    /// is refused, since this binary is dev mode.
    pub dev: Option<bool>,
    /// See `--example`.
    pub example: Option<bool>,
    /// See `--enable-test-plugins`.
    pub enable_test_plugins: Option<bool>,
    /// See `--rest-listen`.
    pub rest_listen: Option<String>,
    /// See `--metrics-listen`.
    pub metrics_listen: Option<String>,
    /// See `--log-format`.
    pub log_format: Option<String>,
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
    /// Where the metrics listener binds, `None` for none.
    pub metrics_listen: Option<SocketAddr>,
    /// How log events are written.
    pub log_format: wharf::telemetry::LogFormat,
    /// The metrics address is the default: a failed bind is logged, not fatal.
    pub metrics_optional: bool,
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
            listen,
            data_dir,
            lease_ms,
            heartbeat_interval_ms,
            dev: _,
            example,
            enable_test_plugins,
            rest_listen,
            metrics_listen,
            log_format,
        } = self;
        let FileConfig {
            listen: file_listen,
            data_dir: file_data_dir,
            lease_ms: file_lease_ms,
            heartbeat_interval_ms: file_heartbeat_interval_ms,
            dev: file_dev,
            example: file_example,
            enable_test_plugins: file_enable_test_plugins,
            rest_listen: file_rest_listen,
            metrics_listen: file_metrics_listen,
            log_format: file_log_format,
        } = wharf::config::read_file(config.as_deref())?;
        if file_dev == Some(false) {
            return Err(ConfigError::Invalid {
                field: "dev",
                reason: "wharf-dev always runs dev mode; drop `dev = false` from the file (run wharf-control-plane and wharf-executor for production)".into(),
            });
        }
        let listen = layer(listen, file_listen, || app::DEFAULT_LISTEN);
        // Dev mode has no TLS and no admin authentication: anyone who reached a
        // non-loopback address would be an admin and could act as an executor.
        loopback_only("listen", listen)?;
        let data_dir = required(
            data_dir,
            file_data_dir,
            ("--data-dir", "WHARF_DATA_DIR", "data_dir"),
        )?;
        let rest_given = rest_listen.or(file_rest_listen);
        // Only the default address may be taken (parallel dev runs); an asked-for one must bind.
        let rest_optional = rest_given.is_none();
        let rest_listen = listen_or_default("rest-listen", rest_given, DEV_REST_LISTEN)?;
        let metrics_given = metrics_listen.or(file_metrics_listen);
        let metrics_optional = metrics_given.is_none();
        let metrics_listen =
            listen_or_default("metrics-listen", metrics_given, DEV_METRICS_LISTEN)?;
        for (field, addr) in [
            ("rest-listen", rest_listen),
            ("metrics-listen", metrics_listen),
        ] {
            if let Some(addr) = addr {
                loopback_only(field, addr)?;
            }
        }
        Ok(Settings {
            config: Config {
                rest_listen,
                rest_optional,
                // Dev mode is loopback-only and open: every caller is `anonymous`, admin.
                auth: Default::default(),
                listen,
                data_dir,
                lease: LeaseConfig {
                    lease_ms: layer(lease_ms, file_lease_ms, || app::DEFAULT_LEASE_MS),
                    heartbeat_interval_ms: layer(
                        heartbeat_interval_ms,
                        file_heartbeat_interval_ms,
                        || app::DEFAULT_HEARTBEAT_INTERVAL_MS,
                    ),
                },
                // Dev mode is loopback, no certificates (docs/security.md): a
                // non-loopback --listen is refused like a plaintext control plane's.
                tls: None,
            },
            example: example || file_example.unwrap_or(false),
            enable_test_plugins: layer(enable_test_plugins, file_enable_test_plugins, || false),
            metrics_listen,
            metrics_optional,
            log_format: wharf::config::parsed("log-format", log_format.or(file_log_format))?
                .unwrap_or_default(),
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

/// An `IP:PORT|off` option with a default: `None` for `off`.
fn listen_or_default(
    field: &'static str,
    given: Option<String>,
    default: SocketAddr,
) -> Result<Option<SocketAddr>, ConfigError> {
    match given.as_deref() {
        Some("off") => Ok(None),
        Some(addr) => addr.parse().map(Some).map_err(|e| ConfigError::Invalid {
            field,
            reason: format!("{addr:?} is not IP:PORT or off: {e}"),
        }),
        None => Ok(Some(default)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("wharf-dev").chain(args.iter().copied()))
            .expect("flags parse")
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
