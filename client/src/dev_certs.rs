//! Development certificates (issue #23): a CA and one certificate per node or client, for a
//! local or compose cluster with TLS (`keelctl tls dev-certs`, `keelctl cluster up --tls`,
//! `deploy/dev-certs.sh`). Not for production: the keys are unencrypted files and the
//! certificates do not expire (rcgen's default validity, 1975 to 4096).
//!
//! Layout of the directory: `ca.pem` (the CA certificate, the `tls_ca_file` of every node
//! and client) and `ca-key.pem`; `<name>.pem` and `<name>-key.pem` per name. Private keys
//! are written with mode 0600. A leaf certificate has the subject CN `<name>` (the principal
//! a later authorizer maps, as Kafka's `ssl.principal.mapping.rules` default `CN=<name>`
//! does), the SANs `<name>` plus the given hosts (DNS names or IP addresses: what peers
//! dial), and both server and client authentication usages (a node is both).
//!
//! The CA is created once; issuing more certificates later signs them with the same key
//! (the CA's subject and key identifier are derived from fixed parameters and its key).

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// File name of the CA certificate.
pub const CA_FILE: &str = "ca.pem";
/// File name of the CA's private key.
pub const CA_KEY_FILE: &str = "ca-key.pem";
/// Subject CN of a CA: this prefix and the first 8 bytes (hex) of the SHA-256 of its public
/// key, so two development CAs never share a name (a verifier that finds an issuer by name
/// then reports a bad signature instead of an unknown CA) and the name can be derived again
/// from the key alone to sign more certificates.
const CA_NAME_PREFIX: &str = "Keel development CA";

/// The files of one issued certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// The name (subject CN and first SAN).
    pub name: String,
    /// Certificate (PEM), `<dir>/<name>.pem`.
    pub cert: PathBuf,
    /// Private key (PEM, PKCS#8), `<dir>/<name>-key.pem`.
    pub key: PathBuf,
}

/// The certificate file of `name` in `dir`.
pub fn cert_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.pem"))
}

/// The key file of `name` in `dir`.
pub fn key_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}-key.pem"))
}

fn ca_params(key: &KeyPair) -> CertificateParams {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(key.public_key_raw());
    let id: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    let mut p = CertificateParams::default();
    p.distinguished_name
        .push(DnType::CommonName, format!("{CA_NAME_PREFIX} {id}"));
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p
}

fn write(path: &Path, text: &str, private: bool) -> Result<(), String> {
    let mut o = OpenOptions::new();
    o.write(true).create(true).truncate(true);
    if private {
        o.mode(0o600);
    }
    o.open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A name usable as a file name and CN: 1..=64 of `[A-Za-z0-9._-]`, not starting with `.`.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "certificate name {name:?}: use 1 to 64 of A-Z a-z 0-9 . _ - (not starting with .)"
        ))
    }
}

/// The CA key of `dir`, creating the CA (certificate and key) when `ca.pem` is missing.
///
/// Errors: the directory or a file cannot be written, or an existing `ca-key.pem` is not a
/// PEM key (each names the file).
pub fn ensure_ca(dir: &Path) -> Result<KeyPair, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let key_file = dir.join(CA_KEY_FILE);
    if dir.join(CA_FILE).exists() {
        let pem = std::fs::read_to_string(&key_file)
            .map_err(|e| format!("cannot read {}: {e}", key_file.display()))?;
        return KeyPair::from_pem(&pem)
            .map_err(|e| format!("{}: not a PEM private key ({e})", key_file.display()));
    }
    let key = KeyPair::generate().map_err(|e| format!("generating the CA key: {e}"))?;
    let cert = ca_params(&key)
        .self_signed(&key)
        .map_err(|e| format!("signing the CA certificate: {e}"))?;
    write(&key_file, &key.serialize_pem(), true)?;
    write(&dir.join(CA_FILE), &cert.pem(), false)?;
    Ok(key)
}

/// Issues (or re-issues) the certificate of `name` in `dir`, signed by the CA of `dir`
/// (created if missing), valid for `name` and each of `hosts` (IP addresses become IP SANs,
/// anything else DNS SANs).
///
/// Errors: a bad name or host, or a file that cannot be read or written (named).
pub fn issue(dir: &Path, name: &str, hosts: &[String]) -> Result<Issued, String> {
    check_name(name)?;
    let ca_key = ensure_ca(dir)?;
    let issuer = Issuer::new(ca_params(&ca_key), ca_key);
    let mut sans = vec![name.to_string()];
    sans.extend(hosts.iter().filter(|h| *h != name).cloned());
    let mut params =
        CertificateParams::new(sans).map_err(|e| format!("certificate of {name}: {e}"))?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let key = KeyPair::generate().map_err(|e| format!("generating the key of {name}: {e}"))?;
    let cert = params
        .signed_by(&key, &issuer)
        .map_err(|e| format!("signing the certificate of {name}: {e}"))?;
    let issued = Issued {
        name: name.to_string(),
        cert: cert_path(dir, name),
        key: key_path(dir, name),
    };
    write(&issued.key, &key.serialize_pem(), true)?;
    write(&issued.cert, &cert.pem(), false)?;
    Ok(issued)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_runtime::tls::{ClientAuth, TlsContext, TlsFiles};

    #[test]
    fn issued_certificates_load_as_a_tls_context_and_share_one_ca() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = vec!["127.0.0.1".to_string(), "localhost".to_string()];
        let a = issue(dir.path(), "controller-1", &hosts).unwrap();
        let ca_before = std::fs::read(dir.path().join(CA_FILE)).unwrap();
        let b = issue(dir.path(), "broker-1", &hosts).unwrap();
        assert_eq!(
            std::fs::read(dir.path().join(CA_FILE)).unwrap(),
            ca_before,
            "a second certificate reuses the CA"
        );
        for i in [&a, &b] {
            let files = TlsFiles {
                ca: dir.path().join(CA_FILE),
                identity: Some((i.cert.clone(), i.key.clone())),
            };
            let ctx = TlsContext::load(files, ClientAuth::Required).unwrap();
            assert!(ctx.server_config().is_some());
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&a.key).unwrap().permissions().mode();
        assert_eq!(
            mode & 0o777,
            0o600,
            "private keys are readable by the owner only"
        );
    }

    #[test]
    fn names_that_are_not_file_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "../x", ".hidden", "a/b", &"n".repeat(65)] {
            let e = issue(dir.path(), bad, &[]).unwrap_err();
            assert!(e.contains("certificate name"), "{bad}: {e}");
        }
        assert!(!dir.path().join(CA_FILE).exists(), "nothing written");
    }
}
