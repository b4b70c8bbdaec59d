//! Wharf executor (library half; the binary is a thin composition root).
pub mod log;
