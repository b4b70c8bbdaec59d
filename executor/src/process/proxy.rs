//! The instances of an out-of-process plugin as the executor sees them: a
//! [`Connector`], [`SourceTask`] or [`SinkTask`] whose every call is a request to the
//! plugin process. The calls await only the answer, so they are cancel-safe: the host's
//! cancellation of a `poll` and its stop timeout work as for any plugin, and no thread
//! of the executor waits on the plugin.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use wharf::pb::v1 as pb;
use wharf::sdk::{
    ConfigMap, Connector, ConnectorContext, PluginResult, SinkRecord, SinkTask, SourceRecord,
    SourceTask, TaskContext, TopicPartition,
};

use super::PluginProcess;
use super::conn::{Answer, Ask, Conn, Hooks, RecordLedger};

/// The hook through which an instance's `record_resources` requests reach its
/// `resources` (the executor's ledger, [`wharf::sdk::Resources`]): each is run on the
/// current tokio runtime and answered once stored. A request whose change or resource
/// does not parse is answered with the field at fault.
fn ledger_hook(resources: wharf::sdk::Resources) -> RecordLedger {
    let runtime = tokio::runtime::Handle::current();
    Arc::new(move |req: pb::PluginRecordResources, reply| {
        let Some(change) = wharf::wire::ledger_change_from(req.change) else {
            return reply(Err(
                "record_resources.change must be INTENT, CONFIRM, RELEASE or ABSENT".into(),
            ));
        };
        let Some(resource) = req.resource.as_ref() else {
            return reply(Err("record_resources.resource is required".into()));
        };
        if change == wharf::sdk::LedgerChange::Intent
            && !matches!(
                pb::ResourceOrigin::try_from(resource.origin),
                Ok(pb::ResourceOrigin::Created | pb::ResourceOrigin::Adopted)
            )
        {
            return reply(Err(
                "record_resources.resource.origin must be CREATED or ADOPTED on an intent".into(),
            ));
        }
        let resource = wharf::wire::resource_from(resource, wharf::sdk::Origin::Created);
        let resources = resources.clone();
        // Not awaited: the reply answers the plugin when the control plane did. The
        // request comes on the process's stdout reader thread, outside any runtime.
        let _runtime = runtime.enter();
        drop(wharf::task::spawn(
            wharf::task::TaskKind::Detached,
            "plugin ledger change",
            async move {
                let outcome = match change {
                    wharf::sdk::LedgerChange::Intent => resources.intend(&resource).await,
                    wharf::sdk::LedgerChange::Confirm => resources.confirm(&resource).await,
                    wharf::sdk::LedgerChange::Release => resources.release(&resource).await,
                    wharf::sdk::LedgerChange::Absent => resources.absent(&resource).await,
                };
                reply(outcome.map_err(|e| e.to_string()));
            },
        ));
    })
}

/// An instance living in a plugin process.
struct Bound {
    conn: Arc<Conn>,
    id: u64,
    /// Its stop got an answer: dropping it is not an abandonment.
    stopped: bool,
}

impl Bound {
    /// Places a new instance in the process that takes new ones.
    async fn place(process: &PluginProcess, hooks: Hooks) -> PluginResult<Self> {
        let conn = process.conn().await?;
        let id = conn.add_instance(hooks)?;
        Ok(Self {
            conn,
            id,
            stopped: false,
        })
    }

    /// A call other than the stop: an error the plugin raised since fails it first.
    async fn call(&self, ask: Ask) -> PluginResult<Answer> {
        if let Some(raised) = self.conn.raised(self.id) {
            return Err(raised.into());
        }
        Ok(self.conn.call(ask).await?)
    }

    /// The stop: always sent, whatever was raised.
    async fn stop(&mut self, ask: Ask) -> PluginResult<()> {
        let answer = self.conn.call(ask).await;
        self.stopped = true;
        ok(answer?, "stop")
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        self.conn.remove_instance(self.id, !self.stopped);
    }
}

/// The answer's kind, for an error about an unexpected one.
pub(crate) fn answer_name(answer: &Answer) -> &'static str {
    match answer {
        Answer::Describe(_) => "describe",
        Answer::Error(_) => "error",
        Answer::Ok(_) => "ok",
        Answer::TaskConfigs(_) => "task_configs",
        Answer::Validate(_) => "validate",
        Answer::Poll(_) => "poll",
        Answer::ReadOffsets(_) => "read_offsets",
        Answer::RequestTaskReconfiguration(_) => "request_task_reconfiguration",
        Answer::RaiseError(_) => "raise_error",
        Answer::SinkSeek(_) => "sink_seek",
        Answer::ReportErrant(_) => "report_errant",
        Answer::RecordResources(_) => "record_resources",
    }
}

fn unexpected(answer: &Answer, call: &str) -> wharf::sdk::PluginError {
    format!(
        "the plugin process answered {call} with {} (protocol violation)",
        answer_name(answer)
    )
    .into()
}

