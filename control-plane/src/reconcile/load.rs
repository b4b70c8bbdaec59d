//! The load index of the herder: units per executor of each connector as the last pass
//! that covered it placed them, so that a pass over a few changed connectors weighs where
//! new units go without walking the cluster.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Units per executor of each connector, and their sum, kept between passes so that a
/// pass over a few changed connectors knows the load the others put on each executor
/// without walking the cluster. Rebuilt on every full pass; a partial pass
/// replaces the entries of the connectors it planned with where it placed them. An entry
/// that a change did not mark stays stale until the next full pass (within
/// [`super::FULL_PASS_INTERVAL_MS`] or so): the load only weighs where new units go.
#[derive(Debug, Default)]
pub(super) struct LoadIndex {
    /// Units per executor, by connector.
    pub(super) by_connector: HashMap<String, Vec<(Arc<str>, usize)>>,
    /// The sum over every connector, per executor.
    pub(super) total: HashMap<Arc<str>, usize>,
}

impl LoadIndex {
    /// Replaces what `connector` puts on each executor (an empty `per_executor`: nothing).
    pub(super) fn set(&mut self, connector: &str, per_executor: Vec<(Arc<str>, usize)>) {
        self.remove(connector);
        if per_executor.is_empty() {
            return;
        }
        for (e, n) in &per_executor {
            *self.total.entry(e.clone()).or_default() += n;
        }
        self.by_connector.insert(connector.to_owned(), per_executor);
    }

    pub(super) fn remove(&mut self, connector: &str) {
        let Some(old) = self.by_connector.remove(connector) else {
            return;
        };
        for (e, n) in old {
            if let Some(t) = self.total.get_mut(&e) {
                *t = t.saturating_sub(n);
                if *t == 0 {
                    self.total.remove(&e);
                }
            }
        }
    }

    /// Units per executor of every connector but `names`.
    pub(super) fn without<'a>(&'a self, names: &HashSet<String>) -> HashMap<&'a str, usize> {
        let mut out: HashMap<&str, usize> = self.total.iter().map(|(e, n)| (&**e, *n)).collect();
        for name in names {
            for (e, n) in self.by_connector.get(name).into_iter().flatten() {
                if let Some(t) = out.get_mut(&**e) {
                    *t = t.saturating_sub(*n);
                }
            }
        }
        out
    }
}

/// Units per executor of one connector's planned placement (units with no host left out).
pub(super) fn per_executor(
    placed: &BTreeMap<Option<u32>, Option<String>>,
    ids: &mut HashMap<String, Arc<str>>,
) -> Vec<(Arc<str>, usize)> {
    let mut out: Vec<(Arc<str>, usize)> = Vec::new();
    for e in placed.values().flatten() {
        match out.iter_mut().find(|(id, _)| **id == **e) {
            Some((_, n)) => *n += 1,
            None => {
                let id = ids
                    .entry(e.clone())
                    .or_insert_with(|| Arc::from(e.as_str()))
                    .clone();
                out.push((id, 1));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placed(units: &[(Option<u32>, Option<&str>)]) -> BTreeMap<Option<u32>, Option<String>> {
        units
            .iter()
            .map(|(t, e)| (*t, e.map(str::to_owned)))
            .collect()
    }

    #[test]
    fn the_load_index_counts_each_connector_once_and_leaves_out_the_ones_planned_now() {
        let mut ids = HashMap::new();
        let mut load = LoadIndex::default();
        let a = placed(&[
            (None, Some("e1")),
            (Some(0), Some("e1")),
            (Some(1), Some("e2")),
        ]);
        let b = placed(&[(None, Some("e2")), (Some(0), None)]);
        load.set("a", per_executor(&a, &mut ids));
        load.set("b", per_executor(&b, &mut ids));
        let all = load.without(&HashSet::new());
        assert_eq!(all, HashMap::from([("e1", 2), ("e2", 2)]));
        let without_a = load.without(&HashSet::from(["a".to_owned()]));
        assert_eq!(without_a, HashMap::from([("e1", 0), ("e2", 1)]));
        // Planned again elsewhere: replaced, not added.
        load.set("a", per_executor(&placed(&[(None, Some("e3"))]), &mut ids));
        assert_eq!(
            load.without(&HashSet::new()),
            HashMap::from([("e2", 1), ("e3", 1)])
        );
        // Stopped or deleted: puts nothing.
        load.remove("b");
        load.set("a", Vec::new());
        assert!(load.without(&HashSet::new()).is_empty());
        assert!(load.by_connector.is_empty());
    }
}
