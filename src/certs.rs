//! Certificates for operators (`wharf-control-plane certs ...`), made with rcgen so that
//! nobody needs openssl: a cluster CA and leaf certificates carrying one identity URI SAN
//! each (see [`crate::identity`] and `docs/security.md`). Keys are ECDSA P-256, written
//! with mode 0600.
//!
//! Files in the directory: `ca.pem`/`ca.key`, then `<name>.pem`/`<name>.key` per leaf:
//! `control-plane`, `executor-<id>`, `admin-<name>`.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

use crate::identity::{DEFAULT_TRUST_DOMAIN, Identity};

/// File name of the CA certificate.
pub const CA_CERT: &str = "ca.pem";
/// File name of the CA key.
pub const CA_KEY: &str = "ca.key";
/// Validity of the CA, in days.
pub const CA_VALIDITY_DAYS: i64 = 3650;
/// Validity of a leaf certificate, in days (rotate before: see `docs/security.md`).
pub const LEAF_VALIDITY_DAYS: i64 = 365;
/// Host names every server certificate carries, so that loopback URLs verify.
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// rcgen refused (bad name, unreadable CA...).
    #[error("{0}")]
    Rcgen(String),
    /// The identity cannot be named in a certificate (or a file name): an executor id
    /// outside [`crate::ids::check_executor_id`]'s rule, or an admin name that is empty,
    /// `.`/`..`, or holds `/`, whitespace or control characters.
    #[error("{0}")]
    BadIdentity(String),
    /// A `--host` entry is neither an IP address nor a DNS name (see [`parse_host`]).
    #[error("--host {entry:?}: {reason}")]
    BadHost {
        /// The entry as given (before trimming).
        entry: String,
        /// Why it is refused.
        reason: HostRefusal,
    },
    /// `init` would overwrite an existing CA.
    #[error("{0} exists; remove it to make a new CA (every certificate must then be re-issued)")]
    CaExists(PathBuf),
}

/// Longest DNS name, in bytes (RFC 1035 2.3.4, without the final dot).
pub const MAX_DNS_NAME_LEN: usize = 253;
/// Longest DNS label, in bytes (RFC 1035 2.3.4).
pub const MAX_DNS_LABEL_LEN: usize = 63;

/// A `--host` entry as a certificate names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// An IP address SAN.
    Ip(std::net::IpAddr),
    /// A DNS name SAN (maybe a `*.` wildcard).
    Dns(String),
}

/// Why a `--host` entry is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostRefusal {
    /// Nothing (or only blanks) between two commas.
    #[error("empty entry (two commas in a row, or a comma at an end)")]
    Empty,
    /// Dotted digits that do not parse as an IP address (`10.0.0.300`).
    #[error("not an IP address (and a DNS name's last label cannot be all digits)")]
    NotAnIp,
    /// Longer than [`MAX_DNS_NAME_LEN`].
    #[error("longer than {MAX_DNS_NAME_LEN} bytes")]
    TooLong,
    /// A fully qualified name with its final dot (`cp.local.`): certificates name hosts
    /// without it.
    #[error("ends with '.': write the name without the final dot ({0})")]
    FinalDot(String),
    /// An IPv6 address in brackets (`[::1]`), as URLs write it.
    #[error("an IPv6 address is written without brackets here ({0})")]
    Bracketed(String),
    /// A label that is empty (`a..b`, a leading or final dot) or longer than
    /// [`MAX_DNS_LABEL_LEN`].
    #[error("label {0:?} is not 1 to {MAX_DNS_LABEL_LEN} bytes")]
    LabelLength(String),
    /// A label with a byte other than A-Z a-z 0-9 and `-`, or starting or ending with `-`.
    #[error(
        "label {0:?} is not a DNS label (A-Z a-z 0-9 and '-', not at either end; a wildcard only as a whole first label '*.')"
    )]
    BadLabel(String),
}

