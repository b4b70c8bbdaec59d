//! The record log against real backends: one contract suite every backend passes
//! (`contract`, run on the embedded log in a temp dir and on NATS JetStream), and what only
//! one backend promises (`embedded`: file locks, kill -9 of the process, memory;
//! `jetstream`: stream naming, replication, kill -9 of nats-server).
//!
//! JetStream needs a nats-server with JetStream on 127.0.0.1:4222 (override with
//! `WHARF_NATS_URL`); every test uses its own stream prefix and removes its streams. The
//! kill -9 tests start their own `nats-server -js` on a free loopback port.
//! Run with `cargo test -p wharf-executor --test log`.

mod common;
mod contract;
mod embedded;
mod jetstream;
