//! The checks, one public method per rule of the lifecycle contract (docs/contract.md),
//! each its own ordinary test for the author; [`Kit::all`] runs them in the order of
//! [`CHECKS`].

use std::collections::{BTreeMap, BTreeSet};

use wharf_sdk::{PluginKind, SinkRecord, TopicPartition};

use super::{Kit, Task};
use crate::bounds::CallKind;
use crate::report::{
    CHECKS, CheckFailed, CheckResult, Report, checks_for, fail, nothing_checked, record,
};
use crate::{FIRST_INCARNATION, Probe, RECORDS_PER_TASK, SECOND_INCARNATION};

impl<P: Probe> Kit<P> {
    /// Start then `stop(false)`, a restart (fresh instances of the same incarnation), a
    /// reconfiguration (the connector recomputes task configs and the tasks restart)
    /// and a pause/STOPPED (`stop(false)` on everything): nothing the probe lists
    /// disappears.
    ///
    /// # Errors
    /// [`CheckFailed`] naming the step after which a resource was gone.
    pub async fn plain_stops_keep_resources(&self) -> CheckResult {
        const CHECK: &str = "plain_stops_keep_resources";
        let name = self.name("plain", "a");
        let (mut r, before) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.stop(CHECK, &mut r, false).await?;
        self.expect_kept(
            CHECK,
            "stop(false) on every task and the connector",
            &r,
            &before,
        )
        .await?;
        for step in ["a restart", "a reconfiguration", "a pause or STOPPED"] {
            let mut again = self
                .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, false)
                .await?;
            self.expect_kept(CHECK, &format!("the start after {step}"), &again, &before)
                .await?;
            self.stop(CHECK, &mut again, false).await?;
            self.expect_kept(CHECK, &format!("{step} (stop(false))"), &again, &before)
                .await?;
        }
        let mut cleanup = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, false)
            .await?;
        self.delete_at_end(CHECK, &mut cleanup).await
    }

    /// A lower `tasks.max`: the tasks no longer wanted get `stop(false)` and nothing the
    /// probe lists disappears.
    ///
    /// # Errors
    /// [`CheckFailed`].
    pub async fn lower_tasks_max_keeps_resources(&self) -> CheckResult {
        const CHECK: &str = "lower_tasks_max_keeps_resources";
        let name = self.name("shrink", "a");
        let (mut r, before) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.stop(CHECK, &mut r, false).await?;
        let fewer = self.tasks_max.saturating_sub(1).max(1);
        let mut smaller = self
            .start(CHECK, &name, FIRST_INCARNATION, fewer, false)
            .await?;
        self.expect_kept(
            CHECK,
            &format!("a restart with tasks.max {fewer}"),
            &smaller,
            &before,
        )
        .await?;
        self.stop(CHECK, &mut smaller, false).await?;
        self.expect_kept(
            CHECK,
            "stop(false) after lowering tasks.max",
            &smaller,
            &before,
        )
        .await?;
        let mut cleanup = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, false)
            .await?;
        self.delete_at_end(CHECK, &mut cleanup).await
    }

    /// `stop(true)` on the tasks then the connector removes everything the probe lists.
    ///
    /// # Errors
    /// [`CheckFailed`] listing what was left.
    pub async fn delete_removes_everything(&self) -> CheckResult {
        const CHECK: &str = "delete_removes_everything";
        let name = self.name("delete", "a");
        let (mut r, _) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.delete(CHECK, &mut r).await
    }

    /// `stop(true)` twice on the same instances, then `stop(true)` on fresh cleanup-only
    /// instances after the first cleanup ran: every call succeeds and changes nothing
    /// more (cleanup is at least once).
    ///
    /// # Errors
    /// [`CheckFailed`] naming the repeated call that failed or what it changed.
    pub async fn repeated_cleanup_is_a_no_op(&self) -> CheckResult {
        const CHECK: &str = "repeated_cleanup_is_a_no_op";
        let name = self.name("twice", "a");
        let pre = self.pre_existing(CHECK, &name).await?;
        let (mut r, _) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.delete(CHECK, &mut r).await?;
        self.stop(CHECK, &mut r, true).await.map_err(|e| {
            fail(
                CHECK,
                format!("a second stop(true) on the same instances: {}", e.message),
            )
        })?;
        self.expect_empty(CHECK, "a second stop(true)", &r).await?;
        let mut fresh = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, true)
            .await?;
        self.stop(CHECK, &mut fresh, true).await.map_err(|e| {
            fail(
                CHECK,
                format!(
                    "stop(true) on fresh cleanup-only instances after the cleanup ran: {}",
                    e.message
                ),
            )
        })?;
        self.expect_empty(CHECK, "a re-run cleanup", &fresh).await?;
        self.expect_pre_existing(CHECK, &name, &pre).await
    }

    /// `stop(true)` on cleanup-only instances of a connector whose start never ran:
    /// no error, nothing listed.
    ///
    /// # Errors
    /// [`CheckFailed`].
    pub async fn cleanup_without_start_succeeds(&self) -> CheckResult {
        const CHECK: &str = "cleanup_without_start_succeeds";
        let name = self.name("never", "a");
        let pre = self.pre_existing(CHECK, &name).await?;
        let mut r = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, true)
            .await?;
        if let Ok(owned) = self.owned(CHECK, &r).await
            && !owned.is_empty()
        {
            return Err(fail(
                CHECK,
                format!(
                    "a cleanup-only start provisioned {owned:?}: it must only prepare the stop(true)"
                ),
            ));
        }
        self.stop(CHECK, &mut r, true).await?;
        self.expect_empty(CHECK, "a cleanup of a connector that never started", &r)
            .await?;
        self.expect_pre_existing(CHECK, &name, &pre).await
    }

    /// After a start that failed halfway, `stop(true)` on cleanup-only instances removes
    /// what exists, without error. The half-made state: the kit offers the resources the
    /// start made to [`Probe::remove`], in order, until it removes one.
    ///
    /// # Errors
    /// [`CheckFailed`]; with [`CheckFailed::checked_nothing`] when `Probe::remove`
    /// removed none of them (after deleting the connector, so nothing is left).
    pub async fn cleanup_after_half_start_succeeds(&self) -> CheckResult {
        const CHECK: &str = "cleanup_after_half_start_succeeds";
        let name = self.name("half", "a");
        let (mut r, owned) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.stop(CHECK, &mut r, false).await?;
        let mut removed = None;
        for resource in &owned {
            let gone = self
                .probe
                .remove(resource)
                .await
                .map_err(|e| fail(CHECK, format!("probe could not remove {resource}: {e}")))?;
            if gone {
                removed = Some(resource);
                break;
            }
        }
        let mut cleanup = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, true)
            .await?;
        let Some(removed) = removed else {
            self.delete_at_end(CHECK, &mut cleanup).await?;
            return Err(nothing_checked(
                CHECK,
                format!(
                    "checked nothing: Probe::remove removed none of {owned:?} (it returned Ok(false) for each; the default does), so there was no half-made state to clean up: implement Probe::remove to delete one resource behind the plugin's back the way a start that failed halfway would leave it"
                ),
            ));
        };
        self.stop(CHECK, &mut cleanup, true).await?;
        self.expect_empty(
            CHECK,
            &format!("the cleanup after a half-made provisioning (the probe removed {removed})"),
            &cleanup,
        )
        .await
    }

    /// Two connectors of the plugin side by side: deleting one leaves every resource of
    /// the other.
    ///
    /// # Errors
    /// [`CheckFailed`] listing what of the survivor was removed.
    pub async fn deleting_one_connector_leaves_another(&self) -> CheckResult {
        const CHECK: &str = "deleting_one_connector_leaves_another";
        let (a, b) = (self.name("pair", "a"), self.name("pair", "b"));
        let (mut ra, _) = self.provisioned(CHECK, &a, self.tasks_max).await?;
        let (mut rb, owned_b) = self.provisioned(CHECK, &b, self.tasks_max).await?;
        self.delete(CHECK, &mut ra).await?;
        self.expect_kept(CHECK, &format!("deleting {a}"), &rb, &owned_b)
            .await?;
        self.delete_at_end(CHECK, &mut rb).await
    }

    /// A resource the probe marks as pre-existing (made by the user) is never removed:
    /// not by plain stops, not by the deletion.
    ///
    /// # Errors
    /// [`CheckFailed`] listing the user's resources that went; with
    /// [`CheckFailed::checked_nothing`] when [`Probe::pre_existing`] lists none.
    pub async fn pre_existing_resources_survive(&self) -> CheckResult {
        const CHECK: &str = "pre_existing_resources_survive";
        let name = self.name("user", "a");
        let pre = self.pre_existing(CHECK, &name).await?;
        if pre.is_empty() {
            return Err(nothing_checked(
                CHECK,
                format!(
                    "checked nothing: Probe::pre_existing lists no resource for {name} (the default lists none): implement it to list the resources the user made that the connector uses and must never remove (a watched table, a pre-declared queue), or leave this check out when the plugin uses none"
                ),
            ));
        }
        let (mut r, _) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.stop(CHECK, &mut r, false).await?;
        self.expect_pre_existing(CHECK, &name, &pre).await?;
        let mut again = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, false)
            .await?;
        self.delete_at_end(CHECK, &mut again).await?;
        self.expect_pre_existing(CHECK, &name, &pre).await
    }

    /// A late `stop(true)` of a deleted incarnation leaves what a re-created connector of
    /// the same name made (docs/connector-guide.md section 3, step 3). Incarnation 1 of
    /// the connector starts and provisions; its deletion's `stop(true)` overruns its
    /// timeout, so those instances are abandoned and the cleanup runs on fresh
    /// cleanup-only instances (docs/contract.md, "Abandoned instances stay visible"),
    /// which remove everything. The connector is created again (incarnation 2) and
    /// provisions; then the abandoned instances of incarnation 1 get their
    /// `stop(true)` after all, tasks then connector, and so do fresh cleanup-only ones
    /// (a retried cleanup): each must succeed and leave every resource of incarnation
    /// 2. Incarnation 2 then restarts over its own resources and its own deletion
    /// removes them.
    ///
    /// # Errors
    /// [`CheckFailed`] naming the late stop that removed incarnation 2's resources (or
    /// failed), or the step of incarnation 2 that no longer worked.
    pub async fn late_cleanup_leaves_a_re_created_connector(&self) -> CheckResult {
        const CHECK: &str = "late_cleanup_leaves_a_re_created_connector";
        let name = self.name("late", "a");
        let pre = self.pre_existing(CHECK, &name).await?;
        let (abandoned, _) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        let mut cleanup = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, true)
            .await?;
        self.delete(CHECK, &mut cleanup).await?;
        let mut second = self
            .start(CHECK, &name, SECOND_INCARNATION, self.tasks_max, false)
            .await
            .map_err(|e| {
                fail(
                    CHECK,
                    format!(
                        "{name} created again ({SECOND_INCARNATION}) after {FIRST_INCARNATION}'s cleanup removed everything: {}",
                        e.message
                    ),
                )
            })?;
        let made = self.owned(CHECK, &second).await?;
        let made_by = format!(
            "which {SECOND_INCARNATION} of {name} (the connector created again under the same name) made"
        );
        if made.is_empty() {
            return Err(fail(
                CHECK,
                format!(
                    "after the start of {SECOND_INCARNATION} the probe lists nothing that {name} owns: check the probe"
                ),
            ));
        }
        for (i, t) in abandoned.tasks.iter().enumerate() {
            self.stop_task(
                CHECK,
                format!("the late stop(true) of {FIRST_INCARNATION}'s task {name}/{i}"),
                t,
                true,
            )
            .await?;
            self.expect_other_incarnation_kept(
                CHECK,
                &format!("the late stop(true) of {FIRST_INCARNATION}'s task {name}/{i}"),
                &second,
                &made,
                &made_by,
            )
            .await?;
        }
        self.stop_connector(
            CHECK,
            format!("the late stop(true) of {FIRST_INCARNATION}'s connector instance {name}"),
            &abandoned.connector,
            true,
        )
        .await?;
        self.expect_other_incarnation_kept(
            CHECK,
            &format!("the late stop(true) of {FIRST_INCARNATION}'s connector instance {name}"),
            &second,
            &made,
            &made_by,
        )
        .await?;
        let mut retried = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, true)
            .await?;
        self.stop(CHECK, &mut retried, true).await?;
        self.expect_other_incarnation_kept(
            CHECK,
            &format!("a retried cleanup of {FIRST_INCARNATION} (stop(true) on fresh cleanup-only instances)"),
            &second,
            &made, &made_by)
        .await?;
        self.stop(CHECK, &mut second, false).await?;
        let mut restarted = self
            .start(CHECK, &name, SECOND_INCARNATION, self.tasks_max, false)
            .await
            .map_err(|e| {
                fail(
                    CHECK,
                    format!(
                        "{SECOND_INCARNATION} no longer restarts after {FIRST_INCARNATION}'s late cleanup: {}",
                        e.message
                    ),
                )
            })?;
        self.expect_other_incarnation_kept(
            CHECK,
            &format!("{FIRST_INCARNATION}'s late cleanup and a restart of {SECOND_INCARNATION}"),
            &restarted,
            &made,
            &made_by,
        )
        .await?;
        self.delete_at_end(CHECK, &mut restarted).await?;
        self.expect_pre_existing(CHECK, &name, &pre).await
    }

    /// A start refuses resources another incarnation owns (docs/connector-guide.md
    /// section 3, step 3; docs/lifecycle.md: `audit.adopt=never`, the default, refuses).
    /// Incarnation 1 provisions and is deleted with `keep_resources` (`stop(false)` on
    /// everything: what it made stays, still naming it as owner); the connector is
    /// created again (incarnation 2) with the same config. Its start (the connector
    /// instance's or a task's) must fail, remove nothing, and the deletion of the
    /// refused connector (`stop(true)` on the instances that exist, then on fresh
    /// cleanup-only instances) must succeed and leave what incarnation 1 kept. The kit
    /// then removes the kept resources with a cleanup of incarnation 1.
    ///
    /// A plugin that takes kept resources over only when its config says so (like the
    /// audit sources' `audit.adopt`) passes with its default config.
    ///
    /// # Errors
    /// [`CheckFailed`] when incarnation 2 started over the kept resources, or a step
    /// removed some of them.
    pub async fn start_refuses_what_another_incarnation_kept(&self) -> CheckResult {
        const CHECK: &str = "start_refuses_what_another_incarnation_kept";
        let name = self.name("kept", "a");
        let pre = self.pre_existing(CHECK, &name).await?;
        let (mut first, kept) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        self.stop(CHECK, &mut first, false).await?;
        self.expect_kept(
            CHECK,
            "a deletion with keep_resources (stop(false))",
            &first,
            &kept,
        )
        .await?;
        let made_by = format!(
            "which {FIRST_INCARNATION} of {name} made and kept (deleted with keep_resources)"
        );
        let mut second = self.instance(&name, self.tasks_max);
        let refused = self
            .start_into(
                CHECK,
                &mut second,
                SECOND_INCARNATION,
                self.tasks_max,
                false,
            )
            .await?;
        let Some(refusal) = refused else {
            return Err(fail(
                CHECK,
                format!(
                    "{name} created again ({SECOND_INCARNATION}) started over {kept:?}, which {FIRST_INCARNATION} made and kept (deleted with keep_resources): a start must refuse resources another incarnation owns, or a later cleanup of either incarnation removes what the other uses (docs/connector-guide.md section 3, step 3)"
                ),
            ));
        };
        self.expect_other_incarnation_kept(
            CHECK,
            &format!("the refused start of {SECOND_INCARNATION} ({refusal})"),
            &first,
            &kept,
            &made_by,
        )
        .await?;
        self.stop(CHECK, &mut second, true).await.map_err(|e| {
            fail(
                CHECK,
                format!(
                    "deleting the refused {SECOND_INCARNATION} (stop(true) on the instances whose start failed): {}",
                    e.message
                ),
            )
        })?;
        self.expect_other_incarnation_kept(
            CHECK,
            &format!("the stop(true) of the refused {SECOND_INCARNATION}"),
            &first,
            &kept,
            &made_by,
        )
        .await?;
        let mut rehosted = self
            .start(CHECK, &name, SECOND_INCARNATION, self.tasks_max, true)
            .await?;
        self.stop(CHECK, &mut rehosted, true).await?;
        self.expect_other_incarnation_kept(
            CHECK,
            &format!(
                "the cleanup of the refused {SECOND_INCARNATION} on fresh cleanup-only instances"
            ),
            &first,
            &kept,
            &made_by,
        )
        .await?;
        let mut tidy = self
            .start(CHECK, &name, FIRST_INCARNATION, self.tasks_max, true)
            .await?;
        self.delete_at_end(CHECK, &mut tidy).await?;
        self.expect_pre_existing(CHECK, &name, &pre).await
    }

    /// For a sink plugin: records move through `put` and `flush` the way the executor
    /// drives them, and a sink acknowledges only what is durable. Each task gets
    /// [`RECORDS_PER_TASK`] records in two `put` batches, then one `flush` (after which
    /// the runtime acknowledges them and never delivers them again): right after that
    /// `flush` returned, [`Probe::delivered`] MUST list every one of them. A sink whose
    /// `flush` returns before the external system holds the records (a broker confirm
    /// not awaited, a buffer not written) fails here. The topic is the first of the
    /// config's `topics` (or `kit`).
    ///
    /// # Errors
    /// [`CheckFailed`] listing the acknowledged records the probe does not see, or
    /// saying the plugin is not a sink or the probe cannot read records.
    pub async fn sink_acknowledges_only_flushed_records(&self) -> CheckResult {
        const CHECK: &str = "sink_acknowledges_only_flushed_records";
        if self.plugin.kind() != PluginKind::Sink {
            return Err(fail(
                CHECK,
                format!("{} is not a sink plugin", self.plugin.name),
            ));
        }
        let name = self.name("flush", "a");
        let (mut r, _) = self.provisioned(CHECK, &name, self.tasks_max).await?;
        let topic = r
            .config
            .get("topics")
            .and_then(|t| t.split(',').map(str::trim).find(|t| !t.is_empty()))
            .unwrap_or("kit")
            .to_owned();
        let mut sent = Vec::new();
        for (i, task) in r.tasks.iter().enumerate() {
            if !matches!(*task.lock().await, Task::Sink(_)) {
                continue;
            }
            let records: Vec<SinkRecord> = (0..RECORDS_PER_TASK)
                .map(|offset| SinkRecord {
                    topic: topic.clone(),
                    key: Some(format!("task-{i}").into_bytes()),
                    value: format!("{name}/task-{i}/record-{offset}").into_bytes(),
                    headers: vec![("kit".to_owned(), b"1".to_vec())],
                    timestamp_ms: Some(1_700_000_000_000 + offset as i64),
                    partition: 0,
                    offset: offset + (i as u64) * RECORDS_PER_TASK,
                    data: None,
                })
                .collect();
            sent.extend(records.iter().map(|r| r.value.clone()));
            let (first, second) = records.split_at(records.len() / 2);
            for batch in [first, second] {
                let (t, batch) = (task.clone(), batch.to_vec());
                self.call(
                    CHECK,
                    format!("task {name}/{i} put({} records)", batch.len()),
                    CallKind::Other,
                    async move { t.lock().await.put(batch).await },
                )
                .await?;
            }
            let next = BTreeMap::from([(
                TopicPartition::new(topic.clone(), 0),
                (i as u64 + 1) * RECORDS_PER_TASK,
            )]);
            let t = task.clone();
            self.call(
                CHECK,
                format!("task {name}/{i} flush"),
                CallKind::Other,
                async move { t.lock().await.flush(&next).await },
            )
            .await?;
        }
        if sent.is_empty() {
            return Err(fail(
                CHECK,
                format!("{name} started no task: nothing was put"),
            ));
        }
        let held = self
            .probe
            .delivered(&name, &r.config)
            .await
            .map_err(|e| fail(CHECK, format!("probe could not read the records: {e}")))?
            .ok_or_else(|| {
                fail(
                    CHECK,
                    "the probe does not implement Probe::delivered: it must list the record values the external system holds".to_owned(),
                )
            })?;
        let held: BTreeSet<Vec<u8>> = held.into_iter().collect();
        let missing: Vec<String> = sent
            .iter()
            .filter(|v| !held.contains(*v))
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        if !missing.is_empty() {
            return Err(fail(
                CHECK,
                format!(
                    "flush returned, so the runtime acknowledges these {} records and never delivers them again, but the external system does not hold them: {missing:?}",
                    missing.len()
                ),
            ));
        }
        self.delete_at_end(CHECK, &mut r).await
    }

    /// Every check that applies to the plugin's kind, in the order of [`CHECKS`] (the
    /// cleanup checks first); stops at the first failure. For a sink plugin this
    /// includes [`Kit::sink_acknowledges_only_flushed_records`]. A check that could not
    /// check anything ([`CheckFailed::checked_nothing`]: the probe does not list
    /// pre-existing resources, or cannot remove one) is skipped: listed in the
    /// [`Report`] and on stderr, the others still run.
    ///
    /// # Errors
    /// The first [`CheckFailed`] that is not a skip.
    pub async fn all(&self) -> Result<Report, CheckFailed> {
        let mut report = Report::default();
        for check in checks_for(self.plugin.kind()) {
            let outcome = self.run(check).await;
            if let Err(e) = &outcome
                && e.checked_nothing
            {
                // Shown with --nocapture or when the test fails: a skip must not pass unseen.
                eprintln!("wharf-testkit: skipped {e}");
            }
            record(&mut report, check, outcome)?;
        }
        Ok(report)
    }

    /// Runs the check named `check` (one of [`CHECKS`]).
    ///
    /// # Errors
    /// The check's [`CheckFailed`]; one naming `check` when no check has that name.
    pub async fn run(&self, check: &str) -> CheckResult {
        match check {
            "delete_removes_everything" => self.delete_removes_everything().await,
            "repeated_cleanup_is_a_no_op" => self.repeated_cleanup_is_a_no_op().await,
            "cleanup_without_start_succeeds" => self.cleanup_without_start_succeeds().await,
            "cleanup_after_half_start_succeeds" => self.cleanup_after_half_start_succeeds().await,
            "plain_stops_keep_resources" => self.plain_stops_keep_resources().await,
            "lower_tasks_max_keeps_resources" => self.lower_tasks_max_keeps_resources().await,
            "deleting_one_connector_leaves_another" => {
                self.deleting_one_connector_leaves_another().await
            }
            "pre_existing_resources_survive" => self.pre_existing_resources_survive().await,
            "late_cleanup_leaves_a_re_created_connector" => {
                self.late_cleanup_leaves_a_re_created_connector().await
            }
            "start_refuses_what_another_incarnation_kept" => {
                self.start_refuses_what_another_incarnation_kept().await
            }
            "ledger_declares_before_creating" => self.ledger_declares_before_creating().await,
            "plain_stop_releases_nothing" => self.plain_stop_releases_nothing().await,
            "delete_releases_every_created_entry" => {
                self.delete_releases_every_created_entry().await
            }
            "sink_acknowledges_only_flushed_records" => {
                self.sink_acknowledges_only_flushed_records().await
            }
            other => Err(fail(
                "run",
                format!("no check is named {other:?}; the checks: {CHECKS:?}"),
            )),
        }
    }
}
