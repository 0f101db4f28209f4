//! MQTT client options from a connection config: stable client id, `clean_session: false`,
//! manual acks, TLS with rustls and ring. The reconnect back-off is ours ([`reconnect_delay`]):
//! rumqttc reconnects on the next `poll` after an error, at once.

use std::sync::Arc;
use std::time::Duration;

use rumqttc::{MqttOptions, TlsConfiguration, Transport};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::config::MqttConnectionConfig;
use crate::sources::nats::config::TlsConfig;

/// The client queue of every MQTT client: the `cap` of `AsyncClient::new` (its
/// `set_request_channel_capacity` does nothing). The `mqtt` sink refuses when it is full.
pub const CLIENT_QUEUE: usize = 1024;

/// The wait after `n` failed connection attempts in a row: 100 ms doubling to `max`.
pub fn reconnect_delay(n: u32, max: Duration) -> Duration {
    Duration::from_millis(100)
        .saturating_mul(1 << n.saturating_sub(1).min(20))
        .min(max)
}

/// Options for the client `<client_id>-<suffix>`.
pub fn options(cfg: &MqttConnectionConfig, suffix: &str) -> Result<MqttOptions, String> {
    let id = format!("{}-{suffix}", cfg.client_id);
    let mut o = MqttOptions::new(id, cfg.host.clone(), cfg.port);
    o.set_clean_session(false)
        .set_manual_acks(true)
        .set_keep_alive(cfg.keep_alive)
        .set_max_packet_size(1 << 20, 1 << 20);
    if let Some((u, p)) = &cfg.credentials {
        o.set_credentials(u.clone(), p.clone());
    }
    if let Some(tls) = &cfg.tls {
        let config = tls_config(tls)?;
        o.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
            Arc::new(config),
        )));
    }
    Ok(o)
}

/// A rustls client config with the ring provider: the CA file's certificates (else the
/// system's), and the client certificate when configured.
pub fn tls_config(tls: &TlsConfig) -> Result<rustls::ClientConfig, String> {
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
