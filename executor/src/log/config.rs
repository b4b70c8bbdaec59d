//! Which record log an executor uses: `--record-log SPEC` read into a [`LogConfig`], here
//! and nowhere else, and opened by [`super::open`].
//!
//! Adding a backend: a variant of [`LogConfig`] holding its settings, a module of its
//! own under `log/` (with the settings' reader), an arm in [`LogConfig::parse`], a form in
//! [`RECORD_LOG_FORMS`], and its arm in [`super::open`] (the compiler asks for it); then
//! the backend joins the contract suite (`executor/tests/log/contract.rs`).

use std::path::{Path, PathBuf};

use super::jetstream::{NatsConfig, NatsSecurity};
use super::kafka::KafkaConfig;
use super::{LogError, LogLimits};

/// The forms `--record-log` accepts, for the messages that refuse another one.
pub const RECORD_LOG_FORMS: &str = "`embedded` (the default: files in <data-dir>/log, one host) or `nats://HOST:PORT[,nats://HOST:PORT...][?replicas=N&max_age_s=N&max_bytes=N]` (NATS JetStream; tls:// for TLS) or `kafka://HOST:PORT[,HOST:PORT...][?OPTION=V&...]` (Kafka brokers; options in docs/kafka.md)";

/// The record log an executor uses, with that backend's settings.
#[derive(Debug, Clone, PartialEq)]
pub enum LogConfig {
    /// Embedded redb files (one process only).
    Embedded(EmbeddedConfig),
    /// NATS JetStream (executors on several hosts).
    Nats(NatsConfig),
    /// Kafka brokers (docs/kafka.md).
    Kafka(KafkaConfig),
}

/// Settings of the embedded log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedConfig {
    /// Directory of the log's files (created when missing), conventionally
    /// `<data-dir>/log`.
    pub dir: PathBuf,
    /// Fetch and in-flight bounds.
    pub limits: LogLimits,
}

/// The directory of the embedded log inside an executor's data dir.
pub const EMBEDDED_LOG_DIR: &str = "log";

impl LogConfig {
    /// The default: the embedded log in `<data_dir>/log`.
    pub fn embedded(data_dir: &Path) -> Self {
        Self::Embedded(EmbeddedConfig {
            dir: data_dir.join(EMBEDDED_LOG_DIR),
            limits: LogLimits::default(),
        })
    }

    /// Reads a `--record-log` spec (see [`RECORD_LOG_FORMS`]): `embedded` puts the log
    /// under `data_dir`; a NATS spec takes `nats`, the connection's TLS and credentials,
    /// which no other backend takes.
    ///
    /// # Errors
    /// [`LogError::InvalidConfig`] saying what is wrong: an unknown form (listing the
    /// accepted ones), a bad server or option, or NATS TLS or credentials given with
    /// another backend.
    pub fn parse(spec: &str, data_dir: &Path, nats: NatsSecurity) -> Result<Self, LogError> {
        let spec = spec.trim();
        let scheme = spec.split_once("://").map_or(spec, |(scheme, _)| scheme);
        let config = match scheme {
            "embedded" if spec == "embedded" => Self::embedded(data_dir),
            "nats" | "tls" => return Ok(Self::Nats(NatsConfig::from_spec(spec, nats)?)),
            "kafka" => Self::Kafka(KafkaConfig::from_spec(spec)?),
            _ => {
                return Err(LogError::InvalidConfig(format!(
                    "{spec:?} is not a record log; give {RECORD_LOG_FORMS}"
                )));
            }
        };
        if nats != NatsSecurity::default() {
            return Err(LogError::InvalidConfig(format!(
                "the NATS TLS and credential options (--nats-cacert, --nats-cert, --nats-key, --nats-creds, --nats-user) need a nats:// record log (--record-log, or its alias --nats-url), not {config}"
            )));
        }
        Ok(config)
    }
}

/// Default port of a NATS server URL that names none.
const NATS_DEFAULT_PORT: u16 = 4222;

impl LogConfig {
    /// The canonical identity of this log, as registration reports it to the control
    /// plane: two executors use the same log exactly when their identities are equal
    /// (and neither is embedded, whose files are one process's own). No secret: scheme,
    /// user and password are dropped from every server. Forms:
    /// `nats://HOST:PORT,...?prefix=P` (servers lowercased, port 4222 filled in, sorted,
    /// `tls://` and `nats://` alike), `kafka://HOST:PORT,...` (brokers lowercased,
    /// sorted), `embedded:DIR`.
    pub fn identity(&self) -> String {
        match self {
            LogConfig::Embedded(c) => format!("embedded:{}", c.dir.display()),
            LogConfig::Nats(c) => format!(
                "nats://{}?prefix={}",
                canonical_servers(&c.servers, Some(NATS_DEFAULT_PORT)),
                c.options.prefix
            ),
            LogConfig::Kafka(c) => format!("kafka://{}", canonical_servers(&c.brokers, None)),
        }
    }
}