/// An `ok` answer, or the plugin's error.
fn ok(answer: Answer, call: &str) -> PluginResult<()> {
    match answer {
        Answer::Ok(_) => Ok(()),
        Answer::Error(e) => Err(e.message.into()),
        other => Err(unexpected(&other, call)),
    }
}

fn not_placed(plugin: &str, process: &PluginProcess) -> wharf::sdk::PluginError {
    format!(
        "plugin {plugin}: the instance never reached its plugin process {} (its start failed before)",
        process.name()
    )
    .into()
}

/// A connector instance in a plugin process.
pub(crate) struct ProxyConnector {
    process: Arc<PluginProcess>,
    plugin: String,
    bound: Option<Bound>,
}

impl ProxyConnector {
    pub(crate) fn new(process: Arc<PluginProcess>, plugin: String) -> Self {
        Self {
            process,
            plugin,
            bound: None,
        }
    }

    fn bound(&self) -> PluginResult<&Bound> {
        self.bound
            .as_ref()
            .ok_or_else(|| not_placed(&self.plugin, &self.process))
    }
}

#[async_trait]
impl Connector for ProxyConnector {
    async fn start(&mut self, ctx: ConnectorContext, config: ConfigMap) -> PluginResult<()> {
        let (asker, raiser) = (ctx.clone(), ctx.clone());
        let hooks = Hooks {
            reconfigure: Some(Arc::new(move || asker.request_task_reconfiguration())),
            offsets: BTreeMap::new(),
            raised: None,
            raise: Some(Arc::new(move |error| raiser.raise_error(error))),
            ledger: Some(ledger_hook(ctx.resources().clone())),
            seek: None,
            errant: None,
        };
        let bound = self.bound.insert(Bound::place(&self.process, hooks).await?);
        let start = pb::PluginConnectorStart {
            instance_id: bound.id,
            plugin: self.plugin.clone(),
            connector: ctx.connector,
            incarnation: ctx.incarnation,
            cleanup_only: ctx.cleanup_only,
            executor_id: ctx.executor_id,
            config: config.into_iter().collect(),
        };
        ok(
            bound.call(Ask::ConnectorStart(start)).await?,
            "connector_start",
        )
    }

    async fn task_configs(&mut self, max_tasks: u32) -> PluginResult<Vec<ConfigMap>> {
        let bound = self.bound()?;
        let ask = Ask::ConnectorTaskConfigs(pb::PluginConnectorTaskConfigs {
            instance_id: bound.id,
            max_tasks,
        });
        match bound.call(ask).await? {
            Answer::TaskConfigs(t) => Ok(t
                .configs
                .into_iter()
                .map(|c| c.config.into_iter().collect())
                .collect()),
            Answer::Error(e) => Err(e.message.into()),
            other => Err(unexpected(&other, "connector_task_configs")),
        }
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        let Some(bound) = self.bound.as_mut() else {
            return Err(not_placed(&self.plugin, &self.process));
        };
        let id = bound.id;
        bound
            .stop(Ask::ConnectorStop(pb::PluginConnectorStop {
                instance_id: id,
                connector_deleted,
            }))
            .await
    }
}

/// A source task in a plugin process.
pub(crate) struct ProxySourceTask {
    process: Arc<PluginProcess>,
    plugin: String,
    bound: Option<Bound>,
}

impl ProxySourceTask {
    pub(crate) fn new(process: Arc<PluginProcess>, plugin: String) -> Self {
        Self {
            process,
            plugin,
            bound: None,
        }
    }
}

/// A source record from the wire: partition and offset must be JSON.
fn source_record(r: pb::PluginSourceRecord) -> PluginResult<SourceRecord> {
    let json = |text: &str, field: &str| {
        serde_json::from_str::<serde_json::Value>(text).map_err(|e| {
            format!("the plugin process returned a record whose {field} is not JSON ({e})")
        })
    };
    Ok(SourceRecord {
        source_partition: json(&r.source_partition, "source_partition")?,
        source_offset: json(&r.source_offset, "source_offset")?,
        topic: r.topic,
        key: r.key,
        value: r.value,
        headers: r.headers.into_iter().map(|h| (h.key, h.value)).collect(),
        timestamp_ms: r.timestamp_ms,
        partition: r.partition,
        // The protocol carries bytes: the connector's converters read them.
        data: None,
    })
}

