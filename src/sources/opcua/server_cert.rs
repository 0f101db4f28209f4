//! The client's own checks of an OPC-UA server's application instance certificate: its
//! validity period, the host name of the endpoint URL and the server's application URI.
//!
//! Why not the library's: async-opcua 0.19 (`async-opcua-crypto`, `src/x509.rs`) looks for
//! the host name in the subject alternative names after skipping the first entry, which it
//! takes for the application URI (`X509::is_hostname_valid`), and compares the application
//! URI with the first entry only (`X509::is_application_uri_valid`). OPC-UA Part 6 (6.2.2)
//! fixes no order, and a server whose certificate lists its DNS name first (node-opcua does)
//! is refused whether it is reached by name or by address. So the client turns those checks
//! off (`verify_server_certs(false)`: the library still checks that the certificate is
//! trusted and that its key is long enough) and makes them here, over every entry.
//!
//! The certificate checked is the one in the server's endpoint description. The library then
//! requires the CreateSession answer to carry the very same certificate, checks that it is
//! trusted, and verifies the server's signature made with its key: a certificate that passes
//! here but is not the server's own cannot open a session.
//!
//! What matches (pure, nothing is resolved): a name matches a DNS entry ignoring ASCII case
//! and a final dot, and a leftmost `*` label stands for exactly one label (`*.plant.example`
//! matches `plc-1.plant.example`); an address (IPv4, or IPv6 in brackets) matches an IP entry,
//! or a DNS entry that spells the same address, as some stacks write them. The application
//! URI must equal one of the URI entries exactly.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{SystemTime, UNIX_EPOCH};

use x509_cert::der::Decode;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::Certificate;

/// Why a server certificate is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertificateError {
    /// The endpoint carries no certificate, or one that does not parse.
    Unreadable(String),
    /// Its validity period has not begun yet, or is over.
    Time(String),
    /// None of its DNS or IP entries is the host the endpoint URL names.
    HostName {
        /// The host of the endpoint URL.
        host: String,
        /// Its DNS and IP entries, e.g. `DNS:plc-1`, `IP:10.0.0.5`.
        names: Vec<String>,
    },
    /// None of its URI entries is the application URI the server describes itself with.
    ApplicationUri {
        /// The server's application URI (from its endpoint description).
        uri: String,
        /// Its URI entries.
        uris: Vec<String>,
    },
}

impl fmt::Display for CertificateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unreadable(e) => write!(f, "the server certificate cannot be read: {e}"),
            Self::Time(e) => write!(f, "the server certificate {e}"),
            Self::HostName { host, names } if names.is_empty() => write!(
                f,
                "the server certificate names no host (no DNS or IP subject alternative name), so it is not valid for {host}; set check_server_hostname: false to accept it"
            ),
            Self::HostName { host, names } => write!(
                f,
                "the server certificate is not valid for {host}: it names {}; connect by one of those, or set check_server_hostname: false to accept it",
                names.join(", ")
            ),
            Self::ApplicationUri { uri, uris } => write!(
                f,
                "the server certificate does not name the server's application URI {uri:?} (its URIs: [{}])",
                uris.join(", ")
            ),
        }
    }
}

impl std::error::Error for CertificateError {}

/// One subject alternative name that matters here.
#[derive(Debug, Clone, PartialEq, Eq)]
enum AltName {
    Dns(String),
    Ip(IpAddr),
    Uri(String),
}

impl fmt::Display for AltName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Dns(d) => write!(f, "DNS:{d}"),
            Self::Ip(a) => write!(f, "IP:{a}"),
            Self::Uri(u) => write!(f, "URI:{u}"),
        }
    }
}

