//! The option groups every Wharf binary shares, declared once: each binary flattens the
//! clap group into its arguments (`#[command(flatten)]`) and the matching file group into
//! its `--config` keys (`#[serde(flatten)]`), then calls the group's `layer` to get the
//! winning values (flag > environment > file > default, docs/configuration.md).
//!
//! A file group denies no unknown key itself: the binary's file struct does
//! (`#[serde(deny_unknown_fields)]` on the outer struct sees the keys no group took).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::{FileError, SettingsError, parsed};
use crate::telemetry::LogFormat;
use crate::tls::TlsFiles;

/// `--config FILE`: the TOML file of the binary's settings.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ConfigFileArgs {
    /// TOML file with settings, keys as the flag names with '_' for '-' (`data_dir =
    /// "/var/lib/wharf"`); an unknown key is an error naming it. See docs/configuration.md.
    #[arg(long, env = "WHARF_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

impl ConfigFileArgs {
    /// The file's keys; no `--config` gives `T::default()` (every key unset).
    ///
    /// # Errors
    /// [`FileError`]: unreadable, not TOML, or a key `T` does not know.
    pub fn read<T: DeserializeOwned + Default>(&self) -> Result<T, FileError> {
        super::read_file(self.config.as_deref())
    }

    /// The file given, if any.
    pub fn path(&self) -> Option<&Path> {
        self.config.as_deref()
    }
}

/// The observability options: `--metrics-listen`, `--log-format`, `--otlp-endpoint`
/// (docs/observability.md).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ObservabilityArgs {
    /// Address of the metrics listener (plain HTTP: Prometheus text at /metrics, KIP-1017
    /// health at /health, /ready; names, states and counts only, see
    /// docs/observability.md), IP:PORT, or `off`. [default: off; `wharf-dev`:
    /// 127.0.0.1:9464, skipped when that port is taken]
    #[arg(long, env = "WHARF_METRICS_LISTEN", value_name = "IP:PORT|off")]
    pub metrics_listen: Option<String>,
    /// How log events are written to stderr: `text` (one readable line each) or `json`
    /// (one JSON object per line with the span fields; docs/observability.md).
    /// [default: text]
    #[arg(long, env = "WHARF_LOG_FORMAT", value_name = "text|json")]
    pub log_format: Option<String>,
    /// OTLP/gRPC endpoint to export traces to, for example http://127.0.0.1:4317 (an
    /// OpenTelemetry Collector; https:// for TLS, checked against the system's roots or
    /// SSL_CERT_FILE): admin calls, deletion rounds and plugin stops are spans,
    /// carried between hosts in `traceparent` (docs/observability.md). [default: none,
    /// nothing is exported]
    #[arg(long, env = "WHARF_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

/// The `--config` keys of [`ObservabilityArgs`].
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ObservabilityFile {
    /// See `--metrics-listen`.
    pub metrics_listen: Option<String>,
    /// See `--log-format`.
    pub log_format: Option<String>,
    /// See `--otlp-endpoint`.
    pub otlp_endpoint: Option<String>,
}

/// The winning observability settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observability {
    /// Where the metrics listener binds, `None` for none.
    pub metrics_listen: Option<SocketAddr>,
    /// `metrics_listen` is the binary's default, not asked for: a failed bind may be
    /// logged instead of fatal (wharf-dev's parallel runs).
    pub metrics_defaulted: bool,
    /// How log events are written.
    pub log_format: LogFormat,
    /// Where spans are exported (OTLP/gRPC), `None` for nowhere.
    pub otlp_endpoint: Option<String>,
}

impl ObservabilityArgs {
    /// Layers these flags over `file`; `metrics_default` is the listener when no layer
    /// sets one (`None`: off).
    ///
    /// # Errors
    /// [`SettingsError::Invalid`] naming `--metrics-listen` or `--log-format`.
    pub fn layer(
        self,
        file: ObservabilityFile,
        metrics_default: Option<SocketAddr>,
    ) -> Result<Observability, SettingsError> {
        let ObservabilityArgs {
            metrics_listen,
            log_format,
            otlp_endpoint,
        } = self;
        // Empty (`WHARF_METRICS_LISTEN=`, as a templated manifest writes an unset value)
        // is unset, for the three of them.
        let given = |v: Option<String>| v.filter(|v| !v.trim().is_empty());
        let metrics_given = given(metrics_listen).or(given(file.metrics_listen));
        Ok(Observability {
            metrics_defaulted: metrics_given.is_none() && metrics_default.is_some(),
            metrics_listen: super::optional_addr_or(
                "--metrics-listen",
                metrics_given,
                metrics_default,
            )?,
            log_format: parsed("--log-format", given(log_format).or(given(file.log_format)))?
                .unwrap_or_default(),
            otlp_endpoint: otlp_url(given(otlp_endpoint).or(given(file.otlp_endpoint)))?,
        })
    }
}

