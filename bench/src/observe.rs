//! The observability load of the "on" runs: an OTLP/gRPC trace receiver that counts and
//! drops every export (what a collector costs the sender is the export itself), and a
//! scraper that fetches every metrics page once per [`SCRAPE_INTERVAL_MS`], as Prometheus
//! would.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// How often each metrics page is fetched, in milliseconds (a common scrape interval is
/// 15 s; once a second is a heavier load than a deployment's).
pub const SCRAPE_INTERVAL_MS: u64 = 1_000;

/// Counts the spans it receives, then drops them.
struct Discard(Arc<AtomicU64>);

#[tonic::async_trait]
impl TraceService for Discard {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans: usize = request
            .get_ref()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.0.fetch_add(spans as u64, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A running receiver and scraper; both stop when dropped.
pub struct Load {
    /// The receiver's endpoint, `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// Spans received so far.
    pub spans: Arc<AtomicU64>,
    stop: CancellationToken,
}

impl Load {
    /// The load of an "on" cluster when `observed`, none for an "off" one.
    pub async fn start_if(observed: bool) -> anyhow::Result<Option<Self>> {
        Ok(if observed {
            Some(Self::start().await?)
        } else {
            None
        })
    }

    /// Starts the trace receiver.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let endpoint = format!("http://{}", listener.local_addr()?);
        let stop = CancellationToken::new();
        let until = stop.clone().cancelled_owned();
        let spans = Arc::new(AtomicU64::new(0));
        let receiver = Discard(spans.clone());
        tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(TraceServiceServer::new(receiver))
                .serve_with_incoming_shutdown(incoming, until)
                .await;
        });
        Ok(Self {
            endpoint,
            spans,
            stop,
        })
    }

    /// Scrapes `GET /metrics` of every `IP:PORT` in `targets` until dropped.
    pub fn scrape(&self, targets: Vec<String>) {
        let stop = self.stop.clone();
        tokio::spawn(async move {
            loop {
                for t in &targets {
                    let _ = scrape_once(t).await;
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_millis(SCRAPE_INTERVAL_MS)) => {}
                }
            }
        });
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One HTTP/1.1 GET of `/metrics`, the page read to its end.
async fn scrape_once(target: &str) -> std::io::Result<usize> {
    let mut s = tokio::net::TcpStream::connect(target).await?;
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut page = Vec::new();
    s.read_to_end(&mut page).await?;
    Ok(page.len())
}
