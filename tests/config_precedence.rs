//! Both binaries take every option from a flag, a `WHARF_*` variable or the `--config`
//! TOML file, in that order of precedence (docs/configuration.md), and a bad setting
//! stops them with exit code 2 and a message naming it.
//!
//! Build first: `cargo build -p wharf-control-plane -p wharf-executor-stock`.

use std::process::{Command, Stdio};
use std::time::Duration;

use wharf_harness::{KeepOnFailure, wait_until};

/// Exit code of a settings error (as clap's usage errors).
const SETTINGS_EXIT_CODE: i32 = 2;

fn output(cmd: &mut Command) -> (i32, String) {
    let out = cmd
        .env_remove("WHARF_LISTEN")
        .env_remove("WHARF_DATA_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("run the binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn flag_beats_env_beats_file() {
    let dir = KeepOnFailure::new();
    let data = dir.path().join("cp");
    let file = dir.path().join("cp.toml");
    // The file's heartbeat interval is not shorter than its lease: unusable on its own.
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:0\"\ndata_dir = \"{}\"\nlease_ms = 5000\nheartbeat_interval_ms = 6000\n",
            data.display()
        ),
    )
    .expect("write config");
    let cp = wharf_harness::bin("wharf-control-plane");

    // File alone: refused as bad settings (exit code 2), naming the setting.
    let (code, stderr) = output(Command::new(&cp).arg("--config").arg(&file));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--heartbeat-interval-ms"), "{stderr}");

    // Flag over env: the flag's unusable value wins over the env's good one.
    let (code, stderr) = output(
        Command::new(&cp)
            .arg("--config")
            .arg(&file)
            .args(["--heartbeat-interval-ms", "7000"])
            .env("WHARF_HEARTBEAT_INTERVAL_MS", "1000"),
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--heartbeat-interval-ms"), "{stderr}");

    // Env over file: starts, on the file's data dir and address.
    let log = dir.path().join("cp.log");
    let mut child = Command::new(&cp)
        .arg("--config")
        .arg(&file)
        .env("WHARF_HEARTBEAT_INTERVAL_MS", "1000")
        .env_remove("WHARF_LISTEN")
        .env_remove("WHARF_DATA_DIR")
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("start");
    let addr_file = data.join("listen.addr");
    wait_until(
        "the control plane to bind with the file's settings",
        Duration::from_secs(30),
        || {
            let exited = child.try_wait().ok().flatten();
            assert!(
                exited.is_none(),
                "exited {exited:?}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            let bound = std::fs::read_to_string(&addr_file).ok();
            async move { bound.filter(|a| a.starts_with("127.0.0.1:")) }
        },
    )
    .await;
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn unknown_file_key_and_missing_settings_name_what_to_fix() {
    let dir = KeepOnFailure::new();
    let file = dir.path().join("ex.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:0\"\ncontrolplane = \"http://x\"\n",
    )
    .expect("write config");
    let (code, stderr) = output(
        Command::new(wharf_harness::bin("wharf-executor"))
            .arg("--config")
            .arg(&file),
    );
    assert_eq!(code, SETTINGS_EXIT_CODE, "{stderr}");
    assert!(stderr.contains("controlplane"), "{stderr}");

    let (code, stderr) = output(
        Command::new(wharf_harness::bin("wharf-executor"))
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("e")),
    );
    assert_eq!(code, SETTINGS_EXIT_CODE, "{stderr}");
    assert!(
        stderr.contains("--control-plane") && stderr.contains("WHARF_CONTROL_PLANE"),
        "{stderr}"
    );

    let (code, stderr) = output(&mut Command::new(wharf_harness::bin("wharf-control-plane")));
    assert_eq!(code, SETTINGS_EXIT_CODE, "{stderr}");
    assert!(stderr.contains("--data-dir"), "{stderr}");
}