/// An OTLP/gRPC endpoint as given, when it is an `http://` (plaintext) or `https://`
/// (TLS, the system's roots) URL with a host.
///
/// # Errors
/// [`SettingsError::Invalid`] naming `--otlp-endpoint`, with the value quoted.
fn otlp_url(value: Option<String>) -> Result<Option<String>, SettingsError> {
    let Some(url) = value else {
        return Ok(None);
    };
    let invalid = |reason: String| SettingsError::Invalid {
        field: "--otlp-endpoint",
        reason,
    };
    let not_url = || {
        invalid(format!(
            "{url:?} is not a URL; write it like http://127.0.0.1:4317"
        ))
    };
    let uri: tonic::codegen::http::Uri = url.parse().map_err(|_| not_url())?;
    match uri.scheme_str() {
        None => Err(not_url()),
        Some("http" | "https") if uri.host().is_none_or(str::is_empty) => Err(not_url()),
        Some("http" | "https") if !matches!(uri.path(), "" | "/") => Err(invalid(format!(
            "{url:?}: OTLP/gRPC takes no path ({}); a path such as /v1/traces (port 4318) is OTLP/HTTP, which Wharf does not send: give the collector's gRPC port, usually 4317",
            uri.path()
        ))),
        Some("http" | "https") => Ok(Some(url)),
        Some(other) => Err(invalid(format!(
            "{url:?}: scheme {other:?} is not OTLP/gRPC; use http:// (plaintext) or https:// (TLS)"
        ))),
    }
}

/// The transport security options: `--tls-cert`, `--tls-key`, `--tls-ca`
/// (docs/security.md).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// PEM certificate of this process: spiffe://wharf/control-plane for a control plane,
    /// spiffe://wharf/executor/ID for an executor with id ID (make them with `wharf-control-plane
    /// certs`). With --tls-key and --tls-ca every listener and client of the process
    /// speaks mutual TLS and peers must present certificates of the cluster CA
    /// (docs/security.md). Reloaded when the file changes.
    #[arg(long, env = "WHARF_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, env = "WHARF_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// PEM cluster CA: the peers' certificates (executors', admin clients', the control
    /// plane's) must chain to it.
    #[arg(long, env = "WHARF_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
}

/// The `--config` keys of [`TlsArgs`].
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TlsFile {
    /// See `--tls-cert`.
    pub tls_cert: Option<PathBuf>,
    /// See `--tls-key`.
    pub tls_key: Option<PathBuf>,
    /// See `--tls-ca`.
    pub tls_ca: Option<PathBuf>,
}

impl TlsArgs {
    /// Layers these flags over `file`: all three files, or none (plaintext).
    ///
    /// # Errors
    /// [`SettingsError::Invalid`] naming the missing one when only some are set.
    pub fn layer(self, file: TlsFile) -> Result<Option<TlsFiles>, SettingsError> {
        let TlsArgs {
            tls_cert,
            tls_key,
            tls_ca,
        } = self;
        TlsFiles::from_parts(
            tls_cert.or(file.tls_cert),
            tls_key.or(file.tls_key),
            tls_ca.or(file.tls_ca),
        )
        .map_err(|e| SettingsError::Invalid {
            field: "--tls-cert/--tls-key/--tls-ca",
            reason: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        file: ConfigFileArgs,
        #[command(flatten)]
        observability: ObservabilityArgs,
        #[command(flatten)]
        tls: TlsArgs,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Keys {
        own: Option<u32>,
        #[serde(flatten)]
        observability: ObservabilityFile,
        #[serde(flatten)]
        tls: TlsFile,
    }

    fn cli(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied())).expect("parses")
    }

    fn keys(text: &str) -> Result<Keys, FileError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("x.toml");
        std::fs::write(&file, text).expect("write");
        cli(&["--config", file.to_str().expect("utf8")]).file.read()
    }

    #[test]
    fn the_groups_keys_sit_beside_the_binarys_own_and_an_unknown_one_is_named() {
        let k = keys("own = 1\nlog_format = \"json\"\ntls_ca = \"/ca.pem\"\n").expect("reads");
        assert_eq!(k.own, Some(1));
        assert_eq!(k.observability.log_format.as_deref(), Some("json"));
        assert_eq!(k.tls.tls_ca, Some(PathBuf::from("/ca.pem")));
        let err = keys("own = 1\nlog_fromat = \"json\"\n").expect_err("typo");
        assert!(err.to_string().contains("log_fromat"), "{err}");
    }

