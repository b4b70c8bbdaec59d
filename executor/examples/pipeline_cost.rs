//! What the record pipeline costs a source per record, without the record log or the
//! plugins around it: the records of `wharf-bench`'s data-plane rows (one 100-byte JSON
//! line each, `{"t":...,"p":"xxx..."}`) through `Pipeline::source` with the bench's chain
//! (JsonConverter without schemas on key and value; MaskField, InsertField,
//! ReplaceField: `wharf-bench`'s `CHAIN`), and through the identity pipeline, in one
//! thread. Prints the rate of each and the time per record (bench/NOTES.md).
//!
//! Usage: `cargo run --release -p wharf-executor --example pipeline_cost -- [RECORDS]`.

use std::time::Instant;

use wharf_executor::pipeline::{ConverterDefaults, Pipeline};
use wharf_sdk::{ConfigMap, PluginKind, SourceRecord};

/// The chain of `wharf-bench`'s chained data-plane runs (bench/src/dataplane.rs).
const CHAIN: &[(&str, &str)] = &[
    (
        "key.converter",
        "org.apache.kafka.connect.json.JsonConverter",
    ),
    ("key.converter.schemas.enable", "false"),
    (
        "value.converter",
        "org.apache.kafka.connect.json.JsonConverter",
    ),
    ("value.converter.schemas.enable", "false"),
    ("transforms", "mask,insert,rename"),
    (
        "transforms.mask.type",
        "org.apache.kafka.connect.transforms.MaskField$Value",
    ),
    ("transforms.mask.fields", "p"),
    (
        "transforms.insert.type",
        "org.apache.kafka.connect.transforms.InsertField$Value",
    ),
    ("transforms.insert.static.field", "src"),
    ("transforms.insert.static.value", "bench"),
    (
        "transforms.rename.type",
        "org.apache.kafka.connect.transforms.ReplaceField$Value",
    ),
    ("transforms.rename.renames", "p:pad"),
];

/// Bytes of one record, as the bench's.
const RECORD_BYTES: usize = 100;

fn record(i: u64) -> SourceRecord {
    let head = format!("{{\"t\":{},\"p\":\"", 1_700_000_000_000_000_000 + i);
    let pad = RECORD_BYTES - head.len() - 3;
    SourceRecord {
        partition: None,
        topic: "bench".into(),
        key: None,
        value: format!("{head}{}\"}}", "x".repeat(pad)).into_bytes(),
        headers: Vec::new(),
        timestamp_ms: Some(1_700_000_000_000),
        source_partition: serde_json::json!({ "file": "in" }),
        source_offset: serde_json::json!({ "position": i }),
        data: None,
    }
}

/// Records per second through `pipeline`, and the bytes it wrote (so that the work is
/// not optimised away).
fn run(pipeline: &mut Pipeline, records: Vec<SourceRecord>) -> (f64, usize) {
    let n = records.len();
    let started = Instant::now();
    let mut bytes = 0;
    for r in records {
        if let Ok(Some(out)) = pipeline.source(r) {
            bytes += out.value.len();
        }
    }
    (n as f64 / started.elapsed().as_secs_f64(), bytes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(300_000);
    let chain: ConfigMap = CHAIN
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let defaults = ConverterDefaults::default();
    let make = |config: &ConfigMap| {
        Pipeline::new(config, PluginKind::Source, &defaults, &[])
            .map_err(|p| format!("refused: {p:?}"))
    };
    let mut chained = make(&chain)?;
    let mut identity = make(&ConfigMap::new())?;
    // One warm-up pass each, then three measured; the median is printed.
    let mut rates = (Vec::new(), Vec::new());
    for pass in 0..4 {
        let (c, cb) = run(&mut chained, (0..n).map(record).collect());
        let (i, ib) = run(&mut identity, (0..n).map(record).collect());
        if pass > 0 {
            rates.0.push(c);
            rates.1.push(i);
        }
        if pass == 0 {
            eprintln!("warm-up: chain wrote {cb} bytes, identity {ib}");
        }
    }
    rates.0.sort_by(f64::total_cmp);
    rates.1.sort_by(f64::total_cmp);
    let (c, i) = (rates.0[1], rates.1[1]);
    println!(
        "{n} records of {RECORD_BYTES} bytes, median of 3: chain {c:.0} rec/s ({:.2} us/record), identity {i:.0} rec/s",
        1e6 / c
    );
    Ok(())
}
