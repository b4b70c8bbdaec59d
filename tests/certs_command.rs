//! `wharf-control-plane certs` run as an operator would: a `--host` entry that is neither
//! an IP address nor a DNS name is refused with exit code 2, naming `--host` and the
//! entry, and no file is written or replaced (docs/security.md).
//!
//! Build first: `cargo build -p wharf-control-plane`.

use std::collections::BTreeMap;
use std::path::Path;

use wharf_harness::{KeepOnFailure, certs_command};

/// Every file of `dir` with its contents.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| {
            let e = e.expect("entry");
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).expect("read"),
            )
        })
        .collect()
}

#[test]
fn a_bad_host_is_refused_with_exit_code_2_and_nothing_is_written() {
    let root = KeepOnFailure::new();
    let dir = root.path().join("pki");
    let d = dir.display().to_string();
    let ok = |args: &[&str]| {
        let out = certs_command(args);
        assert!(
            out.status.success(),
            "certs {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(&["init", "--dir", &d]);
    // An existing certificate, which a refused re-issue must leave as it is.
    ok(&[
        "executor", "--dir", &d, "--id", "exec-1", "--host", "10.0.0.1",
    ]);
    let before = files(&dir);
    for (what, host, named) in [
        (
            &["control-plane"][..],
            "cp.local,bad host!",
            "\"bad host!\"",
        ),
        (&["control-plane"][..], "a,,b", "\"\": empty entry"),
        (
            &["control-plane"][..],
            "10.0.0.300",
            "\"10.0.0.300\": not an IP address",
        ),
        (&["executor", "--id", "exec-1"][..], "*.*.x", "\"*.*.x\""),
    ] {
        let mut args = what.to_vec();
        args.extend(["--dir", &d, "--host", host]);
        let out = certs_command(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&format!("--host {named}")), "{args:?}: {err}");
        assert_eq!(files(&dir), before, "{args:?} wrote or replaced a file");
    }
    // Blanks around an entry are not part of it: the IP address is an IP SAN.
    ok(&[
        "control-plane",
        "--dir",
        &d,
        "--host",
        "cp.local, 127.0.0.2",
    ]);
    let pem = std::fs::read(dir.join("control-plane.pem")).expect("control-plane.pem");
    let der = rustls_pki_types::pem::PemObject::from_pem_slice(&pem)
        .map(|c: rustls_pki_types::CertificateDer<'_>| c.to_vec())
        .expect("pem");
    let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("x509");
    use x509_parser::extensions::GeneralName;
    let sans = &cert
        .subject_alternative_name()
        .expect("extension")
        .expect("SANs")
        .value
        .general_names;
    assert!(
        sans.iter()
            .any(|n| matches!(n, GeneralName::IPAddress(ip) if *ip == [127, 0, 0, 2])),
        "{sans:?}"
    );
    assert!(
        sans.iter()
            .any(|n| matches!(n, GeneralName::DNSName(name) if *name == "cp.local")),
        "{sans:?}"
    );
    assert!(
        !sans
            .iter()
            .any(|n| matches!(n, GeneralName::DNSName(name) if name.contains("127"))),
        "{sans:?}"
    );
}
