//! Settings of the `wharf-control-plane` binary, from flags, `WHARF_*` environment
//! variables and an optional TOML file (`--config FILE`). Precedence: flag > environment >
//! file > default. Every option is documented in `docs/configuration.md`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use serde::Deserialize;
use wharf::config::{layer, read_file, required};
use wharf_control_plane::app::{self, Config};
use wharf_control_plane::reconcile::LeaseConfig;

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
    /// store, etcd_endpoints, etcd_prefix, etcd_election_ttl_secs, advertise, rest_listen).
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
    /// Dev mode moved to the `wharf-dev` binary; this hidden flag only says so.
    #[arg(long, hide = true)]
    pub dev: bool,
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
    /// Address of the Kafka Connect REST gateway (HTTP/1.1: Kafka Connect's routes, JSON
    /// and status codes over the same admin logic as gRPC; see docs/rest.md), IP:PORT;
    /// port 0 picks one and writes it to <data-dir>/rest.addr. `off` for none.
    /// [default: off; `wharf-dev` turns it on at 127.0.0.1:8083]
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
    /// See `--rest-listen`.
    pub rest_listen: Option<String>,
}

/// What the binary runs.
#[derive(Debug)]
pub struct Settings {
    /// The control plane's settings.
    pub config: Config,
    /// The state store backend.
    pub store: app::StoreOptions,
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
            dev,
            store,
            etcd_endpoints,
            etcd_prefix,
            etcd_election_ttl_secs,
            advertise,
            rest_listen,
        } = self;
        if dev {
            return Err(ConfigError::Invalid {
                field: "dev",
                reason: "dev mode is its own binary now: run `wharf-dev` with the same flags (for example `wharf-dev --example --data-dir DIR`), see docs/quickstart.md".into(),
            });
        }
        let FileConfig {
            listen: file_listen,
            data_dir: file_data_dir,
            lease_ms: file_lease_ms,
            heartbeat_interval_ms: file_heartbeat_interval_ms,
            store: file_store,
            etcd_endpoints: file_etcd_endpoints,
            etcd_prefix: file_etcd_prefix,
            etcd_election_ttl_secs: file_etcd_election_ttl_secs,
            advertise: file_advertise,
            rest_listen: file_rest_listen,
        } = read_file(config.as_deref())?;
        let store = match store.or(file_store).as_deref() {
            None | Some("redb") => app::StoreOptions::Redb,
            Some("etcd") => {
                let endpoints = if etcd_endpoints.is_empty() {
                    file_etcd_endpoints.unwrap_or_default()
                } else {
                    etcd_endpoints
                };
                if endpoints.is_empty() {
                    return Err(ConfigError::Missing {
                        flag: "--etcd-endpoints",
                        env: "WHARF_ETCD_ENDPOINTS",
                        key: "etcd_endpoints",
                    });
                }
                let election_ttl_secs =
                    layer(etcd_election_ttl_secs, file_etcd_election_ttl_secs, || {
                        wharf_control_plane::store::etcd_election::DEFAULT_ELECTION_TTL_SECS
                    });
                if election_ttl_secs < 2 {
                    return Err(ConfigError::Invalid {
                        field: "etcd-election-ttl-secs",
                        reason: "must be at least 2 (etcd's shortest lease)".into(),
                    });
                }
                app::StoreOptions::Etcd {
                    etcd: wharf_control_plane::store::EtcdOptions {
                        endpoints,
                        prefix: layer(etcd_prefix, file_etcd_prefix, || {
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
        let listen = layer(listen, file_listen, || app::DEFAULT_LISTEN);
        let data_dir = required(
            data_dir,
            file_data_dir,
            ("--data-dir", "WHARF_DATA_DIR", "data_dir"),
        )?;
        let rest_listen = match rest_listen.or(file_rest_listen).as_deref() {
            None | Some("off") => None,
            Some(addr) => Some(addr.parse().map_err(|e| ConfigError::Invalid {
                field: "rest-listen",
                reason: format!("{addr:?} is not IP:PORT or off: {e}"),
            })?),
        };
        Ok(Settings {
            config: Config {
                rest_listen,
                rest_optional: false,
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
            },
            store,
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
            store: None,
            etcd_endpoints: Vec::new(),
            etcd_prefix: None,
            etcd_election_ttl_secs: None,
            advertise: None,
            rest_listen: None,
        }
        .build()
        .expect_err("missing");
        assert!(err.to_string().contains("--data-dir"), "{err}");
    }

    #[test]
    fn dev_says_where_dev_mode_went() {
        let err = parse(&["--data-dir", "/tmp/x", "--dev"])
            .build()
            .expect_err("--dev moved");
        assert!(err.to_string().contains("wharf-dev"), "{err}");
    }

    #[test]
    fn the_rest_gateway_is_off_by_default_and_the_flag_wins() {
        let plain = parse(&["--data-dir", "/tmp/x"]).build().expect("builds");
        assert_eq!(plain.config.rest_listen, None);
        let off = parse(&["--data-dir", "/tmp/x", "--rest-listen", "off"])
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
