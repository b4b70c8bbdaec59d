//! Roles and the authorization decision: a pure function of (role, action), least
//! privilege first. The table is in docs/security.md ("Roles"); the tests below check
//! every cell.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An admin caller's role. Ordered: each role may do everything the one before it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads and watches: connectors, status, offsets, plugins, executors.
    Viewer,
    /// Also creates, updates, pauses, resumes, stops, restarts, and deletes with cleanup;
    /// reads the audit trail.
    Operator,
    /// Also deletes with `keep_resources` or `force`, alters or resets offsets, and retries
    /// cleanup: the calls that can leave external resources behind or skip data.
    Admin,
}

impl Role {
    /// The lowercase name used in token files and certificate identities.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "viewer" => Ok(Role::Viewer),
            "operator" => Ok(Role::Operator),
            "admin" => Ok(Role::Admin),
            other => Err(format!(
                "{other:?} is not a role; use viewer, operator or admin"
            )),
        }
    }
}

/// How a DeleteConnector asks to delete (its `force` and `keep_resources` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeleteMode {
    /// Every task and the connector instance get stop(connector_deleted = true): the
    /// plugin removes what it provisioned (the default).
    Cleanup,
    /// `keep_resources`: every instance gets stop(false); external resources stay.
    KeepResources,
    /// `force`: the cleanup steps still outstanding are skipped.
    Force,
    /// `force` and `keep_resources` together.
    ForceKeepResources,
}

impl DeleteMode {
    /// The mode of a request's flags.
    pub fn of(force: bool, keep_resources: bool) -> Self {
        match (force, keep_resources) {
            (false, false) => DeleteMode::Cleanup,
            (false, true) => DeleteMode::KeepResources,
            (true, false) => DeleteMode::Force,
            (true, true) => DeleteMode::ForceKeepResources,
        }
    }

    /// Name in the audit trail and logs: `cleanup`, `keep_resources`, `force`,
    /// `force_keep_resources`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeleteMode::Cleanup => "cleanup",
            DeleteMode::KeepResources => "keep_resources",
            DeleteMode::Force => "force",
            DeleteMode::ForceKeepResources => "force_keep_resources",
        }
    }
}

/// Every admin call a caller can make: one per `wharf.v1.ConnectorAdmin` RPC, with
/// DeleteConnector split by its mode, and the Kafka Connect REST gateway's two calls with
/// no RPC behind them (`/admin/loggers`). Each REST route maps to one of these
/// (`rest::rest_access`), so both adapters are decided by the same table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AdminAction {
    /// CreateConnector.
    CreateConnector,
    /// PutConnectorConfig.
    PutConnectorConfig,
    /// GetConnector.
    GetConnector,
    /// ListConnectors.
    ListConnectors,
    /// GetConnectorStatus.
    GetConnectorStatus,
    /// ValidateConnectorConfig (reads plugin definitions, changes nothing).
    ValidateConnectorConfig,
    /// ListConnectorPlugins.
    ListConnectorPlugins,
    /// PauseConnector.
    PauseConnector,
    /// ResumeConnector.
    ResumeConnector,
    /// StopConnector.
    StopConnector,
    /// RestartConnector.
    RestartConnector,
    /// RestartTask.
    RestartTask,
    /// DeleteConnector, in the given mode.
    DeleteConnector(DeleteMode),
    /// RetryCleanup.
    RetryCleanup,
    /// GetOffsets.
    GetOffsets,
    /// AlterOffsets.
    AlterOffsets,
    /// ResetOffsets.
    ResetOffsets,
    /// ListExecutors.
    ListExecutors,
    /// WatchConnector.
    WatchConnector,
    /// ListAuditEntries.
    ListAuditEntries,
    /// GetConnectorResources (reads a connector's resource ledger).
    GetConnectorResources,
    /// ListOrphanedResources.
    ListOrphanedResources,
    /// AdoptOrphanedResources (moves orphans into a connector's ledger: afterwards no
    /// list shows them as left behind).
    AdoptOrphanedResources,
    /// PurgeOrphanedResources (runs a deleted connector's cleanup code again, on demand).
    PurgeOrphanedResources,
    /// GetConnectorTopics (KIP-558: reads a connector's active topics).
    GetConnectorTopics,
    /// ResetConnectorTopics (KIP-558: empties a connector's active topics).
    ResetConnectorTopics,
    /// REST only: `GET /admin/loggers[/{logger}]` (reads log levels).
    GetLoggers,
    /// REST only: `PUT /admin/loggers/{logger}` (changes what this process logs, so it
    /// could hide events: an admin's call, and audited).
    SetLoggerLevel,
}

