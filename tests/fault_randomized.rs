//! A seeded, reproducible random schedule of creates, deletes, restarts, executor kills
//! (kill -9, then a start again under the same id) and control-plane restarts (kill -9,
//! then a start on the same data dir), a few hundred steps against real processes; then
//! the contract's invariants:
//! - every deleted connector's tasks and connector instance each saw a completed
//!   stop(true), none before its delete was sent;
//! - no live connector's instance ever saw stop(true), and every live connector runs again;
//! - the store holds nothing of deleted connectors: the admin API lists exactly the live
//!   ones, and, once the control plane is stopped, its store file has no connector,
//!   deletion or offset key of any other name.
//!
//! The seed is printed; set `WHARF_RANDOMIZED_SEED` to replay one, and
//! `WHARF_RANDOMIZED_STEPS` to change the length (default [`DEFAULT_STEPS`]).
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use wharf_harness::cluster::{FAILED_PRECONDITION, NOT_FOUND};
use wharf_harness::fault::{completed_trues, gone, now_ms, start_mtls_cluster, store_names};
use wharf_harness::lifecycle::Lifecycle;
use wharf_harness::rng::Rng;
use wharf_harness::wait_until;

/// Steps of the schedule when `WHARF_RANDOMIZED_STEPS` is unset.
const DEFAULT_STEPS: usize = 300;
/// Executors in the cluster.
const EXECUTORS: usize = 3;
/// Connector names the schedule draws from (so that names are reused after deletions).
const NAMES: usize = 6;
/// Longest "let time pass" step, in milliseconds.
const MAX_IDLE_MS: u64 = 300;
/// Upper bound for the cluster to settle after the schedule.
const SETTLE: Duration = Duration::from_secs(120);

