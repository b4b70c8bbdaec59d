//! Plugins out of process: a plugin that runs as a child process of the executor,
//! speaking the plugin protocol (proto/wharf/v1/plugin.proto, docs/plugins-out-of-process.md)
//! over its stdio, offered to the rest of the executor as an ordinary
//! [`Plugin`] whose instances are proxies: the host, the lifecycle
//! contract, the metrics and the deletion path treat it like any plugin.
//!
//! One process per `[[process]]` entry of `--plugin-processes` ([`spec`]) hosts every
//! instance of the plugins it offers, multiplexed by request id (`conn`). It is started
//! and described when the settings are read, so the plugins it offers are advertised at
//! registration; when it dies its instances fail (the death text names the exit status and
//! the stderr tail) and the next instance starts a fresh process. An instance abandoned
//! after its stop overran the timeout taints its process: new instances go to a fresh one,
//! and the tainted one is killed once its last instance is gone.

mod conn;
pub mod frame;
pub mod plugin_path;
mod proxy;
pub mod spec;

use std::sync::Arc;

use wharf::pb::v1 as pb;
use wharf::sdk::{Plugin, TaskFactory};

use conn::{Answer, Ask, Conn};
pub use spec::{DEFAULT_DESCRIBE_TIMEOUT_MS, INHERITED_ENV, ProcessSpec};

/// The plugin protocol version this executor speaks (proto/wharf/v1/plugin.proto).
pub const PROTOCOL_VERSION: u32 = 1;

/// A configured plugin process: its spec, what it offered when first described, and the
/// process that takes new instances now.
pub struct PluginProcess {
    spec: ProcessSpec,
    offered: Vec<pb::PluginInfo>,
    current: tokio::sync::Mutex<Option<Arc<Conn>>>,
}

impl std::fmt::Debug for PluginProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginProcess")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl PluginProcess {
    /// Starts the process and describes it, blocking the calling thread for at most the
    /// spec's describe timeout (this runs when the settings are read, before any runtime).
    ///
    /// # Errors
    /// Text naming the process: it could not be started, did not answer, or answered
    /// something unusable (`check_described`).
    pub fn start(spec: ProcessSpec) -> Result<Arc<Self>, String> {
        let conn = Conn::spawn(&spec).map_err(|e| spawn_error(&spec, &e))?;
        let answer = conn.call_blocking(describe_request(), spec.describe_timeout);
        let offered = match check_described(answer) {
            Ok(o) => o,
            Err(e) => {
                conn.kill();
                return Err(format!("plugin process {}: {e}", spec.name));
            }
        };
        Ok(Arc::new(Self {
            spec,
            offered,
            current: tokio::sync::Mutex::new(Some(conn)),
        }))
    }

    /// The plugins the process offers, as the executor advertises and runs them.
    pub fn plugins(self: &Arc<Self>) -> Vec<Plugin> {
        self.offered
            .iter()
            .map(|info| {
                let def = wharf::wire::config_def(&info.config_defs);
                let (p, name) = (self.clone(), info.name.clone());
                let connector = Arc::new(move || {
                    Box::new(proxy::ProxyConnector::new(p.clone(), name.clone()))
                        as Box<dyn wharf::sdk::Connector>
                });
                let (p, name) = (self.clone(), info.name.clone());
                let task = match pb::PluginKind::try_from(info.kind) {
                    Ok(pb::PluginKind::Sink) => TaskFactory::Sink(Arc::new(move || {
                        Box::new(proxy::ProxySinkTask::new(p.clone(), name.clone()))
                            as Box<dyn wharf::sdk::SinkTask>
                    })),
                    // check_described let only sources and sinks through.
                    Ok(pb::PluginKind::Source | pb::PluginKind::Unspecified) | Err(_) => {
                        TaskFactory::Source(Arc::new(move || {
                            Box::new(proxy::ProxySourceTask::new(p.clone(), name.clone()))
                                as Box<dyn wharf::sdk::SourceTask>
                        }))
                    }
                };
                Plugin {
                    name: info.name.clone(),
                    version: info.version.clone(),
                    config_def: def,
                    connector,
                    task,
                }
            })
            .collect()
    }

    /// The process that takes a new instance: the current one while it is alive and not
    /// tainted, else a fresh one, described again (it must still offer every plugin it
    /// offered at first).
    ///
    /// # Errors
    /// Text naming the process when a fresh one cannot be started or described.
    pub(crate) async fn conn(&self) -> Result<Arc<Conn>, String> {
        let mut current = self.current.lock().await;
        if let Some(c) = current.as_ref().filter(|c| c.usable()) {
            return Ok(c.clone());
        }
        let conn = Conn::spawn(&self.spec).map_err(|e| spawn_error(&self.spec, &e))?;
        let answer =
            tokio::time::timeout(self.spec.describe_timeout, conn.call(describe_request()))
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "did not answer describe within {} ms",
                        self.spec.describe_timeout.as_millis()
                    ))
                });
        let checked = check_described(answer).and_then(|now| {
            match self
                .offered
                .iter()
                .find(|o| !now.iter().any(|n| n.name == o.name && n.kind == o.kind))
            {
                Some(missing) => Err(format!(
                    "no longer offers plugin {:?} after a restart",
                    missing.name
                )),
                None => Ok(()),
            }
        });
        if let Err(e) = checked {
            conn.kill();
            return Err(format!("plugin process {}: {e}", self.spec.name));
        }
        *current = Some(conn.clone());
        Ok(conn)
    }

    /// True when the process offers plugin `name`.
    pub fn offers(&self, name: &str) -> bool {
        self.offered.iter().any(|o| o.name == name)
    }

    /// The plugin's own checks of `config` (Kafka Connect's `Connector#validate`):
    /// `(key, messages)` per key with an error, as the plugin answers them.
    ///
    /// # Errors
    /// Text naming the plugin: the process could not be reached or answered an error.
    pub async fn validate(
        &self,
        plugin: &str,
        config: wharf::sdk::ConfigMap,
    ) -> Result<Vec<(String, Vec<String>)>, String> {
        let conn = self.conn().await?;
        let ask = Ask::ConnectorValidate(pb::PluginConnectorValidate {
            plugin: plugin.to_owned(),
            config: config.into_iter().collect(),
        });
        match conn.call(ask).await? {
            Answer::Validate(v) => Ok(v.errors.into_iter().map(|e| (e.key, e.messages)).collect()),
            Answer::Error(e) => Err(format!("its validate failed: {}", e.message)),
            other => Err(format!(
                "plugin process {} answered validate with {}",
                self.spec.name,
                proxy::answer_name(&other)
            )),
        }
    }

    /// The spec's name, for errors.
    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }
}

