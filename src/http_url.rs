//! What an `http` health check's config names, read and checked: its URL and its
//! `health.ca_file`. Below both the config, which refuses a bad one at `check-config`, and
//! the check itself, which uses them.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::io;
use std::net::IpAddr;
use std::path::Path;
use warden_fencing::files::{io_reason, read_regular_file};

/// A parsed `http://` or `https://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// As configured, for messages.
    pub url: String,
    /// For the `Host` header: the host, and the port unless it is the scheme's own.
    pub(crate) authority: String,
    /// To connect to: a name or an IP address (IPv6 without brackets).
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Path and query, starting with `/`.
    pub(crate) target: String,
    /// https: the name the server's certificate must hold.
    pub(crate) server_name: Option<ServerName<'static>>,
}

impl HttpUrl {
    /// Parses an `http://` or `https://` URL (`host[:port][/path][?query]`; the fragment
    /// is dropped, as browsers do). Returns why it cannot be used otherwise.
    pub fn parse(text: &str) -> Result<HttpUrl, String> {
        let url = url::Url::parse(text).map_err(|e| format!("is not a URL ({e})"))?;
        let https = match url.scheme() {
            "http" => false,
            "https" => true,
            other => {
                return Err(format!(
                    "has scheme {other:?}: write http:// or https://, as in \
                     \"http://127.0.0.1:8088/health\""
                ))
            }
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(
                "contains a user name or password, which the check never sends: \
                        remove it from the URL"
                    .to_string(),
            );
        }
        let (host, server_name) = match url.host() {
            None => return Err("names no host".to_string()),
            Some(url::Host::Domain(name)) => {
                let server_name = if https {
                    Some(ServerName::try_from(name.to_string()).map_err(|_| {
                        format!("has host {name:?}, which is not a name a certificate can hold")
                    })?)
                } else {
                    None
                };
                (name.to_string(), server_name)
            }
            Some(url::Host::Ipv4(ip)) => (ip.to_string(), https.then(|| IpAddr::V4(ip).into())),
            Some(url::Host::Ipv6(ip)) => (ip.to_string(), https.then(|| IpAddr::V6(ip).into())),
        };
        let Some(port) = url.port_or_known_default() else {
            return Err("names no port".to_string());
        };
        let authority = match (url.host_str(), url.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_string(),
            (None, _) => return Err("names no host".to_string()),
        };
        Ok(HttpUrl {
            url: text.to_string(),
            authority,
            host,
            port,
            target: url[url::Position::BeforePath..url::Position::AfterQuery].to_string(),
            server_name,
        })
    }

    /// Whether the check speaks TLS.
    pub fn is_https(&self) -> bool {
        self.server_name.is_some()
    }
}

/// Why `health.ca_file` cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CaFileError {
    #[error("cannot read it: {}", io_reason(.0))]
    Unreadable(io::Error),
    #[error("{0}")]
    Invalid(String),
}

/// The largest `health.ca_file`. A private CA's certificate is a few KiB; a whole system
/// bundle (every CA a distribution trusts) is about 220 KiB.
pub const MAX_CA_FILE_BYTES: u64 = 4 << 20;

/// The CA certificates of `health.ca_file` (PEM; other blocks, such as a key, are skipped).
/// Each is parsed as a trust anchor here, so that a wrong file is refused by
/// `check-config` and at start, not found out at every check.
pub fn read_ca_file(file: &Path) -> Result<Vec<CertificateDer<'static>>, CaFileError> {
    let bytes = read_regular_file(file, MAX_CA_FILE_BYTES).map_err(CaFileError::Unreadable)?;
    let mut certs = Vec::new();
    for (i, cert) in CertificateDer::pem_slice_iter(&bytes).enumerate() {
        let n = i + 1;
        let cert = cert.map_err(|e| {
            CaFileError::Invalid(format!("its certificate {n} is not valid PEM ({e})"))
        })?;
        rustls::RootCertStore::empty()
            .add(cert.clone())
            .map_err(|e| {
                CaFileError::Invalid(format!(
                    "its certificate {n} is not a usable CA certificate ({e})"
                ))
            })?;
        certs.push(cert);
    }
    if certs.is_empty() {
        return Err(CaFileError::Invalid(
            "holds no certificate (no -----BEGIN CERTIFICATE----- block): it must hold the \
             CA certificate in PEM form"
                .to_string(),
        ));
    }
    Ok(certs)
}
