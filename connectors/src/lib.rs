//! Built-in connector plugins.
