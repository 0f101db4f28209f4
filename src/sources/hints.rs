//! What a device's error means, in the words of the technician at the machine, and what to
//! try next: the `last_error_hint` beside each device's `last_error` in `/api/status` and on
//! the status page, and the reason the commissioning tools print when they cannot go on.
//!
//! `last_error` stays the exact text of the error (logs, alerts and scripts read it); a hint
//! is written from it and from the device's own settings (its address, unit, timeout), so it
//! can name what to check. Pure: the same error always gives the same words.
//!
//! OPC-UA errors arrive as text from the stack; they carry the status code's name
//! (`BadUserAccessDenied`), which is what the hint is chosen by.

use std::time::Duration;

use crate::sources::driver::LinkError;
use crate::sources::modbus::config::{RegisterKind, Transport};

/// The name of a Modbus exception code, as the standard calls it.
pub fn exception_name(code: u8) -> &'static str {
    match code {
        1 => "illegal function",
        2 => "illegal data address",
        3 => "illegal data value",
        4 => "server device failure",
        5 => "acknowledge",
        6 => "server device busy",
        8 => "memory parity error",
        0x0A => "gateway path unavailable",
        0x0B => "gateway target device failed to respond",
        _ => "not a standard exception",
    }
}

/// One unit of a table and several, in words: `holding register(s)`, `coil(s)`.
pub fn unit_words(kind: RegisterKind) -> (&'static str, &'static str) {
    match kind {
        RegisterKind::Holding => ("holding register", "holding registers"),
        RegisterKind::Input => ("input register", "input registers"),
        RegisterKind::Coil => ("coil", "coils"),
        RegisterKind::Discrete => ("discrete input", "discrete inputs"),
    }
}

/// `holding register 100`, or `holding registers 100-103` for `count` units from `start`.
pub fn units_at(kind: RegisterKind, start: u16, count: u16) -> String {
    let (one, many) = unit_words(kind);
    if count > 1 {
        format!("{many} {start}-{}", u32::from(start) + u32::from(count) - 1)
    } else {
        format!("{one} {start}")
    }
}

/// A device's refusal, e.g. `exception 2 "illegal data address" at holding register 100`.
pub fn exception_text(code: u8, kind: RegisterKind, start: u16, count: u16) -> String {
    format!(
        "exception {code} \"{}\" at {}",
        exception_name(code),
        units_at(kind, start, count)
    )
}

/// What to do about exception `code` to a read of `count` units of `kind` from `start`.
pub fn exception_hint(code: u8, kind: RegisterKind, start: u16, count: u16) -> String {
    let (_, many) = unit_words(kind);
    match code {
        1 => format!(
            "the device does not read {many}: check the point's kind (holding, input, coil, discrete) against the device's manual"
        ),
        2 => format!(
            "the device has no {}: check the address against the device's manual (a manual that counts from 1, or writes 40001 for holding register 0, puts each address 1 higher); `opex-connector scan` lists the addresses the device has",
            units_at(kind, start, count)
        ),
        3 => "the device refused the length of the request: a point wider than the device allows there, or fewer registers per request than 125 (try max_gap: 0)".to_string(),
        4 => "the device failed while answering: check the device itself (its display or its own diagnostics)".to_string(),
        5 | 6 => "the device is busy: poll it less often (a larger interval_ms)".to_string(),
        8 => "the device reports a memory error: check the device itself".to_string(),
        0x0A => "the gateway has no path to this unit: check the unit id and the gateway's serial settings".to_string(),
        0x0B => "the gateway got no answer from the unit behind it: check the unit id, and the baud rate, parity and wiring of the gateway's serial side".to_string(),
        _ => "see the device's manual for this exception code".to_string(),
    }
}

/// What to do about a Modbus link error of a device reached by `transport` at `unit`.
pub fn link_hint(e: &LinkError, transport: &Transport, unit: u8, timeout: Duration) -> String {
    let ms = timeout.as_millis();
    match (e, transport) {
        (LinkError::Timeout, Transport::Tcp { .. }) => format!(
            "no answer within {ms} ms: check that the device's unit id is {unit} (a gateway drops requests for a unit it does not have), or raise timeout_ms for a slow device"
        ),
        (LinkError::Timeout, Transport::Rtu(line)) => format!(
            "no answer from unit {unit} on {} within {ms} ms: check the unit id, the baud rate ({}), parity and stop bits against the device, the A/B wiring and the line's termination",
            line.path, line.baud
        ),
        (LinkError::Open(text), Transport::Tcp { host, port }) => tcp_open_hint(text, host, *port),
        (LinkError::Open(text), Transport::Rtu(line)) => serial_open_hint(text, &line.path),
        (LinkError::Transport(text), _) if has(text, &["reset", "broken pipe", "closed"]) => {
            "the device closed the connection: it may serve fewer connections at once (another client holds it), or it restarted".to_string()
        }
        (LinkError::Transport(_) | LinkError::Request(_), _) => {
            "the connection failed while talking to the device: check the cable and the network".to_string()
        }
        (LinkError::Framing(_), Transport::Rtu(_)) => {
            "the answer did not match the request: two devices on the line with the same unit id, or a baud rate or parity that differs from the device's".to_string()
        }
        (LinkError::Framing(_), Transport::Tcp { .. }) => {
            "the answer did not match the request: the port may not speak Modbus TCP (a gateway in RTU-over-TCP mode, or another service)".to_string()
        }
    }
}

