//! Settings of the `wharf-control-plane` binary, from flags, `WHARF_*` environment
//! variables and an optional TOML file (`--config FILE`). Precedence: flag > environment >
//! file > default. Every option is documented in `docs/configuration.md`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Parser;
use clap::builder::BoolishValueParser;
use serde::Deserialize;
use wharf_control_plane::app::{self, Config};
use wharf_control_plane::reconcile::LeaseConfig;

/// Default admin/registry listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7000";
/// REST gateway address of `--dev` when `--rest-listen` is not given (Kafka Connect's
/// port).
pub const DEV_REST_LISTEN: &str = "127.0.0.1:8083";

/// Wharf control plane: stores connector configs and state, assigns connector instances
/// and tasks to executors, runs deletions to completion (stop with connector_deleted =
/// true on every task's executor), and serves the ConnectorAdmin and ExecutorRegistry
/// gRPC services (with reflection, so grpcurl works).
///
/// Every option can also be set by its WHARF_* environment variable or in the TOML file
/// given with --config (keys as the flag names with '_' for '-'). Precedence: flag >
/// environment > file > default. See docs/configuration.md.
#[derive(Parser, Debug)]
#[command(name = "wharf-control-plane", version)]
pub struct Args {
    /// TOML file with settings (keys: listen, data_dir, lease_ms, heartbeat_interval_ms,
    /// dev, example, store, etcd_endpoints, etcd_prefix, etcd_election_ttl_secs, advertise,
    /// enable_test_plugins, rest_listen).
    #[arg(long, env = "WHARF_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on, IP:PORT (port 0 picks a free port; the bound address is
    /// written to <data-dir>/listen.addr). [default: 127.0.0.1:7000]
    #[arg(long, env = "WHARF_LISTEN", value_name = "IP:PORT")]
    pub listen: Option<SocketAddr>,
    /// Directory for the embedded store (state.redb), its encryption key (store.key)
    /// and listen.addr. Created if missing. Required (flag, env or file).
    #[arg(long, env = "WHARF_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Executor lease in milliseconds: an executor without a heartbeat for this long is
    /// marked lost and its work moves. [default: 10000]
    #[arg(long, env = "WHARF_LEASE_MS", value_name = "MS")]
    pub lease_ms: Option<u32>,
    /// Heartbeat interval handed to executors, in milliseconds (shorter than the lease).
    /// [default: 2000]
    #[arg(long, env = "WHARF_HEARTBEAT_INTERVAL_MS", value_name = "MS")]
    pub heartbeat_interval_ms: Option<u32>,
    /// Development mode: also run an executor with the built-in plugins in this process
    /// (file-source, file-sink, postgres-audit, sqlite-audit; embedded store, embedded
    /// record log; nothing to install). Its data lives in <data-dir>/dev-executor.
    /// [default: false]
    #[arg(long, env = "WHARF_DEV", value_parser = BoolishValueParser::new())]
    pub dev: bool,
    /// With --dev: create the quickstart example if it is missing: the SQLite database
    /// <data-dir>/example/shop.db (tables customers and orders), a `sqlite-audit`
    /// connector `shop-audit` on it and a `file-sink` connector `shop-sink` writing
    /// <data-dir>/example/audit.jsonl. [default: false]
    #[arg(long, env = "WHARF_EXAMPLE", requires = "dev", value_parser = BoolishValueParser::new())]
    pub example: bool,
    /// State store backend: `redb` (embedded file in the data dir, one replica) or `etcd`
    /// (shared by several replicas; one is elected leader and runs the herder, the others
    /// serve reads and forward the rest to it). See docs/state.md. [default: redb]
    #[arg(long, env = "WHARF_STORE", value_name = "redb|etcd")]
    pub store: Option<String>,
    /// With --store etcd: comma-separated etcd client URLs, e.g.
    /// http://10.0.0.1:2379,http://10.0.0.2:2379.
    #[arg(
        long,
        env = "WHARF_ETCD_ENDPOINTS",
        value_name = "URLS",
        value_delimiter = ','
    )]
    pub etcd_endpoints: Vec<String>,
    /// With --store etcd: key prefix of this cluster's state. [default: /wharf/]
    #[arg(long, env = "WHARF_ETCD_PREFIX", value_name = "PREFIX")]
    pub etcd_prefix: Option<String>,
    /// With --store etcd: TTL of the leader election lease, in seconds; a killed leader
    /// is replaced after at most about this long. [default: 10]
    #[arg(long, env = "WHARF_ETCD_ELECTION_TTL_SECS", value_name = "SECS")]
    pub etcd_election_ttl_secs: Option<u32>,
    /// With --store etcd: URL other replicas forward requests to when this one leads.
    /// [default: http://<bound address>]
    #[arg(long, env = "WHARF_ADVERTISE", value_name = "URL")]
    pub advertise: Option<String>,
    /// With --dev: the in-process executor also offers the fault-injecting test plugins
    /// test-source and test-sink (for tests only; ignored without --dev).
    /// `--enable-test-plugins` alone means true. [default: false]
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
    /// Address of the Kafka Connect REST gateway (HTTP/1.1: Kafka Connect's routes, JSON
    /// and status codes over the same admin logic as gRPC; see docs/rest.md), IP:PORT;
    /// port 0 picks one and writes it to <data-dir>/rest.addr. `off` for none.
    /// [default: off; with --dev 127.0.0.1:8083]
    #[arg(long, env = "WHARF_REST_LISTEN", value_name = "IP:PORT|off")]
    pub rest_listen: Option<String>,
}

