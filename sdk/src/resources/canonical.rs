//! The canonical form of a locator, so that two spellings of one place are one resource
//! (docs/resources.md, "A second claim is refused"): `localhost:5672` and
//! `127.0.0.1:5672` name the same broker, and two sinks must not share its queue because
//! their configs spelled it differently.
//!
//! The rules, all textual (no DNS look-up: a claim is decided without I/O):
//! - host names are compared without case and without trailing dots;
//! - the loopback names (`localhost`, `localhost.localdomain`, `ip6-localhost`,
//!   `ip6-loopback`) and the loopback addresses `127.0.0.1` and `::1` (in any IPv6
//!   spelling, IPv4-mapped ones included) are all `127.0.0.1`; other `127.x.y.z`
//!   addresses stay apart (tests use them as separate hosts);
//! - IPv6 addresses are written in their shortest form, bracketed before a port;
//! - a host without a port gets the default port of its kind of resource when there is
//!   one (AMQP 5672 for queues, exchanges and bindings; PostgreSQL 5432 for tables,
//!   triggers, functions, replication slots and publications located in a database;
//!   Kafka 9092 for topics and consumer groups); a port is written without leading zeros;
//! - a path is compared with repeated and trailing slashes and `.` segments removed
//!   (`..` and symbolic links are left alone: resolving them needs the file system).
//!
//! The other locator parts (database, vhost) are compared as written.

use std::net::IpAddr;

use super::{Locator, ResourceKind};

/// The loopback host every loopback spelling becomes.
const LOOPBACK: &str = "127.0.0.1";

/// The port a locator of `kind` means when its host names none (`database`: whether it
/// is located in a database, as PostgreSQL objects are). Pure.
pub(super) fn default_port(kind: &ResourceKind, in_database: bool) -> Option<u16> {
    match kind {
        ResourceKind::Queue | ResourceKind::Exchange | ResourceKind::Binding => Some(5672),
        ResourceKind::Table
        | ResourceKind::Trigger
        | ResourceKind::Function
        | ResourceKind::ReplicationSlot
        | ResourceKind::Publication => in_database.then_some(5432),
        ResourceKind::Topic | ResourceKind::ConsumerGroup => Some(9092),
        ResourceKind::File | ResourceKind::Account | ResourceKind::Other(_) => None,
    }
}

/// `host` (`name`, `name:port`, `[v6]:port`, a bare IPv6 address) in canonical form
/// (the module's rules), with `default_port` added when it names no port. Pure.
pub fn canonical_host(host: &str, default_port: Option<u16>) -> String {
    let host = host.trim();
    if host.is_empty() {
        return String::new();
    }
    let (name, port) = split_host_port(host);
    let name = canonical_name(name);
    let port = match port {
        Some(p) => Some(
            p.parse::<u16>()
                .map_or_else(|_| p.to_owned(), |n| n.to_string()),
        ),
        None => default_port.map(|p| p.to_string()),
    };
    let bracketed = name.contains(':');
    match (port, bracketed) {
        (Some(p), true) => format!("[{name}]:{p}"),
        (Some(p), false) => format!("{name}:{p}"),
        (None, _) => name,
    }
}

/// Splits `host:port`, `[v6]:port`, `[v6]` or a bare IPv6 address (more than one `:`,
/// no port). Pure.
fn split_host_port(host: &str) -> (&str, Option<&str>) {
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((name, tail)) => (name, tail.strip_prefix(':').filter(|p| !p.is_empty())),
            None => (rest, None),
        };
    }
    match host.matches(':').count() {
        1 => {
            let (name, port) = host.split_once(':').unwrap_or((host, ""));
            (name, Some(port).filter(|p| !p.is_empty()))
        }
        _ => (host, None),
    }
}

/// A host name or address without a port in canonical form. Pure.
fn canonical_name(name: &str) -> String {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    match name.parse::<IpAddr>() {
        Ok(IpAddr::V4(v4)) if v4.octets() == [127, 0, 0, 1] => LOOPBACK.to_owned(),
        Ok(IpAddr::V4(v4)) => v4.to_string(),
        Ok(IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => canonical_name(&v4.to_string()),
            None if v6.is_loopback() => LOOPBACK.to_owned(),
            None => v6.to_string(),
        },
        Err(_) => match name.as_str() {
            "localhost" | "localhost.localdomain" | "ip6-localhost" | "ip6-loopback" => {
                LOOPBACK.to_owned()
            }
            _ => name,
        },
    }
}

