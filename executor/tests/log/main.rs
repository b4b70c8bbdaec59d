//! The record log against real backends: one contract suite every backend passes
//! (`contract`, run on the embedded log in a temp dir, on NATS JetStream and on Kafka), and
//! what only one backend promises (`embedded`: file locks, kill -9 of the process, memory;
//! `jetstream`: stream naming, replication, kill -9 of nats-server; `kafka`: topic names,
//! the records' layout as a plain Kafka client sees it, the consumer group's offsets).
//!
//! JetStream needs a nats-server with JetStream on 127.0.0.1:4222 (override with
//! `WHARF_NATS_URL`); every test uses its own stream prefix and removes its streams. The
//! kill -9 tests start their own `nats-server -js` on a free loopback port. Kafka tests
//! start their own tansu broker (`tansu.rs`; `scripts/setup-services` installs it, or set
//! `WHARF_TANSU` to its binary).
//! Run with `cargo test -p wharf-executor --test log`.

mod common;
mod contract;
mod embedded;
mod jetstream;
mod kafka;
mod kafka_tls;
mod tansu;