fn tcp_open_hint(text: &str, host: &str, port: u16) -> String {
    if has(text, &["refused"]) {
        format!(
            "nothing accepts connections on {host} port {port}: check the port (Modbus TCP is usually 502), that the device's Modbus server is switched on, and any firewall in between"
        )
    } else if has(text, &["timed out"]) {
        format!(
            "{host} does not answer: check the IP address, the cable and the network (does `ping {host}` answer?)"
        )
    } else if has(text, &["unreachable", "no route"]) {
        format!(
            "{host} cannot be reached from this box: check its address and this box's network settings"
        )
    } else if has(text, &["lookup", "resolve", "name or service", "not known"]) {
        format!("the name {host} does not resolve: use the device's IP address, or fix DNS")
    } else {
        format!("cannot connect to {host} port {port}: check the address and the network")
    }
}

fn serial_open_hint(text: &str, path: &str) -> String {
    if has(text, &["no such file", "not found"]) {
        format!(
            "there is no serial port {path}: check the adapter is plugged in (`ls /dev/serial/by-id/` names it for good)"
        )
    } else if has(text, &["permission denied"]) {
        format!("no permission to open {path}: add the service's user to the dialout group")
    } else if has(text, &["busy", "locked"]) {
        format!("another program holds {path}: stop it (only one program can own a serial line)")
    } else {
        format!("cannot open {path}: check the serial adapter")
    }
}

/// What to do about an OPC-UA error (a device's `last_error`, a tool's failure), chosen by
/// the status code named in the text or by the connector's own certificate checks; `None`
/// for an error these words do not cover.
pub fn opcua_hint(text: &str) -> Option<String> {
    // The stack refuses a certificate it put in rejected/ before, whatever the settings.
    if has(text, &["rejected directory"]) {
        return Some("the server's certificate was refused before and lies in rejected/ of the device's pki_dir: move it to trusted/ to trust it, then try again".to_string());
    }
    if let Some(name) = status_name(text) {
        return status_hint(name).map(str::to_string);
    }
    let words = if has(text, &["is not valid for", "names no host"]) {
        HOST_NAME
    } else if has(text, &["offers no"]) {
        "the server offers no endpoint with this security: pick a security_policy and security_mode from those it offers"
    } else if has(text, &["timed out"]) {
        "the server did not answer in time: check the host, the port (often 4840) and the network"
    } else {
        return None;
    };
    Some(words.to_string())
}

const HOST_NAME: &str = "the server's certificate does not name the host of the endpoint URL: connect by a name or address it holds, or set check_server_hostname: false";

/// The words for one status code name.
fn status_hint(name: &str) -> Option<&'static str> {
    Some(match name {
        "BadCertificateHostNameInvalid" => HOST_NAME,
        "BadCertificateUntrusted" | "BadCertificateChainIncomplete" => "the server's certificate is not trusted yet: move it from rejected/ to trusted/ in the device's pki_dir (or set trust_server_certs: true), then try again",
        "BadCertificateTimeInvalid" | "BadCertificateIssuerTimeInvalid" => "a certificate has expired or is not valid yet: check the clock of this box and of the server, or renew the certificate",
        "BadCertificateUriInvalid" => "the server's certificate does not name the server's application URI: make a new certificate for the server",
        "BadCertificateRevoked" | "BadCertificateIssuerRevoked" => "the certificate was revoked: make a new one",
        "BadCertificateInvalid" | "BadSecurityChecksFailed" | "BadCertificateUseNotAllowed" => "the server refused the connector's certificate or security settings: trust the connector's certificate (own/cert.der in its pki_dir) on the server, and check security_policy and security_mode",
        "BadSecurityPolicyRejected" | "BadSecurityModeRejected" => "the server does not accept this security: pick a security_policy and security_mode it offers",
        "BadIdentityTokenRejected" | "BadIdentityTokenInvalid" | "BadUserAccessDenied" | "BadUserSignatureInvalid" => "the server refused the user: check username and password, and that the server allows this user (or anonymous access)",
        "BadTooManySessions" => "the server has no session left to give: close other clients, or raise its session limit",
        "BadTcpEndpointUrlInvalid" | "BadServerUriInvalid" => "the server does not know this endpoint URL: check its path (e.g. opc.tcp://host:4840/ or the path in the server's manual)",
        "BadNotConnected" | "BadConnectionRejected" | "BadCommunicationError" | "BadConnectionClosed" | "BadServerNotConnected" | "BadDisconnect" => "no OPC-UA server answers at the endpoint: check the host, the port (often 4840), that the server runs, and any firewall in between",
        "BadTimeout" | "BadRequestTimeout" => "the server did not answer in time: check the network, or raise request_timeout_ms",
        "BadNodeIdUnknown" | "BadNodeIdInvalid" => "the server has no node with this id: `opex-connector browse` lists the ids it has",
        "BadNotReadable" | "BadAttributeIdInvalid" => "the node cannot be read (not a variable, or not readable by this user)",
        "BadSessionIdInvalid" | "BadSessionClosed" | "BadSessionNotActivated" => "the server closed the session; the connector makes a new one",
        "BadTooManyOperations" => "the server takes fewer nodes per request: split the group",
        "BadServerHalted" | "BadShutdown" => "the server is shutting down or halted: check it",
        _ => return None,
    })
}

