//! Shared by the admin-authentication suites (`admin_auth`, `admin_auth_etcd`,
//! `rest_auth`): tokens minted by the real `wharf-control-plane token` subcommand, a
//! control plane reading an `--admin-tokens` file, and admin calls carrying
//! `authorization: Bearer <token>` (docs/security.md) through the typed client.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::Proc;
use crate::client::{Call, Dial, rpc};
use crate::cluster::{TEST_LEASE_MS, control_plane_flags};

/// A token and its `--admin-tokens` file line, from `wharf-control-plane token`.
#[derive(Debug, Clone)]
pub struct Minted {
    /// The bearer token (`wharf_...`), shown once on stderr.
    pub token: String,
    /// The file line (name, role and the token's hash; never the token).
    pub line: String,
}

/// Runs `wharf-control-plane token --name NAME --role ROLE`: the line on stdout, the
/// token as the last line of stderr. Panics unless the token looks like one and the line
/// does not hold it.
pub fn mint(name: &str, role: &str) -> Minted {
    let out = Command::new(crate::bin("wharf-control-plane"))
        .args(["token", "--name", name, "--role", role])
        .output()
        .expect("run the token subcommand");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout)
        .expect("utf8")
        .trim()
        .to_owned();
    let err = String::from_utf8(out.stderr).expect("utf8");
    let token = err.lines().last().expect("token line").trim().to_owned();
    assert!(token.starts_with("wharf_"), "{err}");
    assert!(
        !line.contains(&token),
        "the file line must not hold the token: {line}"
    );
    Minted { token, line }
}

/// Mints `vera` (viewer), `otto` (operator) and `ada` (admin), in that order: the three
/// roles of docs/security.md.
pub fn mint_roles() -> [Minted; 3] {
    [
        mint("vera", "viewer"),
        mint("otto", "operator"),
        mint("ada", "admin"),
    ]
}

/// `wharf.v1.ConnectorAdmin/<method>` on `addr` (plaintext) with
/// `authorization: Bearer <token>` when given, none otherwise.
pub fn call_with_token(addr: &str, token: Option<&str>, method: &str, body: &Value) -> Call {
    let dial = token.map(Dial::bearer).unwrap_or_default();
    rpc(
        addr,
        &dial,
        &format!("wharf.v1.ConnectorAdmin/{method}"),
        body,
    )
}

/// Starts a control plane on 127.0.0.1 (port 0) in `<dir>/cp` with the test lease and
/// heartbeat and `--admin-tokens tokens`, `extra` appended to its flags.
pub fn control_plane_with_tokens(dir: &Path, tokens: &Path, extra: &[&str]) -> Proc {
    let d = dir.join("cp");
    let mut args = control_plane_flags("127.0.0.1:0", &d, TEST_LEASE_MS);
    args.extend(["--admin-tokens".into(), tokens.display().to_string()]);
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    Proc::spawn(crate::bin("wharf-control-plane"), args, &d)
}

/// (principal, rpc, deletion_mode, outcome) of one audit entry.
pub type AuditRow = (String, String, String, String);

/// The [`AuditRow`] of each ListAuditEntries entry (JSON as [`rpc`] gives it), in order.
pub fn audit_summary(entries: &[Value]) -> Vec<AuditRow> {
    entries
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_owned();
            (s("principal"), s("rpc"), s("deletionMode"), s("outcome"))
        })
        .collect()
}

/// An expected [`AuditRow`].
pub fn row(principal: &str, rpc: &str, mode: &str, outcome: &str) -> AuditRow {
    (principal.into(), rpc.into(), mode.into(), outcome.into())
}

/// The names ListConnectors answers on `addr` to the caller holding `token`, in order;
/// panics unless the call is OK.
pub fn connector_names(addr: &str, token: &str) -> Vec<String> {
    let r = call_with_token(addr, Some(token), "ListConnectors", &serde_json::json!({}));
    assert_eq!(r.code, 0, "{}", r.err);
    r.body["connectors"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| c["name"].as_str().unwrap_or("").to_owned())
                .collect()
        })
        .unwrap_or_default()
}
