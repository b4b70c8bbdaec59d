//! Settings of the `wharf-control-plane` binary, from flags, `WHARF_*` environment
//! variables and an optional TOML file (`--config FILE`). Precedence: flag > environment >
//! file > default. Every option is documented in `docs/configuration.md`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use clap::builder::BoolishValueParser;
use serde::Deserialize;
use wharf::config::{layer, read_file, required};
use wharf_control_plane::app::{self, Config};
use wharf_control_plane::auth::AuthSettings;
use wharf_control_plane::model::{
    AuditRetention, DEFAULT_AUDIT_MAX_AGE_DAYS, DEFAULT_AUDIT_MAX_ENTRIES,
};
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
#[command(
    name = "wharf-control-plane",
    version,
    args_conflicts_with_subcommands = true
)]
pub struct Args {
    /// A subcommand instead of running the control plane.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// TOML file with settings (keys: listen, data_dir, lease_ms, heartbeat_interval_ms,
    /// store, etcd_endpoints, etcd_prefix, etcd_election_ttl_secs, advertise, rest_listen,
    /// admin_tokens, insecure, audit_max_entries, audit_max_age_days, metrics_listen,
    /// log_format, otlp_endpoint, tls_cert, tls_key, tls_ca).
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
    /// TOML file of admin bearer tokens (name = { role, hash }; make lines with the
    /// `token` subcommand). Reloaded when it changes, without a restart. Without it (and
    /// without client certificates) the admin API has no authentication: every caller is
    /// `anonymous` with role admin, allowed only on a loopback listen address. See
    /// docs/security.md.
    #[arg(long, env = "WHARF_ADMIN_TOKENS", value_name = "FILE")]
    pub admin_tokens: Option<PathBuf>,
    /// Allow a non-loopback listen address without any admin authentication (anyone who
    /// reaches it is an admin). Warns at start. [default: false]
    #[arg(
        long,
        env = "WHARF_INSECURE",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new()
    )]
    pub insecure: Option<bool>,
    /// Most audit trail entries kept; the oldest are removed beyond it. [default: 100000]
    #[arg(long, env = "WHARF_AUDIT_MAX_ENTRIES", value_name = "N")]
    pub audit_max_entries: Option<u64>,
    /// Audit trail entries older than this many days are removed. [default: 90]
    #[arg(long, env = "WHARF_AUDIT_MAX_AGE_DAYS", value_name = "DAYS")]
    pub audit_max_age_days: Option<u32>,
    /// Address of the Kafka Connect REST gateway (HTTP/1.1: Kafka Connect's routes, JSON
    /// and status codes over the same admin logic as gRPC; see docs/rest.md), IP:PORT;
    /// port 0 picks one and writes it to <data-dir>/rest.addr. `off` for none.
    /// [default: off; `wharf-dev` turns it on at 127.0.0.1:8083]
    #[arg(long, env = "WHARF_REST_LISTEN", value_name = "IP:PORT|off")]
    pub rest_listen: Option<String>,
    /// Address of the metrics listener (plain HTTP: Prometheus text at /metrics, KIP-1017
    /// health at /health, /ready; names, states and counts only, see
    /// docs/observability.md), IP:PORT, or `off`. [default: off; `wharf-dev` turns it on
    /// at 127.0.0.1:9464]
    #[arg(long, env = "WHARF_METRICS_LISTEN", value_name = "IP:PORT|off")]
    pub metrics_listen: Option<String>,
    /// How log events are written to stderr: `text` (one readable line each) or `json`
    /// (one JSON object per line with the span fields; docs/observability.md).
    /// [default: text]
    #[arg(long, env = "WHARF_LOG_FORMAT", value_name = "text|json")]
    pub log_format: Option<String>,
    /// OTLP/gRPC endpoint to export traces to, for example http://127.0.0.1:4317 (an
    /// OpenTelemetry Collector): every admin call and deletion round is a span, carried
    /// to executors in `traceparent` (docs/observability.md). [default: none, nothing is
    /// exported]
    #[arg(long, env = "WHARF_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,

    // ---- transport security (docs/security.md) ----
    /// PEM certificate of this control plane (identity spiffe://wharf/control-plane; make
    /// one with `wharf-control-plane certs`). With --tls-key and --tls-ca: every listener
    /// and client speaks TLS, executors must present their certificates. Reloaded when
    /// the file changes.
    #[arg(long, env = "WHARF_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "WHARF_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// PEM cluster CA: executors' and admin clients' certificates must chain to it.
    #[arg(long, env = "WHARF_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
}