    #[test]
    fn the_flag_wins_over_the_file_and_the_default_comes_last() {
        let file = ObservabilityFile {
            metrics_listen: Some("127.0.0.1:9000".into()),
            log_format: Some("json".into()),
            otlp_endpoint: None,
        };
        let o = cli(&["--metrics-listen", "off"])
            .observability
            .layer(file.clone(), None)
            .expect("layers");
        assert_eq!(o.metrics_listen, None);
        assert_eq!(o.log_format, LogFormat::Json);
        let default: SocketAddr = "127.0.0.1:9464".parse().expect("addr");
        let o = cli(&[])
            .observability
            .layer(ObservabilityFile::default(), Some(default))
            .expect("layers");
        assert_eq!(
            (o.metrics_listen, o.metrics_defaulted),
            (Some(default), true)
        );
        let o = cli(&[])
            .observability
            .layer(file, Some(default))
            .expect("layers");
        assert!(!o.metrics_defaulted, "the file asked for it");
    }

    #[test]
    fn empty_observability_values_are_unset() {
        let default: SocketAddr = "127.0.0.1:9464".parse().expect("addr");
        let o = cli(&[
            "--metrics-listen",
            "",
            "--log-format",
            " ",
            "--otlp-endpoint",
            "",
        ])
        .observability
        .layer(ObservabilityFile::default(), Some(default))
        .expect("empty is unset");
        assert_eq!(o.metrics_listen, Some(default));
        assert_eq!(o.log_format, LogFormat::default());
        assert_eq!(o.otlp_endpoint, None);
    }

    #[test]
    fn bad_observability_values_name_their_flag() {
        let err = cli(&["--metrics-listen", "9464"])
            .observability
            .layer(ObservabilityFile::default(), None)
            .expect_err("not IP:PORT");
        assert!(err.to_string().contains("--metrics-listen"), "{err}");
        let err = cli(&["--log-format", "xml"])
            .observability
            .layer(ObservabilityFile::default(), None)
            .expect_err("no such format");
        assert!(
            err.to_string().contains("--log-format") && err.to_string().contains("xml"),
            "{err}"
        );
    }

    #[test]
    fn an_otlp_endpoint_is_an_http_or_https_url_with_a_host() {
        let layered = |url: &str| {
            cli(&["--otlp-endpoint", url])
                .observability
                .layer(ObservabilityFile::default(), None)
        };
        for ok in ["http://127.0.0.1:4317", "https://collector.example:4317"] {
            assert_eq!(
                layered(ok).expect("a URL").otlp_endpoint.as_deref(),
                Some(ok)
            );
        }
        for (bad, says) in [
            ("127.0.0.1:4317", "is not a URL"),
            ("not a url", "is not a URL"),
            ("ftp://127.0.0.1:4317", "scheme \"ftp\" is not OTLP/gRPC"),
            ("http:///v1/traces", "is not a URL"),
            (
                "http://127.0.0.1:4318/v1/traces",
                "OTLP/gRPC takes no path (/v1/traces)",
            ),
        ] {
            let err = layered(bad).expect_err(bad).to_string();
            assert!(
                err.contains("--otlp-endpoint") && err.contains(&format!("{bad:?}")),
                "{err}"
            );
            assert!(err.contains(says), "{bad}: {err}");
        }
        // Empty is unset; the scheme's case does not matter.
        assert_eq!(layered("").expect("unset").otlp_endpoint, None);
        assert!(layered("HTTP://127.0.0.1:4317").is_ok());
        // From the --config file too.
        let err = cli(&[])
            .observability
            .layer(
                ObservabilityFile {
                    otlp_endpoint: Some("localhost:4317".into()),
                    ..ObservabilityFile::default()
                },
                None,
            )
            .expect_err("no scheme");
        assert!(err.to_string().contains("\"localhost:4317\""), "{err}");
    }

    #[test]
    fn tls_takes_all_three_files_or_none() {
        assert_eq!(cli(&[]).tls.layer(TlsFile::default()).expect("none"), None);
        let file = TlsFile {
            tls_key: Some("/k".into()),
            tls_ca: Some("/ca".into()),
            ..TlsFile::default()
        };
        let err = cli(&[]).tls.layer(file.clone()).expect_err("no cert");
        assert!(err.to_string().contains("--tls-cert"), "{err}");
        assert!(
            cli(&["--tls-cert", "/c"])
                .tls
                .layer(file)
                .expect("complete")
                .is_some()
        );
    }
}
