//! Applies Wharf's record pipeline to the records of each case in a cases file, as a
//! sink's pipeline does (JsonConverter without schemas on key and value, the case's
//! transforms and predicates), and prints one JSON line per case in the shape of
//! `scripts/compare-transforms/TransformCompare.java`, which does the same with Kafka
//! Connect's own classes; `scripts/compare-transforms` compares the two.
//!
//! Usage: `cargo run -p wharf-executor --example pipeline_apply -- CASES.json`.

use serde_json::{Value, json};
use wharf_executor::pipeline::{ConverterDefaults, Pipeline};
use wharf_sdk::{ConfigMap, PluginKind, SinkRecord};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .ok_or("usage: pipeline_apply CASES.json")?;
    let cases: Value = serde_json::from_slice(&std::fs::read(path)?)?;
    for case in cases.as_array().ok_or("cases must be an array")? {
        let mut config: ConfigMap = case["config"]
            .as_object()
            .ok_or("config must be an object")?
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_owned),
                )
            })
            .collect();
        for (k, v) in [
            ("key.converter", "json"),
            ("key.converter.schemas.enable", "false"),
            ("value.converter", "json"),
            ("value.converter.schemas.enable", "false"),
        ] {
            config.insert(k.to_owned(), v.to_owned());
        }
        let mut line = json!({ "case": case["name"] });
        let mut pipeline = match Pipeline::new(
            &config,
            PluginKind::Sink,
            &ConverterDefaults::default(),
            &[],
        ) {
            Ok(p) => p,
            Err(_) => {
                line["config_error"] = json!(true);
                println!("{line}");
                continue;
            }
        };
        let mut out = Vec::new();
        for (offset, r) in case["records"]
            .as_array()
            .ok_or("records must be an array")?
            .iter()
            .enumerate()
        {
            let text = |v: &Value| v.as_str().map(|s| s.as_bytes().to_vec());
            let record = SinkRecord {
                topic: r["topic"].as_str().unwrap_or_default().to_owned(),
                partition: 0,
                key: text(&r["key"]),
                value: text(&r["value"]).unwrap_or_default(),
                headers: r["headers"]
                    .as_array()
                    .map(|hs| {
                        hs.iter()
                            .map(|h| {
                                (
                                    h[0].as_str().unwrap_or_default().to_owned(),
                                    text(&h[1]).unwrap_or_default(),
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
                timestamp_ms: r["timestamp"].as_i64(),
                offset: offset as u64,
                data: None,
            };
            out.push(match pipeline.sink(record) {
                Ok(None) => json!({ "dropped": true }),
                Err(_) => json!({ "error": true }),
                Ok(Some(r)) => {
                    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                    json!({
                        "topic": r.topic,
                        "key": r.key.as_deref().map(s),
                        "value": if r.value.is_empty() { Value::Null } else { json!(s(&r.value)) },
                        "headers": r.headers.iter().map(|(k, v)| json!([k, s(v)])).collect::<Vec<_>>(),
                        "timestamp": r.timestamp_ms,
                    })
                }
            });
        }
        line["out"] = json!(out);
        println!("{line}");
    }
    Ok(())
}
