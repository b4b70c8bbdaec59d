//! The Kafka Connect REST gateway behind the same admin guard as gRPC, end to end: a real
//! control plane with an `--admin-tokens` file and `--rest-listen`, a real executor, real
//! curl with `Authorization: Bearer …` (as an operator calls Kafka Connect), the typed admin
//! client for the gRPC side, tokens minted by `wharf-control-plane token`.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`, then
//! `cargo test --test rest_auth`.

use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};
use wharf_harness::auth::{
    AuditRow, audit_summary, call_with_token, connector_names, control_plane_with_tokens,
    mint_roles, row,
};
use wharf_harness::cluster::{CONVERGE, Call, PERMISSION_DENIED};
use wharf_harness::{KeepOnFailure, Proc, wait_until};

/// `method` on `addr` with `authorization: Bearer <token>` through the typed client.
fn grpc(addr: &str, token: &str, method: &str, body: &Value) -> Call {
    call_with_token(addr, Some(token), method, body)
}

/// curl `method` `http://<rest><path>` with `Authorization: Bearer <token>` when given:
/// (HTTP status, JSON body or null).
fn curl(
    rest: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut args: Vec<String> = vec![
        "-sS".into(),
        "--max-time".into(),
        "60".into(),
        "-X".into(),
        method.into(),
        "-w".into(),
        "\n%{http_code}".into(),
    ];
    if let Some(t) = token {
        args.push("-H".into());
        args.push(format!("Authorization: Bearer {t}"));
    }
    if let Some(b) = body {
        args.extend([
            "-H".into(),
            "Content-Type: application/json".into(),
            "-d".into(),
            b.to_string(),
        ]);
    }
    args.push(format!("http://{rest}{path}"));
    let out = Command::new("curl")
        .args(&args)
        .output()
        .expect("curl on PATH");
    assert!(out.status.success(), "curl failed: {out:?}");
    let text = String::from_utf8(out.stdout).expect("utf8");
    let (body, code) = text.rsplit_once('\n').expect("status line");
    let status = code.trim().parse().expect("HTTP status");
    let body = if body.trim().is_empty() {
        Value::Null
    } else {
        serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {body}"))
    };
    (status, body)
}

