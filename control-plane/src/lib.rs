//! Wharf control plane: the herder, the state store, the deletion finalizer and the
//! admin API.
//!
//! Layout: [`model`] is data, [`plan`] decides, [`reconcile`] acts, [`store`] persists,
//! [`grpc`] adapts; [`executors`] is the one table of what is known about each executor;
//! [`auth`] says who may call the admin API; [`app`] composes them.

pub mod admin;
pub mod app;
pub mod auth;
pub mod executors;
pub mod flags;
pub mod grpc;
pub mod launch;
pub mod model;
pub mod observe;
pub mod plan;
pub mod reconcile;
pub mod rest;
pub mod store;