/// Subcommands of `wharf-control-plane`.
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Mints an admin bearer token. Prints the token file line (name, role, SHA-256 of
    /// the token) on stdout, to append to the --admin-tokens file, and the token itself
    /// on stderr, once: only its hash is ever stored.
    Token {
        /// The principal's name (A-Z a-z 0-9 . _ @ -), as it appears in the audit trail.
        #[arg(long)]
        name: String,
        /// viewer, operator or admin.
        #[arg(long)]
        role: wharf_control_plane::auth::Role,
    },
    /// Make certificates with no openssl: a cluster CA, then a certificate per control
    /// plane, executor and admin client (see docs/security.md).
    Certs {
        /// What to make.
        #[command(subcommand)]
        what: CertsCommand,
    },
}

/// `wharf-control-plane certs ...`.
#[derive(clap::Subcommand, Debug)]
pub enum CertsCommand {
    /// A new cluster CA: <dir>/ca.pem and <dir>/ca.key (keep ca.key offline).
    Init {
        /// Directory of the CA and the certificates.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
    },
    /// <dir>/control-plane.pem|.key (identity spiffe://wharf/control-plane).
    ControlPlane {
        /// Directory of the CA.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// Host names or IP addresses executors and clients dial, besides localhost,
        /// 127.0.0.1 and ::1 (comma-separated).
        #[arg(long, value_name = "HOSTS", value_delimiter = ',')]
        host: Vec<String>,
    },
    /// <dir>/executor-<id>.pem|.key (identity spiffe://wharf/executor/<id>).
    Executor {
        /// Directory of the CA.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// The executor id (its --executor-id).
        #[arg(long, value_name = "ID")]
        id: String,
        /// Host names or IP addresses of its advertised address (comma-separated).
        #[arg(long, value_name = "HOSTS", value_delimiter = ',')]
        host: Vec<String>,
    },
    /// <dir>/admin-<name>.pem|.key (identity spiffe://wharf/role/<role>/<name>).
    Admin {
        /// Directory of the CA.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// Name recorded as the principal.
        #[arg(long, value_name = "NAME")]
        name: String,
        /// viewer, operator or admin.
        #[arg(long, value_name = "ROLE")]
        role: String,
    },
}

/// Runs a `certs` subcommand; prints the files written.
///
/// # Errors
/// A message for the operator.
pub fn run_certs(what: CertsCommand) -> Result<(), String> {
    use wharf::identity::{AdminRole, Identity};
    let issued = match what {
        CertsCommand::Init { dir } => wharf::certs::init_ca(&dir),
        CertsCommand::ControlPlane { dir, host } => {
            wharf::certs::issue(&dir, &Identity::ControlPlane, &host)
        }
        CertsCommand::Executor { dir, id, host } => {
            let identity = Identity::Executor(id);
            Identity::parse_uri(
                &identity.to_uri(wharf::identity::DEFAULT_TRUST_DOMAIN),
                wharf::identity::DEFAULT_TRUST_DOMAIN,
            )
            .map_err(|e| format!("--id: {e}"))?;
            wharf::certs::issue(&dir, &identity, &host)
        }
        CertsCommand::Admin { dir, name, role } => {
            let role = AdminRole::parse(&role).map_err(|e| format!("--role: {e}"))?;
            wharf::certs::issue(&dir, &Identity::Admin { role, name }, &[])
        }
    }
    .map_err(|e| e.to_string())?;
    println!("{}\n{}", issued.cert.display(), issued.key.display());
    Ok(())
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
    /// See `--admin-tokens`.
    pub admin_tokens: Option<PathBuf>,
    /// See `--insecure`.
    pub insecure: Option<bool>,
    /// See `--audit-max-entries`.
    pub audit_max_entries: Option<u64>,
    /// See `--audit-max-age-days`.
    pub audit_max_age_days: Option<u32>,
    /// See `--metrics-listen`.
    pub metrics_listen: Option<String>,
    /// See `--log-format`.
    pub log_format: Option<String>,
    /// See `--otlp-endpoint`.
    pub otlp_endpoint: Option<String>,
    /// See `--tls-cert`.
    pub tls_cert: Option<PathBuf>,
    /// See `--tls-key`.
    pub tls_key: Option<PathBuf>,
    /// See `--tls-ca`.
    pub tls_ca: Option<PathBuf>,
}

