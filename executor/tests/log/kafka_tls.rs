//! The Kafka log over TLS and mutual TLS (`security.protocol=ssl`, `ssl.*` record log
//! options), against a test-owned TLS endpoint in front of the tansu broker: tansu 0.6.0's
//! own TLS listener does not start (its `--cert` and `--key` flags refuse each other), so
//! the test terminates TLS itself (rustls, the certificates made with `wharf::certs`) and
//! forwards the bytes to the broker, which advertises the endpoint's port. What this does
//! not test: SASL (PLAIN, SCRAM), which tansu does not offer; the SASL options are
//! unit-tested down to the librdkafka settings they give (`settings.rs`).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use wharf::identity::Identity;
use wharf_executor::log::{LogConfig, LogError, NatsSecurity, RecordLog, StartPosition};

use crate::common::{read_and_ack, rec, topics};
use crate::tansu::TestKafka;

/// Makes a CA and the broker's and a client's certificates in `dir` (`ca.pem`,
/// `executor-broker.*`, `executor-client.*`), the broker's for 127.0.0.1.
fn make_certs(dir: &Path) {
    wharf::certs::init_ca(dir).expect("ca");
    wharf::certs::issue(
        dir,
        &Identity::Executor("broker".into()),
        &["127.0.0.1".into()],
    )
    .expect("broker certificate");
    wharf::certs::issue(dir, &Identity::Executor("client".into()), &[])
        .expect("client certificate");
}

/// Serves TLS on `listener`, forwarding each connection's bytes to `upstream`; with
/// `require_client`, a client must present a certificate the CA signed.
fn serve_tls(listener: TcpListener, certs: &Path, upstream: String, require_client: bool) {
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(certs.join("executor-broker.pem"))
            .expect("cert")
            .collect::<Result<_, _>>()
            .expect("cert");
    let key = PrivateKeyDer::from_pem_file(certs.join("executor-broker.key")).expect("key");
    let roots = Arc::new(wharf::tls::read_roots(&certs.join("ca.pem")).expect("ca"));
    let builder = rustls::ServerConfig::builder();
    let builder = if require_client {
        builder.with_client_cert_verifier(
            rustls::server::WebPkiClientVerifier::builder(roots)
                .build()
                .expect("verifier"),
        )
    } else {
        builder.with_no_client_auth()
    };
    let config = Arc::new(builder.with_single_cert(chain, key).expect("server config"));
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let Ok((socket, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(socket).await else {
                    return;
                };
                let Ok(mut plain) = TcpStream::connect(&upstream).await else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
            });
        }
    });
}

/// A broker behind a TLS endpoint: (the broker, the endpoint's `127.0.0.1:PORT`).
async fn broker_behind_tls(certs: &Path, require_client: bool) -> (TestKafka, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let kafka = TestKafka::start_advertising(Some(port));
    serve_tls(listener, certs, kafka.broker.clone(), require_client);
    (kafka, format!("127.0.0.1:{port}"))
}

/// The Kafka log on `endpoint` with the record log options `options`.
async fn open_with(endpoint: &str, options: &str) -> Result<Arc<dyn RecordLog>, LogError> {
    let config = LogConfig::parse(
        &format!("kafka://{endpoint}?{options}"),
        Path::new("unused"),
        NatsSecurity::default(),
    )?;
    wharf_executor::log::open(&config).await
}

/// Appends to and reads back from a new topic through `log`.
async fn round_trip(log: &Arc<dyn RecordLog>) {
    log.append("secured", vec![rec("over-tls")])
        .await
        .expect("append over TLS");
    let mut reader = log
        .consumer(
            "connect-secured",
            &topics(&["secured"]),
            StartPosition::Earliest,
        )
        .await
        .expect("consumer over TLS");
    let got = read_and_ack(reader.as_mut(), 1).await;
    assert_eq!(got[0].2, "over-tls");
}

#[tokio::test]
async fn the_kafka_log_speaks_tls_to_a_broker_whose_certificate_its_ca_signed() {
    let dir = tempfile::tempdir().expect("dir");
    make_certs(dir.path());
    let (_kafka, endpoint) = broker_behind_tls(dir.path(), false).await;
    let ca = dir.path().join("ca.pem");
    let log = open_with(
        &endpoint,
        &format!("security.protocol=ssl&ssl.ca.location={}", ca.display()),
    )
    .await
    .expect("open");
    round_trip(&log).await;
}

#[tokio::test]
async fn with_mutual_tls_the_log_presents_its_certificate_and_without_one_it_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    make_certs(dir.path());
    let (_kafka, endpoint) = broker_behind_tls(dir.path(), true).await;
    let d = dir.path();
    let log = open_with(
        &endpoint,
        &format!(
            "security.protocol=ssl&ssl.ca.location={}&ssl.certificate.location={}&ssl.key.location={}",
            d.join("ca.pem").display(),
            d.join("executor-client.pem").display(),
            d.join("executor-client.key").display()
        ),
    )
    .await
    .expect("open");
    round_trip(&log).await;

    // Without a client certificate the endpoint refuses every connection: a consumer
    // cannot even read the topic's metadata.
    let anonymous = open_with(
        &endpoint,
        &format!(
            "security.protocol=ssl&ssl.ca.location={}&admin.socket.timeout.ms=2000",
            d.join("ca.pem").display()
        ),
    )
    .await
    .expect("open");
    let refused = tokio::time::timeout(
        Duration::from_secs(30),
        anonymous.consumer(
            "connect-anon",
            &topics(&["secured"]),
            StartPosition::Earliest,
        ),
    )
    .await
    .expect("the refusal comes within the request timeout");
    match refused {
        Err(LogError::Unavailable(_)) => {}
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("a client without a certificate read the broker"),
    }
}
