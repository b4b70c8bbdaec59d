//! The Kafka Connect REST gateway as a test's client sees it: a control plane started
//! with `--rest-listen` ([`start_with_rest`]), and a plain HTTP/1.1 client of it
//! ([`Rest`]) that sends one request per connection, as curl does.

use std::path::Path;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::Value;

use crate::cluster::TestCluster;

/// One HTTP answer.
#[derive(Debug)]
pub struct Answer {
    /// HTTP status code.
    pub status: u16,
    /// Response headers.
    pub headers: hyper::HeaderMap,
    /// The body as JSON (`Null` when empty).
    pub body: Value,
}

/// A REST client of one gateway.
pub struct Rest {
    /// The gateway's IP:PORT.
    pub addr: String,
}

impl Rest {
    /// Sends one request on a fresh connection. `body` goes as `application/json`
    /// unless `content_type` says otherwise. Panics when the answer's body is not JSON.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
        content_type: Option<&str>,
    ) -> Answer {
        let stream = tokio::net::TcpStream::connect(&self.addr)
            .await
            .expect("connect to the REST gateway");
        let (mut sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .expect("HTTP/1.1 handshake");
        tokio::spawn(conn);
        let mut req = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", &self.addr)
            .header("accept", "application/json");
        if body.is_some() {
            req = req.header("content-type", content_type.unwrap_or("application/json"));
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .expect("request");
        let resp = sender.send_request(req).await.expect("response");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                panic!(
                    "{method} {path}: body is not JSON ({e}): {}",
                    String::from_utf8_lossy(&bytes)
                )
            })
        };
        Answer {
            status,
            headers,
            body,
        }
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Answer {
        self.send("GET", path, None, None).await
    }

    /// `method path` with the JSON `body`.
    pub async fn json(&self, method: &str, path: &str, body: &Value) -> Answer {
        self.send(method, path, Some(body.to_string().into_bytes()), None)
            .await
    }

    /// `method path` without a body.
    pub async fn empty(&self, method: &str, path: &str) -> Answer {
        self.send(method, path, None, None).await
    }
}

/// The REST gateway's address a control plane with data dir `cp_dir` wrote
/// (`rest.addr`, written before `listen.addr`).
pub fn rest_addr(cp_dir: &Path) -> String {
    std::fs::read_to_string(cp_dir.join("rest.addr"))
        .expect("rest.addr written")
        .trim()
        .to_owned()
}

/// A cluster of `executors` whose control plane also serves REST on a free port, with
/// `env` in the control plane's environment; and a client of that gateway.
pub async fn start_with_rest(executors: usize, env: &[(&str, &str)]) -> (TestCluster, Rest) {
    let c = TestCluster::start_secured_with_env(
        executors,
        vec!["--rest-listen".into(), "127.0.0.1:0".into()],
        false,
        env,
    )
    .await;
    let addr = rest_addr(&c.dir.path().join("cp"));
    (c, Rest { addr })
}
