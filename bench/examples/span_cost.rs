//! What one exported span costs its process alone (bench/NOTES.md, issue 16, "what is
//! cost and what is noise"): `N` pairs of a `StopTask` server span and its `plugin stop`
//! child, made with `wharf::trace::DirectSpan` as the executor makes them, on a
//! current-thread runtime (on a multi-thread one, parking and waking threads on a small
//! VM costs more than the spans and varies from run to run).
//!
//! ```sh
//! cargo build --release -p wharf-bench --example span_cost
//! target/release/examples/span_cost receive &   # prints its endpoint, then its count
//! target/release/examples/span_cost send off 50000
//! OTEL_BSP_MAX_QUEUE_SIZE=65536 target/release/examples/span_cost send ENDPOINT 50000
//! ```
//!
//! `send` prints the CPU time of its process (the SDK's batch thread included, the
//! receiver's not) per pair, the export flushed. `receive` is the tests' OTLP receiver
//! (`wharf_harness::otlp::TestOtlp`) in a process of its own; it prints how many spans
//! it holds whenever that changes (all `2 N` of a run should arrive).

use wharf::trace::{DirectSpan, KeyValue, TraceContext};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["receive"] => {
            let otlp = wharf_harness::otlp::TestOtlp::start().await;
            println!("{}", otlp.endpoint);
            let mut shown = 0;
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                let received = otlp.received();
                if received != shown {
                    eprintln!("received {received} spans in all");
                    shown = received;
                }
            }
        }
        ["send", endpoint, n] => send(endpoint, n.parse()?).await?,
        _ => anyhow::bail!("usage: span_cost receive | span_cost send off|ENDPOINT N"),
    }
    Ok(())
}

async fn send(endpoint: &str, n: usize) -> anyhow::Result<()> {
    let otlp = (endpoint != "off").then(|| wharf::telemetry::Otlp {
        endpoint: endpoint.to_owned(),
        service: "wharf-executor",
        instance: "span-cost".into(),
    });
    let (_reload, export) =
        wharf::telemetry::init_traced(wharf::telemetry::LogFormat::Text, otlp.as_ref())?.split();
    // A control plane's sampled deletion trace, as a StopTask carries it.
    let mut metadata = tonic::metadata::MetadataMap::new();
    metadata.insert(
        "traceparent",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".parse()?,
    );
    let before = cpu_ms();
    for i in 0..n {
        DirectSpan::server("/wharf.v1.Executor/StopTask", &metadata)
            .around(async move {
                let stop = DirectSpan::child(
                    &TraceContext::current(),
                    "plugin stop",
                    [KeyValue::new("connector_deleted", true)],
                );
                let stopped = tokio::spawn(wharf::trace::with_current_context(
                    stop.around(async move { Ok::<_, String>(i) }),
                ));
                stopped.await.map_err(|e| e.to_string())?
            })
            .await
            .map_err(anyhow::Error::msg)?;
        // Lets the export, which runs on this runtime, go on. It does not always keep
        // up: the SDK's queue (2,048 spans unless OTEL_BSP_MAX_QUEUE_SIZE says more)
        // drops what overflows, and a dropped span costs less than a sent one.
        if i % 100 == 0 {
            tokio::task::yield_now().await;
        }
    }
    export.shutdown().await;
    let used = cpu_ms() - before;
    println!(
        "{n} pairs, export {endpoint}: {used:.0} ms of CPU, {:.2} us per pair",
        used * 1000.0 / n as f64
    );
    Ok(())
}

/// CPU time (user + system) of this process so far, ms (/proc, 100 Hz ticks).
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    [11, 12]
        .iter()
        .filter_map(|i| f.get(*i).and_then(|v| v.parse::<f64>().ok()))
        .sum::<f64>()
        * 10.0
}