/// Checks the DER certificate `der` of a server reached at `host` (the host of the endpoint
/// URL, as written there) that calls itself `application_uri`, at `now`. With
/// `check_hostname` false the host name is not checked (`check_server_hostname: false`).
pub fn check(
    der: &[u8],
    host: &str,
    application_uri: &str,
    check_hostname: bool,
    now: SystemTime,
) -> Result<(), CertificateError> {
    if der.is_empty() {
        return Err(CertificateError::Unreadable(
            "the endpoint carries none".into(),
        ));
    }
    let cert =
        Certificate::from_der(der).map_err(|e| CertificateError::Unreadable(e.to_string()))?;
    let validity = &cert.tbs_certificate.validity;
    let not_before = validity.not_before.to_system_time();
    let not_after = validity.not_after.to_system_time();
    if now < not_before {
        return Err(CertificateError::Time(format!(
            "is not valid before {}",
            rfc3339(not_before)
        )));
    }
    if now > not_after {
        return Err(CertificateError::Time(format!(
            "expired at {}",
            rfc3339(not_after)
        )));
    }
    let names = alt_names(&cert)?;
    if check_hostname && !host_matches(&names, host) {
        return Err(CertificateError::HostName {
            host: host.to_string(),
            names: names
                .iter()
                .filter(|n| !matches!(n, AltName::Uri(_)))
                .map(AltName::to_string)
                .collect(),
        });
    }
    if !names
        .iter()
        .any(|n| matches!(n, AltName::Uri(u) if u == application_uri))
    {
        return Err(CertificateError::ApplicationUri {
            uri: application_uri.to_string(),
            uris: names
                .iter()
                .filter_map(|n| match n {
                    AltName::Uri(u) => Some(u.clone()),
                    _ => None,
                })
                .collect(),
        });
    }
    Ok(())
}

/// The DNS, IP and URI entries of the certificate's subject alternative names, in order.
fn alt_names(cert: &Certificate) -> Result<Vec<AltName>, CertificateError> {
    let san = cert
        .tbs_certificate
        .get::<SubjectAltName>()
        .map_err(|e| CertificateError::Unreadable(format!("its subject alternative names: {e}")))?;
    let Some((_, SubjectAltName(names))) = san else {
        return Ok(Vec::new());
    };
    Ok(names
        .iter()
        .filter_map(|n| match n {
            GeneralName::DnsName(d) => Some(AltName::Dns(d.to_string())),
            GeneralName::UniformResourceIdentifier(u) => Some(AltName::Uri(u.to_string())),
            GeneralName::IpAddress(bytes) => ip_of(bytes.as_bytes()).map(AltName::Ip),
            _ => None,
        })
        .collect())
}

/// The address of an IP entry: 4 or 16 bytes (other lengths are masks of name constraints).
fn ip_of(bytes: &[u8]) -> Option<IpAddr> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Some(IpAddr::V4(Ipv4Addr::from(v4)));
    }
    <[u8; 16]>::try_from(bytes)
        .ok()
        .map(|v6| IpAddr::V6(Ipv6Addr::from(v6)))
}

/// True when one of `names` is the endpoint's `host`.
fn host_matches(names: &[AltName], host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        let ip = ip.to_canonical();
        return names.iter().any(|n| match n {
            AltName::Ip(a) => a.to_canonical() == ip,
            AltName::Dns(d) => d.parse::<IpAddr>().is_ok_and(|a| a.to_canonical() == ip),
            AltName::Uri(_) => false,
        });
    }
    let host = normalised(bare);
    !host.is_empty()
        && names
            .iter()
            .any(|n| matches!(n, AltName::Dns(d) if dns_matches(&normalised(d), &host)))
}

