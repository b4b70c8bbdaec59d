//! KIP-558 active topics: the set of topics a connector's tasks used, kept in its record
//! until an operator resets it. Executors report the topics their tasks wrote to or read
//! from ([`merge_active_topics`] decides what a report adds).

use std::collections::BTreeSet;

use super::resources::{LedgerEntry, Origin, ResourceKind, ResourceOwner};

/// Most topics one connector's set keeps: a report beyond it adds nothing (a connector
/// that writes to more topics than this is shown with the first ones).
pub const MAX_ACTIVE_TOPICS: usize = 10_000;
/// Longest topic name kept (Kafka's own limit is 249 characters).
pub const MAX_ACTIVE_TOPIC_CHARS: usize = 249;

/// Adds the `reported` topics to `set`; returns true when the set grew. Empty names,
/// names longer than [`MAX_ACTIVE_TOPIC_CHARS`] and topics beyond [`MAX_ACTIVE_TOPICS`]
/// are left out. Pure.
pub fn merge_active_topics<'a>(
    set: &mut BTreeSet<String>,
    reported: impl IntoIterator<Item = &'a String>,
) -> bool {
    let mut grew = false;
    for topic in reported {
        if topic.is_empty() || topic.chars().count() > MAX_ACTIVE_TOPIC_CHARS {
            continue;
        }
        if set.len() >= MAX_ACTIVE_TOPICS && !set.contains(topic) {
            break;
        }
        grew |= set.insert(topic.clone());
    }
    grew
}

/// The topics task `task` of `incarnation` created (through KIP-158 topic creation: the
/// runtime records them as created topics of the task) and the ledger does not account
/// for yet: what its deletion stop removes, or records as kept. Pure.
pub fn created_topics_of(ledger: &[LedgerEntry], task: u32, incarnation: &str) -> Vec<String> {
    ledger
        .iter()
        .filter(|e| {
            e.owner == ResourceOwner::Task(task)
                && e.incarnation == incarnation
                && e.resource.kind == ResourceKind::Topic
                && e.resource.origin == Origin::Created
                && !e.state.accounted()
        })
        .map(|e| e.resource.name.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::resources::{EntryState, Locator, Resource};

    fn topic(name: &str, owner: ResourceOwner, state: EntryState, origin: Origin) -> LedgerEntry {
        LedgerEntry {
            resource: Resource::created(
                ResourceKind::Topic,
                name,
                Locator::default().host("k:9092"),
            )
            .with_origin(origin),
            owner,
            state,
            incarnation: "i1".into(),
            updated_at_ms: 0,
        }
    }

    #[test]
    fn a_deletion_stop_names_the_tasks_created_topics_not_yet_accounted_for() {
        use EntryState::{Absent, Confirmed, Intended, Released};
        let ledger = vec![
            topic("a", ResourceOwner::Task(0), Confirmed, Origin::Created),
            topic("b", ResourceOwner::Task(0), Intended, Origin::Created),
            topic("c", ResourceOwner::Task(0), Released, Origin::Created),
            topic("d", ResourceOwner::Task(0), Absent, Origin::Created),
            topic("e", ResourceOwner::Task(0), Confirmed, Origin::Adopted),
            topic("f", ResourceOwner::Task(1), Confirmed, Origin::Created),
            topic("g", ResourceOwner::Connector, Confirmed, Origin::Created),
        ];
        assert_eq!(created_topics_of(&ledger, 0, "i1"), ["a", "b"]);
        assert_eq!(created_topics_of(&ledger, 1, "i1"), ["f"]);
        assert!(created_topics_of(&ledger, 0, "i0").is_empty());
    }

    #[test]
    fn a_created_entry_of_another_kind_is_not_a_topic() {
        let mut e = topic(
            "q",
            ResourceOwner::Task(0),
            EntryState::Confirmed,
            Origin::Created,
        );
        e.resource.kind = ResourceKind::Queue;
        assert!(created_topics_of(&[e], 0, "i1").is_empty());
    }

    fn set(topics: &[&str]) -> BTreeSet<String> {
        topics.iter().map(|t| (*t).to_owned()).collect()
    }

    fn reported(topics: &[&str]) -> Vec<String> {
        topics.iter().map(|t| (*t).to_owned()).collect()
    }

    #[test]
    fn a_new_topic_grows_the_set() {
        let mut s = set(&["a"]);
        assert!(merge_active_topics(&mut s, &reported(&["b"])));
        assert_eq!(s, set(&["a", "b"]));
    }

    #[test]
    fn a_topic_already_known_changes_nothing() {
        let mut s = set(&["a", "b"]);
        assert!(!merge_active_topics(&mut s, &reported(&["b", "a"])));
        assert_eq!(s, set(&["a", "b"]));
    }

    #[test]
    fn empty_and_overlong_names_are_left_out() {
        let mut s = BTreeSet::new();
        let long = "x".repeat(MAX_ACTIVE_TOPIC_CHARS + 1);
        assert!(!merge_active_topics(&mut s, &[String::new(), long]));
        assert!(s.is_empty());
    }

    #[test]
    fn a_full_set_takes_no_more_topics() {
        let mut s: BTreeSet<String> = (0..MAX_ACTIVE_TOPICS).map(|i| format!("t{i}")).collect();
        assert!(!merge_active_topics(&mut s, &reported(&["t0", "new"])));
        assert_eq!(s.len(), MAX_ACTIVE_TOPICS);
    }
}