#[async_trait]
impl SourceTask for ProxySourceTask {
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        start_task_into(&mut self.bound, &self.process, &self.plugin, ctx, config).await
    }

    async fn poll(&mut self) -> PluginResult<Vec<SourceRecord>> {
        let bound = self
            .bound
            .as_ref()
            .ok_or_else(|| not_placed(&self.plugin, &self.process))?;
        let ask = Ask::TaskPoll(pb::PluginTaskPoll {
            instance_id: bound.id,
        });
        match bound.call(ask).await? {
            Answer::Poll(p) => p.records.into_iter().map(source_record).collect(),
            Answer::Error(e) => Err(e.message.into()),
            other => Err(unexpected(&other, "task_poll")),
        }
    }

    async fn commit(&mut self) -> PluginResult<()> {
        let bound = self
            .bound
            .as_ref()
            .ok_or_else(|| not_placed(&self.plugin, &self.process))?;
        let ask = Ask::TaskCommit(pb::PluginTaskCommit {
            instance_id: bound.id,
        });
        ok(bound.call(ask).await?, "task_commit")
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        stop_task(
            &mut self.bound,
            &self.process,
            &self.plugin,
            connector_deleted,
        )
        .await
    }
}

/// Starts a task (source or sink) in its process. The instance stays placed in `slot`
/// when the plugin's start fails: the stop that follows still goes there.
async fn start_task_into(
    slot: &mut Option<Bound>,
    process: &PluginProcess,
    plugin: &str,
    ctx: TaskContext,
    config: ConfigMap,
) -> PluginResult<()> {
    let offsets = ctx
        .offsets
        .iter()
        .map(|(partition, offset)| pb::SourceOffset {
            partition: partition.clone(),
            offset: offset.to_string(),
        })
        .collect();
    let hooks = Hooks {
        reconfigure: None,
        offsets: ctx.offsets.clone(),
        raised: None,
        raise: None,
        ledger: Some(ledger_hook(ctx.resources.clone())),
        seek: ctx.sink_seek.clone(),
        errant: ctx.errant_reporter.clone(),
    };
    let bound = slot.insert(Bound::place(process, hooks).await?);
    let start = pb::PluginTaskStart {
        instance_id: bound.id,
        plugin: plugin.to_owned(),
        connector: ctx.connector,
        task: ctx.task,
        incarnation: ctx.incarnation,
        cleanup_only: ctx.cleanup_only,
        executor_id: ctx.executor_id,
        connector_config: ctx.connector_config.into_iter().collect(),
        task_config: config.into_iter().collect(),
        offsets,
    };
    ok(bound.call(Ask::TaskStart(start)).await?, "task_start")
}

async fn stop_task(
    slot: &mut Option<Bound>,
    process: &PluginProcess,
    plugin: &str,
    connector_deleted: bool,
) -> PluginResult<()> {
    let Some(bound) = slot.as_mut() else {
        return Err(not_placed(plugin, process));
    };
    let id = bound.id;
    bound
        .stop(Ask::TaskStop(pb::PluginTaskStop {
            instance_id: id,
            connector_deleted,
        }))
        .await
}

/// A sink task in a plugin process.
pub(crate) struct ProxySinkTask {
    process: Arc<PluginProcess>,
    plugin: String,
    bound: Option<Bound>,
}

impl ProxySinkTask {
    pub(crate) fn new(process: Arc<PluginProcess>, plugin: String) -> Self {
        Self {
            process,
            plugin,
            bound: None,
        }
    }
}

#[async_trait]
impl SinkTask for ProxySinkTask {
    async fn start(&mut self, ctx: TaskContext, config: ConfigMap) -> PluginResult<()> {
        start_task_into(&mut self.bound, &self.process, &self.plugin, ctx, config).await
    }

    async fn put(&mut self, records: Vec<SinkRecord>) -> PluginResult<()> {
        let bound = self
            .bound
            .as_ref()
            .ok_or_else(|| not_placed(&self.plugin, &self.process))?;
        let records = records
            .into_iter()
            .map(|r| pb::PluginSinkRecord {
                topic: r.topic,
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(key, value)| pb::PluginHeader { key, value })
                    .collect(),
                timestamp_ms: r.timestamp_ms,
                offset: r.offset,
                partition: r.partition,
            })
            .collect();
        let ask = Ask::TaskPut(pb::PluginTaskPut {
            instance_id: bound.id,
            records,
        });
        ok(bound.call(ask).await?, "task_put")
    }

    async fn flush(&mut self, offsets: &BTreeMap<TopicPartition, u64>) -> PluginResult<()> {
        let bound = self
            .bound
            .as_ref()
            .ok_or_else(|| not_placed(&self.plugin, &self.process))?;
        let ask = Ask::TaskFlush(pb::PluginTaskFlush {
            instance_id: bound.id,
            offsets: offsets
                .iter()
                .filter(|(tp, _)| tp.partition == 0)
                .map(|(tp, o)| (tp.topic.clone(), *o))
                .collect(),
            partition_offsets: offsets
                .iter()
                .map(|(tp, o)| pb::PluginPartitionOffset {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    offset: *o,
                })
                .collect(),
        });
        ok(bound.call(ask).await?, "task_flush")
    }

    async fn stop_with(&mut self, connector_deleted: bool) -> PluginResult<()> {
        stop_task(
            &mut self.bound,
            &self.process,
            &self.plugin,
            connector_deleted,
        )
        .await
    }
}
