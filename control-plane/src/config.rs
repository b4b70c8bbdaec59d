//! Settings of the `wharf-control-plane` binary, from flags, `WHARF_*` environment
//! variables and an optional TOML file (`--config FILE`). Precedence: flag > environment >
//! file > default. Every option is documented in `docs/configuration.md`.

use std::path::PathBuf;

use clap::Parser;
use clap::builder::BoolishValueParser;
use serde::Deserialize;
use wharf::config::flags::{
    ConfigFileArgs, ObservabilityArgs, ObservabilityFile, TlsArgs, TlsFile,
};
use wharf::config::layer;
use wharf_control_plane::app::{self, Config};
use wharf_control_plane::auth::AuthSettings;
use wharf_control_plane::flags::{ServerArgs, ServerFile};
use wharf_control_plane::model::{
    AuditRetention, DEFAULT_AUDIT_MAX_AGE_DAYS, DEFAULT_AUDIT_MAX_ENTRIES,
};
use wharf_control_plane::store::{EtcdTls, EtcdUser, Password};

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
    /// `--config`.
    #[command(flatten)]
    pub config: ConfigFileArgs,
    /// `--listen`, `--data-dir`, `--lease-ms`, `--heartbeat-interval-ms`, `--rest-listen`.
    #[command(flatten)]
    pub server: ServerArgs,
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
    #[arg(
        long,
        env = "WHARF_ETCD_ELECTION_TTL_SECS",
        value_name = "SECS",
        allow_negative_numbers = true
    )]
    pub etcd_election_ttl_secs: Option<u32>,
    /// With --store etcd: PEM file of the CA that signed etcd's server certificates.
    /// Required with https:// endpoints, refused with http:// ones.
    #[arg(long, env = "WHARF_ETCD_CACERT", value_name = "FILE")]
    pub etcd_cacert: Option<PathBuf>,
    /// With --store etcd: PEM client certificate for an etcd run with
    /// --client-cert-auth (with --etcd-key).
    #[arg(long, env = "WHARF_ETCD_CERT", value_name = "FILE")]
    pub etcd_cert: Option<PathBuf>,
    /// With --store etcd: PEM private key of --etcd-cert.
    #[arg(long, env = "WHARF_ETCD_KEY", value_name = "FILE")]
    pub etcd_key: Option<PathBuf>,
    /// With --store etcd: etcd user to authenticate as (etcd auth enabled); its
    /// password comes from --etcd-password-file or the WHARF_ETCD_PASSWORD variable.
    #[arg(long, env = "WHARF_ETCD_USER", value_name = "NAME")]
    pub etcd_user: Option<String>,
    /// With --etcd-user: file holding the password (one line; a trailing newline is
    /// ignored). Read once at start.
    #[arg(long, env = "WHARF_ETCD_PASSWORD_FILE", value_name = "FILE")]
    pub etcd_password_file: Option<PathBuf>,
    /// The WHARF_ETCD_PASSWORD variable (no flag: a flag shows in the process list).
    #[arg(skip = std::env::var("WHARF_ETCD_PASSWORD").ok().map(Password::new))]
    pub etcd_password_env: Option<Password>,
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
    /// Admit executors on embedded record logs beside each other. An embedded log is one
    /// executor's own files, so by default an executor on it is alone in its cluster;
    /// with this each keeps its own records and a sink sees only its executor's (for
    /// tests of placement and lifecycle, never for data). [default: false]
    #[arg(
        long,
        env = "WHARF_ALLOW_SEPARATE_EMBEDDED_LOGS",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = BoolishValueParser::new()
    )]
    pub allow_separate_embedded_logs: Option<bool>,
    /// Most audit trail entries kept; the oldest are removed beyond it. [default: 100000]
    #[arg(
        long,
        env = "WHARF_AUDIT_MAX_ENTRIES",
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub audit_max_entries: Option<u64>,
    /// Audit trail entries older than this many days are removed. [default: 90]
    #[arg(
        long,
        env = "WHARF_AUDIT_MAX_AGE_DAYS",
        value_name = "DAYS",
        allow_negative_numbers = true
    )]
    pub audit_max_age_days: Option<u32>,
    /// `--metrics-listen`, `--log-format`, `--otlp-endpoint`.
    #[command(flatten)]
    pub observability: ObservabilityArgs,
    /// `--tls-cert`, `--tls-key`, `--tls-ca` (docs/security.md).
    #[command(flatten)]
    pub tls: TlsArgs,
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
        /// 127.0.0.1 and ::1 (comma-separated; blanks around an entry are ignored).
        #[arg(long, value_name = "HOSTS", value_delimiter = ',')]
        host: Vec<String>,
    },
    /// <dir>/executor-<id>.pem|.key (identity spiffe://wharf/executor/<id>).
    Executor {
        /// Directory of the CA.
        #[arg(long, value_name = "DIR")]
        dir: PathBuf,
        /// The executor id (its --executor-id): 1 to 200 bytes from A-Z a-z 0-9 . _ -,
        /// not "." or "..".
        #[arg(long, value_name = "ID")]
        id: String,
        /// Host names or IP addresses of its advertised address (comma-separated; blanks
        /// around an entry are ignored).
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

/// Runs a subcommand instead of the control plane.
pub fn run_command(command: Command) -> std::process::ExitCode {
    match command {
        Command::Token { name, role } => wharf_control_plane::launch::mint(&name, role),
        Command::Certs { what } => match run_certs(what) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("wharf-control-plane certs: {e}");
                std::process::ExitCode::from(e.exit_code())
            }
        },
    }
}