/// What the binary runs.
#[derive(Debug)]
pub struct Settings {
    /// The control plane's settings.
    pub config: Config,
    /// The state store backend.
    pub store: app::StoreOptions,
    /// Where the metrics listener binds, `None` for none.
    pub metrics_listen: Option<SocketAddr>,
    /// How log events are written.
    pub log_format: wharf::telemetry::LogFormat,
    /// Where spans are exported (OTLP/gRPC), `None` for nowhere.
    pub otlp_endpoint: Option<String>,
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
            command: _,
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
            admin_tokens,
            insecure,
            audit_max_entries,
            audit_max_age_days,
            metrics_listen,
            log_format,
            otlp_endpoint,
            tls_cert,
            tls_key,
            tls_ca,
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
            admin_tokens: file_admin_tokens,
            insecure: file_insecure,
            audit_max_entries: file_audit_max_entries,
            audit_max_age_days: file_audit_max_age_days,
            metrics_listen: file_metrics_listen,
            log_format: file_log_format,
            otlp_endpoint: file_otlp_endpoint,
            tls_cert: file_tls_cert,
            tls_key: file_tls_key,
            tls_ca: file_tls_ca,
        } = read_file(config.as_deref())?;
        let tls = wharf::tls::TlsFiles::from_parts(
            tls_cert.or(file_tls_cert),
            tls_key.or(file_tls_key),
            tls_ca.or(file_tls_ca),
        )
        .map_err(|e| ConfigError::Invalid {
            field: "tls",
            reason: e.to_string(),
        })?;
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
        let rest_listen =
            wharf::config::optional_addr("rest-listen", rest_listen.or(file_rest_listen))?;
        let metrics_listen =
            wharf::config::optional_addr("metrics-listen", metrics_listen.or(file_metrics_listen))?;
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
                auth: AuthSettings {
                    admin_tokens: admin_tokens.or(file_admin_tokens),
                    // Set by the TLS settings once client certificates are verified.
                    client_certs: false,
                    insecure: layer(insecure, file_insecure, || false),
                    audit_retention: AuditRetention {
                        max_entries: layer(audit_max_entries, file_audit_max_entries, || {
                            DEFAULT_AUDIT_MAX_ENTRIES
                        }),
                        max_age_days: layer(audit_max_age_days, file_audit_max_age_days, || {
                            DEFAULT_AUDIT_MAX_AGE_DAYS
                        }),
                    },
                },
                tls,
            },
            store,
            metrics_listen,
            log_format: wharf::config::parsed("log-format", log_format.or(file_log_format))?
                .unwrap_or_default(),
            otlp_endpoint: otlp_endpoint.or(file_otlp_endpoint),
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
            command: None,
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
            admin_tokens: None,
            insecure: None,
            audit_max_entries: None,
            audit_max_age_days: None,
            metrics_listen: None,
            log_format: None,
            otlp_endpoint: None,
            tls_cert: None,
            tls_key: None,
            tls_ca: None,
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

    #[test]
    fn the_metrics_listener_is_off_by_default_and_the_flag_wins() {
        let plain = parse(&["--data-dir", "/tmp/x"]).build().expect("builds");
        assert_eq!(plain.metrics_listen, None);
        let given = parse(&["--data-dir", "/tmp/x", "--metrics-listen", "127.0.0.1:0"])
            .build()
            .expect("builds");
        assert_eq!(given.metrics_listen.map(|a| a.port()), Some(0));
        let err = parse(&["--data-dir", "/tmp/x", "--metrics-listen", "9464"])
            .build()
            .expect_err("not IP:PORT");
        assert!(err.to_string().contains("metrics-listen"), "{err}");
    }
}
