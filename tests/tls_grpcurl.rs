//! An operator's view of a secured cluster (docs/security.md): certificates made with
//! `wharf-control-plane certs ...`, then the page's own grpcurl and curl lines, run as
//! written (with `D`, `CP`, `EXECUTOR` and `REST` set to this test's cluster): the admin
//! client with its certificate is served; without a certificate the registry and the
//! executor refuse, and nothing changes; the REST gateway speaks HTTPS with the control
//! plane's certificate (to HTTP/1.1 and HTTP/2 clients alike), and a plaintext
//! non-loopback `--rest-listen` refuses to start.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`. grpcurl comes
//! from `$GRPCURL` (scripts/test sets it) or `PATH`. It stays grpcurl here (the other
//! suites use the typed clients): the page's grpcurl lines, as typed, are the point.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use wharf_harness::{KeepOnFailure, Proc, WAIT_DEADLINE, wait_until};

/// grpcurl exits with 64 + the gRPC status code of a failed call.
const GRPCURL_STATUS_BASE: i32 = 64;

/// The page whose lines this test runs.
const SECURITY_MD: &str = include_str!("../docs/security.md");

/// docs/security.md: an admin client lists executors.
const LIST_EXECUTORS: &str = "grpcurl -cacert $D/ca.pem -cert $D/admin-alice.pem -key $D/admin-alice.key $CP wharf.v1.ConnectorAdmin/ListExecutors";
/// docs/security.md: a registration for exec-1 without a certificate.
const REGISTER_WITHOUT_CERT: &str = r#"grpcurl -cacert $D/ca.pem -d '{"executor_id":"exec-1","advertised_address":"https://10.0.0.99:7070"}' $CP wharf.v1.ExecutorRegistry/RegisterExecutor"#;
/// docs/security.md: a deleting stop sent to an executor without a certificate.
const STOP_WITHOUT_CERT: &str = r#"grpcurl -cacert $D/ca.pem -d '{"connector":"c","connector_deleted":true,"generation":1}' $EXECUTOR wharf.v1.Executor/StopConnector"#;
/// docs/security.md: the same stop with an admin client's certificate.
const STOP_AS_ADMIN: &str = r#"grpcurl -cacert $D/ca.pem -cert $D/admin-alice.pem -key $D/admin-alice.key -d '{"connector":"c","connector_deleted":true,"generation":1}' $EXECUTOR wharf.v1.Executor/StopConnector"#;
/// docs/security.md: the REST gateway over HTTPS.
const REST_CONNECTORS: &str = "curl --cacert $D/ca.pem --cert $D/admin-alice.pem --key $D/admin-alice.key https://$REST/connectors";

/// gRPC UNAUTHENTICATED.
const UNAUTHENTICATED: i32 = 16;
/// gRPC PERMISSION_DENIED.
const PERMISSION_DENIED: i32 = 7;
/// Upper bound for one grpcurl or curl call.
const CALL_TIMEOUT: Duration = Duration::from_secs(20);

/// The cluster's addresses, as the page's variables.
struct Env<'a> {
    certs: &'a Path,
    cp: String,
    executor: String,
    rest: String,
}

/// Runs one documented `line` with bash, its variables set to `env`.
async fn run(line: &str, env: &Env<'_>) -> Output {
    assert!(
        SECURITY_MD.contains(line),
        "docs/security.md no longer holds the line this test runs:\n{line}"
    );
    let mut path = std::env::var("PATH").unwrap_or_default();
    if let Some(dir) = std::env::var_os("GRPCURL")
        .map(std::path::PathBuf::from)
        .and_then(|p| p.parent().map(Path::to_path_buf))
    {
        path = format!("{}:{path}", dir.display());
    }
    let out = tokio::process::Command::new("bash")
        .arg("-c")
        .arg(line)
        .env("PATH", path)
        .env("D", env.certs)
        .env("CP", &env.cp)
        .env("EXECUTOR", &env.executor)
        .env("REST", &env.rest)
        .output();
    tokio::time::timeout(CALL_TIMEOUT, out)
        .await
        .unwrap_or_else(|_| panic!("{line} took longer than {CALL_TIMEOUT:?}"))
        .expect("bash")
}

