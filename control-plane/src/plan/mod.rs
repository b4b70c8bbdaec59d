//! Pure placement decisions: which live executor runs each connector instance and task.
//! See `README.md` beside this file. No I/O here; the herder applies the moves and bumps
//! the generation of every moved unit.

pub mod hosted;
pub mod unit;

use std::collections::{BTreeMap, BTreeSet};

/// One connector instance (`task == None`) or task to place.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnitKey {
    /// Connector name.
    pub connector: String,
    /// Task index; `None` for the connector instance.
    pub task: Option<u32>,
}

/// A unit and where it runs now.
#[derive(Debug, Clone)]
pub struct Unit {
    /// Which unit.
    pub key: UnitKey,
    /// Plugin it needs.
    pub plugin: String,
    /// Executor it is assigned to now (live or not).
    pub current: Option<String>,
}

/// An executor that holds its lease, and the plugins it offers.
#[derive(Debug, Clone)]
pub struct LiveExecutor {
    /// Executor id.
    pub id: String,
    /// Plugins it offers.
    pub plugins: BTreeSet<String>,
    /// False while it missed heartbeats or cannot be reached: it keeps the units it has
    /// (its lease decides about them) but takes no new ones, and none move from it.
    pub accepts_new: bool,
}

/// A change of placement. `to == None`: no live executor offers the plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    /// Which unit.
    pub key: UnitKey,
    /// Where it was (maybe a lost executor).
    pub from: Option<String>,
    /// Where it goes.
    pub to: Option<String>,
}

