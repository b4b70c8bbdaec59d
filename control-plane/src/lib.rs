//! Wharf control plane (library half; the binary is a thin composition root).