impl AdminAction {
    /// The RPC's name, as in `wharf.v1.ConnectorAdmin` (and the audit trail).
    pub fn rpc(self) -> &'static str {
        match self {
            AdminAction::CreateConnector => "CreateConnector",
            AdminAction::PutConnectorConfig => "PutConnectorConfig",
            AdminAction::GetConnector => "GetConnector",
            AdminAction::ListConnectors => "ListConnectors",
            AdminAction::GetConnectorStatus => "GetConnectorStatus",
            AdminAction::ValidateConnectorConfig => "ValidateConnectorConfig",
            AdminAction::ListConnectorPlugins => "ListConnectorPlugins",
            AdminAction::PauseConnector => "PauseConnector",
            AdminAction::ResumeConnector => "ResumeConnector",
            AdminAction::StopConnector => "StopConnector",
            AdminAction::RestartConnector => "RestartConnector",
            AdminAction::RestartTask => "RestartTask",
            AdminAction::DeleteConnector(_) => "DeleteConnector",
            AdminAction::RetryCleanup => "RetryCleanup",
            AdminAction::GetOffsets => "GetOffsets",
            AdminAction::AlterOffsets => "AlterOffsets",
            AdminAction::ResetOffsets => "ResetOffsets",
            AdminAction::ListExecutors => "ListExecutors",
            AdminAction::WatchConnector => "WatchConnector",
            AdminAction::ListAuditEntries => "ListAuditEntries",
            AdminAction::GetConnectorResources => "GetConnectorResources",
            AdminAction::ListOrphanedResources => "ListOrphanedResources",
            AdminAction::AdoptOrphanedResources => "AdoptOrphanedResources",
            AdminAction::PurgeOrphanedResources => "PurgeOrphanedResources",
            AdminAction::GetConnectorTopics => "GetConnectorTopics",
            AdminAction::ResetConnectorTopics => "ResetConnectorTopics",
            AdminAction::GetLoggers => "GetLoggers",
            AdminAction::SetLoggerLevel => "SetLoggerLevel",
        }
    }

    /// Whether the call can change state: these are recorded in the audit trail, accepted
    /// or refused.
    pub fn is_mutating(self) -> bool {
        match self {
            AdminAction::CreateConnector
            | AdminAction::PutConnectorConfig
            | AdminAction::PauseConnector
            | AdminAction::ResumeConnector
            | AdminAction::StopConnector
            | AdminAction::RestartConnector
            | AdminAction::RestartTask
            | AdminAction::DeleteConnector(_)
            | AdminAction::RetryCleanup
            | AdminAction::AlterOffsets
            | AdminAction::ResetOffsets
            | AdminAction::AdoptOrphanedResources
            | AdminAction::PurgeOrphanedResources
            | AdminAction::ResetConnectorTopics
            | AdminAction::SetLoggerLevel => true,
            AdminAction::GetConnector
            | AdminAction::ListConnectors
            | AdminAction::GetConnectorStatus
            | AdminAction::ValidateConnectorConfig
            | AdminAction::ListConnectorPlugins
            | AdminAction::GetOffsets
            | AdminAction::ListExecutors
            | AdminAction::WatchConnector
            | AdminAction::ListAuditEntries
            | AdminAction::GetConnectorResources
            | AdminAction::ListOrphanedResources
            | AdminAction::GetConnectorTopics
            | AdminAction::GetLoggers => false,
        }
    }

    /// The least role that may make the call.
    pub fn required_role(self) -> Role {
        match self {
            AdminAction::GetConnector
            | AdminAction::ListConnectors
            | AdminAction::GetConnectorStatus
            | AdminAction::ValidateConnectorConfig
            | AdminAction::ListConnectorPlugins
            | AdminAction::GetOffsets
            | AdminAction::ListExecutors
            | AdminAction::WatchConnector
            | AdminAction::GetConnectorResources
            | AdminAction::ListOrphanedResources
            | AdminAction::GetConnectorTopics
            | AdminAction::GetLoggers => Role::Viewer,
            AdminAction::CreateConnector
            | AdminAction::PutConnectorConfig
            | AdminAction::PauseConnector
            | AdminAction::ResumeConnector
            | AdminAction::StopConnector
            | AdminAction::RestartConnector
            | AdminAction::RestartTask
            | AdminAction::DeleteConnector(DeleteMode::Cleanup)
            | AdminAction::ResetConnectorTopics
            | AdminAction::ListAuditEntries => Role::Operator,
            // Calls that can leave a plugin's external resources behind, skip or replay
            // data, or re-run cleanup code on demand.
            AdminAction::DeleteConnector(
                DeleteMode::KeepResources | DeleteMode::Force | DeleteMode::ForceKeepResources,
            )
            | AdminAction::RetryCleanup
            | AdminAction::AlterOffsets
            | AdminAction::ResetOffsets
            | AdminAction::AdoptOrphanedResources
            | AdminAction::PurgeOrphanedResources
            | AdminAction::SetLoggerLevel => Role::Admin,
        }
    }
}

