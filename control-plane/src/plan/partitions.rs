//! Which partitions of a sink connector's topics each of its tasks reads.
//!
//! The control plane gives every sink task a *share* with its assignment: task `index` of
//! the connector's `count` tasks. The executor's record log reads, for that task, the
//! partitions the share owns (on Kafka: partition `p` of topic `t` when
//! `(FNV-1a-32(t) + p) mod count = index`; the one-partition logs share their records
//! among readers whatever the share). So the tasks of one sink read disjoint sets of
//! partitions that cover every partition, whichever executors run them, without a
//! consumer-group rebalance and without the control plane knowing the topics' partitions
//! (a partition added to a topic has its owner at once).
//!
//! Two rules keep each partition read by one task at a time: a task keeps its share for as
//! long as it runs (the share goes out with the start, at a new generation), and when the
//! number of tasks changes every running task of the sink restarts with its new share
//! (the herder stops the old instances before it starts the new ones).

use wharf::sdk::ConfigMap;

/// Task `index` of `count` tasks of one connector (`index < count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionShare {
    /// The task's place, from 0.
    pub index: u32,
    /// How many tasks the connector has.
    pub count: u32,
}

/// The share of task `task` of a connector with `tasks` task configs; `None` for a task
/// beyond them (it is stopped, not started).
pub fn share_of(task: u32, tasks: usize) -> Option<PartitionShare> {
    let count = u32::try_from(tasks).ok()?;
    (task < count).then_some(PartitionShare { index: task, count })
}

/// Whether a connector reads topics (a sink): its config names `topics` or
/// `topics.regex`, one of which Kafka Connect requires of every sink connector.
pub fn reads_topics(config: &ConfigMap) -> bool {
    config.contains_key("topics") || config.contains_key("topics.regex")
}

/// Whether the tasks a connector keeps across new task configs must restart for their
/// shares: a sink whose number of tasks changed (every share's `count` changed, so the
/// partitions each task owns moved). A source has no shares; an unchanged number keeps
/// every share.
pub fn shares_moved(connector_config: &ConfigMap, old_tasks: usize, new_tasks: usize) -> bool {
    reads_topics(connector_config) && old_tasks != new_tasks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(keys: &[&str]) -> ConfigMap {
        keys.iter()
            .map(|k| ((*k).to_string(), "x".to_string()))
            .collect()
    }

    #[test]
    fn each_task_gets_its_place_among_the_connectors_tasks() {
        assert_eq!(share_of(0, 1), Some(PartitionShare { index: 0, count: 1 }));
        assert_eq!(share_of(3, 4), Some(PartitionShare { index: 3, count: 4 }));
    }

    #[test]
    fn a_task_beyond_the_task_configs_has_no_share() {
        assert_eq!(share_of(4, 4), None);
        assert_eq!(share_of(0, 0), None);
    }

    #[test]
    fn a_connector_with_topics_or_a_topic_pattern_reads_topics() {
        assert!(reads_topics(&config(&["topics"])));
        assert!(reads_topics(&config(&["topics.regex"])));
        assert!(!reads_topics(&config(&["file", "topic"])));
    }

    #[test]
    fn a_sink_whose_task_count_grew_or_shrank_restarts_its_kept_tasks() {
        assert!(shares_moved(&config(&["topics"]), 4, 5));
        assert!(shares_moved(&config(&["topics.regex"]), 5, 4));
    }

    #[test]
    fn a_sink_with_as_many_tasks_as_before_keeps_its_tasks() {
        assert!(!shares_moved(&config(&["topics"]), 4, 4));
    }

    #[test]
    fn a_source_keeps_its_tasks_whatever_their_number() {
        assert!(!shares_moved(&config(&["topic"]), 4, 5));
    }
}
