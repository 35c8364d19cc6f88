//! `keelctl tls dev-certs`: a development CA and certificates ([`crate::dev_certs`]).

use std::path::PathBuf;

use serde::Serialize;

use super::{CliError, CliResult, Ctx};
use crate::dev_certs;

/// `keelctl tls ...`
#[derive(Debug, clap::Subcommand)]
pub enum TlsCommand {
    /// Make a development CA (once per directory) and a certificate and key per NAME, for a
    /// cluster with TLS (tls_cert_file, tls_key_file, tls_ca_file) and its clients
    /// (--tls-ca-file, --tls-cert-file, --tls-key-file). Keys are unencrypted and
    /// certificates do not expire: for development and tests only.
    DevCerts(DevCertsArgs),
}

/// Arguments of `tls dev-certs`.
#[derive(Debug, clap::Args)]
pub struct DevCertsArgs {
    /// Directory of the CA and the certificates (created if missing; an existing CA is
    /// reused, existing certificates of the same names are replaced).
    #[arg(long)]
    pub dir: PathBuf,
    /// Host names and IP addresses the certificates are valid for besides their NAME (what
    /// peers and clients dial), comma separated.
    #[arg(long, value_delimiter = ',', default_value = "localhost,127.0.0.1")]
    pub hosts: Vec<String>,
    /// Names of the certificates (subject CN and first DNS name), e.g. controller-1 broker-1
    /// keelctl: 1 to 64 of A-Z a-z 0-9 . _ -.
    #[arg(required = true, value_name = "NAME")]
    pub names: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Row {
    name: String,
    cert: String,
    key: String,
}

/// Runs `keelctl tls ...`.
pub(super) fn run(c: TlsCommand, ctx: &Ctx) -> CliResult {
    let TlsCommand::DevCerts(a) = c;
    let hosts: Vec<String> = a
        .hosts
        .iter()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .collect();
    let mut rows = Vec::new();
    for name in &a.names {
        let issued = dev_certs::issue(&a.dir, name, &hosts).map_err(CliError::new)?;
        rows.push(Row {
            name: issued.name,
            cert: issued.cert.display().to_string(),
            key: issued.key.display().to_string(),
        });
    }
    let ca = a.dir.join(dev_certs::CA_FILE).display().to_string();
    if ctx.json {
        return ctx.print_json(&serde_json::json!({ "ca": ca, "certificates": rows }));
    }
    outln!("CA: {ca}");
    for r in &rows {
        outln!("{}: {} (key {})", r.name, r.cert, r.key);
    }
    Ok(())
}