/// The `--config` file: every key optional; unknown keys are an error (a typo must not be
/// silently ignored).
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
    /// See `--dev`.
    pub dev: Option<bool>,
    /// See `--example`.
    pub example: Option<bool>,
    /// See `--store`.
    pub store: Option<String>,
    /// See `--etcd-endpoints`.
    pub etcd_endpoints: Option<Vec<String>>,
    /// See `--etcd-prefix`.
    pub etcd_prefix: Option<String>,
    /// See `--etcd-election-ttl-secs`.
    pub etcd_election_ttl_secs: Option<u32>,
    /// See `--advertise`.
    pub advertise: Option<String>,
    /// See `--enable-test-plugins`.
    pub enable_test_plugins: Option<bool>,
    /// See `--rest-listen`.
    pub rest_listen: Option<String>,
}

/// What the binary runs.
#[derive(Debug)]
pub struct Settings {
    /// The control plane's settings.
    pub config: Config,
    /// Run the in-process executor too.
    pub dev: bool,
    /// Create the quickstart example (only with `dev`).
    pub example: bool,
    /// The state store backend.
    pub store: app::StoreOptions,
    /// With `dev`: the in-process executor also offers `test-source` / `test-sink`.
    pub enable_test_plugins: bool,
}

/// Why the settings could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The config file is not valid TOML for these settings.
    #[error("config file {path}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message (names the key and line).
        message: String,
    },
    /// A required setting is missing everywhere.
    #[error("missing setting {0}")]
    Missing(&'static str),
    /// A setting is set to an unusable value.
    #[error("invalid setting {field}: {reason}")]
    Invalid {
        /// The setting.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

/// Reads the TOML file at `path`.
///
/// # Errors
/// [`ConfigError::Read`], [`ConfigError::Parse`].
pub fn read_file(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

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
            dev,
            example,
            store,
            etcd_endpoints,
            etcd_prefix,
            etcd_election_ttl_secs,
            advertise,
            enable_test_plugins,
            rest_listen,
        } = self;
        let file = match &config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let FileConfig {
            listen: file_listen,
            data_dir: file_data_dir,
            lease_ms: file_lease_ms,
            heartbeat_interval_ms: file_heartbeat_interval_ms,
            dev: file_dev,
            example: file_example,
            store: file_store,
            etcd_endpoints: file_etcd_endpoints,
            etcd_prefix: file_etcd_prefix,
            etcd_election_ttl_secs: file_etcd_election_ttl_secs,
            advertise: file_advertise,
            enable_test_plugins: file_enable_test_plugins,
            rest_listen: file_rest_listen,
        } = file;
        let store = match store.or(file_store).as_deref() {
            None | Some("redb") => app::StoreOptions::Redb,
            Some("etcd") => {
                let endpoints = if etcd_endpoints.is_empty() {
                    file_etcd_endpoints.unwrap_or_default()
                } else {
                    etcd_endpoints
                };
                if endpoints.is_empty() {
                    return Err(ConfigError::Missing(
                        "etcd endpoints: --store etcd needs --etcd-endpoints URL[,URL...]",
                    ));
                }
                let election_ttl_secs = etcd_election_ttl_secs
                    .or(file_etcd_election_ttl_secs)
                    .unwrap_or(
                        wharf_control_plane::store::etcd_election::DEFAULT_ELECTION_TTL_SECS,
                    );
                if election_ttl_secs < 2 {
                    return Err(ConfigError::Invalid {
                        field: "etcd-election-ttl-secs",
                        reason: "must be at least 2 (etcd's shortest lease)".into(),
                    });
                }
                app::StoreOptions::Etcd {
                    etcd: wharf_control_plane::store::EtcdOptions {
                        endpoints,
                        prefix: etcd_prefix.or(file_etcd_prefix).unwrap_or_else(|| {
                            wharf_control_plane::store::DEFAULT_ETCD_PREFIX.into()
                        }),
                    },
                    election_ttl_secs,
                    advertise: advertise.or(file_advertise),
                }
            }
            Some(other) => {
                return Err(ConfigError::Invalid {
                    field: "store",
                    reason: format!("{other:?} is not a backend; use redb or etcd"),
                });
            }
        };
        if dev && matches!(store, app::StoreOptions::Etcd { .. }) {
            return Err(ConfigError::Invalid {
                field: "store",
                reason: "--dev runs on the embedded store; drop --store etcd".into(),
            });
        }
        let listen = match listen.or(file_listen) {
            Some(addr) => addr,
            None => DEFAULT_LISTEN.parse().map_err(|e| ConfigError::Invalid {
                field: "listen",
                reason: format!("{e}"),
            })?,
        };
        let data_dir = data_dir.or(file_data_dir).ok_or(ConfigError::Missing(
            "data dir: pass --data-dir DIR, set WHARF_DATA_DIR, or put data_dir = \"DIR\" in the --config file",
        ))?;
        let dev = dev || file_dev.unwrap_or(false);
        let example = example || file_example.unwrap_or(false);
        if example && !dev {
            return Err(ConfigError::Invalid {
                field: "example",
                reason: "the quickstart example needs --dev (it runs on the in-process executor)"
                    .into(),
            });
        }
        let rest_given = rest_listen.or(file_rest_listen);
        let rest_optional = rest_given.is_none();
        let rest_listen = match rest_given.as_deref() {
            Some("off") => None,
            Some(addr) => Some(addr.parse().map_err(|e| ConfigError::Invalid {
                field: "rest-listen",
                reason: format!("{addr:?} is not IP:PORT or off: {e}"),
            })?),
            None if dev => Some(DEV_REST_LISTEN.parse().map_err(|e| ConfigError::Invalid {
                field: "rest-listen",
                reason: format!("{e}"),
            })?),
            None => None,
        };
        Ok(Settings {
            config: Config {
                rest_listen,
                rest_optional,
                listen,
                data_dir,
                lease: LeaseConfig {
                    lease_ms: lease_ms.or(file_lease_ms).unwrap_or(app::DEFAULT_LEASE_MS),
                    heartbeat_interval_ms: heartbeat_interval_ms
                        .or(file_heartbeat_interval_ms)
                        .unwrap_or(app::DEFAULT_HEARTBEAT_INTERVAL_MS),
                },
            },
            dev,
            example,
            store,
            enable_test_plugins: enable_test_plugins
                .or(file_enable_test_plugins)
                .unwrap_or(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("wharf-control-plane").chain(args.iter().copied()))
            .expect("flags parse")
    }

    #[test]
    fn file_fills_what_flags_leave_and_flags_win() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("cp.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:7100\"\ndata_dir = \"/tmp/x\"\nlease_ms = 5000\n",
        )
        .expect("write");
        let settings = parse(&[
            "--config",
            file.to_str().expect("utf8"),
            "--lease-ms",
            "3000",
        ])
        .build()
        .expect("builds");
        assert_eq!(settings.config.listen.to_string(), "127.0.0.1:7100");
        assert_eq!(settings.config.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(settings.config.lease.lease_ms, 3000);
        assert_eq!(
            settings.config.lease.heartbeat_interval_ms,
            app::DEFAULT_HEARTBEAT_INTERVAL_MS
        );
    }

    #[test]
    fn unknown_key_in_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("cp.toml");
        std::fs::write(&file, "lease = 5000\n").expect("write");
        let err = parse(&[
            "--config",
            file.to_str().expect("utf8"),
            "--data-dir",
            "/tmp/x",
        ])
        .build()
        .expect_err("unknown key");
        assert!(err.to_string().contains("lease"), "{err}");
    }

    #[test]
    fn missing_data_dir_says_how_to_set_it() {
        let err = Args {
            config: None,
            listen: None,
            data_dir: None,
            lease_ms: None,
            heartbeat_interval_ms: None,
            dev: false,
            example: false,
            store: None,
            etcd_endpoints: Vec::new(),
            etcd_prefix: None,
            etcd_election_ttl_secs: None,
            advertise: None,
            enable_test_plugins: None,
            rest_listen: None,
        }
        .build()
        .expect_err("missing");
        assert!(err.to_string().contains("--data-dir"), "{err}");
    }

    #[test]
    fn test_plugins_are_off_by_default_and_the_flag_wins_over_the_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("cp.toml");
        std::fs::write(&file, "data_dir = \"/tmp/x\"\nenable_test_plugins = true\n")
            .expect("write");
        let path = file.to_str().expect("utf8");
        let default = parse(&["--data-dir", "/tmp/x", "--dev"])
            .build()
            .expect("builds");
        assert!(!default.enable_test_plugins);
        let from_file = parse(&["--config", path, "--dev"]).build().expect("builds");
        assert!(from_file.enable_test_plugins);
        let flag_off = parse(&["--config", path, "--dev", "--enable-test-plugins=false"])
            .build()
            .expect("builds");
        assert!(!flag_off.enable_test_plugins);
        let flag_on = parse(&["--data-dir", "/tmp/x", "--dev", "--enable-test-plugins"])
            .build()
            .expect("builds");
        assert!(flag_on.enable_test_plugins);
    }

    #[test]
    fn the_rest_gateway_is_off_by_default_on_8083_in_dev_mode_and_the_flag_wins() {
        let plain = parse(&["--data-dir", "/tmp/x"]).build().expect("builds");
        assert_eq!(plain.config.rest_listen, None);
        let dev = parse(&["--data-dir", "/tmp/x", "--dev"])
            .build()
            .expect("builds");
        assert_eq!(
            dev.config.rest_listen,
            Some(DEV_REST_LISTEN.parse().expect("addr"))
        );
        assert!(dev.config.rest_optional, "a default address may be taken");
        let off = parse(&["--data-dir", "/tmp/x", "--dev", "--rest-listen", "off"])
            .build()
            .expect("builds");
        assert_eq!(off.config.rest_listen, None);
        let given = parse(&["--data-dir", "/tmp/x", "--rest-listen", "127.0.0.1:0"])
            .build()
            .expect("builds");
        assert_eq!(given.config.rest_listen.map(|a| a.port()), Some(0));
        assert!(
            !given.config.rest_optional,
            "an asked-for address must bind"
        );
        let err = parse(&["--data-dir", "/tmp/x", "--rest-listen", "8083"])
            .build()
            .expect_err("not IP:PORT");
        assert!(err.to_string().contains("rest-listen"), "{err}");
    }
}
