//! Pure placement decisions: which live executor runs each connector instance and task.
//! See `README.md` beside this file. No I/O here; the herder applies the moves and bumps
//! the generation of every moved unit.

pub mod deletion_support;
pub mod hosted;
pub mod partitions;
pub mod plugin_defs;
pub mod record_log;
pub mod unit;

use std::collections::{BTreeSet, HashMap};

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

/// Sticky, even placement of `units` over `executors`: [`plan_with`] with nothing placed
/// elsewhere and evening out on (a plan over every unit of the cluster).
pub fn plan_assignments(units: &[Unit], executors: &[LiveExecutor]) -> Vec<Move> {
    plan_with(units, executors, &HashMap::new(), Evening::On)
}

/// Whether [`plan_with`] moves kept units to even out the load (its step 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Evening {
    /// Move units from the fullest executor to the emptiest while they differ by two or
    /// more: a plan over every unit.
    On,
    /// Only place the units that need a host: a plan over some connectors (the ones that
    /// changed), beside units it does not see, which it must not move.
    Off,
}

/// Sticky, even placement of `units` over `executors`, beside `base[executor]` units
/// placed elsewhere (counted in each executor's load, never moved).
///
/// 1. A unit stays where it is if that executor holds its lease and offers its plugin.
/// 2. Every other unit goes to the capable executor that accepts new work with the fewest
///    units (ties: fewest units of the same connector, then id).
/// 3. With [`Evening::On`]: while some executor holds at least two more units than
///    another one that could take one of them, one unit moves from the fullest to the
///    emptiest (preferring the connector with most units on the fullest, so connectors
///    spread too).
///
/// A connector's units are either all in `units` or none (the tie-break counts them).
/// Returns only the units whose executor changes, sorted by key. Cost: O(U log U) for
/// U units, plus O(units on the fullest executor) per step-3 move; no allocation per
/// unit beyond the sort (a herder pass plans 110,000 units at the scale of bench/NOTES.md).
pub fn plan_with(
    units: &[Unit],
    executors: &[LiveExecutor],
    base: &HashMap<&str, usize>,
    evening: Evening,
) -> Vec<Move> {
    // Executors by id, so that index order is id order (the last tie-break).
    let mut ex: Vec<&LiveExecutor> = executors.iter().collect();
    ex.sort_by(|a, b| a.id.cmp(&b.id));
    ex.dedup_by(|a, b| a.id == b.id);
    let index: HashMap<&str, usize> = ex
        .iter()
        .enumerate()
        .map(|(i, e)| (e.id.as_str(), i))
        .collect();
    let mut capable: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut load: Vec<usize> = ex
        .iter()
        .map(|e| base.get(e.id.as_str()).copied().unwrap_or(0))
        .collect();
    let mut per_connector: HashMap<(usize, &str), usize> = HashMap::new();
    let mut sorted: Vec<&Unit> = units.iter().collect();
    sorted.sort_by(|a, b| a.key.cmp(&b.key));

    // 1. Keep what can stay.
    let mut placement: Vec<Option<usize>> = sorted
        .iter()
        .map(|u| {
            let keep = u
                .current
                .as_deref()
                .and_then(|c| index.get(c).copied())
                .filter(|&e| ex[e].plugins.contains(&u.plugin));
            if let Some(e) = keep {
                load[e] += 1;
                *per_connector
                    .entry((e, u.key.connector.as_str()))
                    .or_default() += 1;
            }
            keep
        })
        .collect();
    // 2. Place the rest.
    for (i, u) in sorted.iter().enumerate() {
        if placement[i].is_some() {
            continue;
        }
        let offer = capable.entry(u.plugin.as_str()).or_insert_with(|| {
            (0..ex.len())
                .filter(|&e| ex[e].plugins.contains(&u.plugin))
                .collect()
        });
        let best = offer
            .iter()
            .copied()
            .filter(|&e| ex[e].accepts_new)
            .min_by_key(|&e| {
                (
                    load[e],
                    per_connector
                        .get(&(e, u.key.connector.as_str()))
                        .copied()
                        .unwrap_or(0),
                    e,
                )
            });
        if let Some(e) = best {
            load[e] += 1;
            *per_connector
                .entry((e, u.key.connector.as_str()))
                .or_default() += 1;
            placement[i] = Some(e);
        }
    }
    // 3. Even out, one move at a time; every move lowers the spread, so this ends.
    if evening == Evening::On {
        even_out(&sorted, &ex, &mut placement, &mut load, &mut per_connector);
    }

    sorted
        .iter()
        .zip(&placement)
        .filter_map(|(u, at)| {
            let to = at.map(|e| ex[e].id.clone());
            (to != u.current).then(|| Move {
                key: u.key.clone(),
                from: u.current.clone(),
                to,
            })
        })
        .collect()
}

