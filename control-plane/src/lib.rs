//! Wharf control plane: the herder, the state store, the deletion finalizer and the
//! admin API.
//!
//! Layout: [`model`] is data, [`plan`] decides, [`reconcile`] acts, [`store`] persists,
//! [`grpc`] adapts; [`app`] composes them.

pub mod admin;
pub mod app;
pub mod grpc;
pub mod model;
pub mod plan;
pub mod reconcile;
pub mod rest;
pub mod store;
