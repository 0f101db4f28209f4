//! TLS of a broker connection: the trusted CA and the client certificate, validated without
//! I/O; the files are read when the connection is built.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

use crate::config::Problems;

/// `tls:` of a connection.
#[derive(Debug, Default, Deserialize)]
pub struct RawTls {
    /// PEM file of the CA certificates to trust (default: the system's).
    pub ca_file: Option<String>,
    /// PEM file of the client certificate, for servers that ask for one (with `key_file`).
    pub cert_file: Option<String>,
    /// PEM file of the client certificate's private key.
    pub key_file: Option<String>,
}

/// TLS files, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsConfig {
    /// CA certificates (PEM).
    pub ca_file: Option<String>,
    /// Client certificate and key (PEM).
    pub client: Option<(String, String)>,
}

/// Validates a `tls:` section (files are read at start).
pub fn validate_tls(raw: &RawTls, at: &str, p: &mut Problems) -> TlsConfig {
    let client = match (&raw.cert_file, &raw.key_file) {
        (Some(c), Some(k)) => Some((c.clone(), k.clone())),
        (None, None) => None,
        _ => {
            p.push(
                format!("{at}.cert_file"),
                "cert_file and key_file go together",
            );
            None
        }
    };
    TlsConfig {
        ca_file: raw.ca_file.clone(),
        client,
    }
}

/// A rustls client config with the ring provider: the CA file's certificates (else the
/// system's), and the client certificate when configured.
pub fn client_config(tls: &TlsConfig) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match &tls.ca_file {
        Some(ca) => {
            for cert in CertificateDer::pem_file_iter(ca).map_err(|e| format!("{ca}: {e}"))? {
                let cert = cert.map_err(|e| format!("{ca}: {e}"))?;
                roots.add(cert).map_err(|e| format!("{ca}: {e}"))?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots);
    match &tls.client {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let certs = CertificateDer::pem_file_iter(cert)
                .map_err(|e| format!("{cert}: {e}"))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{cert}: {e}"))?;
            crate::config::check_private_file(std::path::Path::new(key))?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("{key}: {e}"))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| e.to_string())
        }
    }
}