/// Step 3 of [`plan_with`]: `placement[i]` is the executor index of `sorted[i]`.
fn even_out<'a>(
    sorted: &[&'a Unit],
    ex: &[&LiveExecutor],
    placement: &mut [Option<usize>],
    load: &mut [usize],
    per_connector: &mut HashMap<(usize, &'a str), usize>,
) {
    // Units on each executor, in key order (a move appends; candidates are re-sorted).
    let mut on: Vec<Vec<usize>> = vec![Vec::new(); ex.len()];
    for (i, at) in placement.iter().enumerate() {
        if let Some(e) = at {
            on[*e].push(i);
        }
    }
    // Only between executors that accept work: a move off a silent one would need a stop
    // it cannot answer.
    let accepting: Vec<usize> = (0..ex.len()).filter(|&e| ex[e].accepts_new).collect();
    loop {
        let mut by_load: Vec<usize> = accepting.clone();
        by_load.sort_by(|&a, &b| load[b].cmp(&load[a]).then(a.cmp(&b)));
        let mut chosen: Option<(usize, usize, usize)> = None;
        'search: for &full in &by_load {
            for &empty in by_load.iter().rev() {
                if load[full] < load[empty] + 2 {
                    break;
                }
                // Candidates on `full` that `empty` can run; prefer the connector that
                // has most units on `full` and fewest on `empty`. Ties: the last in key
                // order.
                let count = |e: usize, c: &str| per_connector.get(&(e, c)).copied().unwrap_or(0);
                let candidate = on[full]
                    .iter()
                    .copied()
                    .filter(|&i| ex[empty].plugins.contains(&sorted[i].plugin))
                    .max_by_key(|&i| {
                        let k = &sorted[i].key;
                        let (on_full, on_empty) =
                            (count(full, &k.connector), count(empty, &k.connector));
                        // Tasks before connector instances, higher index first (the
                        // newest tasks move; older ones keep their host).
                        (
                            on_full as i64 - on_empty as i64,
                            k.task.is_some(),
                            k.task,
                            i,
                        )
                    });
                if let Some(i) = candidate {
                    chosen = Some((i, full, empty));
                    break 'search;
                }
            }
        }
        let Some((i, from, to)) = chosen else { break };
        let connector = sorted[i].key.connector.as_str();
        load[from] -= 1;
        load[to] += 1;
        if let Some(n) = per_connector.get_mut(&(from, connector)) {
            *n = n.saturating_sub(1);
        }
        *per_connector.entry((to, connector)).or_default() += 1;
        on[from].retain(|&j| j != i);
        on[to].push(i);
        placement[i] = Some(to);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

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
    /// The plain planner (BTreeMaps keyed by cloned strings, one capable-list
    /// allocation per unit), kept as the reference the faster one must agree with.
    fn reference_plan(units: &[Unit], executors: &[LiveExecutor]) -> Vec<Move> {
        let capable = |plugin: &str| -> Vec<&LiveExecutor> {
            executors
                .iter()
                .filter(|e| e.plugins.contains(plugin))
                .collect()
        };
        let mut placement: BTreeMap<UnitKey, Option<String>> = BTreeMap::new();
        let mut load: BTreeMap<String, usize> =
            executors.iter().map(|e| (e.id.clone(), 0)).collect();
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

    /// A tiny deterministic generator (xorshift), so that a failing case can be replayed.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    #[test]
    fn agrees_with_the_reference_planner_on_random_clusters() {
        for seed in 1..400u64 {
            let mut g = Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            let n_exec = 1 + g.next(5) as usize;
            let mut ex: Vec<LiveExecutor> = (0..n_exec)
                .map(|i| LiveExecutor {
                    id: format!("e{i}"),
                    plugins: ["p", "q"]
                        .iter()
                        .filter(|_| g.next(4) != 0)
                        .map(|p| (*p).to_owned())
                        .collect(),
                    accepts_new: g.next(5) != 0,
                })
                .collect();
            ex.reverse(); // not given in id order
            let mut units = Vec::new();
            for c in 0..1 + g.next(6) {
                let plugin = if g.next(3) == 0 { "q" } else { "p" };
                for t in 0..1 + g.next(5) {
                    let current = match g.next(n_exec as u64 + 2) as usize {
                        i if i < n_exec => Some(format!("e{i}")),
                        i if i == n_exec => Some("lost".to_owned()),
                        _ => None,
                    };
                    units.push(Unit {
                        key: UnitKey {
                            connector: format!("c{c}"),
                            task: (t > 0).then(|| t as u32 - 1),
                        },
                        plugin: plugin.into(),
                        current,
                    });
                }
            }
            assert_eq!(
                plan_assignments(&units, &ex),
                reference_plan(&units, &ex),
                "seed {seed}: {units:?} on {ex:?}"
            );
        }
    }

    #[test]
    fn a_partial_plan_counts_the_units_it_does_not_see_and_moves_none() {
        // a already runs 3 units of other connectors, b none: both new tasks go to b,
        // and nothing evens out (the plan sees only connector c).
        let units = tasks(2, &[]);
        let base: HashMap<&str, usize> = [("a", 3)].into_iter().collect();
        let moves = plan_with(&units, &execs(&["a", "b"]), &base, Evening::Off);
        assert!(
            moves.iter().all(|m| m.to.as_deref() == Some("b")),
            "{moves:?}"
        );
        let units = tasks(4, &[Some("a"), Some("a"), Some("a"), Some("a")]);
        assert!(plan_with(&units, &execs(&["a", "b"]), &base, Evening::Off).is_empty());
    }

    #[test]
    fn evening_on_moves_the_newest_tasks_of_the_fullest_executor() {
        let units = tasks(4, &[Some("a"), Some("a"), Some("a"), Some("a")]);
        let moves = plan_with(&units, &execs(&["a", "b"]), &HashMap::new(), Evening::On);
        let moved: Vec<_> = moves.iter().map(|m| m.key.task).collect();
        assert_eq!(moved, vec![Some(2), Some(3)], "{moves:?}");
    }
}
