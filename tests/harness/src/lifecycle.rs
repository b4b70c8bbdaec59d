//! Reads the lifecycle file written by the `test-source` / `test-sink` plugins (one JSON
//! line per lifecycle call, see `connectors/src/test_plugin.rs`) into typed events, with
//! the questions tests ask of it.

use std::path::Path;

use serde::Deserialize;

/// One lifecycle call, as a test plugin recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Event {
    /// Wall-clock time, Unix milliseconds.
    pub ts_ms: i64,
    /// Id of the executor that hosted the instance.
    pub executor: String,
    /// Connector name.
    pub connector: String,
    /// Task index; `None` for the connector instance.
    pub task: Option<u32>,
    /// Unique per plugin instance.
    pub instance: String,
    /// Connector incarnation.
    pub incarnation: String,
    /// `start`, `task_configs`, `stop` (began), `stopped` (returned), `poll`, `put`.
    pub call: String,
    /// The stop's flag (stop and stopped lines only).
    pub connector_deleted: Option<bool>,
    /// The instance was started in cleanup-only mode.
    pub cleanup_only: bool,
    /// The call succeeded.
    pub ok: bool,
    /// The call's error text.
    pub error: Option<String>,
}

/// A stop an instance began, with how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// Executor that ran it.
    pub executor: String,
    /// The flag.
    pub connector_deleted: bool,
    /// True when the matching `stopped` line says ok; false when it failed or never
    /// completed.
    pub ok: bool,
    /// Instance id.
    pub instance: String,
    /// Instance was started cleanup-only.
    pub cleanup_only: bool,
}

/// Every event of a lifecycle file, in file order.
#[derive(Debug, Clone, Default)]
pub struct Lifecycle {
    /// The events.
    pub events: Vec<Event>,
}

impl Lifecycle {
    /// Reads `path`; a missing file is empty, and a torn last line (being written) is
    /// skipped.
    pub fn read(path: &Path) -> Self {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let events = text
            .lines()
            .filter_map(|l| serde_json::from_str::<Event>(l).ok())
            .collect();
        Self { events }
    }

    /// Whether any stop(true) (a `stop` line with `connector_deleted = true`) has begun.
    pub fn a_stop_true_began(&self) -> bool {
        self.events
            .iter()
            .any(|e| e.call == "stop" && e.connector_deleted == Some(true))
    }

    /// Events of one connector's task (`Some(i)`) or connector instance (`None`).
    pub fn of(&self, connector: &str, task: Option<u32>) -> Vec<&Event> {
        self.events
            .iter()
            .filter(|e| e.connector == connector && e.task == task)
            .collect()
    }

    /// Call names of one task or connector instance, in order.
    pub fn calls(&self, connector: &str, task: Option<u32>) -> Vec<String> {
        self.of(connector, task)
            .iter()
            .map(|e| e.call.clone())
            .collect()
    }

    /// How many `call` lines one task or connector instance has.
    pub fn count(&self, connector: &str, task: Option<u32>, call: &str) -> usize {
        self.of(connector, task)
            .iter()
            .filter(|e| e.call == call)
            .count()
    }

    /// Stops begun for a task (`Some(i)`) or the connector instance (`None`), each with
    /// the outcome of its `stopped` line.
    pub fn stops(&self, connector: &str, task: Option<u32>) -> Vec<Stop> {
        let events = self.of(connector, task);
        events
            .iter()
            .filter(|e| e.call == "stop")
            .map(|e| {
                let ok = events
                    .iter()
                    .any(|s| s.call == "stopped" && s.instance == e.instance && s.ok);
                Stop {
                    executor: e.executor.clone(),
                    connector_deleted: e.connector_deleted.unwrap_or(false),
                    ok,
                    instance: e.instance.clone(),
                    cleanup_only: e.cleanup_only,
                }
            })
            .collect()
    }

    /// [`Lifecycle::stops`] with `connector_deleted = true` (cleanups), in order.
    pub fn cleanups(&self, connector: &str, task: Option<u32>) -> Vec<Stop> {
        self.stops(connector, task)
            .into_iter()
            .filter(|s| s.connector_deleted)
            .collect()
    }

    /// `(executor, connector_deleted, ok)` of every stop of one task.
    pub fn stops_for(&self, connector: &str, task: u32) -> Vec<(String, bool, bool)> {
        self.stops(connector, Some(task))
            .into_iter()
            .map(|s| (s.executor, s.connector_deleted, s.ok))
            .collect()
    }

    /// Instance ids of one task or connector instance, in order of their `start`.
    pub fn instances(&self, connector: &str, task: Option<u32>) -> Vec<String> {
        self.of(connector, task)
            .iter()
            .filter(|e| e.call == "start")
            .map(|e| e.instance.clone())
            .collect()
    }

    /// Events of one instance.
    pub fn of_instance(&self, instance: &str) -> Vec<&Event> {
        self.events
            .iter()
            .filter(|e| e.instance == instance)
            .collect()
    }
}
