//! The OPC-UA client's side of a session: the client as a device's config makes it, and a
//! session opened on the server's endpoint that matches the device's security.
//!
//! Before a secure session, the server certificate of the chosen endpoint is checked by the
//! library (trusted, key length) and then by [`super::server_cert`] (validity, host name over
//! every subject alternative name, application URI), instead of the library's own host name
//! and URI checks that look at the names' order.
//!
//! The client's key pair is made by [`ensure_key_pair`] when the device's driver is built,
//! before any task starts: devices that share a PKI folder (the default one) would otherwise
//! race to make it on first start, and the loser would run without a certificate.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opcua::client::transport::TcpConnector;
use opcua::client::{
    Client, ClientBuilder, ClientEndpoint, IdentityToken, Session, SessionEventLoop,
};
use opcua::core::comms::url::{
    hostname_from_url, url_matches_except_host, url_with_replaced_hostname,
};
use opcua::crypto::X509;
use opcua::types::{EndpointDescription, MessageSecurityMode};

use super::config::{Identity, OpcuaDeviceConfig, SecurityMode, SecurityPolicy};

/// The folder of the client certificate when the config names none: `<data_dir>/opcua-pki`.
pub fn default_pki_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("opcua-pki")
}

/// The client as the device's driver builds it for each session (the commissioning tools
/// start from it too).
pub fn client_builder(c: &OpcuaDeviceConfig, pki_dir: &Path) -> ClientBuilder {
    // The device's endpoint, so that the library's config is complete (without one it warns
    // "Endpoint config contains no endpoints" at every client made); sessions are still
    // opened on the endpoint `open_session` chooses from the server's list.
    let (policy, mode) = security(c);
    let mut endpoint = ClientEndpoint::new(c.endpoint.as_str());
    endpoint.security_policy = policy.to_str().to_string();
    endpoint.security_mode = mode.into();
    ClientBuilder::new()
        .endpoint("device", endpoint)
        .application_name("opex-connector")
        .application_uri("urn:opex-connector:client")
        .product_uri("urn:opex-connector")
        .create_sample_keypair(true)
        .pki_dir(pki_dir)
        .trust_server_certs(c.trust_server_certs)
        // Trust and key length are still checked by the library; validity, host name and
        // application URI by `check_server_certificate`.
        .verify_server_certs(false)
        .session_retry_limit(-1)
        .session_retry_initial(c.reconnect_initial)
        .session_retry_max(c.reconnect_max)
        .request_timeout(c.request_timeout)
        .keep_alive_interval(Duration::from_secs(5).min(c.watchdog / 3))
        .max_failed_keep_alive_count(3)
        .session_name(format!("opex-connector {}", c.name))
}

/// Makes the client's certificate and private key in `pki_dir` unless they are there (the
/// library does it when a client is made), and checks both can be read.
pub fn ensure_key_pair(c: &OpcuaDeviceConfig, pki_dir: &Path) -> Result<(), String> {
    let client = client_builder(c, pki_dir)
        .client()
        .map_err(|errors| errors.join("; "))?;
    let store = client.certificate_store().read();
    store.read_own_cert()?;
    store.read_own_pkey()?;
    Ok(())
}

/// The user token of the device's identity.
fn identity_token(identity: &Identity) -> IdentityToken {
    match identity {
        Identity::Anonymous => IdentityToken::Anonymous,
        Identity::User { username, password } => {
            IdentityToken::new_user_name(username.clone(), password.clone())
        }
    }
}

/// Opens a session with the server of `c`, a client made by `builder` (see
/// [`client_builder`]): asks the server for its endpoints, picks the one with the device's
/// policy and mode, checks its certificate when the policy is not `None`, and connects. The
/// session does nothing until its event loop is driven; keep the client as long as the
/// session. `Err` says what failed, in one line.
pub async fn open_session(
    c: &OpcuaDeviceConfig,
    builder: ClientBuilder,
) -> Result<(Client, Arc<Session>, SessionEventLoop<TcpConnector>), String> {
    // Making the client reads its certificate and key (made when the driver was built), kept
    // off the pollers' thread.
    let mut client = match tokio::task::spawn_blocking(move || builder.client()).await {
        Ok(Ok(client)) => client,
        Ok(Err(errors)) => return Err(format!("client: {}", errors.join("; "))),
        Err(e) => return Err(format!("client: {e}")),
    };
    let asked = client.get_server_endpoints_from_url(c.endpoint.as_str());
    let endpoints = match tokio::time::timeout(c.request_timeout * 2, asked).await {
        Ok(Ok(endpoints)) => endpoints,
        Ok(Err(e)) => return Err(format!("endpoints of {}: {e}", c.endpoint)),
        Err(_) => return Err(format!("endpoints of {}: timed out", c.endpoint)),
    };
    let endpoint =
        choose_endpoint(c, &client, &endpoints).map_err(|e| format!("{}: {e}", c.endpoint))?;
    let (session, event_loop) = client
        .connect_to_endpoint_directly(endpoint, identity_token(&c.identity))
        .map_err(|e| format!("session with {}: {e}", c.endpoint))?;
    Ok((client, session, event_loop))
}