/// Why a `certs` subcommand wrote nothing, or not everything.
#[derive(Debug)]
pub enum CertsFailure {
    /// A flag's value is unusable (exit code 2, as clap's usage errors); nothing written.
    BadFlag(String),
    /// Anything else: a message for the operator (exit code 1).
    Failed(String),
}

impl CertsFailure {
    /// The process's exit code.
    pub fn exit_code(&self) -> u8 {
        match self {
            CertsFailure::BadFlag(_) => wharf_control_plane::launch::EXIT_BAD_SETTINGS,
            CertsFailure::Failed(_) => 1,
        }
    }
}

impl std::fmt::Display for CertsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CertsFailure::BadFlag(m) | CertsFailure::Failed(m) => f.write_str(m),
        }
    }
}

/// Runs a `certs` subcommand; prints the files written.
///
/// # Errors
/// [`CertsFailure::BadFlag`] for a `--host` entry that is neither an IP address nor a DNS
/// name ([`wharf::certs::parse_host`]); [`CertsFailure::Failed`] otherwise.
pub fn run_certs(what: CertsCommand) -> Result<(), CertsFailure> {
    use wharf::identity::{AdminRole, Identity};
    let failed = |e: String| CertsFailure::Failed(e);
    let issued = match what {
        CertsCommand::Init { dir } => wharf::certs::init_ca(&dir),
        CertsCommand::ControlPlane { dir, host } => {
            check_hosts(&host)?;
            wharf::certs::issue(&dir, &Identity::ControlPlane, &host)
        }
        CertsCommand::Executor { dir, id, host } => {
            // The executor applies the same rule at start, the registry at registration.
            wharf::ids::check_executor_id(&id).map_err(|e| failed(format!("--id {id:?} {e}")))?;
            check_hosts(&host)?;
            wharf::certs::issue(&dir, &Identity::Executor(id), &host)
        }
        CertsCommand::Admin { dir, name, role } => {
            let role = AdminRole::parse(&role).map_err(|e| failed(format!("--role: {e}")))?;
            wharf::certs::issue(&dir, &Identity::Admin { role, name }, &[])
        }
    }
    .map_err(|e| failed(e.to_string()))?;
    println!("{}\n{}", issued.cert.display(), issued.key.display());
    Ok(())
}