/// Asserts Kafka Connect's error body with `code`.
fn assert_connect_error(answer: &(u16, Value), code: u16) {
    assert_eq!(answer.0, code, "{answer:?}");
    assert_eq!(answer.1["error_code"], code, "{answer:?}");
    assert!(
        answer.1["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{answer:?}"
    );
}

/// The connector's state and whether a deletion is recorded, from GetConnectorStatus.
fn state(addr: &str, token: &str, name: &str) -> (String, bool) {
    let r = grpc(addr, token, "GetConnectorStatus", &json!({ "name": name }));
    assert_eq!(r.code, 0, "{}", r.err);
    let s = &r.body["status"];
    (
        s["connector"]["state"].as_str().unwrap_or("").to_owned(),
        !s["deletion"].is_null(),
    )
}

async fn wait_running(addr: &str, token: &str, name: &str) {
    wait_until(&format!("{name} RUNNING"), CONVERGE, || async {
        (state(addr, token, name) == ("STATE_RUNNING".to_owned(), false)).then_some(())
    })
    .await;
}

/// (principal, rpc, deletion_mode, outcome) of every audit entry, oldest first.
fn audit(addr: &str, token: &str) -> Vec<AuditRow> {
    let r = grpc(
        addr,
        token,
        "ListAuditEntries",
        &json!({ "page_size": 1000 }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    audit_summary(
        r.body["entries"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default(),
    )
}

/// A control plane with the three roles' tokens (`vera` viewer, `otto` operator, `ada`
/// admin) and the REST gateway, and one executor whose plugins it offers.
struct Secured {
    cp: Proc,
    ex: Proc,
    addr: String,
    rest: String,
    vera: String,
    otto: String,
    ada: String,
}

impl Secured {
    async fn start(dir: &Path) -> Self {
        let minted = mint_roles();
        let [vera, otto, ada] = minted.clone().map(|m| m.token);
        let [vera_line, otto_line, ada_line] = minted.map(|m| m.line);
        let tokens = dir.join("tokens.toml");
        std::fs::write(&tokens, format!("{vera_line}\n{otto_line}\n{ada_line}\n")).unwrap();
        let mut cp = control_plane_with_tokens(dir, &tokens, &["--rest-listen", "127.0.0.1:0"]);
        let addr = cp.listen_addr().await;
        let rest = std::fs::read_to_string(dir.join("cp").join("rest.addr"))
            .expect("rest.addr written before listen.addr")
            .trim()
            .to_owned();
        let ex_dir = dir.join("exec-1");
        let mut ex = Proc::spawn(
            wharf_harness::bin("wharf-executor"),
            vec![
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--control-plane".into(),
                format!("http://{addr}"),
                "--data-dir".into(),
                ex_dir.display().to_string(),
                "--executor-id".into(),
                "exec-1".into(),
            ],
            &ex_dir,
        );
        ex.listen_addr().await;
        wait_until("the executor's plugins offered", CONVERGE, || async {
            let (code, body) = curl(&rest, Some(&vera), "GET", "/connector-plugins", None);
            (code == 200 && body.as_array().is_some_and(|a| !a.is_empty())).then_some(())
        })
        .await;
        Self {
            cp,
            ex,
            addr,
            rest,
            vera,
            otto,
            ada,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_callers_are_authenticated_authorized_and_audited_like_grpc_ones() {
    let dir = KeepOnFailure::new();
    let Secured {
        mut cp,
        mut ex,
        addr,
        rest,
        vera,
        otto,
        ada,
    } = Secured::start(dir.path()).await;
    let mut expected = Vec::new();

    // No credentials and a bad token: 401 in Connect's shape, reads included.
    assert_connect_error(&curl(&rest, None, "GET", "/connectors", None), 401);
    assert_connect_error(
        &curl(&rest, Some("wharf_not-a-token"), "GET", "/connectors", None),
        401,
    );
    // /health stays open for probes.
    assert_eq!(curl(&rest, None, "GET", "/health", None).0, 200);

    // An operator creates over REST.
    let name = "guarded";
    let lifecycle = dir.path().join("lifecycle.jsonl");
    let config = json!({
        "connector.class": "test-source",
        "tasks.max": "2",
        "lifecycle.path": lifecycle.display().to_string(),
        "test.poll.block.ms": "50",
    });
    // A refused create is in the trail under its connector too (a field Kafka Connect
    // does not know: 400, nothing created).
    let (code, body) = curl(
        &rest,
        Some(&otto),
        "POST",
        "/connectors",
        Some(&json!({ "name": name, "config": config, "initialState": "PAUSED" })),
    );
    assert_eq!(code, 400, "{body}");
    expected.push(row("otto", "CreateConnector", "", "INVALID_ARGUMENT"));
    let (code, body) = curl(
        &rest,
        Some(&otto),
        "POST",
        "/connectors",
        Some(&json!({ "name": name, "config": config })),
    );
    assert_eq!(code, 201, "{body}");
    expected.push(row("otto", "CreateConnector", "", "OK"));
    wait_running(&addr, &vera, name).await;
    // The create's entry names the connector from the body, as gRPC's does, so that the
    // trail filtered by connector finds it.
    let r = grpc(
        &addr,
        &ada,
        "ListAuditEntries",
        &json!({ "connector": name, "page_size": 1000 }),
    );
    assert_eq!(r.code, 0, "{}", r.err);
    let created = r.body["entries"].as_array().cloned().unwrap_or_default();
    assert_eq!(
        audit_summary(&created),
        vec![
            row("otto", "CreateConnector", "", "INVALID_ARGUMENT"),
            row("otto", "CreateConnector", "", "OK")
        ],
        "{created:#?}"
    );
    assert!(
        created.iter().all(|e| e["connector"] == name),
        "{created:#?}"
    );

    // A viewer reads.
    let (code, body) = curl(&rest, Some(&vera), "GET", "/connectors", None);
    assert_eq!((code, body), (200, json!([name])));
    assert_eq!(
        curl(
            &rest,
            Some(&vera),
            "GET",
            &format!("/connectors/{name}/status"),
            None
        )
        .0,
        200
    );

    // Refused deletions change nothing: no token, a bad token, a viewer, an operator
    // forcing or keeping resources.
    let path = format!("/connectors/{name}");
    // The two without valid credentials are not in the trail (docs/security.md).
    assert_connect_error(&curl(&rest, None, "DELETE", &path, None), 401);
    assert_connect_error(
        &curl(&rest, Some("wharf_not-a-token"), "DELETE", &path, None),
        401,
    );
    assert_connect_error(&curl(&rest, Some(&vera), "DELETE", &path, None), 403);
    expected.push(row(
        "vera",
        "DeleteConnector",
        "cleanup",
        "PERMISSION_DENIED",
    ));
    assert_connect_error(
        &curl(
            &rest,
            Some(&otto),
            "DELETE",
            &format!("{path}?force=true"),
            None,
        ),
        403,
    );
    expected.push(row("otto", "DeleteConnector", "force", "PERMISSION_DENIED"));
    assert_connect_error(
        &curl(
            &rest,
            Some(&otto),
            "DELETE",
            &format!("{path}?keepResources=true"),
            None,
        ),
        403,
    );
    expected.push(row(
        "otto",
        "DeleteConnector",
        "keep_resources",
        "PERMISSION_DENIED",
    ));
    assert_eq!(connector_names(&addr, &vera), vec![name.to_owned()]);
    assert_eq!(
        state(&addr, &vera, name),
        ("STATE_RUNNING".to_owned(), false)
    );

    // One table for both adapters: each row is the same action by the same role over REST
    // and over gRPC, and both answer alike (2xx / OK, or 403 / PERMISSION_DENIED).
    type Row<'a> = (
        &'a str,
        &'a str,
        &'a str,
        &'a str,
        Option<Value>,
        &'a str,
        Value,
        bool,
    );
    let n = name;
    let table: Vec<Row> = vec![
        (
            "vera",
            &vera,
            "PUT",
            "pause",
            None,
            "PauseConnector",
            json!({ "name": n }),
            false,
        ),
        (
            "vera",
            &vera,
            "GET",
            "offsets",
            None,
            "GetOffsets",
            json!({ "name": n }),
            true,
        ),
        (
            "otto",
            &otto,
            "PUT",
            "pause",
            None,
            "PauseConnector",
            json!({ "name": n }),
            true,
        ),
        (
            "otto",
            &otto,
            "PUT",
            "resume",
            None,
            "ResumeConnector",
            json!({ "name": n }),
            true,
        ),
        (
            "otto",
            &otto,
            "DELETE",
            "offsets",
            None,
            "ResetOffsets",
            json!({ "name": n }),
            false,
        ),
        (
            "otto",
            &otto,
            "PATCH",
            "offsets",
            Some(json!({ "offsets": [] })),
            "AlterOffsets",
            json!({ "name": n }),
            false,
        ),
        (
            "otto",
            &otto,
            "POST",
            "cleanup/retry",
            None,
            "RetryCleanup",
            json!({ "name": n }),
            false,
        ),
        (
            "vera",
            &vera,
            "POST",
            "restart",
            None,
            "RestartConnector",
            json!({ "name": n }),
            false,
        ),
    ];
    for (who, token, method, sub, body, rpc, grpc_body, allowed) in table {
        let (code, answer) = curl(
            &rest,
            Some(token),
            method,
            &format!("/connectors/{n}/{sub}"),
            body.as_ref(),
        );
        let g = grpc(&addr, token, rpc, &grpc_body);
        if allowed {
            assert!(
                (200..300).contains(&code),
                "{who} {method} {sub}: {code} {answer}"
            );
            assert_eq!(g.code, 0, "{who} {rpc}: {}", g.err);
        } else {
            assert_connect_error(&(code, answer), 403);
            assert_eq!(g.code, PERMISSION_DENIED, "{who} {rpc}: {}", g.err);
        }
        let mutating = rpc != "GetOffsets";
        if mutating {
            let outcome = if allowed { "OK" } else { "PERMISSION_DENIED" };
            // Once over REST, once over gRPC.
            expected.push(row(who, rpc, "", outcome));
            expected.push(row(who, rpc, "", outcome));
        }
    }
    wait_running(&addr, &vera, name).await;

    // A viewer may not change log levels (they decide what is logged).
    assert_connect_error(
        &curl(
            &rest,
            Some(&vera),
            "PUT",
            "/admin/loggers/root",
            Some(&json!({ "level": "ERROR" })),
        ),
        403,
    );
    expected.push(row("vera", "SetLoggerLevel", "", "PERMISSION_DENIED"));

    // The operator deletes with cleanup: accepted, and the connector goes.
    let (code, body) = curl(&rest, Some(&otto), "DELETE", &path, None);
    assert_eq!(code, 204, "{body}");
    expected.push(row("otto", "DeleteConnector", "cleanup", "OK"));
    wait_until("the deleted connector gone", CONVERGE, || async {
        connector_names(&addr, &vera).is_empty().then_some(())
    })
    .await;
    assert_connect_error(&curl(&rest, Some(&vera), "GET", &path, None), 404);

    // The audit trail: one entry per mutating call of an identified caller, REST and gRPC
    // alike, with its principal; reads are not in it.
    assert_eq!(audit(&addr, &ada), expected);

    ex.terminate(CONVERGE).await;
    cp.terminate(CONVERGE).await;
}

/// `cleanup.policy = give-up` lets a plain delete skip its cleanup, as `force` does: an
/// operator may not turn it on (over REST or gRPC, at create or update), an admin may,
/// and an operator may then keep it (GET config, PUT it back); `cleanup.timeout.ms` cannot
/// be made so short that every attempt fails. Found by a newcomer run: an operator's
/// PATCH with give-up and a 1 ms timeout, then a DELETE, left a PostgreSQL trigger behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_cannot_turn_a_deletions_cleanup_off_by_config() {
    let dir = KeepOnFailure::new();
    let s = Secured::start(dir.path()).await;
    let (addr, rest) = (s.addr.as_str(), s.rest.as_str());
    let (otto, ada) = (s.otto.as_str(), s.ada.as_str());
    let name = "kept-clean";
    let config = json!({
        "connector.class": "test-source",
        "tasks.max": "1",
        "lifecycle.path": dir.path().join("lifecycle.jsonl").display().to_string(),
    });
    let (code, body) = curl(
        rest,
        Some(otto),
        "POST",
        "/connectors",
        Some(&json!({ "name": name, "config": config })),
    );
    assert_eq!(code, 201, "{body}");
    let policy = |who: &str| {
        let (code, body) = curl(
            rest,
            Some(who),
            "GET",
            &format!("/connectors/{name}/config"),
            None,
        );
        assert_eq!(code, 200, "{body}");
        body["cleanup.policy"].as_str().map(str::to_owned)
    };

    // The operator's PATCH (with the newcomer's 1 ms timeout dropped: refused on its own).
    let give_up = json!({ "cleanup.policy": "give-up", "cleanup.max.attempts": "1" });
    let answer = curl(
        rest,
        Some(otto),
        "PATCH",
        &format!("/connectors/{name}/config"),
        Some(&give_up),
    );
    assert_connect_error(&answer, 403);
    let message = answer.1["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("config[cleanup.policy]") && message.contains("needs role admin"),
        "{message}"
    );
    assert_eq!(policy(otto), None, "the refused PATCH changed nothing");
    // The same over gRPC, and at create.
    let mut full = config.clone();
    full["cleanup.policy"] = json!("give-up");
    let r = call_with_token(
        addr,
        Some(otto),
        "PutConnectorConfig",
        &json!({ "name": name, "config": full }),
    );
    assert_eq!(r.code, PERMISSION_DENIED, "{}", r.err);
    assert!(r.err.contains("config[cleanup.policy]"), "{}", r.err);
    let answer = curl(
        rest,
        Some(otto),
        "POST",
        "/connectors",
        Some(&json!({ "name": "leaky", "config": full })),
    );
    assert_connect_error(&answer, 403);
    assert_eq!(
        curl(rest, Some(otto), "GET", "/connectors/leaky", None).0,
        404
    );
    assert_eq!(policy(otto), None);

    // A timeout no cleanup can meet is bad input, naming the key.
    let answer = curl(
        rest,
        Some(ada),
        "PATCH",
        &format!("/connectors/{name}/config"),
        Some(&json!({ "cleanup.timeout.ms": "1" })),
    );
    assert_connect_error(&answer, 400);
    assert!(
        answer.1["message"]
            .as_str()
            .is_some_and(|m| m.contains("cleanup.timeout.ms")),
        "{answer:?}"
    );

    // An admin may; then the operator's GET -> PUT round trip keeps it.
    let (code, body) = curl(
        rest,
        Some(ada),
        "PATCH",
        &format!("/connectors/{name}/config"),
        Some(&give_up),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(policy(otto).as_deref(), Some("give-up"));
    let (_, stored) = curl(
        rest,
        Some(otto),
        "GET",
        &format!("/connectors/{name}/config"),
        None,
    );
    let (code, body) = curl(
        rest,
        Some(otto),
        "PUT",
        &format!("/connectors/{name}/config"),
        Some(&stored),
    );
    assert_eq!(code, 200, "{body}");

    // Every refusal is in the audit trail under the operator's name.
    let refused = audit(addr, ada)
        .into_iter()
        .filter(|(p, _, _, o)| p == "otto" && o == "PERMISSION_DENIED")
        .map(|(_, rpc, _, _)| rpc)
        .collect::<Vec<_>>();
    assert_eq!(
        refused,
        [
            "PutConnectorConfig",
            "PutConnectorConfig",
            "CreateConnector"
        ],
        "the operator's three refused calls"
    );
}
