//! Where a PLC is and how to reach it: host, port, TSAPs (from rack and slot, or as TIA
//! Portal writes them), the PDU size to ask for, and the timeout of every request. Read from
//! an `s7://HOST[:PORT]?rack=R&slot=S` URL by the commissioning tool; the `devices:` config
//! builds the same struct.

use std::time::Duration;

/// ISO-on-TCP's port.
pub const DEFAULT_PORT: u16 = 102;
/// The PDU size asked for by default (S7-300/400/1200 grant 240 or 480, S7-1500 up to 960).
pub const DEFAULT_PDU: u16 = 480;
/// The PDU sizes one may ask for.
pub const PDU_RANGE: std::ops::RangeInclusive<u16> = 240..=960;
/// The local TSAP of a PG connection, as Snap7 and most gateways use it.
pub const LOCAL_TSAP: u16 = 0x0100;

/// How to reach one PLC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Host name or IP address.
    pub host: String,
    /// TCP port (102).
    pub port: u16,
    /// Our TSAP.
    pub local_tsap: u16,
    /// The CPU's TSAP.
    pub remote_tsap: u16,
    /// The PDU size asked for; the PLC may grant less.
    pub pdu_size: u16,
    /// How long connect and every request may take.
    pub timeout: Duration,
}

/// The CPU's TSAP of a PG connection to `rack` and `slot` (0x01, rack × 32 + slot).
pub fn rack_slot_tsap(rack: u8, slot: u8) -> Result<u16, String> {
    if rack > 7 || slot > 31 {
        return Err(format!(
            "rack {rack} slot {slot}: rack is 0 to 7 and slot 0 to 31"
        ));
    }
    Ok(0x0100 | (u16::from(rack) << 5) | u16::from(slot))
}

/// A TSAP as TIA Portal shows it: two hex bytes with a dot, `"03.01"`.
pub fn parse_tsap(text: &str) -> Result<u16, String> {
    let bad = || {
        format!("{text:?} is not a TSAP as TIA Portal writes it (two hex bytes, e.g. \"03.01\")")
    };
    let (hi, lo) = text.trim().split_once('.').ok_or_else(bad)?;
    if hi.len() != 2 || lo.len() != 2 {
        return Err(bad());
    }
    let byte = |s: &str| u8::from_str_radix(s, 16).map_err(|_| bad());
    Ok((u16::from(byte(hi)?) << 8) | u16::from(byte(lo)?))
}

impl Endpoint {
    /// Reads `s7://HOST[:PORT][?rack=R&slot=S | ?local_tsap=01.00&remote_tsap=03.01]
    /// [&pdu_size=N]`; rack 0 and slot 1 (S7-1200/1500) when neither is given.
    pub fn parse_url(url: &str, timeout: Duration) -> Result<Endpoint, String> {
        let rest = url
            .strip_prefix("s7://")
            .ok_or_else(|| format!("{url}: expected s7://HOST:PORT?rack=0&slot=1"))?;
        let (hostport, query) = rest.split_once('?').unwrap_or((rest, ""));
        let hostport = hostport.trim_end_matches('/');
        let port_of = |p: &str| {
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{url}: the port is 1 to 65535"))
        };
        let (host, port) = if let Some(bracketed) = hostport.strip_prefix('[') {
            // An IPv6 address: [::1] or [::1]:102.
            let (host, after) = bracketed
                .split_once(']')
                .ok_or_else(|| format!("{url}: an IPv6 address ends with ]"))?;
            match after.strip_prefix(':') {
                Some(p) => (host, port_of(p)?),
                None if after.is_empty() => (host, DEFAULT_PORT),
                None => return Err(format!("{url}: expected :PORT after the address")),
            }
        } else {
            match hostport.rsplit_once(':') {
                Some((host, p)) => (host, port_of(p)?),
                None => (hostport, DEFAULT_PORT),
            }
        };
        if host.is_empty() {
            return Err(format!("{url}: no host"));
        }
        let mut ep = Endpoint {
            host: host.to_string(),
            port,
            local_tsap: LOCAL_TSAP,
            remote_tsap: rack_slot_tsap(0, 1)?,
            pdu_size: DEFAULT_PDU,
            timeout,
        };
        let (mut rack, mut slot, mut remote) = (None, None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let small = |max: u8| {
                value
                    .parse::<u8>()
                    .ok()
                    .filter(|v| *v <= max)
                    .ok_or_else(|| format!("{url}: {key} is 0 to {max}"))
            };
            match key {
                "rack" => rack = Some(small(7)?),
                "slot" => slot = Some(small(31)?),
                "local_tsap" => ep.local_tsap = parse_tsap(value)?,
                "remote_tsap" => remote = Some(parse_tsap(value)?),
                "pdu_size" => {
                    ep.pdu_size = value
                        .parse()
                        .ok()
                        .filter(|p| PDU_RANGE.contains(p))
                        .ok_or_else(|| format!("{url}: pdu_size is 240 to 960"))?
                }
                _ => return Err(format!("{url}: unknown parameter {key:?} (rack, slot, local_tsap, remote_tsap, pdu_size)")),
            }
        }
        ep.remote_tsap = match (remote, rack.is_some() || slot.is_some()) {
            (Some(_), true) => {
                return Err(format!("{url}: give rack/slot or remote_tsap, not both"))
            }
            (Some(t), false) => t,
            (None, _) => rack_slot_tsap(rack.unwrap_or(0), slot.unwrap_or(1))?,
        };
        Ok(ep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(1);

    #[test]
    fn tsaps_come_from_rack_and_slot_or_as_tia_portal_writes_them() {
        assert_eq!(rack_slot_tsap(0, 2), Ok(0x0102));
        assert_eq!(rack_slot_tsap(1, 3), Ok(0x0123));
        assert_eq!(parse_tsap("03.01"), Ok(0x0301));
        assert_eq!(parse_tsap("10.0a"), Ok(0x100A));
        assert!(parse_tsap("0301").is_err());
        assert!(parse_tsap("3.1").is_err());
        let ep =
            Endpoint::parse_url("s7://10.0.0.5?rack=0&slot=2", T).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (ep.host.as_str(), ep.port, ep.remote_tsap, ep.pdu_size),
            ("10.0.0.5", 102, 0x0102, 480)
        );
        let ep = Endpoint::parse_url(
            "s7://plc:1102?local_tsap=10.00&remote_tsap=03.01&pdu_size=960",
            T,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (ep.port, ep.local_tsap, ep.remote_tsap, ep.pdu_size),
            (1102, 0x1000, 0x0301, 960)
        );
        assert!(Endpoint::parse_url("s7://plc?rack=0&remote_tsap=03.01", T).is_err());
        assert!(Endpoint::parse_url("s7://plc?pdu_size=100", T).is_err());
        assert!(Endpoint::parse_url("s7://plc?slot=40", T).is_err());
        assert!(Endpoint::parse_url("tcp://plc", T).is_err());
        let v6 = |u: &str| Endpoint::parse_url(u, T).map(|e| (e.host, e.port));
        assert_eq!(v6("s7://[::1]:1102"), Ok(("::1".into(), 1102)));
        assert_eq!(v6("s7://[fe80::2]"), Ok(("fe80::2".into(), 102)));
        assert!(v6("s7://plc:0").is_err());
    }
}
