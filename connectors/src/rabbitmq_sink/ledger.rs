//! What `rabbitmq-sink` records in the resource ledger (docs/resources.md): the owner
//! record queue, the queue, the exchange and the binding, each created by this
//! incarnation or adopted when it existed before (a queue the user made is adopted and
//! never deleted). [`resources`] is the one place that lists them, for the declaration
//! at create, the intents of a start and the releases of a cleanup.

use wharf_sdk::{Locator, Resource, ResourceKind};

use super::config::Settings;
use super::owner_queue;
use super::ownership::OwnerRecord;

/// The binding's name in the ledger: `EXCHANGE -> QUEUE (ROUTING_KEY)`.
pub fn binding_name(exchange: &str, queue: &str, routing_key: &str) -> String {
    format!("{exchange} -> {queue} ({routing_key})")
}

/// The resources of connector `connector` with `settings` (where: the broker's
/// `host:port` and vhost, never the credentials). With `record` (a start's plan or the
/// owner record a cleanup found), the queue and exchange are created when the record
/// names them and adopted otherwise; without (a declaration from the config alone),
/// all are listed as created. The queue's and exchange's names are the record's when it
/// names them. Pure.
pub fn resources(
    connector: &str,
    settings: &Settings,
    record: Option<&OwnerRecord>,
) -> Vec<Resource> {
    let at: Locator = settings.locator();
    let queue = record
        .and_then(|r| r.queue.clone())
        .unwrap_or_else(|| settings.queue.clone());
    let exchange = record
        .and_then(|r| r.exchange.clone())
        .or_else(|| settings.exchange.clone());
    let made = |named: Option<&Option<String>>| named.is_none_or(Option::is_some);
    let origin = |created: bool, r: Resource| {
        if created {
            r
        } else {
            r.with_origin(wharf_sdk::Origin::Adopted)
        }
    };
    let mut out = vec![
        Resource::created(ResourceKind::Queue, owner_queue(connector), at.clone()),
        origin(
            made(record.map(|r| &r.queue)),
            Resource::created(ResourceKind::Queue, queue.clone(), at.clone()),
        ),
    ];
    if let Some(x) = exchange {
        out.push(origin(
            made(record.map(|r| &r.exchange)),
            Resource::created(ResourceKind::Exchange, x.clone(), at.clone()),
        ));
        out.push(Resource::created(
            ResourceKind::Binding,
            binding_name(&x, &queue, &settings.routing_key),
            at,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rabbitmq_sink::PLUGIN_NAME;
    use crate::rabbitmq_sink::config::tests::config;
    use wharf_sdk::Origin;

    fn record(queue: Option<&str>, exchange: Option<&str>) -> OwnerRecord {
        OwnerRecord {
            wharf: PLUGIN_NAME.into(),
            connector: "c".into(),
            incarnation: "i1".into(),
            queue: queue.map(str::to_owned),
            exchange: exchange.map(str::to_owned),
        }
    }

    #[test]
    fn the_declaration_lists_the_owner_queue_and_the_queue_without_credentials() {
        let s = Settings::parse(
            "c",
            &config(&[
                ("topics", "t"),
                ("queue", "nc.shared.q"),
                ("rabbitmq.password", "pw"),
            ]),
        )
        .unwrap();
        let rs = resources("c", &s, None);
        let names: Vec<&str> = rs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["wharf.owner.c", "nc.shared.q"]);
        assert!(rs.iter().all(|r| r.origin == Origin::Created));
        assert_eq!(rs[1].locator.to_string(), "host=127.0.0.1:5672 vhost=/");
        assert!(!format!("{rs:?}").contains("pw"));
    }

    #[test]
    fn a_queue_that_existed_before_is_adopted() {
        let s = Settings::parse("c", &config(&[("topics", "t"), ("queue", "users.q")])).unwrap();
        let rs = resources("c", &s, Some(&record(None, None)));
        assert_eq!(rs[1].name, "users.q");
        assert_eq!(rs[1].origin, Origin::Adopted);
        assert_eq!(rs[0].origin, Origin::Created);
    }

    #[test]
    fn an_exchange_brings_its_binding() {
        let s = Settings::parse("c", &config(&[("topics", "t"), ("exchange", "x")])).unwrap();
        let rs = resources("c", &s, Some(&record(Some("wharf.c"), None)));
        assert_eq!(rs.len(), 4);
        assert_eq!(
            (rs[2].kind.as_str(), rs[2].origin),
            ("exchange", Origin::Adopted)
        );
        assert_eq!(rs[3].name, "x -> wharf.c (wharf.c)");
        assert_eq!(rs[3].origin, Origin::Created);
    }
}