/// stdout as JSON; panics with stderr when the call failed.
fn ok_json(line: &str, out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{line} failed with {}:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{line}: not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Asserts grpcurl ended with gRPC status `code` and printed its name.
fn refused(line: &str, out: &Output, code: i32, name: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(GRPCURL_STATUS_BASE + code),
        "{line}: expected {name}; stdout {} stderr {err}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains(&format!("Code: {name}")), "{line}: {err}");
}

/// Runs `wharf-control-plane certs ARGS` as an operator would.
fn certs(args: &[&str]) {
    let out = wharf_harness::certs_command(args);
    assert!(
        out.status.success(),
        "certs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// exec-1 as ListExecutors shows it: (state, epoch, advertised address).
fn exec1(list: &Value) -> Option<(String, String, String)> {
    list["executors"]
        .as_array()?
        .iter()
        .find(|e| e["id"] == "exec-1")
        .map(|e| {
            (
                e["state"].as_str().unwrap_or_default().to_owned(),
                e["epoch"].to_string(),
                e["advertisedAddress"].to_string(),
            )
        })
}

fn tls_flags(d: &Path, leaf: &str) -> Vec<String> {
    vec![
        "--tls-cert".into(),
        d.join(format!("{leaf}.pem")).display().to_string(),
        "--tls-key".into(),
        d.join(format!("{leaf}.key")).display().to_string(),
        "--tls-ca".into(),
        d.join("ca.pem").display().to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_grpcurl_and_curl_lines_work_against_a_secured_cluster() {
    let root = KeepOnFailure::new();
    let d = root.path().join("pki");
    let ds = d.display().to_string();
    certs(&["init", "--dir", &ds]);
    certs(&["control-plane", "--dir", &ds]);
    certs(&[
        "executor",
        "--dir",
        &ds,
        "--id",
        "exec-1",
        "--host",
        "127.0.0.2",
    ]);
    certs(&[
        "admin", "--dir", &ds, "--name", "alice", "--role", "operator",
    ]);

    let cp_dir = root.path().join("cp");
    let mut args = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--rest-listen".into(),
        "127.0.0.1:0".into(),
        "--data-dir".into(),
        cp_dir.display().to_string(),
    ];
    args.extend(tls_flags(&d, "control-plane"));
    let mut cp = Proc::spawn(wharf_harness::bin("wharf-control-plane"), args, &cp_dir);
    let cp_addr = cp.listen_addr().await;
    let rest = std::fs::read_to_string(cp_dir.join("rest.addr")).expect("rest.addr");
    let ex_dir = root.path().join("exec-1");
    let mut args = vec![
        "--listen".into(),
        "127.0.0.2:0".into(),
        "--control-plane".into(),
        format!("https://{cp_addr}"),
        "--data-dir".into(),
        ex_dir.display().to_string(),
    ];
    args.extend(tls_flags(&d, "executor-exec-1"));
    let mut ex = Proc::spawn(wharf_harness::bin("wharf-executor"), args, &ex_dir);
    let ex_addr = ex.listen_addr().await;
    let env = Env {
        certs: &d,
        cp: cp_addr,
        executor: ex_addr,
        rest: rest.trim().to_owned(),
    };

    // The admin client's certificate: served, and it sees exec-1 registered over mTLS.
    let before = wait_until("exec-1 alive, seen with grpcurl", WAIT_DEADLINE, || {
        let env = &env;
        async move {
            let out = run(LIST_EXECUTORS, env).await;
            exec1(&ok_json(LIST_EXECUTORS, &out)).filter(|(s, _, _)| s == "EXECUTOR_STATE_ALIVE")
        }
    })
    .await;

    // No certificate: the registry refuses, exec-1 keeps its epoch and address.
    let out = run(REGISTER_WITHOUT_CERT, &env).await;
    refused(
        REGISTER_WITHOUT_CERT,
        &out,
        UNAUTHENTICATED,
        "Unauthenticated",
    );
    let out = run(LIST_EXECUTORS, &env).await;
    assert_eq!(
        exec1(&ok_json(LIST_EXECUTORS, &out)),
        Some(before),
        "a refused registration changed exec-1"
    );

    // The executor: no certificate, and an admin's certificate, are both refused.
    let out = run(STOP_WITHOUT_CERT, &env).await;
    refused(STOP_WITHOUT_CERT, &out, UNAUTHENTICATED, "Unauthenticated");
    let out = run(STOP_AS_ADMIN, &env).await;
    refused(STOP_AS_ADMIN, &out, PERMISSION_DENIED, "PermissionDenied");
    assert!(
        ex.log()
            .contains("Executor call refused: not the control plane"),
        "the executor logs the refusals: {}",
        ex.log()
    );

    // REST over HTTPS with the control plane's certificate; plaintext gets nothing.
    let out = run(REST_CONNECTORS, &env).await;
    assert_eq!(
        ok_json(REST_CONNECTORS, &out),
        serde_json::json!([]),
        "GET /connectors over HTTPS"
    );
    // HTTPS without a client certificate or token: 401, Connect's error body.
    let anonymous = tokio::process::Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(env.certs.join("ca.pem"))
        .arg(format!("https://{}/connectors", env.rest))
        .output()
        .await
        .expect("curl");
    let body: serde_json::Value =
        serde_json::from_slice(&anonymous.stdout).expect("an error body in JSON");
    assert_eq!(body["error_code"], 401, "{body}");
    // Plaintext HTTP to the HTTPS gateway is not served: a 400 that says to use https.
    let plain = tokio::process::Command::new("curl")
        .args(["-sS", "-w", "\n%{http_code}"])
        .arg(format!("http://{}/connectors", env.rest))
        .output()
        .await
        .expect("curl");
    let said = String::from_utf8_lossy(&plain.stdout);
    assert!(
        said.ends_with("\n400")
            && said.contains(&format!("{} speaks TLS", env.rest))
            && said.contains("use an https:// URL"),
        "plaintext HTTP to the HTTPS gateway: {said}"
    );
    // grpcurl -plaintext against the TLS port fails too.
    let out =
        tokio::process::Command::new(std::env::var("GRPCURL").unwrap_or_else(|_| "grpcurl".into()))
            .args(["-plaintext", &env.cp, "list"])
            .output()
            .await
            .expect("grpcurl");
    assert!(
        !out.status.success(),
        "-plaintext against a TLS port worked"
    );
    // ... and says why at once, instead of "context deadline exceeded" after 10 s.
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("Unavailable") && said.contains(&format!("{} speaks TLS", env.cp)),
        "grpcurl -plaintext against the TLS port: {said}"
    );
    assert!(said.contains("not -plaintext"), "{said}");
    drop(ex);
    drop(cp);
}

/// curl of `GET /connectors` on the HTTPS gateway `rest` as admin alice, speaking HTTP
/// version `flag` (`--http1.1`, `--http2`): (status, HTTP version, body).
async fn curl_connectors(d: &Path, rest: &str, flag: &str) -> (String, String, Value) {
    let out = tokio::process::Command::new("curl")
        .args([
            "-sS",
            flag,
            "-w",
            "\n%{http_code} %{http_version}",
            "--cacert",
        ])
        .arg(d.join("ca.pem"))
        .arg("--cert")
        .arg(d.join("admin-alice.pem"))
        .arg("--key")
        .arg(d.join("admin-alice.key"))
        .arg(format!("https://{rest}/connectors"))
        .output();
    let out = tokio::time::timeout(CALL_TIMEOUT, out)
        .await
        .unwrap_or_else(|_| panic!("curl {flag} took longer than {CALL_TIMEOUT:?}"))
        .expect("curl");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "curl {flag} failed with {}: {}{stdout}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, last) = stdout.rsplit_once('\n').expect("the -w line");
    let (code, version) = last.split_once(' ').expect("code and version");
    let body =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{flag}: not JSON ({e}): {body}"));
    (code.to_owned(), version.to_owned(), body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_https_rest_gateway_serves_http_1_1_and_http_2_clients() {
    let root = KeepOnFailure::new();
    let d = root.path().join("pki");
    let ds = d.display().to_string();
    certs(&["init", "--dir", &ds]);
    certs(&["control-plane", "--dir", &ds]);
    certs(&[
        "admin", "--dir", &ds, "--name", "alice", "--role", "operator",
    ]);
    let cp_dir = root.path().join("cp");
    let mut args = vec![
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--rest-listen".into(),
        "127.0.0.1:0".into(),
        "--data-dir".into(),
        cp_dir.display().to_string(),
    ];
    args.extend(tls_flags(&d, "control-plane"));
    let mut cp = Proc::spawn(wharf_harness::bin("wharf-control-plane"), args, &cp_dir);
    cp.listen_addr().await;
    let rest = std::fs::read_to_string(cp_dir.join("rest.addr")).expect("rest.addr");

    // curl --http1.1 and Python requests offer only http/1.1 in ALPN; plain curl offers
    // h2 first, and gets it.
    for (flag, version) in [("--http1.1", "1.1"), ("--http2", "2")] {
        let (code, got_version, body) = curl_connectors(&d, rest.trim(), flag).await;
        assert_eq!(
            (code.as_str(), got_version.as_str()),
            ("200", version),
            "curl {flag}: {body}"
        );
        assert_eq!(body, serde_json::json!([]), "curl {flag}");
    }
    drop(cp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_non_loopback_rest_listener_refuses_to_start() {
    let root = KeepOnFailure::new();
    let cp_dir = root.path().join("cp");
    let mut cp = Proc::spawn(
        wharf_harness::bin("wharf-control-plane"),
        vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--rest-listen".into(),
            "0.0.0.0:0".into(),
            "--data-dir".into(),
            cp_dir.display().to_string(),
        ],
        &cp_dir,
    );
    let mut child = cp.child.take().expect("running");
    let status = wait_until("the control plane to exit", WAIT_DEADLINE, || {
        let r = child.try_wait().ok().flatten();
        async move { r }
    })
    .await;
    assert!(!status.success(), "{}", cp.log());
    assert!(
        cp.log().contains("--rest-listen") && cp.log().contains("--insecure"),
        "{}",
        cp.log()
    );
    assert!(
        !cp_dir.join("rest.addr").exists() && !cp_dir.join("listen.addr").exists(),
        "nothing was bound"
    );
}
