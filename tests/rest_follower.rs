//! The Kafka Connect REST gateway of a follower replica, as a Connect client sees it: two
//! control planes on one (test-owned) etcd, both with `--rest-listen`, one executor
//! registered with the leader. Plain HTTP/1.1 requests (and curl) sent to the follower
//! get the leader's answers, as Kafka Connect's workers forward REST requests to their
//! leader: the plugins the executor offers are listed, validate runs the plugin's checks
//! (no "no live executor" warning), and every write succeeds and lands in the store the
//! leader serves. The follower's answers name the leader when it cannot forward.
//!
//! Needs the `etcd` binary (Debian `etcd-server`, see scripts/setup-services). Build
//! first: `cargo build -p wharf-control-plane -p wharf-executor-stock`, then
//! `cargo test -p wharf --test rest_follower`.

use std::time::Duration;

use serde_json::{Value, json};
use wharf_harness::cluster::CONVERGE;
use wharf_harness::etcd::control_plane_replica;
use wharf_harness::rest::{Rest, rest_addr};
use wharf_harness::{KeepOnFailure, Proc, wait_until};

/// Executor lease of the replicas, in milliseconds.
const LEASE_MS: u32 = 8_000;
/// Bound on the leader election after a start.
const ELECTION_DEADLINE: Duration = Duration::from_secs(20);

async fn wait_log(p: &Proc, what: &str, needle: &str) {
    wait_until(what, ELECTION_DEADLINE, || async {
        p.log().contains(needle).then_some(())
    })
    .await;
}

