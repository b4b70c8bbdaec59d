//! A certificate authority of the test's own, made with rcgen, for the external servers
//! a test starts with TLS (PostgreSQL, etcd, NATS). Unlike `wharf::certs` (Wharf's own
//! identities, loopback names always added) a leaf here carries exactly the names given,
//! so a test can make a certificate for another host.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

/// Tells the CAs of one process apart.
static CA_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A CA: its certificate on disk and the issuer that signs leaves.
pub struct TestCa {
    /// The CA certificate (PEM): what a client's CA option names.
    pub cert: PathBuf,
    dir: PathBuf,
    issuer: Issuer<'static, KeyPair>,
}

/// A certificate and its key, both PEM files (the key with mode 0600).
#[derive(Debug, Clone)]
pub struct Leaf {
    /// The certificate.
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

impl TestCa {
    /// A new CA in `dir` (created), as `<dir>/ca.pem`. Two CAs never trust each other.
    pub fn new(dir: &Path) -> TestCa {
        std::fs::create_dir_all(dir).expect("CA dir");
        let key = KeyPair::generate().expect("CA key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        // A name of its own: a client finding a CA of the same name would report a bad
        // signature instead of an unknown issuer.
        let n = CA_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        params.distinguished_name.push(
            DnType::CommonName,
            format!("wharf test CA {} {n}", std::process::id()),
        );
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).expect("CA certificate");
        let path = dir.join("ca.pem");
        std::fs::write(&path, cert.pem()).expect("write ca.pem");
        TestCa {
            cert: path,
            dir: dir.to_owned(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf `<dir>/<stem>.crt|.key` for `names` (DNS names or IP addresses; the first
    /// is also the common name, which etcd takes as the user of a client certificate),
    /// usable by a server and by a client.
    pub fn issue(&self, stem: &str, names: &[&str]) -> Leaf {
        let key = KeyPair::generate().expect("leaf key");
        let mut params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .expect("leaf params");
        params
            .distinguished_name
            .push(DnType::CommonName, names.first().copied().unwrap_or(stem));
        params.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("leaf certificate");
        let leaf = Leaf {
            cert: self.dir.join(format!("{stem}.crt")),
            key: self.dir.join(format!("{stem}.key")),
        };
        std::fs::write(&leaf.cert, cert.pem()).expect("write certificate");
        std::fs::write(&leaf.key, key.serialize_pem()).expect("write key");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&leaf.key, std::fs::Permissions::from_mode(0o600))
            .expect("chmod key");
        leaf
    }
}