/// The device's security policy and mode in the library's words.
fn security(c: &OpcuaDeviceConfig) -> (opcua::crypto::SecurityPolicy, MessageSecurityMode) {
    let mode = match c.security_mode {
        SecurityMode::None => MessageSecurityMode::None,
        SecurityMode::Sign => MessageSecurityMode::Sign,
        SecurityMode::SignAndEncrypt => MessageSecurityMode::SignAndEncrypt,
    };
    let policy = match c.security_policy {
        SecurityPolicy::None => opcua::crypto::SecurityPolicy::None,
        SecurityPolicy::Basic256Sha256 => opcua::crypto::SecurityPolicy::Basic256Sha256,
    };
    (policy, mode)
}

/// The server's endpoint with the device's policy and mode (its URL's host replaced by
/// the configured one), its certificate checked when the policy is not `None`.
fn choose_endpoint(
    c: &OpcuaDeviceConfig,
    client: &Client,
    endpoints: &[EndpointDescription],
) -> Result<EndpointDescription, String> {
    let (policy, mode) = security(c);
    let Some(endpoint) = Client::find_matching_endpoint(endpoints, &c.endpoint, policy, mode)
    else {
        if let Some(elsewhere) = endpoints_elsewhere(c, endpoints) {
            return Err(elsewhere);
        }
        let offered: Vec<String> = endpoints
            .iter()
            .take(16)
            .map(|e| {
                let uri = e.security_policy_uri.as_ref();
                let name = uri.rsplit('#').next().unwrap_or(uri);
                format!("{name}/{:?}", e.security_mode)
            })
            .collect();
        return Err(format!(
            "the server offers no {} {mode:?} endpoint (it offers: {})",
            c.security_policy.as_str(),
            offered.join(", ")
        ));
    };
    if c.security_policy != SecurityPolicy::None {
        check_server_certificate(c, client, &endpoint, policy)?;
    }
    Ok(endpoint)
}

/// When none of the server's endpoints is at the URL's path (`/line/` asked, `/` served):
/// where they are, with the configured host, so the technician can copy the URL.
fn endpoints_elsewhere(c: &OpcuaDeviceConfig, endpoints: &[EndpointDescription]) -> Option<String> {
    let host = hostname_from_url(&c.endpoint).ok()?;
    let mut urls: Vec<String> = Vec::new();
    for e in endpoints.iter().take(16) {
        let url = e.endpoint_url.as_ref();
        if url_matches_except_host(&c.endpoint, url) {
            return None;
        }
        let url = url_with_replaced_hostname(url, &host).unwrap_or_else(|_| url.to_string());
        if !urls.contains(&url) {
            urls.push(url);
        }
    }
    (!urls.is_empty()).then(|| {
        format!(
            "the server's endpoints are at {}, not at this path: use that URL as the endpoint",
            urls.join(", ")
        )
    })
}

/// The library's checks of the endpoint's certificate (trusted or not, stored in
/// `trusted/` or `rejected/`; key length), then ours ([`super::server_cert`]).
fn check_server_certificate(
    c: &OpcuaDeviceConfig,
    client: &Client,
    endpoint: &EndpointDescription,
    policy: opcua::crypto::SecurityPolicy,
) -> Result<(), String> {
    let cert = X509::from_byte_string(&endpoint.server_certificate)
        .map_err(|e| format!("server certificate: {e}"))?;
    client
        .certificate_store()
        .read()
        .validate_or_reject_application_instance_cert(&cert, policy, None, None)
        .map_err(|e| format!("server certificate: {e}"))?;
    let host = hostname_from_url(&c.endpoint).map_err(|e| format!("{}: {e}", c.endpoint))?;
    super::server_cert::check(
        endpoint.server_certificate.as_ref(),
        &host,
        endpoint.server.application_uri.as_ref(),
        c.check_server_hostname,
        SystemTime::now(),
    )
    .map_err(|e| e.to_string())
}