/// The first OPC-UA status code name (`Bad...`) in `text`.
fn status_name(text: &str) -> Option<&str> {
    text.split(|c: char| !c.is_ascii_alphanumeric()).find(|w| {
        w.strip_prefix("Bad")
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_uppercase()))
    })
}

/// Whether `text` holds any of `words`, ignoring case.
fn has(text: &str, words: &[&str]) -> bool {
    let lower = text.to_ascii_lowercase();
    words.iter().any(|w| lower.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::modbus::config::{LineConfig, Parity};

    fn tcp() -> Transport {
        Transport::Tcp {
            host: "10.0.0.5".into(),
            port: 502,
        }
    }

    #[test]
    fn an_exception_names_its_code_its_table_and_the_register() {
        assert_eq!(
            exception_text(2, RegisterKind::Holding, 100, 1),
            "exception 2 \"illegal data address\" at holding register 100"
        );
        assert_eq!(
            exception_text(2, RegisterKind::Coil, 10, 3),
            "exception 2 \"illegal data address\" at coils 10-12"
        );
        assert!(
            exception_hint(2, RegisterKind::Holding, 100, 1).contains("no holding register 100")
        );
        assert!(
            exception_hint(1, RegisterKind::Input, 0, 1).contains("does not read input registers")
        );
    }

    #[test]
    fn link_errors_say_what_to_check_for_tcp_and_for_a_serial_line() {
        let refused = LinkError::Open("Connection refused (os error 111)".into());
        let hint = link_hint(&refused, &tcp(), 1, Duration::from_secs(1));
        assert!(
            hint.contains("nothing accepts connections on 10.0.0.5 port 502"),
            "{hint}"
        );
        let timeout = link_hint(&LinkError::Timeout, &tcp(), 3, Duration::from_millis(500));
        assert!(
            timeout.contains("500 ms") && timeout.contains("unit id is 3"),
            "{timeout}"
        );
        let line = Transport::Rtu(LineConfig {
            path: "/dev/ttyUSB0".into(),
            baud: 19200,
            parity: Parity::None,
            data_bits: 8,
            stop_bits: 1,
            inter_frame_delay: Duration::ZERO,
        });
        let rtu = link_hint(&LinkError::Timeout, &line, 7, Duration::from_secs(1));
        assert!(
            rtu.contains("unit 7 on /dev/ttyUSB0") && rtu.contains("19200"),
            "{rtu}"
        );
        let missing = LinkError::Open("/dev/ttyUSB0: No such file or directory".into());
        let hint = link_hint(&missing, &line, 7, Duration::from_secs(1));
        assert!(
            hint.contains("there is no serial port /dev/ttyUSB0"),
            "{hint}"
        );
    }

    #[test]
    fn opcua_errors_are_explained_by_their_status_name() {
        let h = opcua_hint("connection lost: BadCertificateHostNameInvalid").unwrap_or_default();
        assert!(h.contains("check_server_hostname: false"), "{h}");
        let user = opcua_hint("session with opc.tcp://h:4840/: BadUserAccessDenied: refused")
            .unwrap_or_default();
        assert!(user.contains("username and password"), "{user}");
        let ours = opcua_hint("the server certificate is not valid for 10.0.0.5: it names DNS:plc")
            .unwrap_or_default();
        assert!(ours.contains("check_server_hostname"), "{ours}");
        let rejected = opcua_hint("server certificate: BadSecurityChecksFailed: Certificate CN=x.der is untrusted because it resides in the rejected directory").unwrap_or_default();
        assert!(rejected.contains("move it to trusted/"), "{rejected}");
        assert_eq!(opcua_hint("something else entirely"), None);
        assert_eq!(opcua_hint("Badly formed"), None);
    }
}
