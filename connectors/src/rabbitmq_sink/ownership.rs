//! Who owns what in the broker: the [`OwnerRecord`] kept in the owner queue, and the two
//! pure decisions ([`decide_start`], [`decide_cleanup`]) that say what a start may declare
//! and what a cleanup may delete.

use serde::{Deserialize, Serialize};

use super::config::Settings;
use super::{PLUGIN_NAME, owner_queue};

/// The owner record kept in [`owner_queue`], as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRecord {
    /// Plugin that wrote it (`rabbitmq-sink`).
    pub wharf: String,
    /// Connector that owns the objects.
    pub connector: String,
    /// Incarnation of that connector.
    pub incarnation: String,
    /// The queue it declared, `None` when the queue existed before (the user's).
    pub queue: Option<String>,
    /// The exchange it declared, `None` when none is used or it existed before.
    pub exchange: Option<String>,
}

/// Who asks: this incarnation of this connector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Connector name.
    pub connector: String,
    /// Connector incarnation ([`wharf_sdk::ConnectorContext::incarnation`]).
    pub incarnation: String,
}

/// What the broker holds at [`owner_queue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// No owner-record queue.
    Absent,
    /// The queue exists but holds no readable owner record (somebody else's queue).
    Unreadable,
    /// The queue holds this record.
    Owned(OwnerRecord),
}

/// What the broker holds at the configured names, when the connector starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Existing {
    /// The queue exists.
    pub queue: bool,
    /// An exchange is configured and exists.
    pub exchange: bool,
}

/// What a connector start does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartPlan {
    /// First start of this incarnation: write this record, then declare what it names.
    Create(OwnerRecord),
    /// Ours already (a restart, a reconfiguration): declare again what the record names
    /// (idempotent), use the rest as it is.
    Reuse(OwnerRecord),
    /// Declare nothing and fail the start with this text.
    Refuse(String),
}

/// The ownership decision at connector start.
pub fn decide_start(
    marker: &Marker,
    claim: &Claim,
    existing: Existing,
    settings: &Settings,
) -> StartPlan {
    let owner_queue = owner_queue(&claim.connector);
    match marker {
        Marker::Absent => StartPlan::Create(OwnerRecord {
            wharf: PLUGIN_NAME.to_owned(),
            connector: claim.connector.clone(),
            incarnation: claim.incarnation.clone(),
            queue: (!existing.queue).then(|| settings.queue.clone()),
            exchange: settings.exchange.clone().filter(|_| !existing.exchange),
        }),
        Marker::Unreadable => StartPlan::Refuse(format!(
            "queue {owner_queue:?} exists but holds no rabbitmq-sink owner record: it is not this connector's; delete it or rename the connector"
        )),
        Marker::Owned(r) if r.wharf != PLUGIN_NAME || r.connector != claim.connector => {
            StartPlan::Refuse(format!(
                "queue {owner_queue:?} holds the owner record of {} connector {:?}",
                r.wharf, r.connector
            ))
        }
        Marker::Owned(r) if r.incarnation == claim.incarnation => StartPlan::Reuse(r.clone()),
        Marker::Owned(r) => StartPlan::Refuse(format!(
            "the RabbitMQ objects of connector {:?} are owned by an earlier incarnation ({}) that was deleted with keep_resources (or whose cleanup has not finished): delete queue {owner_queue:?} (and the queue it names) to start afresh",
            claim.connector, r.incarnation
        )),
    }
}

/// What a deletion's cleanup does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CleanupPlan {
    /// Ours: delete the queue and exchange the record names, then the record.
    Delete(OwnerRecord),
    /// No owner record: nothing was declared (or the cleanup already ran).
    Nothing,
    /// Not this incarnation's: delete nothing, say why.
    Leave(String),
}