/// The least role that may store a config whose `cleanup.policy` is `give-up`
/// (`gives_up`) over one where it was (`stored_gives_up`; a create has none). Turning
/// `give-up` on lets a later deletion with cleanup finish with its cleanup skipped after
/// `cleanup.max.attempts`, which is what `force` does: so it needs the role `force` needs,
/// or an operator could skip a cleanup by a config change and a plain delete. Keeping
/// or turning off a policy an admin set stays an operator's call.
pub fn cleanup_policy_role(stored_gives_up: bool, gives_up: bool) -> Role {
    match (stored_gives_up, gives_up) {
        (false, true) => Role::Admin,
        (false, false) | (true, true) | (true, false) => Role::Operator,
    }
}

/// The answer of [`authorize`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The role may make the call.
    Allow,
    /// It may not; `needed` is the least role that may.
    Deny {
        /// The least role that may make the call.
        needed: Role,
    },
}

/// May `role` make `action`? Pure; the whole policy is [`AdminAction::required_role`].
pub fn authorize(role: Role, action: AdminAction) -> Decision {
    let needed = action.required_role();
    if role >= needed {
        Decision::Allow
    } else {
        Decision::Deny { needed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Decision = Decision::Allow;
    const OP: Decision = Decision::Deny {
        needed: Role::Operator,
    };
    const AD: Decision = Decision::Deny {
        needed: Role::Admin,
    };

    /// Every action with the expected decision for (viewer, operator, admin). The match
    /// in `covered` makes the compiler point here when an action is added.
    fn table() -> Vec<(AdminAction, [Decision; 3])> {
        use AdminAction as X;
        use DeleteMode as M;
        vec![
            (X::GetConnector, [A, A, A]),
            (X::ListConnectors, [A, A, A]),
            (X::GetConnectorStatus, [A, A, A]),
            (X::ValidateConnectorConfig, [A, A, A]),
            (X::ListConnectorPlugins, [A, A, A]),
            (X::GetOffsets, [A, A, A]),
            (X::ListExecutors, [A, A, A]),
            (X::WatchConnector, [A, A, A]),
            (X::CreateConnector, [OP, A, A]),
            (X::PutConnectorConfig, [OP, A, A]),
            (X::PauseConnector, [OP, A, A]),
            (X::ResumeConnector, [OP, A, A]),
            (X::StopConnector, [OP, A, A]),
            (X::RestartConnector, [OP, A, A]),
            (X::RestartTask, [OP, A, A]),
            (X::DeleteConnector(M::Cleanup), [OP, A, A]),
            (X::ListAuditEntries, [OP, A, A]),
            (X::DeleteConnector(M::KeepResources), [AD, AD, A]),
            (X::DeleteConnector(M::Force), [AD, AD, A]),
            (X::DeleteConnector(M::ForceKeepResources), [AD, AD, A]),
            (X::RetryCleanup, [AD, AD, A]),
            (X::AlterOffsets, [AD, AD, A]),
            (X::ResetOffsets, [AD, AD, A]),
            (X::GetLoggers, [A, A, A]),
            (X::SetLoggerLevel, [AD, AD, A]),
            (X::GetConnectorResources, [A, A, A]),
            (X::ListOrphanedResources, [A, A, A]),
            (X::AdoptOrphanedResources, [AD, AD, A]),
            (X::PurgeOrphanedResources, [AD, AD, A]),
            (X::GetConnectorTopics, [A, A, A]),
            (X::ResetConnectorTopics, [OP, A, A]),
        ]
    }

    fn covered(a: AdminAction) -> bool {
        // Exhaustive on purpose: a new action must get a row in `table`.
        match a {
            AdminAction::CreateConnector
            | AdminAction::PutConnectorConfig
            | AdminAction::GetConnector
            | AdminAction::ListConnectors
            | AdminAction::GetConnectorStatus
            | AdminAction::ValidateConnectorConfig
            | AdminAction::ListConnectorPlugins
            | AdminAction::PauseConnector
            | AdminAction::ResumeConnector
            | AdminAction::StopConnector
            | AdminAction::RestartConnector
            | AdminAction::RestartTask
            | AdminAction::DeleteConnector(
                DeleteMode::Cleanup
                | DeleteMode::KeepResources
                | DeleteMode::Force
                | DeleteMode::ForceKeepResources,
            )
            | AdminAction::RetryCleanup
            | AdminAction::GetOffsets
            | AdminAction::AlterOffsets
            | AdminAction::ResetOffsets
            | AdminAction::ListExecutors
            | AdminAction::WatchConnector
            | AdminAction::ListAuditEntries
            | AdminAction::GetConnectorResources
            | AdminAction::ListOrphanedResources
            | AdminAction::AdoptOrphanedResources
            | AdminAction::PurgeOrphanedResources
            | AdminAction::GetConnectorTopics
            | AdminAction::ResetConnectorTopics
            | AdminAction::GetLoggers
            | AdminAction::SetLoggerLevel => table().iter().any(|(x, _)| *x == a),
        }
    }

    #[test]
    fn every_cell_of_the_role_table_decides_as_documented() {
        let roles = [Role::Viewer, Role::Operator, Role::Admin];
        let mut cells = 0;
        for (action, expected) in table() {
            assert!(covered(action));
            for (role, want) in roles.iter().zip(expected) {
                assert_eq!(authorize(*role, action), want, "{role} calling {action:?}");
                cells += 1;
            }
        }
        // 26 RPCs, DeleteConnector split into 4 modes, and 2 REST-only calls: 31 actions
        // times 3 roles.
        assert_eq!(cells, 31 * 3);
    }

    #[test]
    fn a_viewer_may_not_delete_even_with_cleanup() {
        assert_eq!(
            authorize(
                Role::Viewer,
                AdminAction::DeleteConnector(DeleteMode::Cleanup)
            ),
            OP
        );
    }

    #[test]
    fn an_operator_deletes_with_cleanup_but_may_not_force_or_keep_resources() {
        let op = Role::Operator;
        assert_eq!(
            authorize(op, AdminAction::DeleteConnector(DeleteMode::Cleanup)),
            A
        );
        for m in [
            DeleteMode::Force,
            DeleteMode::KeepResources,
            DeleteMode::ForceKeepResources,
        ] {
            assert_eq!(authorize(op, AdminAction::DeleteConnector(m)), AD, "{m:?}");
        }
    }

    #[test]
    fn an_admin_may_force() {
        assert_eq!(
            authorize(Role::Admin, AdminAction::DeleteConnector(DeleteMode::Force)),
            A
        );
    }

    #[test]
    fn every_mutating_call_needs_at_least_an_operator_and_reads_stay_open_to_viewers() {
        for (action, _) in table() {
            if action.is_mutating() {
                assert!(action.required_role() >= Role::Operator, "{action:?}");
            } else if action != AdminAction::ListAuditEntries {
                assert_eq!(action.required_role(), Role::Viewer, "{action:?}");
            }
        }
    }

    #[test]
    fn turning_cleanup_give_up_on_needs_an_admin() {
        assert_eq!(cleanup_policy_role(false, true), Role::Admin);
    }

    #[test]
    fn keeping_cleanup_give_up_is_an_operators_call() {
        assert_eq!(cleanup_policy_role(true, true), Role::Operator);
    }

    #[test]
    fn turning_cleanup_give_up_off_is_an_operators_call() {
        assert_eq!(cleanup_policy_role(true, false), Role::Operator);
    }

    #[test]
    fn a_config_without_give_up_is_an_operators_call() {
        assert_eq!(cleanup_policy_role(false, false), Role::Operator);
    }

    #[test]
    fn delete_mode_follows_the_flags() {
        assert_eq!(DeleteMode::of(false, false), DeleteMode::Cleanup);
        assert_eq!(DeleteMode::of(false, true), DeleteMode::KeepResources);
        assert_eq!(DeleteMode::of(true, false), DeleteMode::Force);
        assert_eq!(DeleteMode::of(true, true), DeleteMode::ForceKeepResources);
    }

    #[test]
    fn roles_parse_from_their_names_only() {
        for r in [Role::Viewer, Role::Operator, Role::Admin] {
            assert_eq!(r.as_str().parse::<Role>(), Ok(r));
        }
        assert!("root".parse::<Role>().is_err());
        assert!("Admin".parse::<Role>().is_err());
    }
}