/// `GET path` with the curl binary, as an operator's script sends it: status and body.
fn curl_get(addr: &str, path: &str) -> (u16, Value) {
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-w",
            "\n%{http_code}",
            &format!("http://{addr}{path}"),
        ])
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("curl printed the status");
    (
        code.trim().parse().expect("status code"),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_gateway_answers_as_the_leader_does() {
    let etcd = wharf_harness::etcd::TestEtcd::start();
    let dir = KeepOnFailure::new();
    let key: [u8; 32] = rand::random();
    let rest_flags = ["--rest-listen".to_owned(), "127.0.0.1:0".to_owned()];
    let replica = |name: &str| {
        control_plane_replica(
            dir.path(),
            name,
            &etcd.endpoint,
            "/rest-follower/",
            &key,
            LEASE_MS,
            &rest_flags,
        )
    };
    let mut a = replica("cp-a");
    let a_addr = a.listen_addr().await;
    wait_log(&a, "cp-a leads", "leading: herder and finalizer start").await;
    let mut b = replica("cp-b");
    b.listen_addr().await;
    // b follows a once it read the leader key (its role names a's URL).
    wait_until("cp-b follows cp-a", ELECTION_DEADLINE, || async {
        b.log()
            .lines()
            .any(|l| l.contains("control-plane role changed") && l.contains("Some("))
            .then_some(())
    })
    .await;
    let leader = Rest {
        addr: rest_addr(&dir.path().join("cp-a")),
    };
    let follower = Rest {
        addr: rest_addr(&dir.path().join("cp-b")),
    };

    let ed = dir.path().join("exec-1");
    let mut exec = Proc::spawn(
        wharf_harness::bin("wharf-executor"),
        vec![
            "--listen".into(),
            "127.0.0.2:0".into(),
            "--control-plane".into(),
            format!("http://{a_addr}"),
            "--data-dir".into(),
            ed.display().to_string(),
            "--executor-id".into(),
            "exec-1".into(),
        ],
        &ed,
    );
    exec.listen_addr().await;

    // The plugins the leader's executor offers, listed by the follower (it has no
    // executors of its own: before, it answered `[]` with 200).
    let plugins = wait_until("the follower to list test-source", CONVERGE, || async {
        let a = follower.get("/connector-plugins").await;
        let listed = a.body.as_array().cloned().unwrap_or_default();
        (a.status == 200 && listed.iter().any(|p| p["class"] == "test-source")).then_some(listed)
    })
    .await;
    assert_eq!(
        plugins,
        leader
            .get("/connector-plugins")
            .await
            .body
            .as_array()
            .cloned()
            .unwrap_or_default(),
        "the follower lists what the leader lists"
    );
    let (code, body) = curl_get(&follower.addr, "/connector-plugins");
    assert_eq!(code, 200, "{body}");
    assert!(
        body.as_array()
            .is_some_and(|l| l.iter().any(|p| p["class"] == "test-source")),
        "curl on the follower: {body}"
    );
    let a = follower.get("/connector-plugins/test-source/config").await;
    assert_eq!(a.status, 200, "{a:?}");

    // Validate runs the plugin's own checks on the leader's executor: no warning that
    // no executor offers the plugin.
    let lifecycle = dir.path().join("lifecycle.jsonl");
    let cfg = json!({
        "connector.class": "test-source",
        "tasks.max": "1",
        "lifecycle.path": lifecycle.display().to_string(),
        "test.poll.block.ms": "50",
    });
    let a = follower
        .json(
            "PUT",
            "/connector-plugins/test-source/config/validate",
            &cfg,
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.body["error_count"], 0, "{}", a.body);
    assert_eq!(
        a.body["wharf_warning_count"].as_u64().unwrap_or(0),
        0,
        "no false warning: {}",
        a.body
    );

    // Writes through the follower succeed (201, 202, 204 as Connect answers) and the
    // leader stores them.
    let a = follower
        .json(
            "POST",
            "/connectors",
            &json!({ "name": "via-follower", "config": cfg }),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    assert_eq!(a.body["name"], "via-follower", "{}", a.body);
    let a = leader.get("/connectors/via-follower").await;
    assert_eq!(a.status, 200, "stored by the leader: {a:?}");
    wait_until(
        "via-follower RUNNING, read on the follower",
        CONVERGE,
        || async {
            let s = follower.get("/connectors/via-follower/status").await.body;
            (s["connector"]["state"] == "RUNNING"
                && s["tasks"]
                    .as_array()
                    .is_some_and(|t| t.len() == 1 && t[0]["state"] == "RUNNING"))
            .then_some(())
        },
    )
    .await;
    let a = follower
        .json(
            "PUT",
            "/connectors/via-follower/config",
            &json!({
                "connector.class": "test-source",
                "tasks.max": "1",
                "lifecycle.path": lifecycle.display().to_string(),
                "test.poll.block.ms": "60",
            }),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    let a = follower
        .empty("PUT", "/connectors/via-follower/pause")
        .await;
    assert_eq!(a.status, 202, "{a:?}");
    wait_until("via-follower PAUSED", CONVERGE, || async {
        (leader.get("/connectors/via-follower/status").await.body["connector"]["state"] == "PAUSED")
            .then_some(())
    })
    .await;
    let a = follower
        .empty("PUT", "/connectors/via-follower/resume")
        .await;
    assert_eq!(a.status, 202, "{a:?}");
    let a = follower
        .empty("POST", "/connectors/via-follower/restart")
        .await;
    assert_eq!(a.status, 204, "{a:?}");
    let a = follower.get("/connectors/via-follower/offsets").await;
    assert_eq!(a.status, 200, "{a:?}");
    let a = follower.empty("DELETE", "/connectors/via-follower").await;
    assert_eq!(a.status, 204, "{a:?}");
    wait_until("via-follower gone", CONVERGE, || async {
        (leader.get("/connectors/via-follower").await.status == 404).then_some(())
    })
    .await;

    // A request a follower forwarded is never forwarded again: a follower that receives
    // one answers 503 naming the leader's gateway instead.
    let stream = tokio::net::TcpStream::connect(&follower.addr)
        .await
        .expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(conn);
    let req = hyper::Request::builder()
        .method("GET")
        .uri("/connector-plugins")
        .header("host", &follower.addr)
        .header("x-wharf-forwarded-by", "http://127.0.0.1:1")
        .body(http_body_util::Full::new(hyper::body::Bytes::new()))
        .expect("request");
    let resp = sender.send_request(req).await.expect("response");
    assert_eq!(resp.status().as_u16(), 503);
    use http_body_util::BodyExt;
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let body: Value = serde_json::from_slice(&body).expect("JSON");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains(&leader.addr)),
        "names the leader's gateway: {body}"
    );

    drop(exec);
}

/// One request to the gateway at `addr` with `authorization: Bearer <token>` when given:
/// status and JSON body (`Null` when empty).
async fn send_as(
    addr: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr)
        .header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    let req = req
        .body(http_body_util::Full::new(hyper::body::Bytes::from(bytes)))
        .expect("request");
    let resp = sender.send_request(req).await.expect("response");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

/// With bearer tokens: the follower forwards the caller's token, the leader decides by
/// it and records the call under its caller, naming the follower that forwarded it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_request_is_authorized_and_audited_by_the_leader_under_its_caller() {
    let etcd = wharf_harness::etcd::TestEtcd::start();
    let dir = KeepOnFailure::new();
    let key: [u8; 32] = rand::random();
    let minted = wharf_harness::auth::mint_roles();
    let [viewer, operator, _admin] = minted.clone().map(|m| m.token);
    let lines: Vec<String> = minted.into_iter().map(|m| m.line).collect();
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, lines.join("\n") + "\n").expect("tokens file");
    let flags = [
        "--rest-listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--admin-tokens".to_owned(),
        tokens.display().to_string(),
    ];
    let replica = |name: &str| {
        control_plane_replica(
            dir.path(),
            name,
            &etcd.endpoint,
            "/rest-follower-auth/",
            &key,
            LEASE_MS,
            &flags,
        )
    };
    let mut a = replica("cp-a");
    let a_addr = a.listen_addr().await;
    wait_log(&a, "cp-a leads", "leading: herder and finalizer start").await;
    let mut b = replica("cp-b");
    let b_addr = b.listen_addr().await;
    wait_until("cp-b follows cp-a", ELECTION_DEADLINE, || async {
        b.log()
            .lines()
            .any(|l| l.contains("control-plane role changed") && l.contains("Some("))
            .then_some(())
    })
    .await;
    let follower = rest_addr(&dir.path().join("cp-b"));

    // The follower serves nothing that needs the leader to a caller without credentials:
    // the leader refuses it (401), as it would directly.
    let (status, body) = wait_until("the follower to forward", ELECTION_DEADLINE, || async {
        let (s, b) = send_as(&follower, None, "DELETE", "/connectors/nobody", None).await;
        (s != 503).then_some((s, b))
    })
    .await;
    assert_eq!(status, 401, "{body}");
    // A viewer may not delete: 403 from the leader's rules.
    let (status, body) = send_as(
        &follower,
        Some(&viewer),
        "DELETE",
        "/connectors/nobody",
        None,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    // An operator may: the leader answers (404, no such connector).
    let (status, body) = send_as(
        &follower,
        Some(&operator),
        "DELETE",
        "/connectors/nobody",
        None,
    )
    .await;
    assert_eq!(status, 404, "{body}");

    // The leader's audit trail names the caller and the follower that forwarded it.
    let r = wharf_harness::auth::call_with_token(
        &a_addr,
        Some(&operator),
        "ListAuditEntries",
        &json!({ "connector": "nobody" }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let entries = r.body["entries"].as_array().cloned().unwrap_or_default();
    let refused = entries
        .iter()
        .find(|e| e["principal"] == "vera")
        .unwrap_or_else(|| panic!("the viewer's refused delete is audited: {entries:?}"));
    assert!(
        refused["forwardedBy"]
            .as_str()
            .is_some_and(|f| f.contains(&b_addr)),
        "names the follower {b_addr}: {refused}"
    );
    assert!(
        entries.iter().any(|e| e["principal"] == "otto"),
        "the operator's delete is audited: {entries:?}"
    );
}

/// Over HTTPS with client certificates (docs/security.md): the follower forwards with its
/// control-plane certificate and the caller's certificate principal in a header the
/// leader believes only from a control-plane certificate; the leader decides by that
/// principal. curl as the client, as an operator sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_https_a_forwarded_request_carries_the_callers_certificate_principal() {
    let etcd = wharf_harness::etcd::TestEtcd::start();
    let dir = KeepOnFailure::new();
    let key: [u8; 32] = rand::random();
    let certs = wharf_harness::cluster::ClusterCerts::make(&dir.path().join("certs"));
    let mut flags = certs.flags("control-plane");
    flags.extend(["--rest-listen".to_owned(), "127.0.0.1:0".to_owned()]);
    let replica = |name: &str| {
        control_plane_replica(
            dir.path(),
            name,
            &etcd.endpoint,
            "/rest-follower-tls/",
            &key,
            LEASE_MS,
            &flags,
        )
    };
    let mut a = replica("cp-a");
    a.listen_addr().await;
    wait_log(&a, "cp-a leads", "leading: herder and finalizer start").await;
    let mut b = replica("cp-b");
    b.listen_addr().await;
    wait_until("cp-b follows cp-a", ELECTION_DEADLINE, || async {
        b.log()
            .lines()
            .any(|l| l.contains("control-plane role changed") && l.contains("Some("))
            .then_some(())
    })
    .await;
    let follower = rest_addr(&dir.path().join("cp-b"));
    let (cert, key_file) = certs.leaf(&format!(
        "admin-{}",
        wharf_harness::cluster::TEST_ADMIN_NAME
    ));
    let curl = |method: &str, path: &str, with_cert: bool| {
        let mut args = vec![
            "-s".to_owned(),
            "-w".to_owned(),
            "\n%{http_code}".to_owned(),
            "--cacert".to_owned(),
            certs.ca().display().to_string(),
            "-X".to_owned(),
            method.to_owned(),
        ];
        if with_cert {
            args.extend([
                "--cert".to_owned(),
                cert.display().to_string(),
                "--key".to_owned(),
                key_file.display().to_string(),
            ]);
        }
        args.push(format!("https://{follower}{path}"));
        let out = std::process::Command::new("curl")
            .args(&args)
            .output()
            .expect("run curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
        (code.trim().parse::<u16>().unwrap_or(0), body.to_owned())
    };
    // The admin's certificate: the leader answers the forwarded calls as the admin's.
    let (status, body) = wait_until("the follower to forward", ELECTION_DEADLINE, || async {
        let (s, b) = curl("GET", "/connector-plugins", true);
        (s != 503 && s != 0).then_some((s, b))
    })
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = curl("DELETE", "/connectors/nobody", true);
    assert_eq!(status, 404, "the leader ran the admin's delete: {body}");
    // Without one: refused by the leader, not served by the follower's certificate.
    let (status, body) = curl("DELETE", "/connectors/nobody", false);
    assert_eq!(status, 401, "{body}");
}