/// Refuses `--host` entries [`wharf::certs::issue`] would refuse, as a bad flag.
fn check_hosts(host: &[String]) -> Result<(), CertsFailure> {
    wharf::certs::parse_hosts(host)
        .map(drop)
        .map_err(|e| CertsFailure::BadFlag(e.to_string()))
}

/// The `--config` file: every key optional; unknown keys are an error (a typo must not be
/// silently ignored).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `listen`, `data_dir`, `lease_ms`, `heartbeat_interval_ms`, `rest_listen`.
    #[serde(flatten)]
    pub server: ServerFile,
    /// See `--store`.
    pub store: Option<String>,
    /// See `--etcd-endpoints`.
    pub etcd_endpoints: Option<Vec<String>>,
    /// See `--etcd-prefix`.
    pub etcd_prefix: Option<String>,
    /// See `--etcd-election-ttl-secs`.
    pub etcd_election_ttl_secs: Option<u32>,
    /// See `--etcd-cacert`.
    pub etcd_cacert: Option<PathBuf>,
    /// See `--etcd-cert`.
    pub etcd_cert: Option<PathBuf>,
    /// See `--etcd-key`.
    pub etcd_key: Option<PathBuf>,
    /// See `--etcd-user`.
    pub etcd_user: Option<String>,
    /// See `--etcd-password-file`.
    pub etcd_password_file: Option<PathBuf>,
    /// See `--advertise`.
    pub advertise: Option<String>,
    /// See `--admin-tokens`.
    pub admin_tokens: Option<PathBuf>,
    /// See `--insecure`.
    pub insecure: Option<bool>,
    /// See `--allow-separate-embedded-logs`.
    pub allow_separate_embedded_logs: Option<bool>,
    /// See `--audit-max-entries`.
    pub audit_max_entries: Option<u64>,
    /// See `--audit-max-age-days`.
    pub audit_max_age_days: Option<u32>,
    /// `metrics_listen`, `log_format`, `otlp_endpoint`.
    #[serde(flatten)]
    pub observability: ObservabilityFile,
    /// `tls_cert`, `tls_key`, `tls_ca`.
    #[serde(flatten)]
    pub tls: TlsFile,
}

/// What the binary runs.
pub use wharf_control_plane::launch::Settings;

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
            server,
            dev,
            store,
            etcd_endpoints,
            etcd_prefix,
            etcd_election_ttl_secs,
            etcd_cacert,
            etcd_cert,
            etcd_key,
            etcd_user,
            etcd_password_file,
            etcd_password_env,
            advertise,
            admin_tokens,
            insecure,
            allow_separate_embedded_logs,
            audit_max_entries,
            audit_max_age_days,
            observability,
            tls,
        } = self;
        if dev {
            return Err(ConfigError::Invalid {
                field: "--dev",
                reason: "dev mode is its own binary now: run `wharf-dev` with the same flags (for example `wharf-dev --example --data-dir DIR`), see docs/quickstart.md".into(),
            });
        }
        let FileConfig {
            server: file_server,
            store: file_store,
            etcd_endpoints: file_etcd_endpoints,
            etcd_prefix: file_etcd_prefix,
            etcd_election_ttl_secs: file_etcd_election_ttl_secs,
            etcd_cacert: file_etcd_cacert,
            etcd_cert: file_etcd_cert,
            etcd_key: file_etcd_key,
            etcd_user: file_etcd_user,
            etcd_password_file: file_etcd_password_file,
            advertise: file_advertise,
            admin_tokens: file_admin_tokens,
            insecure: file_insecure,
            allow_separate_embedded_logs: file_allow_separate_embedded_logs,
            audit_max_entries: file_audit_max_entries,
            audit_max_age_days: file_audit_max_age_days,
            observability: file_observability,
            tls: file_tls,
        } = config.read()?;
        let tls = tls.layer(file_tls)?;
        let etcd = EtcdGiven {
            endpoints: if etcd_endpoints.is_empty() {
                file_etcd_endpoints
            } else {
                Some(etcd_endpoints)
            },
            prefix: etcd_prefix.or(file_etcd_prefix),
            election_ttl_secs: etcd_election_ttl_secs.or(file_etcd_election_ttl_secs),
            cacert: etcd_cacert.or(file_etcd_cacert),
            cert: etcd_cert.or(file_etcd_cert),
            key: etcd_key.or(file_etcd_key),
            user: etcd_user.or(file_etcd_user),
            password_file: etcd_password_file.or(file_etcd_password_file),
            password_env: etcd_password_env,
        };
        let store = store_options(
            store.or(file_store).as_deref(),
            etcd,
            advertise.or(file_advertise),
        )?;
        let server = server.layer(file_server, None)?;
        Ok(Settings {
            config: Config {
                rest_listen: server.rest_listen,
                rest_optional: false,
                separate_embedded_logs: layer(
                    allow_separate_embedded_logs,
                    file_allow_separate_embedded_logs,
                    || false,
                ),
                listen: server.listen,
                data_dir: server.data_dir,
                lease: server.lease,
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
            observability: observability.layer(file_observability, None)?,
        })
    }
}