/// Sticky, even placement of `units` over `executors`.
///
/// 1. A unit stays where it is if that executor holds its lease and offers its plugin.
/// 2. Every other unit goes to the capable executor that accepts new work with the fewest
///    units (ties: fewest units of the same connector, then id).
/// 3. While some executor holds at least two more units than another one that could take
///    one of them, one unit moves from the fullest to the emptiest (preferring the
///    connector with most units on the fullest, so connectors spread too).
///
/// Returns only the units whose executor changes, sorted by key.
pub fn plan_assignments(units: &[Unit], executors: &[LiveExecutor]) -> Vec<Move> {
    let capable = |plugin: &str| -> Vec<&LiveExecutor> {
        executors
            .iter()
            .filter(|e| e.plugins.contains(plugin))
            .collect()
    };
    let mut placement: BTreeMap<UnitKey, Option<String>> = BTreeMap::new();
    let mut load: BTreeMap<String, usize> = executors.iter().map(|e| (e.id.clone(), 0)).collect();
    let mut per_connector: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut sorted: Vec<&Unit> = units.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));

    // 1. Keep what can stay.
    for u in &sorted {
        let keep = u
            .current
            .as_ref()
            .filter(|c| capable(&u.plugin).iter().any(|e| &e.id == *c))
            .cloned();
        if let Some(c) = &keep {
            *load.entry(c.clone()).or_default() += 1;
            *per_connector
                .entry((c.clone(), u.key.connector.clone()))
                .or_default() += 1;
        }
        placement.insert(u.key.clone(), keep);
    }
    // 2. Place the rest.
    for u in &sorted {
        if placement.get(&u.key).is_some_and(Option::is_some) {
            continue;
        }
        let best = capable(&u.plugin)
            .into_iter()
            .filter(|e| e.accepts_new)
            .min_by_key(|e| {
                (
                    load.get(&e.id).copied().unwrap_or(0),
                    per_connector
                        .get(&(e.id.clone(), u.key.connector.clone()))
                        .copied()
                        .unwrap_or(0),
                    e.id.clone(),
                )
            });
        if let Some(e) = best {
            *load.entry(e.id.clone()).or_default() += 1;
            *per_connector
                .entry((e.id.clone(), u.key.connector.clone()))
                .or_default() += 1;
            placement.insert(u.key.clone(), Some(e.id.clone()));
        }
    }
    // 3. Even out, one move at a time; every move lowers the spread, so this ends.
    let plugin_of: BTreeMap<&UnitKey, &str> =
        sorted.iter().map(|u| (&u.key, u.plugin.as_str())).collect();
    let accepting: BTreeSet<&str> = executors
        .iter()
        .filter(|e| e.accepts_new)
        .map(|e| e.id.as_str())
        .collect();
    loop {
        // Only between executors that accept work: a move off a silent one would need a
        // stop it cannot answer.
        let mut by_load: Vec<(&String, usize)> = load
            .iter()
            .filter(|(k, _)| accepting.contains(k.as_str()))
            .map(|(k, v)| (k, *v))
            .collect();
        by_load.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let mut chosen: Option<(UnitKey, String, String)> = None;
        'search: for (full, full_load) in &by_load {
            for (empty, empty_load) in by_load.iter().rev() {
                if *full_load < empty_load + 2 {
                    break;
                }
                let Some(target) = executors.iter().find(|e| &e.id == *empty) else {
                    continue;
                };
                // Candidates on `full` that `empty` can run; prefer the connector that
                // has most units on `full` and fewest on `empty`.
                let candidate = placement
                    .iter()
                    .filter(|(k, at)| {
                        at.as_ref() == Some(*full)
                            && plugin_of
                                .get(k)
                                .is_some_and(|p| target.plugins.contains(*p))
                    })
                    .map(|(k, _)| k)
                    .max_by_key(|k| {
                        let on_full = per_connector
                            .get(&((*full).clone(), k.connector.clone()))
                            .copied()
                            .unwrap_or(0);
                        let on_empty = per_connector
                            .get(&((*empty).clone(), k.connector.clone()))
                            .copied()
                            .unwrap_or(0);
                        // Tasks before connector instances, higher index first (the
                        // newest tasks move; older ones keep their host).
                        (on_full as i64 - on_empty as i64, k.task.is_some(), k.task)
                    });
                if let Some(k) = candidate {
                    chosen = Some((k.clone(), (*full).clone(), (*empty).clone()));
                    break 'search;
                }
            }
        }
        let Some((key, from, to)) = chosen else { break };
        *load.entry(from.clone()).or_default() -= 1;
        *load.entry(to.clone()).or_default() += 1;
        if let Some(n) = per_connector.get_mut(&(from.clone(), key.connector.clone())) {
            *n = n.saturating_sub(1);
        }
        *per_connector
            .entry((to.clone(), key.connector.clone()))
            .or_default() += 1;
        placement.insert(key, Some(to));
    }

    sorted
        .iter()
        .filter_map(|u| {
            let to = placement.get(&u.key).cloned().flatten();
            (to != u.current).then(|| Move {
                key: u.key.clone(),
                from: u.current.clone(),
                to,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn execs(ids: &[&str]) -> Vec<LiveExecutor> {
        ids.iter()
            .map(|id| LiveExecutor {
                id: (*id).into(),
                plugins: ["p".to_owned()].into_iter().collect(),
                accepts_new: true,
            })
            .collect()
    }

    fn tasks(n: u32, current: &[Option<&str>]) -> Vec<Unit> {
        (0..n)
            .map(|i| Unit {
                key: UnitKey {
                    connector: "c".into(),
                    task: Some(i),
                },
                plugin: "p".into(),
                current: current
                    .get(i as usize)
                    .copied()
                    .flatten()
                    .map(str::to_owned),
            })
            .collect()
    }

    fn apply(units: &mut [Unit], moves: &[Move]) {
        for m in moves {
            if let Some(u) = units.iter_mut().find(|u| u.key == m.key) {
                u.current = m.to.clone();
            }
        }
    }

    fn counts(units: &[Unit]) -> BTreeMap<String, usize> {
        let mut c = BTreeMap::new();
        for u in units {
            if let Some(e) = &u.current {
                *c.entry(e.clone()).or_default() += 1;
            }
        }
        c
    }

    #[test]
    fn new_tasks_spread_evenly_over_live_executors() {
        let mut units = tasks(6, &[]);
        let moves = plan_assignments(&units, &execs(&["a", "b", "c"]));
        assert_eq!(moves.len(), 6);
        apply(&mut units, &moves);
        assert!(counts(&units).values().all(|n| *n == 2));
    }

    #[test]
    fn a_balanced_placement_produces_no_moves() {
        let units = tasks(3, &[Some("a"), Some("b"), Some("c")]);
        assert!(plan_assignments(&units, &execs(&["a", "b", "c"])).is_empty());
    }

    #[test]
    fn tasks_of_a_lost_executor_move_and_no_other_task_moves() {
        let units = tasks(
            6,
            &[
                Some("a"),
                Some("a"),
                Some("b"),
                Some("b"),
                Some("c"),
                Some("c"),
            ],
        );
        let moves = plan_assignments(&units, &execs(&["a", "b"]));
        assert_eq!(moves.len(), 2);
        assert!(moves.iter().all(|m| m.from.as_deref() == Some("c")));
        assert!(moves.iter().all(|m| m.to.is_some()));
    }

    #[test]
    fn new_executor_takes_only_enough_tasks_to_even_out() {
        let mut units = tasks(4, &[Some("a"), Some("a"), Some("b"), Some("b")]);
        let moves = plan_assignments(&units, &execs(&["a", "b", "c"]));
        assert_eq!(moves.len(), 1, "{moves:?}");
        apply(&mut units, &moves);
        assert_eq!(counts(&units).get("c"), Some(&1));
    }

    #[test]
    fn a_task_whose_plugin_no_live_executor_offers_stays_unassigned() {
        let mut units = tasks(1, &[]);
        units[0].plugin = "other".into();
        let moves = plan_assignments(&units, &execs(&["a"]));
        assert!(moves.is_empty());
        let units = tasks(1, &[Some("gone")]);
        let moves = plan_assignments(&units, &[]);
        assert_eq!(moves[0].to, None);
    }

    #[test]
    fn a_silent_executor_keeps_its_tasks_but_takes_no_new_ones() {
        let mut ex = execs(&["a", "b"]);
        ex[1].accepts_new = false;
        let mut units = tasks(4, &[Some("b"), Some("b")]);
        let moves = plan_assignments(&units, &ex);
        apply(&mut units, &moves);
        assert_eq!(counts(&units).get("b"), Some(&2), "{moves:?}");
        assert_eq!(counts(&units).get("a"), Some(&2), "{moves:?}");
        assert!(moves.iter().all(|m| m.to.as_deref() == Some("a")));
    }

    #[test]
    fn tasks_only_go_to_executors_that_offer_their_plugin() {
        let mut ex = execs(&["a", "b"]);
        ex[1].plugins.clear();
        let mut units = tasks(4, &[]);
        let moves = plan_assignments(&units, &ex);
        apply(&mut units, &moves);
        assert_eq!(counts(&units).get("a"), Some(&4));
    }
}