/// What one `--host` entry names: trimmed; an IP address when it parses as one, else a
/// DNS name of RFC 1123 labels (A-Z a-z 0-9 and `-`, not at either end, 1 to 63 bytes
/// each, at most 253 bytes in all; a single leading `*.` wildcard label).
///
/// # Errors
/// [`HostRefusal`]: an empty entry, dotted digits that are no IP address, or a name
/// outside the rule.
pub fn parse_host(entry: &str) -> Result<Host, HostRefusal> {
    let entry = entry.trim();
    if entry.is_empty() {
        return Err(HostRefusal::Empty);
    }
    if let Ok(ip) = entry.parse::<std::net::IpAddr>() {
        return Ok(Host::Ip(ip));
    }
    // Two habits from elsewhere (DNS zone files, URLs), refused with the fix.
    if let Some(name) = entry.strip_suffix('.').filter(|n| parse_host(n).is_ok()) {
        return Err(HostRefusal::FinalDot(name.to_owned()));
    }
    if let Some(ip) = entry
        .strip_prefix('[')
        .and_then(|e| e.strip_suffix(']'))
        .filter(|e| e.parse::<std::net::Ipv6Addr>().is_ok())
    {
        return Err(HostRefusal::Bracketed(ip.to_owned()));
    }
    if entry.len() > MAX_DNS_NAME_LEN {
        return Err(HostRefusal::TooLong);
    }
    let labels: Vec<&str> = entry.split('.').collect();
    for (i, label) in labels.iter().enumerate() {
        if label.is_empty() || label.len() > MAX_DNS_LABEL_LEN {
            return Err(HostRefusal::LabelLength((*label).to_owned()));
        }
        // `*` alone as the first label of a longer name: `*.example.com`.
        if *label == "*" && i == 0 && labels.len() > 1 {
            continue;
        }
        let bytes = label.as_bytes();
        let ok = bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-')
            && bytes.first() != Some(&b'-')
            && bytes.last() != Some(&b'-');
        if !ok {
            return Err(HostRefusal::BadLabel((*label).to_owned()));
        }
    }
    // webpki refuses such a name, and it is an IP address mistyped far more often.
    if labels
        .last()
        .is_some_and(|l| l.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(HostRefusal::NotAnIp);
    }
    Ok(Host::Dns(entry.to_owned()))
}

/// [`parse_host`] of every entry, in order.
///
/// # Errors
/// [`CertsError::BadHost`] naming the first refused entry.
pub fn parse_hosts(entries: &[String]) -> Result<Vec<Host>, CertsError> {
    entries
        .iter()
        .map(|entry| {
            parse_host(entry).map_err(|reason| CertsError::BadHost {
                entry: entry.clone(),
                reason,
            })
        })
        .collect()
}

fn rc(e: rcgen::Error) -> CertsError {
    CertsError::Rcgen(e.to_string())
}

/// The paths of one leaf: certificate and key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The certificate (PEM).
    pub cert: PathBuf,
    /// The key (PEM, mode 0600).
    pub key: PathBuf,
}