/// Where the etcd password came from (the error messages name the source).
#[derive(Debug)]
enum PasswordSource {
    /// `--etcd-password-file` (its contents).
    File(Password),
    /// `WHARF_ETCD_PASSWORD`.
    Env(Password),
}
/// The etcd options, each from the command line (or the environment) before the config
/// file; `None` when given nowhere.
struct EtcdGiven {
    endpoints: Option<Vec<String>>,
    prefix: Option<String>,
    election_ttl_secs: Option<u32>,
    cacert: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    user: Option<String>,
    password_file: Option<PathBuf>,
    password_env: Option<Password>,
}

impl EtcdGiven {
    /// The first etcd option given, by its flag (the password from the environment by its
    /// variable): with the redb store it would be silently unused.
    fn first_given(&self) -> Option<&'static str> {
        [
            ("--etcd-endpoints", self.endpoints.is_some()),
            ("--etcd-prefix", self.prefix.is_some()),
            ("--etcd-election-ttl-secs", self.election_ttl_secs.is_some()),
            ("--etcd-cacert", self.cacert.is_some()),
            ("--etcd-cert", self.cert.is_some()),
            ("--etcd-key", self.key.is_some()),
            ("--etcd-user", self.user.is_some()),
            ("--etcd-password-file", self.password_file.is_some()),
            ("WHARF_ETCD_PASSWORD", self.password_env.is_some()),
        ]
        .into_iter()
        .find_map(|(option, given)| given.then_some(option))
    }
}

/// The store backend `backend` names (`redb` when none) with its options.
///
/// # Errors
/// An unknown backend; an etcd option with redb (the operator meant etcd, and the control
/// plane would keep its state alone); a missing or invalid etcd option.
fn store_options(
    backend: Option<&str>,
    etcd: EtcdGiven,
    advertise: Option<String>,
) -> Result<app::StoreOptions, ConfigError> {
    match backend {
        None | Some("redb") => match etcd.first_given() {
            Some(option) => Err(ConfigError::Invalid {
                field: "--store",
                reason: format!(
                    "is redb, but {option} is given: add --store etcd (or drop the etcd options)"
                ),
            }),
            None => Ok(app::StoreOptions::Redb),
        },
        Some("etcd") => etcd_store(etcd, advertise),
        Some(other) => Err(ConfigError::Invalid {
            field: "--store",
            reason: format!("{other:?} is not a backend; use redb or etcd"),
        }),
    }
}