fn normalised(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

/// `pattern` (a DNS entry, normalised) against `host` (normalised): equal, or a leftmost `*`
/// label standing for one label of a name with at least two more labels after it.
fn dns_matches(pattern: &str, host: &str) -> bool {
    if pattern == host {
        return true;
    }
    let Some(parent) = pattern.strip_prefix("*.") else {
        return false;
    };
    match host.split_once('.') {
        Some((label, rest)) => !label.is_empty() && rest == parent && parent.contains('.'),
        None => false,
    }
}

fn rfc3339(t: SystemTime) -> String {
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64)
        .unwrap_or(0);
    crate::time::rfc3339(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn dns(d: &str) -> AltName {
        AltName::Dns(d.into())
    }

    fn ip(a: &str) -> AltName {
        AltName::Ip(a.parse().unwrap())
    }

    #[test]
    fn every_entry_is_looked_at_whatever_its_place() {
        let uri_last = [
            dns("localhost"),
            ip("127.0.0.1"),
            AltName::Uri("urn:s".into()),
        ];
        assert!(host_matches(&uri_last, "localhost"));
        assert!(host_matches(&uri_last, "127.0.0.1"));
        let uri_first = [AltName::Uri("urn:s".into()), dns("plc-1"), ip("10.0.0.5")];
        assert!(host_matches(&uri_first, "PLC-1"));
        assert!(host_matches(&uri_first, "10.0.0.5"));
        assert!(!host_matches(&uri_first, "urn:s"));
        assert!(!host_matches(&uri_first, "10.0.0.6"));
        assert!(!host_matches(&uri_first, ""));
    }

    #[test]
    fn addresses_match_ip_entries_and_dns_entries_that_spell_them() {
        let names = [ip("::1"), dns("192.168.0.7"), ip("::ffff:10.1.2.3")];
        assert!(host_matches(&names, "[::1]"));
        assert!(host_matches(&names, "192.168.0.7"));
        assert!(host_matches(&names, "10.1.2.3"));
        assert!(!host_matches(&names, "[::2]"));
        // A name is never matched against an address, nor resolved.
        assert!(!host_matches(&[ip("127.0.0.1")], "localhost"));
    }

    #[test]
    fn a_wildcard_stands_for_one_leftmost_label() {
        let names = [dns("*.plant.example.")];
        assert!(host_matches(&names, "plc-1.plant.example"));
        assert!(host_matches(&names, "plc-1.plant.example."));
        assert!(!host_matches(&names, "plant.example"));
        assert!(!host_matches(&names, "a.plc-1.plant.example"));
        assert!(!host_matches(&[dns("*.example")], "plc.example"));
    }

    /// A self-signed certificate with these subject alternative names, in this order.
    fn certificate(names: &[&str], days: u32) -> Vec<u8> {
        let mut alt = opcua::crypto::X509Data::alt_host_names("", None, false, false, false);
        alt.names.0.clear();
        for n in names {
            match n.strip_prefix("URI:") {
                Some(uri) => alt.add_uri(uri),
                None => alt.add_address(n),
            }
        }
        let data = opcua::crypto::X509Data {
            key_size: 2048,
            common_name: "test server".into(),
            organization: "test".into(),
            organizational_unit: "test".into(),
            country: "IE".into(),
            state: "Dublin".into(),
            alt_host_names: alt,
            certificate_duration_days: days,
        };
        let (cert, _) = opcua::crypto::X509::cert_and_pkey(&data).unwrap();
        cert.to_der().unwrap()
    }

    #[test]
    fn a_dns_first_certificate_passes_for_its_names_and_is_refused_for_another_host_uri_or_time() {
        let first = certificate(&["localhost", "127.0.0.1", "URI:urn:s"], 2);
        // Its validity starts at its making (whole seconds): take the time after.
        let now = SystemTime::now();
        assert_eq!(check(&first, "localhost", "urn:s", true, now), Ok(()));
        assert_eq!(check(&first, "127.0.0.1", "urn:s", true, now), Ok(()));
        let err = check(&first, "10.0.0.9", "urn:s", true, now).unwrap_err();
        assert_eq!(
            err,
            CertificateError::HostName {
                host: "10.0.0.9".into(),
                names: vec!["DNS:localhost".into(), "IP:127.0.0.1".into()],
            }
        );
        assert!(err.to_string().contains("check_server_hostname"), "{err}");
        assert_eq!(check(&first, "10.0.0.9", "urn:s", false, now), Ok(()));
        let uri = check(&first, "localhost", "urn:other", false, now).unwrap_err();
        assert!(
            matches!(&uri, CertificateError::ApplicationUri { uris, .. } if uris == &["urn:s"]),
            "{uri:?}"
        );
        let later = now + Duration::from_secs(3 * 86_400);
        assert!(matches!(
            check(&first, "localhost", "urn:s", false, later),
            Err(CertificateError::Time(_))
        ));
        assert!(matches!(
            check(b"not a certificate", "localhost", "urn:s", true, now),
            Err(CertificateError::Unreadable(_))
        ));
        assert!(matches!(
            check(&[], "localhost", "urn:s", true, now),
            Err(CertificateError::Unreadable(_))
        ));
    }
}