fn write(path: &Path, contents: &str, secret: bool) -> Result<(), CertsError> {
    let io = |source| CertsError::Io {
        path: path.to_owned(),
        source,
    };
    // Write beside and rename, so that a process reloading the file never reads half of it.
    let tmp = path.with_extension("tmp");
    {
        use std::io::Write;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        if secret {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        #[cfg(not(unix))]
        let _ = secret;
        let mut f = options.open(&tmp).map_err(io)?;
        f.write_all(contents.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)
}

/// Makes a new CA in `dir` (created if missing).
///
/// # Errors
/// [`CertsError::CaExists`] when `dir` already has one; I/O and rcgen errors.
pub fn init_ca(dir: &Path) -> Result<Issued, CertsError> {
    std::fs::create_dir_all(dir).map_err(|source| CertsError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let cert = dir.join(CA_CERT);
    if cert.exists() {
        return Err(CertsError::CaExists(cert));
    }
    let key = KeyPair::generate().map_err(rc)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rc)?;
    params.distinguished_name.push(
        DnType::CommonName,
        format!("{DEFAULT_TRUST_DOMAIN} cluster CA"),
    );
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let now = time_now();
    params.not_before = now - days(1);
    params.not_after = now + days(CA_VALIDITY_DAYS);
    let ca = params.self_signed(&key).map_err(rc)?;
    let key_path = dir.join(CA_KEY);
    write(&key_path, &key.serialize_pem(), true)?;
    write(&cert, &ca.pem(), false)?;
    Ok(Issued {
        cert,
        key: key_path,
    })
}

/// The file stem of `identity`'s leaf: `control-plane`, `executor-<id>`, `admin-<name>`.
pub fn leaf_name(identity: &Identity) -> String {
    match identity {
        Identity::ControlPlane => "control-plane".into(),
        Identity::Executor(id) => format!("executor-{id}"),
        Identity::Admin { name, .. } => format!("admin-{name}"),
    }
}

/// Issues a leaf for `identity`, signed by the CA in `dir`, written to
/// `<dir>/<leaf_name>.pem|.key` (replacing an older one: rotation). `hosts` (DNS names
/// or IP addresses) are added to the loopback names for the certificate a server
/// presents; an admin certificate carries none.
///
/// # Errors
/// [`CertsError::BadHost`] for a host [`parse_host`] refuses (nothing is written); the CA
/// cannot be read; I/O and rcgen errors.
pub fn issue(dir: &Path, identity: &Identity, hosts: &[String]) -> Result<Issued, CertsError> {
    check_nameable(identity)?;
    let name = leaf_name(identity);
    issue_to(
        dir,
        identity,
        hosts,
        &dir.join(format!("{name}.pem")),
        &dir.join(format!("{name}.key")),
    )
}

/// Refuses an identity whose URI would not parse back (what a peer would refuse at its
/// handshake) or whose file name could leave the directory (`..`).
fn check_nameable(identity: &Identity) -> Result<(), CertsError> {
    let name = match identity {
        Identity::ControlPlane => return Ok(()),
        Identity::Executor(id) => ("executor id", id),
        Identity::Admin { name, .. } => ("admin name", name),
    };
    if let Identity::Executor(id) = identity
        && let Err(e) = crate::ids::check_executor_id(id)
    {
        return Err(CertsError::BadIdentity(format!("executor id {id:?} {e}")));
    }
    let uri = identity.to_uri(crate::identity::DEFAULT_TRUST_DOMAIN);
    let parsed = Identity::parse_uri(&uri, crate::identity::DEFAULT_TRUST_DOMAIN);
    if parsed.is_err() || name.1 == "." || name.1 == ".." {
        return Err(CertsError::BadIdentity(format!(
            "{} {:?}: not usable in a certificate (empty, '.', '..', or holding '/', whitespace or control characters)",
            name.0, name.1
        )));
    }
    Ok(())
}

/// As [`issue`], to the given paths.
///
/// # Errors
/// As [`issue`].
pub fn issue_to(
    ca_dir: &Path,
    identity: &Identity,
    hosts: &[String],
    cert_path: &Path,
    key_path: &Path,
) -> Result<Issued, CertsError> {
    // Before anything is read or written: a refused host changes nothing.
    let hosts = parse_hosts(hosts)?;
    let read = |p: PathBuf| {
        std::fs::read_to_string(&p).map_err(|source| CertsError::Io { path: p, source })
    };
    let ca_key = KeyPair::from_pem(&read(ca_dir.join(CA_KEY))?).map_err(rc)?;
    let issuer = Issuer::from_ca_cert_pem(&read(ca_dir.join(CA_CERT))?, ca_key).map_err(rc)?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(rc)?;
    let uri = identity.to_uri(DEFAULT_TRUST_DOMAIN);
    params
        .distinguished_name
        .push(DnType::CommonName, uri.clone());
    params
        .subject_alt_names
        .push(SanType::URI(uri.try_into().map_err(rc)?));
    let serves = !matches!(identity, Identity::Admin { .. });
    if serves {
        let loopback = LOOPBACK_HOSTS.iter().filter_map(|h| parse_host(h).ok());
        for host in loopback.chain(hosts) {
            let san = match host {
                Host::Ip(ip) => SanType::IpAddress(ip),
                Host::Dns(name) => SanType::DnsName(name.try_into().map_err(rc)?),
            };
            if !params.subject_alt_names.contains(&san) {
                params.subject_alt_names.push(san);
            }
        }
    }
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = if serves {
        vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ]
    } else {
        vec![ExtendedKeyUsagePurpose::ClientAuth]
    };
    let now = time_now();
    params.not_before = now - days(1);
    params.not_after = now + days(LEAF_VALIDITY_DAYS);
    let key = KeyPair::generate().map_err(rc)?;
    let cert = params.signed_by(&key, &issuer).map_err(rc)?;
    write(key_path, &key.serialize_pem(), true)?;
    write(cert_path, &cert.pem(), false)?;
    Ok(Issued {
        cert: cert_path.to_owned(),
        key: key_path.to_owned(),
    })
}

fn time_now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

fn days(n: i64) -> std::time::Duration {
    std::time::Duration::from_secs(u64::try_from(n).unwrap_or(0) * 86_400)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_that_could_leave_the_directory_or_not_parse_back_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        init_ca(dir.path()).expect("ca");
        for name in ["../../tmp/evil", "..", ".", "", "a b"] {
            let admin = Identity::Admin {
                role: crate::identity::AdminRole::Admin,
                name: name.into(),
            };
            let err = issue(dir.path(), &admin, &[]).expect_err(name);
            assert!(matches!(err, CertsError::BadIdentity(_)), "{name}: {err}");
            let exec = Identity::Executor(name.into());
            assert!(matches!(
                issue(dir.path(), &exec, &[]),
                Err(CertsError::BadIdentity(_))
            ));
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("dir").count(),
            2,
            "only the CA"
        );
    }

    fn dns(name: &str) -> Result<Host, HostRefusal> {
        Ok(Host::Dns(name.into()))
    }

    #[test]
    fn a_host_is_trimmed() {
        assert_eq!(
            parse_host(" 127.0.0.2"),
            Ok(Host::Ip([127, 0, 0, 2].into()))
        );
        assert_eq!(parse_host("cp.local \t"), dns("cp.local"));
    }

    #[test]
    fn a_host_that_parses_as_an_ip_address_is_one() {
        assert_eq!(parse_host("10.0.0.1"), Ok(Host::Ip([10, 0, 0, 1].into())));
        assert_eq!(
            parse_host("::1"),
            Ok(Host::Ip(std::net::Ipv6Addr::LOCALHOST.into()))
        );
    }

    #[test]
    fn dns_names_and_a_leading_wildcard_are_accepted() {
        for name in [
            "localhost",
            "cp.example.internal",
            "a-1.B2",
            "*.example.com",
            "x1",
        ] {
            assert_eq!(parse_host(name), dns(name), "{name}");
        }
        let longest = vec!["a".repeat(63); 4].join(".");
        assert_eq!(longest.len(), 255);
        let fits = &longest[..253];
        assert_eq!(parse_host(fits), dns(fits));
    }

    #[test]
    fn an_empty_entry_is_refused() {
        assert_eq!(parse_host(""), Err(HostRefusal::Empty));
        assert_eq!(parse_host("  "), Err(HostRefusal::Empty));
    }

    #[test]
    fn dotted_digits_that_are_no_ip_address_are_refused() {
        for entry in ["10.0.0.300", "1.2.3", "300", "host.123"] {
            assert_eq!(parse_host(entry), Err(HostRefusal::NotAnIp), "{entry}");
        }
    }

    #[test]
    fn a_label_with_a_bad_byte_or_an_edge_hyphen_is_refused() {
        for (entry, label) in [
            ("bad host!", "bad host!"),
            ("a b", "a b"),
            ("under_score.x", "under_score"),
            ("-a.x", "-a"),
            ("a-.x", "a-"),
            ("*.*.x", "*"),
            ("a.*.x", "*"),
            ("*", "*"),
            ("*a.x", "*a"),
            ("[a]", "[a]"),
        ] {
            assert_eq!(
                parse_host(entry),
                Err(HostRefusal::BadLabel(label.into())),
                "{entry}"
            );
        }
    }

    #[test]
    fn a_final_dot_or_brackets_are_refused_with_the_fix() {
        assert_eq!(
            parse_host("cp.local."),
            Err(HostRefusal::FinalDot("cp.local".into()))
        );
        assert_eq!(
            parse_host("[::1]"),
            Err(HostRefusal::Bracketed("::1".into()))
        );
        let said = parse_host("[::1]").expect_err("refused").to_string();
        assert!(said.contains("without brackets here (::1)"), "{said}");
    }

    #[test]
    fn an_empty_or_long_label_or_a_long_name_is_refused() {
        for (entry, label) in [("a..b", ""), (".a", ""), ("a..", "")] {
            assert_eq!(
                parse_host(entry),
                Err(HostRefusal::LabelLength(label.into())),
                "{entry}"
            );
        }
        let long = "a".repeat(64);
        assert_eq!(
            parse_host(&format!("{long}.x")),
            Err(HostRefusal::LabelLength(long))
        );
        let longest = vec!["a".repeat(63); 4].join(".");
        assert_eq!(parse_host(&longest[..254]), Err(HostRefusal::TooLong));
    }

    #[test]
    fn a_refused_host_writes_nothing_and_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        init_ca(dir.path()).expect("ca");
        let hosts = ["cp.local".to_owned(), "a,,b".to_owned()];
        let err = issue(dir.path(), &Identity::ControlPlane, &hosts).expect_err("refused");
        assert!(
            err.to_string()
                .starts_with("--host \"a,,b\": label \"a,,b\""),
            "{err}"
        );
        assert_eq!(std::fs::read_dir(dir.path()).expect("dir").count(), 2);
    }

    #[test]
    fn issued_certificates_carry_their_identity_and_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        init_ca(dir.path()).expect("ca");
        assert!(matches!(init_ca(dir.path()), Err(CertsError::CaExists(_))));
        for id in [
            Identity::ControlPlane,
            Identity::Executor("a".into()),
            Identity::Admin {
                role: crate::identity::AdminRole::Operator,
                name: "ops".into(),
            },
        ] {
            let issued = issue(dir.path(), &id, &["10.0.0.1".into()]).expect("issue");
            let tls = crate::tls::Tls::load(crate::tls::TlsFiles {
                cert: issued.cert,
                key: issued.key,
                ca: dir.path().join(CA_CERT),
            })
            .expect("loads");
            assert_eq!(tls.identity(), id);
        }
    }
}