/// The etcd store's options from `etcd`: endpoints required, an election TTL of at least
/// 2 s, TLS matching the endpoints' scheme, the password given one way.
///
/// # Errors
/// [`ConfigError`] naming the option that is missing or wrong.
fn etcd_store(
    etcd: EtcdGiven,
    advertise: Option<String>,
) -> Result<app::StoreOptions, ConfigError> {
    let endpoints = etcd.endpoints.unwrap_or_default();
    if endpoints.is_empty() {
        return Err(ConfigError::Missing {
            flag: "--etcd-endpoints",
            env: "WHARF_ETCD_ENDPOINTS",
            key: "etcd_endpoints",
        });
    }
    let election_ttl_secs = etcd
        .election_ttl_secs
        .unwrap_or(wharf_control_plane::store::etcd_election::DEFAULT_ELECTION_TTL_SECS);
    if election_ttl_secs < 2 {
        return Err(ConfigError::Invalid {
            field: "--etcd-election-ttl-secs",
            reason: "must be at least 2 (etcd's shortest lease)".into(),
        });
    }
    let tls = etcd_tls(&endpoints, etcd.cacert, etcd.cert, etcd.key)?;
    let password = match (&etcd.password_file, etcd.password_env) {
        (Some(path), None) => Some(PasswordSource::File(read_password(path)?)),
        (None, Some(p)) => Some(PasswordSource::Env(p)),
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(ConfigError::Invalid {
                field: "--etcd-password-file",
                reason: "and WHARF_ETCD_PASSWORD are both set: give the password one way".into(),
            });
        }
    };
    Ok(app::StoreOptions::Etcd {
        etcd: wharf_control_plane::store::EtcdOptions {
            endpoints,
            prefix: etcd
                .prefix
                .unwrap_or_else(|| wharf_control_plane::store::DEFAULT_ETCD_PREFIX.into()),
            tls,
            user: etcd_user_auth(etcd.user, password)?,
        },
        election_ttl_secs,
        advertise,
    })
}

/// Reads `--etcd-password-file`: the first line, without its line ending.
fn read_password(path: &std::path::Path) -> Result<Password, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Invalid {
        field: "--etcd-password-file",
        reason: format!("{}: {e}", path.display()),
    })?;
    Ok(Password::new(
        text.lines().next().unwrap_or_default().to_owned(),
    ))
}

/// Decides etcd's TLS from the endpoints' schemes and the three files: `https://`
/// endpoints need the CA; `http://` ones take no TLS file (an `https://` URL speaks TLS
/// or the process refuses to start, and a CA for plaintext is a mistake worth naming);
/// the client certificate and key come together.
fn etcd_tls(
    endpoints: &[String],
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<EtcdTls>, ConfigError> {
    let https = endpoints
        .iter()
        .filter(|e| e.starts_with("https://"))
        .count();
    let invalid = |field, reason: &str| ConfigError::Invalid {
        field,
        reason: reason.into(),
    };
    let client = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        (Some(_), None) => return Err(invalid("etcd-key", "is required with --etcd-cert")),
        (None, Some(_)) => return Err(invalid("etcd-cert", "is required with --etcd-key")),
    };
    match (https, ca, client) {
        (0, None, None) => Ok(None),
        (0, Some(_), _) | (0, None, Some(_)) => Err(invalid(
            "etcd-endpoints",
            "are http:// but etcd TLS files are given: use https:// URLs",
        )),
        (n, _, _) if n < endpoints.len() => Err(invalid(
            "etcd-endpoints",
            "mix https:// and other URLs: use https:// for all or none",
        )),
        (_, None, _) => Err(invalid(
            "etcd-cacert",
            "is required with https:// etcd endpoints (the CA that signed etcd's certificates)",
        )),
        (_, Some(ca), client) => Ok(Some(EtcdTls { ca, client })),
    }
}