/// Starts and describes every process of `specs`, in order, and returns the plugins they
/// offer.
///
/// # Errors
/// The first process that could not be started or described, with the reason.
pub fn start_all(specs: Vec<ProcessSpec>) -> Result<Vec<Plugin>, String> {
    Ok(start_processes(specs)?
        .iter()
        .flat_map(PluginProcess::plugins)
        .collect())
}

/// Starts and describes every process of `specs`, in order.
///
/// # Errors
/// As [`start_all`].
pub fn start_processes(specs: Vec<ProcessSpec>) -> Result<Vec<Arc<PluginProcess>>, String> {
    specs.into_iter().map(PluginProcess::start).collect()
}

fn describe_request() -> Ask {
    Ask::Describe(pb::PluginDescribeRequest {
        protocol_version: PROTOCOL_VERSION,
    })
}

fn spawn_error(spec: &ProcessSpec, e: &std::io::Error) -> String {
    format!(
        "plugin process {}: cannot start {}: {e}",
        spec.name,
        spec.command.display()
    )
}

/// Checks a describe answer: the protocol version this executor speaks, at least one
/// plugin, every name set and unique, every kind a source or a sink. Pure.
///
/// # Errors
/// Text saying what is wrong.
pub(crate) fn check_described(
    answer: Result<Answer, String>,
) -> Result<Vec<pb::PluginInfo>, String> {
    let described = match answer? {
        Answer::Describe(d) => d,
        Answer::Error(e) => return Err(format!("describe failed: {}", e.message)),
        other => {
            return Err(format!(
                "answered describe with {}",
                proxy::answer_name(&other)
            ));
        }
    };
    if described.protocol_version != PROTOCOL_VERSION {
        return Err(format!(
            "speaks plugin protocol version {}, this executor speaks {PROTOCOL_VERSION}",
            described.protocol_version
        ));
    }
    if described.plugins.is_empty() {
        return Err("offers no plugin".to_owned());
    }
    for (i, p) in described.plugins.iter().enumerate() {
        if p.name.is_empty() {
            return Err(format!("plugins[{i}] has an empty name"));
        }
        if described.plugins[..i].iter().any(|q| q.name == p.name) {
            return Err(format!("offers plugin {:?} twice", p.name));
        }
        match pb::PluginKind::try_from(p.kind) {
            Ok(pb::PluginKind::Source | pb::PluginKind::Sink) => {}
            Ok(pb::PluginKind::Unspecified) | Err(_) => {
                return Err(format!(
                    "plugin {:?} is neither a source nor a sink (kind {})",
                    p.name, p.kind
                ));
            }
        }
    }
    Ok(described.plugins)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, kind: pb::PluginKind) -> pb::PluginInfo {
        pb::PluginInfo {
            name: name.to_owned(),
            version: "1".to_owned(),
            kind: kind as i32,
            ..Default::default()
        }
    }

    fn described(version: u32, plugins: Vec<pb::PluginInfo>) -> Result<Answer, String> {
        Ok(Answer::Describe(pb::PluginDescribeResponse {
            protocol_version: version,
            plugins,
        }))
    }

    #[test]
    fn a_good_description_gives_its_plugins() {
        let got = check_described(described(
            1,
            vec![
                info("a", pb::PluginKind::Source),
                info("b", pb::PluginKind::Sink),
            ],
        ))
        .unwrap();
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn each_bad_description_is_refused_saying_why() {
        let cases = [
            (
                described(2, vec![info("a", pb::PluginKind::Source)]),
                "protocol version 2",
            ),
            (described(1, vec![]), "offers no plugin"),
            (
                described(1, vec![info("", pb::PluginKind::Source)]),
                "plugins[0] has an empty name",
            ),
            (
                described(
                    1,
                    vec![
                        info("a", pb::PluginKind::Source),
                        info("a", pb::PluginKind::Sink),
                    ],
                ),
                "offers plugin \"a\" twice",
            ),
            (
                described(1, vec![info("a", pb::PluginKind::Unspecified)]),
                "neither a source nor a sink",
            ),
            (
                Ok(Answer::Error(pb::PluginError {
                    message: "no jars".to_owned(),
                })),
                "describe failed: no jars",
            ),
            (Ok(Answer::Ok(pb::PluginOk {})), "answered describe with ok"),
            (Err("exited (exit status: 1)".to_owned()), "exited"),
        ];
        for (answer, expected) in cases {
            let err = check_described(answer).unwrap_err();
            assert!(err.contains(expected), "{expected}: {err}");
        }
    }
}
