//! Numbered JSON lines for data-plane tests: `{"n":N}` lines appended to a `file-source`
//! input and read back from a `file-sink` output.

use std::io::Write;
use std::path::Path;

use serde_json::{Value, json};

/// Appends one `{"n":N}` line per number in `range` to `path` and syncs it.
pub fn append_lines(path: &Path, range: std::ops::Range<u64>) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("open input");
    for n in range {
        writeln!(f, "{}", json!({ "n": n })).expect("write input");
    }
    f.sync_all().expect("sync input");
}

/// The `n` of every complete JSON line of a sink's file, in file order.
pub fn sink_numbers(path: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n'))
        .map(|l| {
            let v: Value = serde_json::from_str(l.trim_end()).expect("sink line is JSON");
            v["n"].as_u64().expect("n")
        })
        .collect()
}

/// Order of first arrival, with repeats removed.
pub fn first_arrivals(numbers: &[u64]) -> Vec<u64> {
    let mut seen = std::collections::BTreeSet::new();
    numbers
        .iter()
        .copied()
        .filter(|n| seen.insert(*n))
        .collect()
}
