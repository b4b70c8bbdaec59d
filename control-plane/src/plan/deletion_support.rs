//! Whether a deletion's stop cleans anything up: a plugin says, for its connector class
//! and its task class, whether a deletion reaches them (`wharf.v1.PluginInfo`'s
//! `connector_deletion` and `task_deletion`, KIP-883/KIP-901). A Kafka Connect class
//! without a public `stop(boolean)` gets a plain `stop()` on deletion and cleans nothing
//! up: its step says so (`cleanup: not supported by plugin`) instead of claiming a cleanup.

use wharf::pb::v1 as pb;

/// True when a step's stop passes `connector_deleted = true` to a class that declared it
/// has no deletion-aware stop. A plugin that says nothing (a Rust plugin, whose SDK
/// `stop_with` may be implemented) or is not known now is not marked. Pure.
pub fn cleanup_not_supported(
    plugin: Option<&pb::PluginInfo>,
    task: Option<u32>,
    connector_deleted: bool,
) -> bool {
    let Some(p) = plugin else {
        return false;
    };
    let support = match task {
        Some(_) => p.task_deletion,
        None => p.connector_deletion,
    };
    match (connector_deleted, pb::DeletionSupport::try_from(support)) {
        (true, Ok(pb::DeletionSupport::None)) => true,
        (true, Ok(pb::DeletionSupport::Declared | pb::DeletionSupport::Unspecified) | Err(_)) => {
            false
        }
        (false, _) => false,
    }
}

/// Marks the steps of a deletion's status with [`cleanup_not_supported`].
pub fn mark_status(status: &mut pb::DeletionStatus, plugin: Option<&pb::PluginInfo>) {
    for s in &mut status.steps {
        s.cleanup_not_supported = cleanup_not_supported(plugin, s.task, s.connector_deleted);
    }
}

/// Marks the steps of a deletion plan with [`cleanup_not_supported`].
pub fn mark_plan(plan: &mut pb::DeletionPlan, plugin: Option<&pb::PluginInfo>) {
    for s in &mut plan.steps {
        s.cleanup_not_supported = cleanup_not_supported(plugin, s.task, s.connector_deleted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(connector: pb::DeletionSupport, task: pb::DeletionSupport) -> pb::PluginInfo {
        pb::PluginInfo {
            name: "p".into(),
            connector_deletion: connector as i32,
            task_deletion: task as i32,
            ..Default::default()
        }
    }

    #[test]
    fn a_class_without_a_deletion_aware_stop_is_marked_on_a_deletion() {
        let p = plugin(pb::DeletionSupport::Declared, pb::DeletionSupport::None);
        assert!(cleanup_not_supported(Some(&p), Some(0), true));
        assert!(!cleanup_not_supported(Some(&p), None, true));
        let p = plugin(pb::DeletionSupport::None, pb::DeletionSupport::Declared);
        assert!(cleanup_not_supported(Some(&p), None, true));
        assert!(!cleanup_not_supported(Some(&p), Some(1), true));
    }

    #[test]
    fn keeping_resources_is_never_marked() {
        let p = plugin(pb::DeletionSupport::None, pb::DeletionSupport::None);
        assert!(!cleanup_not_supported(Some(&p), Some(0), false));
        assert!(!cleanup_not_supported(Some(&p), None, false));
    }

    #[test]
    fn a_plugin_that_says_nothing_or_is_unknown_is_not_marked() {
        let p = plugin(
            pb::DeletionSupport::Unspecified,
            pb::DeletionSupport::Unspecified,
        );
        assert!(!cleanup_not_supported(Some(&p), Some(0), true));
        assert!(!cleanup_not_supported(Some(&p), None, true));
        assert!(!cleanup_not_supported(None, None, true));
        let mut odd = p.clone();
        odd.task_deletion = 99;
        assert!(!cleanup_not_supported(Some(&odd), Some(0), true));
    }

    #[test]
    fn the_status_and_the_plan_are_marked_per_step() {
        let p = plugin(pb::DeletionSupport::Declared, pb::DeletionSupport::None);
        let mut status = pb::DeletionStatus {
            steps: vec![
                pb::CleanupStep {
                    task: Some(0),
                    connector_deleted: true,
                    ..Default::default()
                },
                pb::CleanupStep {
                    task: None,
                    connector_deleted: true,
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        mark_status(&mut status, Some(&p));
        assert!(status.steps[0].cleanup_not_supported);
        assert!(!status.steps[1].cleanup_not_supported);
        let mut plan = pb::DeletionPlan {
            steps: vec![pb::DeletionPlanStep {
                task: Some(0),
                connector_deleted: true,
                ..Default::default()
            }],
            ..Default::default()
        };
        mark_plan(&mut plan, Some(&p));
        assert!(plan.steps[0].cleanup_not_supported);
    }
}
