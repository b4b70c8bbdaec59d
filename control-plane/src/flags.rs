//! The control plane's own option group, shared by the two binaries that run one
//! (`wharf-control-plane` and `wharf-dev`): where it listens, where it keeps its store, the
//! executor lease and the REST gateway. Declared once like the groups of
//! [`wharf::config::flags`]: the binaries flatten [`ServerArgs`] and [`ServerFile`] and
//! call [`ServerArgs::layer`] (docs/configuration.md).

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;
use wharf::config::{SettingsError, layer, optional_addr_or, required};

use crate::app;
use crate::reconcile::LeaseConfig;

/// `--listen`, `--data-dir`, `--lease-ms`, `--heartbeat-interval-ms`, `--rest-listen`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServerArgs {
    /// Address of the admin API (wharf.v1.ConnectorAdmin) and the executor registry,
    /// IP:PORT (port 0 picks a free port; the bound address is written to
    /// DATA_DIR/listen.addr). [default: 127.0.0.1:7000]
    #[arg(long, env = "WHARF_LISTEN", value_name = "IP:PORT")]
    pub listen: Option<SocketAddr>,
    /// Directory for the embedded store (state.redb), its encryption key (store.key) and
    /// listen.addr; `wharf-dev` keeps its executor's data there too (DATA_DIR/dev-executor).
    /// Created if missing. Required (flag, env or file).
    #[arg(long, env = "WHARF_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Executor lease in milliseconds: an executor without a heartbeat for this long is
    /// marked lost and its work moves. [default: 10000]
    #[arg(
        long,
        env = "WHARF_LEASE_MS",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    pub lease_ms: Option<u32>,
    /// Heartbeat interval handed to executors, in milliseconds (shorter than the lease).
    /// [default: 2000]
    #[arg(
        long,
        env = "WHARF_HEARTBEAT_INTERVAL_MS",
        value_name = "MS",
        allow_negative_numbers = true
    )]
    pub heartbeat_interval_ms: Option<u32>,
    /// Address of the Kafka Connect REST gateway (HTTP/1.1: Kafka Connect's routes, JSON
    /// and status codes over the same admin logic as gRPC; see docs/rest.md), IP:PORT;
    /// port 0 picks one and writes it to DATA_DIR/rest.addr. `off` for none.
    /// [default: off; `wharf-dev`: 127.0.0.1:8083, skipped when that port is taken]
    #[arg(long, env = "WHARF_REST_LISTEN", value_name = "IP:PORT|off")]
    pub rest_listen: Option<String>,
}

/// The `--config` keys of [`ServerArgs`].
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ServerFile {
    /// See `--listen`.
    pub listen: Option<SocketAddr>,
    /// See `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// See `--lease-ms`.
    pub lease_ms: Option<u32>,
    /// See `--heartbeat-interval-ms`.
    pub heartbeat_interval_ms: Option<u32>,
    /// See `--rest-listen`.
    pub rest_listen: Option<String>,
}

/// The winning values of [`ServerArgs`].
#[derive(Debug, Clone)]
pub struct Server {
    /// See [`app::Config::listen`].
    pub listen: SocketAddr,
    /// See [`app::Config::data_dir`].
    pub data_dir: PathBuf,
    /// See [`app::Config::lease`].
    pub lease: LeaseConfig,
    /// See [`app::Config::rest_listen`].
    pub rest_listen: Option<SocketAddr>,
    /// The REST address is the binary's default, not asked for
    /// ([`app::Config::rest_optional`]).
    pub rest_defaulted: bool,
}

impl ServerArgs {
    /// Layers these flags over `file`; `rest_default` is the gateway's address when no
    /// layer sets one (`None`: off).
    ///
    /// # Errors
    /// [`SettingsError::Missing`] for the data dir, [`SettingsError::Invalid`] naming
    /// `--rest-listen`.
    pub fn layer(
        self,
        file: ServerFile,
        rest_default: Option<SocketAddr>,
    ) -> Result<Server, SettingsError> {
        let ServerArgs {
            listen,
            data_dir,
            lease_ms,
            heartbeat_interval_ms,
            rest_listen,
        } = self;
        let rest_given = rest_listen.or(file.rest_listen);
        Ok(Server {
            listen: layer(listen, file.listen, || app::DEFAULT_LISTEN),
            data_dir: required(
                data_dir,
                file.data_dir,
                ("--data-dir", "WHARF_DATA_DIR", "data_dir"),
            )?,
            lease: LeaseConfig {
                lease_ms: layer(lease_ms, file.lease_ms, || app::DEFAULT_LEASE_MS),
                heartbeat_interval_ms: layer(
                    heartbeat_interval_ms,
                    file.heartbeat_interval_ms,
                    || app::DEFAULT_HEARTBEAT_INTERVAL_MS,
                ),
            },
            rest_defaulted: rest_given.is_none() && rest_default.is_some(),
            rest_listen: optional_addr_or("--rest-listen", rest_given, rest_default)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(data_dir: Option<&str>, rest: Option<&str>) -> ServerArgs {
        ServerArgs {
            data_dir: data_dir.map(PathBuf::from),
            rest_listen: rest.map(str::to_owned),
            ..ServerArgs::default()
        }
    }

    #[test]
    fn the_file_fills_what_the_flags_leave_and_defaults_the_rest() {
        let file = ServerFile {
            data_dir: Some("/tmp/file".into()),
            lease_ms: Some(5000),
            ..ServerFile::default()
        };
        let s = args(None, None).layer(file, None).expect("layers");
        assert_eq!(s.data_dir, PathBuf::from("/tmp/file"));
        assert_eq!(s.lease.lease_ms, 5000);
        assert_eq!(
            s.lease.heartbeat_interval_ms,
            app::DEFAULT_HEARTBEAT_INTERVAL_MS
        );
        assert_eq!(s.listen, app::DEFAULT_LISTEN);
    }

    #[test]
    fn a_missing_data_dir_names_flag_env_and_key() {
        let err = args(None, None)
            .layer(ServerFile::default(), None)
            .expect_err("missing");
        let text = err.to_string();
        assert!(
            text.contains("--data-dir") && text.contains("WHARF_DATA_DIR"),
            "{text}"
        );
    }

    #[test]
    fn the_rest_gateway_takes_its_default_only_when_nothing_asks() {
        let default: SocketAddr = "127.0.0.1:8083".parse().expect("addr");
        let s = args(Some("/d"), None)
            .layer(ServerFile::default(), Some(default))
            .expect("layers");
        assert_eq!((s.rest_listen, s.rest_defaulted), (Some(default), true));
        let s = args(Some("/d"), Some("off"))
            .layer(ServerFile::default(), Some(default))
            .expect("layers");
        assert_eq!((s.rest_listen, s.rest_defaulted), (None, false));
        let err = args(Some("/d"), Some("8083"))
            .layer(ServerFile::default(), None)
            .expect_err("not IP:PORT");
        assert!(err.to_string().contains("--rest-listen"), "{err}");
    }
}