/// One incarnation of a connector: its own lifecycle file.
#[derive(Debug, Clone)]
struct Incarnation {
    name: String,
    lifecycle: PathBuf,
    /// When its delete was sent, Unix ms; None while live.
    deleted_at: Option<i64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn randomized_creates_deletes_restarts_and_crashes_keep_the_cleanup_invariants() {
    let (mut rng, seed) = Rng::from_env("WHARF_RANDOMIZED_SEED");
    let steps = std::env::var("WHARF_RANDOMIZED_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_STEPS);
    eprintln!("randomized seed: WHARF_RANDOMIZED_SEED={seed} (steps {steps})");
    let mut c = start_mtls_cluster(EXECUTORS, &[]).await;
    let mut alive = [true; EXECUTORS];
    let mut incs: Vec<Incarnation> = Vec::new();
    // Name -> index into incs of its live incarnation.
    let mut live: BTreeMap<String, usize> = BTreeMap::new();
    let mut log = Vec::new();

    for step in 0..steps {
        let name = format!("rnd-{}", rng.below(NAMES as u64));
        match rng.below(100) {
            0..=29 => {
                if live.contains_key(&name) {
                    continue;
                }
                let path = c.dir.path().join(format!("lifecycle-{name}-{step}.jsonl"));
                let tasks = 1 + rng.below(3);
                let cfg = json!({
                    "connector.class": "test-source",
                    "tasks.max": tasks.to_string(),
                    "lifecycle.path": path.display().to_string(),
                    "test.poll.block.ms": "50",
                });
                let r = c.call("CreateConnector", json!({ "name": name, "config": cfg }));
                log.push(format!("{step}: create {name} tasks {tasks} -> {}", r.code));
                match r.code {
                    0 => {
                        incs.push(Incarnation {
                            name: name.clone(),
                            lifecycle: path,
                            deleted_at: None,
                        });
                        live.insert(name, incs.len() - 1);
                    }
                    FAILED_PRECONDITION => {} // the previous one is still deleting
                    other => panic!("seed {seed} step {step}: create {name}: {other} {}", r.err),
                }
            }
            30..=51 => {
                let Some(&i) = live.get(&name) else { continue };
                let sent = now_ms();
                let r = c.call("DeleteConnector", json!({ "name": name }));
                log.push(format!("{step}: delete {name} -> {}", r.code));
                assert_eq!(
                    r.code, 0,
                    "seed {seed} step {step}: delete {name}: {}",
                    r.err
                );
                incs[i].deleted_at = Some(sent);
                live.remove(&name);
            }
            52..=66 => {
                if !live.contains_key(&name) {
                    continue;
                }
                let r = c.call(
                    "RestartConnector",
                    json!({ "name": name, "include_tasks": rng.below(2) == 0 }),
                );
                log.push(format!("{step}: restart {name} -> {}", r.code));
                assert_eq!(
                    r.code, 0,
                    "seed {seed} step {step}: restart {name}: {}",
                    r.err
                );
            }
            67..=76 => {
                let i = rng.below(EXECUTORS as u64) as usize;
                if alive[i] {
                    c.executors[i].kill9();
                    log.push(format!("{step}: kill -9 exec-{}", i + 1));
                } else {
                    c.add_executor(i).await;
                    log.push(format!("{step}: start exec-{} again", i + 1));
                }
                alive[i] = !alive[i];
            }
            77..=81 => {
                c.restart_control_plane().await;
                log.push(format!("{step}: control plane kill -9 and restart"));
            }
            _ => {
                let ms = rng.below(MAX_IDLE_MS);
                log.push(format!("{step}: let {ms} ms pass"));
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
        }
    }
    eprintln!("schedule:\n{}", log.join("\n"));

    // Settle: every executor back, every deletion finished, every live connector running.
    for (i, up) in alive.iter_mut().enumerate() {
        if !*up {
            c.add_executor(i).await;
            *up = true;
        }
    }
    c.wait_alive(EXECUTORS).await;
    for inc in incs.iter().filter(|i| i.deleted_at.is_some()) {
        if !live.contains_key(&inc.name) {
            wait_until(
                &format!("seed {seed}: {} deleted", inc.name),
                SETTLE,
                || async {
                    (c.call("GetConnectorStatus", json!({ "name": inc.name }))
                        .code
                        == NOT_FOUND)
                        .then_some(())
                },
            )
            .await;
        }
    }
    for name in live.keys() {
        wait_until(&format!("seed {seed}: {name} running"), SETTLE, || async {
            let s = c.status(name)?;
            let ts = s["tasks"].as_array()?.clone();
            (s["connector"]["state"] == "STATE_RUNNING"
                && s["deletion"].is_null()
                && !ts.is_empty()
                && ts.iter().all(|t| t["status"]["state"] == "STATE_RUNNING"))
            .then_some(())
        })
        .await;
    }
    // A re-created name's earlier incarnations are gone too (checked above by the
    // create having succeeded, which needs the deletion finished).

    // Invariants over the lifecycle files.
    for inc in &incs {
        let lc = Lifecycle::read(&inc.lifecycle);
        let mut units: Vec<Option<u32>> = lc.events.iter().map(|e| e.task).collect();
        units.sort();
        units.dedup();
        wharf_harness::fault::no_instance_stopped_twice(&lc, &inc.name);
        match inc.deleted_at {
            Some(at) => {
                assert!(
                    units.contains(&None) || lc.events.is_empty(),
                    "seed {seed}: {} {:?}",
                    inc.name,
                    inc.lifecycle
                );
                for u in units {
                    let done = completed_trues(&lc, &inc.name, u);
                    assert!(
                        !done.is_empty(),
                        "seed {seed}: deleted {} {u:?} ({}) never completed stop(true): {:?}",
                        inc.name,
                        inc.lifecycle.display(),
                        lc.calls(&inc.name, u)
                    );
                }
                for e in lc
                    .events
                    .iter()
                    .filter(|e| e.connector_deleted == Some(true))
                {
                    assert!(
                        e.ts_ms >= at,
                        "seed {seed}: {} stop(true) at {} before its delete at {at}",
                        inc.name,
                        e.ts_ms
                    );
                }
            }
            None => {
                assert!(
                    lc.events.iter().all(|e| e.connector_deleted != Some(true)),
                    "seed {seed}: live {} saw stop(true) ({})",
                    inc.name,
                    inc.lifecycle.display()
                );
            }
        }
    }

    // The store holds exactly the live connectors: through the admin API...
    let r = c.call("ListConnectors", json!({}));
    let listed = r.body.to_string();
    for n in 0..NAMES {
        let name = format!("rnd-{n}");
        assert_eq!(
            listed.contains(&format!("\"{name}\"")),
            live.contains_key(&name),
            "seed {seed}: ListConnectors and {name}: {listed}"
        );
        if !live.contains_key(&name) {
            gone(&c, &name).await;
            assert_eq!(
                c.call("GetOffsets", json!({ "name": name })).code,
                NOT_FOUND
            );
        }
    }
    // ... and in the store file once the control plane is stopped.
    c.cp.kill9();
    let (connectors, deletions, offsets) = store_names(&c.store_file());
    let want: Vec<String> = live.keys().cloned().collect();
    assert_eq!(connectors, want, "seed {seed}: connectors table");
    assert!(
        deletions.is_empty(),
        "seed {seed}: deletions left {deletions:?}"
    );
    assert!(
        offsets.iter().all(|o| live.contains_key(o)),
        "seed {seed}: offsets of deleted connectors {offsets:?}"
    );
}