/// `path` with repeated and trailing slashes and `.` segments removed. Pure.
pub fn canonical_path(path: &str) -> String {
    if path.is_empty() {
        return String::new();
    }
    let absolute = path.starts_with('/');
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// `locator` of a resource of `kind` in canonical form. Pure.
pub(super) fn canonical(locator: &Locator, kind: &ResourceKind) -> Locator {
    Locator {
        host: canonical_host(
            &locator.host,
            default_port(kind, !locator.database.is_empty()),
        ),
        database: locator.database.clone(),
        vhost: locator.vhost.clone(),
        path: canonical_path(&locator.path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AMQP: Option<u16> = Some(5672);

    #[test]
    fn localhost_is_the_loopback_address() {
        assert_eq!(canonical_host("localhost:5672", AMQP), "127.0.0.1:5672");
        assert_eq!(canonical_host("127.0.0.1:5672", AMQP), "127.0.0.1:5672");
    }

    #[test]
    fn case_does_not_matter() {
        assert_eq!(canonical_host("LocalHost:5672", AMQP), "127.0.0.1:5672");
        assert_eq!(
            canonical_host("Rabbit.Example:5672", AMQP),
            "rabbit.example:5672"
        );
    }

    #[test]
    fn a_trailing_dot_does_not_matter() {
        assert_eq!(canonical_host("localhost.:5672", AMQP), "127.0.0.1:5672");
        assert_eq!(
            canonical_host("rabbit.example.:5672", AMQP),
            "rabbit.example:5672"
        );
    }

    #[test]
    fn a_missing_port_is_the_kinds_default_port() {
        assert_eq!(canonical_host("rabbit", AMQP), "rabbit:5672");
        assert_eq!(canonical_host("rabbit", None), "rabbit");
        assert_eq!(canonical_host("rabbit:", AMQP), "rabbit:5672");
    }

    #[test]
    fn a_port_is_a_number_without_leading_zeros() {
        assert_eq!(canonical_host("rabbit:05672", AMQP), "rabbit:5672");
        assert_eq!(canonical_host("rabbit:amqp", AMQP), "rabbit:amqp");
    }

    #[test]
    fn other_loopback_addresses_stay_apart() {
        assert_eq!(canonical_host("127.0.0.2:5672", AMQP), "127.0.0.2:5672");
    }

    #[test]
    fn ipv6_loopback_in_any_spelling_is_the_loopback_address() {
        assert_eq!(canonical_host("[::1]:5672", AMQP), "127.0.0.1:5672");
        assert_eq!(canonical_host("::1", AMQP), "127.0.0.1:5672");
        assert_eq!(canonical_host("[0:0:0:0:0:0:0:1]", AMQP), "127.0.0.1:5672");
        assert_eq!(
            canonical_host("[::ffff:127.0.0.1]:5672", AMQP),
            "127.0.0.1:5672"
        );
        assert_eq!(canonical_host("ip6-localhost:5672", AMQP), "127.0.0.1:5672");
    }

    #[test]
    fn other_ipv6_addresses_are_shortest_and_bracketed() {
        assert_eq!(
            canonical_host("[2001:DB8:0:0:0:0:0:1]:5672", AMQP),
            "[2001:db8::1]:5672"
        );
        assert_eq!(canonical_host("2001:db8::1", None), "2001:db8::1");
    }

    #[test]
    fn an_empty_host_stays_empty() {
        assert_eq!(canonical_host("", AMQP), "");
    }

    #[test]
    fn default_ports_follow_the_kind() {
        assert_eq!(default_port(&ResourceKind::Queue, false), Some(5672));
        assert_eq!(default_port(&ResourceKind::Exchange, false), Some(5672));
        assert_eq!(default_port(&ResourceKind::Binding, false), Some(5672));
        assert_eq!(default_port(&ResourceKind::Table, true), Some(5432));
        assert_eq!(
            default_port(&ResourceKind::Table, false),
            None,
            "an SQLite table"
        );
        assert_eq!(default_port(&ResourceKind::Trigger, true), Some(5432));
        assert_eq!(default_port(&ResourceKind::Function, true), Some(5432));
        assert_eq!(
            default_port(&ResourceKind::ReplicationSlot, true),
            Some(5432)
        );
        assert_eq!(default_port(&ResourceKind::Publication, true), Some(5432));
        assert_eq!(default_port(&ResourceKind::Topic, false), Some(9092));
        assert_eq!(
            default_port(&ResourceKind::ConsumerGroup, false),
            Some(9092)
        );
        assert_eq!(default_port(&ResourceKind::File, false), None);
        assert_eq!(default_port(&ResourceKind::Account, true), None);
        assert_eq!(
            default_port(&ResourceKind::Other("bucket".into()), false),
            None
        );
    }

    #[test]
    fn a_path_loses_repeated_and_trailing_slashes_and_dot_segments() {
        assert_eq!(canonical_path("/data//./shop.db"), "/data/shop.db");
        assert_eq!(canonical_path("/data/out/"), "/data/out");
        assert_eq!(canonical_path("/data/../shop.db"), "/data/../shop.db");
        assert_eq!(canonical_path("./out.txt"), "out.txt");
        assert_eq!(canonical_path("."), ".");
        assert_eq!(canonical_path(""), "");
    }
}