/// `HOST:PORT` of each server without scheme or credentials, lowercased, `default_port`
/// added where none is given, sorted, without repeats, joined by commas. Pure.
fn canonical_servers(servers: &[String], default_port: Option<u16>) -> String {
    let mut out: Vec<String> = servers
        .iter()
        .map(|s| {
            let s = s.trim();
            let s = s.split_once("://").map_or(s, |(_, rest)| rest);
            let s = s.rsplit_once('@').map_or(s, |(_, host)| host);
            let s = s.trim_end_matches('/').to_ascii_lowercase();
            // A port follows the last ':' that is not inside an IPv6 literal's brackets.
            let has_port = s.rsplit_once(':').is_some_and(|(_, p)| !p.contains(']'));
            match (has_port, default_port) {
                (false, Some(port)) => format!("{s}:{port}"),
                _ => s,
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out.join(",")
}

impl std::fmt::Display for LogConfig {
    /// The spec form, without secrets (for logs and messages).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogConfig::Embedded(c) => write!(f, "embedded ({})", c.dir.display()),
            LogConfig::Nats(c) => write!(f, "{c}"),
            LogConfig::Kafka(c) => write!(f, "{c}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::NatsCredentials;

    fn parse(spec: &str) -> Result<LogConfig, LogError> {
        LogConfig::parse(spec, Path::new("/data"), NatsSecurity::default())
    }

    fn refusal(spec: &str) -> String {
        match parse(spec) {
            Err(LogError::InvalidConfig(msg)) => msg,
            other => panic!("{spec:?} was not refused: {other:?}"),
        }
    }

    fn nats(spec: &str) -> NatsConfig {
        match parse(spec) {
            Ok(LogConfig::Nats(c)) => c,
            other => panic!("{spec:?} is not NATS: {other:?}"),
        }
    }

    fn identity(spec: &str) -> String {
        parse(spec).expect("spec").identity()
    }

    #[test]
    fn a_nats_identity_sorts_the_servers_and_fills_in_the_default_port() {
        assert_eq!(
            identity("nats://B:4223,nats://a"),
            "nats://a:4222,b:4223?prefix=wharf"
        );
    }

    #[test]
    fn a_nats_identity_is_the_same_over_tls_and_in_any_order() {
        assert_eq!(
            identity("tls://a:4222,nats://b:4222"),
            identity("nats://b:4222,nats://a:4222")
        );
    }

    #[test]
    fn a_nats_identity_carries_no_credentials() {
        assert_eq!(
            identity("nats://user:secret@a:4222"),
            "nats://a:4222?prefix=wharf"
        );
    }

    #[test]
    fn a_nats_identity_ignores_the_replicas() {
        assert_eq!(
            identity("nats://a:4222?replicas=3"),
            identity("nats://a:4222")
        );
    }

    #[test]
    fn a_kafka_identity_sorts_the_brokers_without_repeats() {
        assert_eq!(
            identity("kafka://K2:9092,k1:9092,kafka://k2:9092"),
            "kafka://k1:9092,k2:9092"
        );
    }

    #[test]
    fn an_ipv6_server_keeps_its_port() {
        assert_eq!(
            canonical_servers(&["[::1]:4223".into(), "[::1]".into()], Some(4222)),
            "[::1]:4222,[::1]:4223"
        );
    }

    #[test]
    fn an_embedded_identity_names_its_directory() {
        assert_eq!(identity("embedded"), "embedded:/data/log");
    }

    #[test]
    fn embedded_spec_puts_the_log_under_the_data_dir() {
        let config = parse("embedded").expect("spec");
        assert_eq!(
            config,
            LogConfig::Embedded(EmbeddedConfig {
                dir: PathBuf::from("/data/log"),
                limits: LogLimits::default(),
            })
        );
        assert_eq!(config, LogConfig::embedded(Path::new("/data")));
        assert_eq!(parse("  embedded\n").expect("trimmed"), config);
    }

    #[test]
    fn nats_spec_takes_servers_and_replicas() {
        let config = nats("nats://a:4222,nats://b:4222?replicas=3");
        assert_eq!(config.servers, ["nats://a:4222", "nats://b:4222"]);
        assert_eq!(config.options.replicas, 3);
        assert_eq!(config.to_string(), "nats://a:4222,nats://b:4222?replicas=3");
    }

    #[test]
    fn nats_spec_takes_the_retention_of_new_streams() {
        let config = nats("nats://a:4222?max_age_s=86400&max_bytes=1048576");
        assert_eq!(config.options.max_age_s, 86_400);
        assert_eq!(config.options.max_bytes, 1_048_576);
        assert_eq!(
            config.to_string(),
            "nats://a:4222?max_age_s=86400&max_bytes=1048576"
        );
        let defaults = nats("nats://a:4222");
        assert_eq!(
            (defaults.options.max_age_s, defaults.options.max_bytes),
            (0, -1)
        );
        for bad in [
            "nats://a:4222?max_age_s=-1",
            "nats://a:4222?max_age_s=1d",
            "nats://a:4222?max_bytes=0",
            "nats://a:4222?max_bytes=-2",
            "nats://a:4222?max_msgs=5",
        ] {
            let e = LogConfig::parse(bad, Path::new("/data"), NatsSecurity::default())
                .expect_err(bad)
                .to_string();
            assert!(e.contains("max_"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_single_nats_server_gets_the_default_options() {
        let config = nats("nats://127.0.0.1:4222");
        assert_eq!(config, NatsConfig::new(["nats://127.0.0.1:4222"]));
        assert_eq!(config.to_string(), "nats://127.0.0.1:4222");
    }

    #[test]
    fn a_tls_url_is_a_nats_log() {
        assert_eq!(nats("tls://n:4222").servers, ["tls://n:4222"]);
    }

    #[test]
    fn servers_after_the_first_are_trimmed_and_may_omit_the_scheme() {
        assert_eq!(
            nats("nats://a:4222, b:4222").servers,
            ["nats://a:4222", "b:4222"]
        );
    }

    #[test]
    fn nats_tls_and_credentials_go_into_the_nats_config() {
        let security = NatsSecurity {
            ca: Some("/ca.pem".into()),
            client_cert: None,
            credentials: Some(NatsCredentials::CredsFile("/w.creds".into())),
        };
        let config =
            LogConfig::parse("nats://n:4222", Path::new("/data"), security.clone()).expect("spec");
        let LogConfig::Nats(config) = config else {
            panic!("not NATS: {config:?}");
        };
        assert_eq!(config.security, security);
    }

    #[test]
    fn nats_tls_or_credentials_with_another_log_are_refused() {
        for spec in ["embedded", "kafka://a:9092"] {
            let security = NatsSecurity {
                ca: Some("/ca.pem".into()),
                ..NatsSecurity::default()
            };
            let Err(LogError::InvalidConfig(msg)) =
                LogConfig::parse(spec, Path::new("/data"), security)
            else {
                panic!("accepted with {spec}");
            };
            assert!(
                msg.contains("--nats-cacert") && msg.contains("nats://") && msg.contains(spec),
                "{msg}"
            );
        }
    }

    #[test]
    fn a_nats_server_without_a_host_is_refused() {
        for spec in ["nats://", "tls://", "nats://:4222"] {
            let msg = refusal(spec);
            assert!(msg.contains("NATS URL"), "{spec}: {msg}");
        }
    }

    #[test]
    fn an_unknown_form_is_refused_listing_the_accepted_ones() {
        for spec in [
            "kafka:/x:9092",
            "",
            "embedded2",
            "nats:/x",
            "file:///tmp/log",
        ] {
            let msg = refusal(spec);
            assert!(
                msg.contains(&format!("{spec:?}")) && msg.contains(RECORD_LOG_FORMS),
                "{msg}"
            );
        }
    }

    #[test]
    fn a_replica_count_out_of_range_or_not_a_number_is_refused() {
        for spec in [
            "nats://x?replicas=0",
            "nats://x?replicas=6",
            "nats://x?replicas=seven",
        ] {
            assert!(refusal(spec).contains("replicas"), "{spec}");
        }
    }

    #[test]
    fn an_unknown_option_is_refused_naming_it() {
        let msg = refusal("nats://x?speed=fast");
        assert!(msg.contains("speed") && msg.contains("replicas"), "{msg}");
    }

    #[test]
    fn a_bad_server_is_refused_naming_it() {
        for (spec, needle) in [
            ("nats://a:4222,", "\"\""),
            ("nats://a:4222,kafka://b:9092", "kafka://b:9092"),
            ("nats://a:notaport", "nats://a:notaport"),
        ] {
            let msg = refusal(spec);
            assert!(
                msg.contains("NATS URL") && msg.contains(needle),
                "{spec}: {msg}"
            );
        }
    }

    #[test]
    fn kafka_spec_takes_the_brokers() {
        let config = parse("kafka://a:9092,b:9093").expect("spec");
        assert_eq!(
            config,
            LogConfig::Kafka(KafkaConfig::new(["a:9092", "b:9093"]))
        );
        assert_eq!(config.to_string(), "kafka://a:9092,b:9093");
    }

    #[test]
    fn a_bad_kafka_broker_is_refused_naming_it() {
        let msg = refusal("kafka://a:9092,b");
        assert!(msg.contains("\"b\"") && msg.contains("HOST:PORT"), "{msg}");
    }

    #[test]
    fn the_embedded_log_shows_its_directory() {
        assert_eq!(
            parse("embedded").expect("spec").to_string(),
            "embedded (/data/log)"
        );
    }
}