/// Decides etcd user authentication: a user needs a password and a password a user; an
/// empty password is refused (etcd would answer with a less clear error).
fn etcd_user_auth(
    user: Option<String>,
    password: Option<PasswordSource>,
) -> Result<Option<EtcdUser>, ConfigError> {
    let (field, password) = match password {
        Some(PasswordSource::File(p)) => ("--etcd-password-file", Some(p)),
        Some(PasswordSource::Env(p)) => ("WHARF_ETCD_PASSWORD", Some(p)),
        None => ("--etcd-password-file", None),
    };
    match (user, password) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(ConfigError::Invalid {
            field: "--etcd-user",
            reason: format!("is required when {field} is given"),
        }),
        (Some(_), None) => Err(ConfigError::Invalid {
            field: "--etcd-user",
            reason: "needs a password: --etcd-password-file (or WHARF_ETCD_PASSWORD_FILE, etcd_password_file) or WHARF_ETCD_PASSWORD".into(),
        }),
        (Some(_), Some(p)) if p.expose().is_empty() => Err(ConfigError::Invalid {
            field,
            reason: "holds an empty password".into(),
        }),
        (Some(name), Some(password)) => Ok(Some(EtcdUser { name, password })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("wharf-control-plane").chain(args.iter().copied()))
            .expect("flags parse")
    }

    /// The spellings docs/configuration.md gives for a boolean (the environment variable
    /// goes through the same parser).
    #[test]
    fn insecure_takes_the_documented_boolean_spellings_in_any_case() {
        for v in ["true", "yes", "on", "1", "y", "t", "Yes", "ON"] {
            assert_eq!(
                parse(&[&format!("--insecure={v}")]).insecure,
                Some(true),
                "{v}"
            );
        }
        for v in ["false", "no", "off", "0", "n", "f", "NO"] {
            assert_eq!(
                parse(&[&format!("--insecure={v}")]).insecure,
                Some(false),
                "{v}"
            );
        }
        assert_eq!(parse(&["--insecure"]).insecure, Some(true));
        let e = Args::try_parse_from(["wharf-control-plane", "--insecure=maybe"])
            .expect_err("refused")
            .to_string();
        assert!(e.contains("invalid value 'maybe' for '--insecure"), "{e}");
    }

    #[test]
    fn a_negative_number_is_refused_naming_its_flag() {
        wharf::config::assert_negative_numbers_name_their_flag::<Args>(
            "wharf-control-plane",
            &[
                "--lease-ms",
                "--heartbeat-interval-ms",
                "--etcd-election-ttl-secs",
                "--audit-max-entries",
                "--audit-max-age-days",
            ],
        );
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
            config: Default::default(),
            server: Default::default(),
            dev: false,
            store: None,
            etcd_endpoints: Vec::new(),
            etcd_prefix: None,
            etcd_election_ttl_secs: None,
            etcd_cacert: None,
            etcd_cert: None,
            etcd_key: None,
            etcd_user: None,
            etcd_password_file: None,
            etcd_password_env: None,
            advertise: None,
            admin_tokens: None,
            insecure: None,
            allow_separate_embedded_logs: None,
            audit_max_entries: None,
            audit_max_age_days: None,
            observability: Default::default(),
            tls: Default::default(),
        }
        .build()
        .expect_err("missing");
        assert!(err.to_string().contains("--data-dir"), "{err}");
    }

    fn https() -> Vec<String> {
        vec![
            "https://10.0.0.1:2379".into(),
            "https://10.0.0.2:2379".into(),
        ]
    }

    /// No etcd option given anywhere.
    fn no_etcd() -> EtcdGiven {
        EtcdGiven {
            endpoints: None,
            prefix: None,
            election_ttl_secs: None,
            cacert: None,
            cert: None,
            key: None,
            user: None,
            password_file: None,
            password_env: None,
        }
    }

    #[test]
    fn no_etcd_option_given_names_none() {
        assert_eq!(no_etcd().first_given(), None);
    }

    #[test]
    fn each_etcd_option_given_is_named_by_its_flag() {
        type Give = fn(&mut EtcdGiven);
        let cases: [(&str, Give); 9] = [
            ("--etcd-endpoints", |e| e.endpoints = Some(Vec::new())),
            ("--etcd-prefix", |e| e.prefix = Some("p/".into())),
            ("--etcd-election-ttl-secs", |e| {
                e.election_ttl_secs = Some(5)
            }),
            ("--etcd-cacert", |e| e.cacert = Some("/ca".into())),
            ("--etcd-cert", |e| e.cert = Some("/c".into())),
            ("--etcd-key", |e| e.key = Some("/k".into())),
            ("--etcd-user", |e| e.user = Some("w".into())),
            ("--etcd-password-file", |e| {
                e.password_file = Some("/pw".into())
            }),
            ("WHARF_ETCD_PASSWORD", |e| {
                e.password_env = Some(Password::new("pw"));
            }),
        ];
        for (name, give) in cases {
            let mut etcd = no_etcd();
            give(&mut etcd);
            assert_eq!(etcd.first_given(), Some(name));
        }
    }

    #[test]
    fn the_first_of_several_etcd_options_is_named() {
        let etcd = EtcdGiven {
            user: Some("w".into()),
            cacert: Some("/ca".into()),
            ..no_etcd()
        };
        assert_eq!(etcd.first_given(), Some("--etcd-cacert"));
    }

    #[test]
    fn redb_is_the_default_backend_and_another_name_is_refused() {
        assert!(matches!(
            store_options(None, no_etcd(), None),
            Ok(app::StoreOptions::Redb)
        ));
        assert!(matches!(
            store_options(Some("redb"), no_etcd(), None),
            Ok(app::StoreOptions::Redb)
        ));
        let err = store_options(Some("sqlite"), no_etcd(), None).expect_err("no backend");
        assert!(
            err.to_string().contains("\"sqlite\" is not a backend"),
            "{err}"
        );
    }

    #[test]
    fn the_etcd_store_needs_endpoints_and_an_election_ttl_of_at_least_2() {
        let err = store_options(Some("etcd"), no_etcd(), None).expect_err("no endpoints");
        assert!(err.to_string().contains("--etcd-endpoints"), "{err}");
        let short = EtcdGiven {
            endpoints: Some(vec!["http://127.0.0.1:2379".into()]),
            election_ttl_secs: Some(1),
            ..no_etcd()
        };
        let err = store_options(Some("etcd"), short, None).expect_err("ttl 1");
        assert!(
            err.to_string().contains("--etcd-election-ttl-secs"),
            "{err}"
        );
    }

    #[test]
    fn an_etcd_option_without_the_etcd_store_is_refused_naming_it() {
        let err = parse(&[
            "--data-dir",
            "/tmp/x",
            "--etcd-endpoints",
            "https://127.0.0.1:2379",
            "--etcd-cacert",
            "/ca.pem",
        ])
        .build()
        .expect_err("etcd options on redb");
        let text = err.to_string();
        assert!(
            text.contains("--etcd-endpoints") && text.contains("--store etcd"),
            "{text}"
        );
        let err = parse(&[
            "--data-dir",
            "/tmp/x",
            "--store",
            "redb",
            "--etcd-user",
            "w",
        ])
        .build()
        .expect_err("etcd user on redb");
        assert!(err.to_string().contains("--etcd-user"), "{err}");
        assert!(parse(&["--data-dir", "/tmp/x"]).build().is_ok());
    }

    #[test]
    fn plaintext_etcd_takes_no_tls_file() {
        let http = vec!["http://127.0.0.1:2379".to_owned()];
        assert_eq!(etcd_tls(&http, None, None, None).expect("plain"), None);
        let err = etcd_tls(&http, Some("/ca.pem".into()), None, None).expect_err("CA");
        assert!(err.to_string().contains("https://"), "{err}");
        let err = etcd_tls(&http, None, Some("/c".into()), Some("/k".into())).expect_err("cert");
        assert!(err.to_string().contains("etcd-endpoints"), "{err}");
    }

    #[test]
    fn https_etcd_needs_the_ca_and_takes_a_client_certificate() {
        let err = etcd_tls(&https(), None, None, None).expect_err("no CA");
        assert!(err.to_string().contains("etcd-cacert"), "{err}");
        assert_eq!(
            etcd_tls(&https(), Some("/ca.pem".into()), None, None).expect("CA"),
            Some(EtcdTls {
                ca: "/ca.pem".into(),
                client: None
            })
        );
        assert_eq!(
            etcd_tls(
                &https(),
                Some("/ca.pem".into()),
                Some("/c".into()),
                Some("/k".into())
            )
            .expect("mutual"),
            Some(EtcdTls {
                ca: "/ca.pem".into(),
                client: Some(("/c".into(), "/k".into()))
            })
        );
    }

    #[test]
    fn an_etcd_client_certificate_needs_its_key_and_the_reverse() {
        let ca = Some(PathBuf::from("/ca.pem"));
        let err = etcd_tls(&https(), ca.clone(), Some("/c".into()), None).expect_err("no key");
        assert!(err.to_string().contains("etcd-key"), "{err}");
        let err = etcd_tls(&https(), ca, None, Some("/k".into())).expect_err("no cert");
        assert!(err.to_string().contains("etcd-cert"), "{err}");
    }

    #[test]
    fn mixed_etcd_schemes_are_refused() {
        let mixed = vec![
            "https://10.0.0.1:2379".to_owned(),
            "http://10.0.0.2:2379".to_owned(),
        ];
        let err = etcd_tls(&mixed, Some("/ca.pem".into()), None, None).expect_err("mixed");
        assert!(err.to_string().contains("mix"), "{err}");
    }

    #[test]
    fn etcd_user_and_password_come_together_and_the_password_is_never_shown() {
        assert_eq!(etcd_user_auth(None, None).expect("none"), None);
        let err = etcd_user_auth(Some("wharf".into()), None).expect_err("no password");
        assert!(err.to_string().contains("etcd-password-file"), "{err}");
        let err = etcd_user_auth(None, Some(PasswordSource::Env(Password::new("pw"))))
            .expect_err("no user");
        assert!(err.to_string().contains("etcd-user"), "{err}");
        let err = etcd_user_auth(
            Some("wharf".into()),
            Some(PasswordSource::File(Password::new(""))),
        )
        .expect_err("empty");
        assert!(err.to_string().contains("empty"), "{err}");
        let user = etcd_user_auth(
            Some("wharf".into()),
            Some(PasswordSource::File(Password::new("s3cret-etcd"))),
        )
        .expect("user")
        .expect("some");
        assert_eq!(user.password.expose(), "s3cret-etcd");
        assert!(!format!("{user:?}").contains("s3cret"), "{user:?}");
    }

    #[test]
    fn the_etcd_password_file_is_read_without_its_newline() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret-etcd\n").expect("write");
        let settings = parse(&[
            "--data-dir",
            "/tmp/x",
            "--store",
            "etcd",
            "--etcd-endpoints",
            "http://127.0.0.1:2379",
            "--etcd-user",
            "wharf",
            "--etcd-password-file",
            file.to_str().expect("utf8"),
        ])
        .build()
        .expect("builds");
        let app::StoreOptions::Etcd { etcd, .. } = &settings.store else {
            panic!("etcd store expected");
        };
        let user = etcd.user.as_ref().expect("user");
        assert_eq!(user.password.expose(), "s3cret-etcd");
        assert!(!format!("{settings:?}").contains("s3cret"));
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
        assert_eq!(plain.observability.metrics_listen, None);
        let given = parse(&["--data-dir", "/tmp/x", "--metrics-listen", "127.0.0.1:0"])
            .build()
            .expect("builds");
        assert_eq!(
            given.observability.metrics_listen.map(|a| a.port()),
            Some(0)
        );
        let err = parse(&["--data-dir", "/tmp/x", "--metrics-listen", "9464"])
            .build()
            .expect_err("not IP:PORT");
        assert!(err.to_string().contains("metrics-listen"), "{err}");
    }
}