/// The ownership decision at `stop_with(true)`.
pub fn decide_cleanup(marker: &Marker, claim: &Claim) -> CleanupPlan {
    match marker {
        Marker::Absent => CleanupPlan::Nothing,
        Marker::Unreadable => CleanupPlan::Leave(format!(
            "queue {:?} holds no rabbitmq-sink owner record",
            owner_queue(&claim.connector)
        )),
        Marker::Owned(r) if r.wharf != PLUGIN_NAME || r.connector != claim.connector => {
            CleanupPlan::Leave(format!("owned by {} connector {:?}", r.wharf, r.connector))
        }
        Marker::Owned(r) if r.incarnation == claim.incarnation => CleanupPlan::Delete(r.clone()),
        Marker::Owned(r) => CleanupPlan::Leave(format!(
            "owned by another incarnation ({}) of this connector",
            r.incarnation
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::rabbitmq_sink::config::tests::config;

    fn settings() -> Settings {
        Settings::parse("c", &config(&[("topics", "t"), ("exchange", "x")])).unwrap()
    }

    fn claim(incarnation: &str) -> Claim {
        Claim {
            connector: "c".to_owned(),
            incarnation: incarnation.to_owned(),
        }
    }

    fn record(incarnation: &str) -> OwnerRecord {
        OwnerRecord {
            wharf: PLUGIN_NAME.to_owned(),
            connector: "c".to_owned(),
            incarnation: incarnation.to_owned(),
            queue: Some("wharf.c".to_owned()),
            exchange: None,
        }
    }

    const NONE: Existing = Existing {
        queue: false,
        exchange: false,
    };

    #[test]
    fn first_start_owns_only_what_is_absent() {
        let s = settings();
        let StartPlan::Create(r) = decide_start(&Marker::Absent, &claim("i1"), NONE, &s) else {
            panic!("expected Create");
        };
        assert_eq!(
            (r.queue.as_deref(), r.exchange.as_deref()),
            (Some("wharf.c"), Some("x"))
        );
        let both = Existing {
            queue: true,
            exchange: true,
        };
        let StartPlan::Create(r) = decide_start(&Marker::Absent, &claim("i1"), both, &s) else {
            panic!("expected Create");
        };
        assert_eq!((r.queue, r.exchange), (None, None));
        assert_eq!(r.incarnation, "i1");
    }

    #[test]
    fn the_same_incarnation_reuses_its_record() {
        let plan = decide_start(
            &Marker::Owned(record("i1")),
            &claim("i1"),
            NONE,
            &settings(),
        );
        assert_eq!(plan, StartPlan::Reuse(record("i1")));
    }

    #[test]
    fn another_incarnation_or_connector_or_an_unreadable_record_is_refused() {
        for marker in [
            Marker::Owned(record("i0")),
            Marker::Owned(OwnerRecord {
                connector: "other".to_owned(),
                ..record("i1")
            }),
            Marker::Owned(OwnerRecord {
                wharf: "something-else".to_owned(),
                ..record("i1")
            }),
            Marker::Unreadable,
        ] {
            assert!(
                matches!(
                    decide_start(&marker, &claim("i1"), NONE, &settings()),
                    StartPlan::Refuse(_)
                ),
                "{marker:?}"
            );
        }
    }

    #[test]
    fn cleanup_deletes_only_for_the_owning_incarnation() {
        assert_eq!(
            decide_cleanup(&Marker::Owned(record("i1")), &claim("i1")),
            CleanupPlan::Delete(record("i1"))
        );
        assert_eq!(
            decide_cleanup(&Marker::Absent, &claim("i1")),
            CleanupPlan::Nothing
        );
        for marker in [
            Marker::Owned(record("i2")),
            Marker::Owned(OwnerRecord {
                connector: "other".to_owned(),
                ..record("i1")
            }),
            Marker::Unreadable,
        ] {
            assert!(
                matches!(decide_cleanup(&marker, &claim("i1")), CleanupPlan::Leave(_)),
                "{marker:?}"
            );
        }
    }

    #[test]
    fn owner_records_round_trip() {
        let r = record("i1");
        let text = serde_json::to_vec(&r).unwrap();
        assert_eq!(serde_json::from_slice::<OwnerRecord>(&text).unwrap(), r);
    }
}
