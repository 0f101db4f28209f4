//! The `Host` check against DNS rebinding, and the one parser of `host[:port]` that the config
//! (`connector.http.allowed_hosts`), the `Host` header and the live view's `Origin` share.
//!
//! A rebinding page is served from a name its owner controls (`evil.example`), which is then
//! made to resolve to this box: the browser takes the connector for that page's own origin and
//! lets the page read every answer. What gives it away is the `Host` header, which carries the
//! page's name. So every request must name one of the connector's own hosts, or it gets
//! `421 Misdirected Request` before any route runs ([`AllowedHosts::refusal`]).
//!
//! The connector always answers:
//! - every IP address (`10.0.0.5`, `127.0.0.1`, `[::1]`): a `Host` that is an address means
//!   the page was loaded from that address, so it is not a rebinding page. This covers the
//!   listen address, and under `0.0.0.0` or `::` every address the box has or gets later
//!   (DHCP, a second interface, a link-local address), which nobody could list in advance;
//! - `localhost`, which browsers resolve to loopback on their own;
//! - the box's host name (and its first label when it is written `name.domain`) and
//!   `<name>.local` (mDNS), read when the server starts;
//!
//! and the entries of `connector.http.allowed_hosts` (the box's DNS name, a reverse proxy's).
//! A port is no defence against rebinding (the page has the connector's port in its own URL),
//! so a name matches on any port unless its entry gives one.
//!
//! The live view ([`origin_allowed`]) is stricter, since there the port tells programs apart:
//! a page may read it when its origin is the host it was requested from, port included, or an
//! entry written with its port.
//!
//! Without a usable `Host`: an HTTP/1.1 request with none, with two, or with one that is not
//! `host[:port]` gets `400`, as RFC 9112 (section 3.2) asks. An HTTP/1.0 request without
//! `Host` is served: HTTP/1.0 has no `Host`, and no browser sends a request without one.

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::Ordering;

use hyper::header::HOST;
use hyper::{Request, StatusCode, Version};

use super::respond::{error, Resp};
use super::server::HttpStats;

/// Longest host name accepted (RFC 1035: 253 characters without the final dot).
const MAX_NAME: usize = 253;

/// A host as a client names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostName {
    /// A DNS name, in lower case, without a final dot.
    Name(String),
    /// An IP address (IPv6 written in brackets).
    Ip(IpAddr),
}

/// `host[:port]`, as in a `Host` header, an `Origin` or an `allowed_hosts` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authority {
    /// The host.
    pub host: HostName,
    /// The port, when one is written.
    pub port: Option<u16>,
}

/// Why a text is not `host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorityError {
    /// Nothing (or only a port) was written.
    Empty,
    /// An IPv6 address without brackets: the port would be ambiguous.
    UnbracketedIpv6,
    /// Brackets around something that is not an IPv6 address.
    BadIpv6,
    /// The port is not a number in 1..=65535.
    BadPort,
    /// The name has a character other than letters, digits, `-`, `_` and `.`, an empty label,
    /// or more than 253 characters.
    BadName,
}

impl fmt::Display for AuthorityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthorityError::Empty => "no host name",
            AuthorityError::UnbracketedIpv6 => "an IPv6 address goes in brackets, e.g. [::1]",
            AuthorityError::BadIpv6 => "the brackets hold no IPv6 address",
            AuthorityError::BadPort => "the port is not a number in 1..=65535",
            AuthorityError::BadName => {
                "a host name has letters, digits, '-', '_' and '.' only, no empty label, at most 253 characters"
            }
        })
    }
}

impl Authority {
    /// Parses `name`, `name:port`, `a.b.c.d[:port]` or `[v6][:port]`. Names are compared in
    /// lower case and without their final dot (`Box.Local.` is `box.local`).
    pub fn parse(s: &str) -> Result<Authority, AuthorityError> {
        let (host, port) = if let Some(rest) = s.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or(AuthorityError::BadIpv6)?;
            let ip = inside
                .parse::<Ipv6Addr>()
                .map_err(|_| AuthorityError::BadIpv6)?;
            let port = match after {
                "" => None,
                _ => Some(after.strip_prefix(':').ok_or(AuthorityError::BadPort)?),
            };
            (HostName::Ip(IpAddr::V6(ip)), port)
        } else {
            let (name, port) = match s.split_once(':') {
                Some((_, p)) if p.contains(':') => return Err(AuthorityError::UnbracketedIpv6),
                Some((n, p)) => (n, Some(p)),
                None => (s, None),
            };
            (host_name(name)?, port)
        };
        let port = match port {
            None => None,
            Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
                match p.parse::<u16>() {
                    Ok(n) if n > 0 => Some(n),
                    _ => return Err(AuthorityError::BadPort),
                }
            }
            Some(_) => return Err(AuthorityError::BadPort),
        };
        Ok(Authority { host, port })
    }
}

fn host_name(name: &str) -> Result<HostName, AuthorityError> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if let Ok(ip) = name.parse::<std::net::Ipv4Addr>() {
        return Ok(HostName::Ip(IpAddr::V4(ip)));
    }
    if name.is_empty() {
        return Err(AuthorityError::Empty);
    }
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.';
    if name.len() > MAX_NAME || !name.bytes().all(allowed) || name.split('.').any(str::is_empty) {
        return Err(AuthorityError::BadName);
    }
    Ok(HostName::Name(name.to_ascii_lowercase()))
}

impl fmt::Display for Authority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostName::Name(n) => f.write_str(n)?,
            HostName::Ip(IpAddr::V4(ip)) => write!(f, "{ip}")?,
            HostName::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// The `Host` a request was admitted with, left in its extensions for the live view's
/// `Origin` check. Absent for an HTTP/1.0 request without `Host`.
#[derive(Debug, Clone)]
pub struct AdmittedHost(pub Authority);

/// Why a request was refused for its `Host`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Refusal {
    /// An HTTP/1.1 request without `Host`.
    Missing,
    /// More than one `Host` header.
    Several,
    /// A `Host` (or absolute request target) that is not `host[:port]`.
    Malformed(AuthorityError),
    /// A well-formed host that is not one of the connector's.
    NotAllowed(Authority),
}

/// The hosts this server answers: built once when it starts.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    /// `localhost` and the box's names.
    names: Vec<String>,
    /// `connector.http.allowed_hosts`.
    listed: Vec<Authority>,
}

impl AllowedHosts {
    /// The built-in names, the box's host name (read now) and `listed`
    /// (`connector.http.allowed_hosts`, validated).
    pub fn build(listed: &[Authority]) -> Self {
        let uname = rustix::system::uname();
        let hostname = uname.nodename().to_str().ok();
        if hostname.is_none() {
            log::warn!("the host name is not UTF-8: requests must name an address, localhost or connector.http.allowed_hosts");
        }
        let hosts = Self::with_hostname(listed, hostname);
        let listed: Vec<String> = hosts.listed.iter().map(Authority::to_string).collect();
        log::info!(
            "http answers every IP address and these names: names={} allowed_hosts={}",
            hosts.names.join(","),
            listed.join(",")
        );
        hosts
    }

    /// As [`AllowedHosts::build`], with the host name given (`None`: unknown).
    pub fn with_hostname(listed: &[Authority], hostname: Option<&str>) -> Self {
        let mut names = vec!["localhost".to_string()];
        if let Some(HostName::Name(full)) = hostname.and_then(|h| host_name(h).ok()) {
            // A host name written as `name.domain` is also reached by its first label.
            let short = full.split('.').next().unwrap_or(&full).to_string();
            names.push(format!("{short}.local"));
            if short != full {
                names.push(short);
            }
            names.push(full);
        }
        Self {
            names,
            listed: listed.to_vec(),
        }
    }

    /// True when a request naming `a` is answered.
    pub fn allows(&self, a: &Authority) -> bool {
        match &a.host {
            HostName::Ip(_) => true,
            HostName::Name(n) => {
                self.names.contains(n)
                    || self
                        .listed
                        .iter()
                        .any(|e| e.host == a.host && port_matches(e.port, a.port))
            }
        }
    }

    /// The answer refusing `req` for its host: `421` (not one of the connector's hosts) or
    /// `400` (no usable `Host`), counted; or `None`, and `req` goes on with its host in its
    /// extensions ([`AdmittedHost`]).
    pub fn refusal<B>(&self, req: &mut Request<B>, stats: &HttpStats) -> Option<Resp> {
        match self.judge(req) {
            Ok(Some(a)) => {
                req.extensions_mut().insert(AdmittedHost(a));
                None
            }
            Ok(None) => None,
            Err(refusal) => Some(refused(stats, &refusal)),
        }
    }

    fn judge<B>(&self, req: &Request<B>) -> Result<Option<Authority>, Refusal> {
        let mut headers = req.headers().get_all(HOST).iter();
        let header = headers.next();
        if headers.next().is_some() {
            return Err(Refusal::Several);
        }
        // An absolute request target names the host itself, and then it counts, not the
        // header (RFC 9112, section 3.2.2).
        let named = match (req.uri().authority(), header) {
            (Some(a), _) => a.as_str(),
            (None, Some(h)) => h
                .to_str()
                .map_err(|_| Refusal::Malformed(AuthorityError::BadName))?,
            (None, None) if req.version() <= Version::HTTP_10 => return Ok(None),
            (None, None) => return Err(Refusal::Missing),
        };
        let a = Authority::parse(named).map_err(Refusal::Malformed)?;
        if self.allows(&a) {
            Ok(Some(a))
        } else {
            Err(Refusal::NotAllowed(a))
        }
    }
}

/// An entry's port against a request's: no port in the entry matches any; a `Host` without a
/// port stands for the default one (80, or 443 behind a TLS proxy).
fn port_matches(entry: Option<u16>, got: Option<u16>) -> bool {
    match (entry, got) {
        (None, _) => true,
        (Some(e), Some(g)) => e == g,
        (Some(e), None) => e == 80 || e == 443,
    }
}

/// True when the live view may be served to a page of `origin` (`http(s)://host[:port]`):
/// the page is this connector's own (its origin is the `Host` the request was admitted with,
/// port included), or `origin` is an `allowed_hosts` entry written with its port (a page
/// served through a reverse proxy under that name; an `Origin` without a port has 80 for
/// `http`, 443 for `https`). Any other site is refused: another name, and also another port
/// of an allowed name (`localhost:3000` is another program than the connector).
pub fn origin_allowed(origin: &str, admitted: Option<&Authority>, listed: &[Authority]) -> bool {
    let (default_port, rest) = match (
        origin.strip_prefix("http://"),
        origin.strip_prefix("https://"),
    ) {
        (Some(rest), _) => (80, rest),
        (_, Some(rest)) => (443, rest),
        _ => return false,
    };
    let Ok(o) = Authority::parse(rest) else {
        return false;
    };
    let port = o.port.unwrap_or(default_port);
    admitted.is_some_and(|h| *h == o)
        || listed
            .iter()
            .any(|e| e.host == o.host && e.port == Some(port))
}

/// Counts a refusal, logs it (the first and then every power of two, so a page that keeps
/// trying cannot flood the log) and answers it.
fn refused(stats: &HttpStats, refusal: &Refusal) -> Resp {
    let total = stats.host_refused_total.fetch_add(1, Ordering::Relaxed) + 1;
    let (status, message) = match refusal {
        Refusal::NotAllowed(a) => (
            StatusCode::MISDIRECTED_REQUEST,
            format!("this connector does not answer to host {a}: name it in connector.http.allowed_hosts if it is this connector's name"),
        ),
        Refusal::Missing => (
            StatusCode::BAD_REQUEST,
            "an HTTP/1.1 request needs a Host header".to_string(),
        ),
        Refusal::Several => (
            StatusCode::BAD_REQUEST,
            "a request carries one Host header, this one has several".to_string(),
        ),
        Refusal::Malformed(e) => (
            StatusCode::BAD_REQUEST,
            format!("the Host header is not host[:port]: {e}"),
        ),
    };
    if total.is_power_of_two() {
        log::warn!(
            "http request refused for its host: status={} reason=\"{message}\" host_refused_total={total}",
            status.as_u16()
        );
    }
    error(status, &message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(s: &str) -> Authority {
        Authority::parse(s).unwrap()
    }

    fn request(host: Option<&str>, version: Version) -> Request<()> {
        let mut b = Request::builder().uri("/api/status").version(version);
        if let Some(h) = host {
            b = b.header(HOST, h);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn host_names_addresses_and_ports_parse_and_everything_else_is_refused_with_its_reason() {
        assert_eq!(
            a("Box.Local.:8080"),
            Authority {
                host: HostName::Name("box.local".into()),
                port: Some(8080)
            }
        );
        assert_eq!(
            a("10.0.0.5").host,
            HostName::Ip("10.0.0.5".parse().unwrap())
        );
        assert_eq!(a("10.0.0.5.:80"), a("10.0.0.5:80"));
        assert_eq!(a("[::1]:80").to_string(), "[::1]:80");
        assert_eq!(a("[0:0::1]"), a("[::1]"));
        for (bad, why) in [
            ("", AuthorityError::Empty),
            (":8080", AuthorityError::Empty),
            (".", AuthorityError::Empty),
            ("::1", AuthorityError::UnbracketedIpv6),
            ("[box]", AuthorityError::BadIpv6),
            ("[::1", AuthorityError::BadIpv6),
            ("[::1]8080", AuthorityError::BadPort),
            ("box:", AuthorityError::BadPort),
            ("box:0", AuthorityError::BadPort),
            ("box:65536", AuthorityError::BadPort),
            ("box:+80", AuthorityError::BadPort),
            ("box:080080", AuthorityError::BadPort),
            ("a..b", AuthorityError::BadName),
            ("user@box", AuthorityError::BadName),
            ("box/x", AuthorityError::BadName),
            ("b ox", AuthorityError::BadName),
            ("*.plant", AuthorityError::BadName),
            ("bäx", AuthorityError::BadName),
        ] {
            assert_eq!(Authority::parse(bad), Err(why), "{bad:?}");
        }
        assert_eq!(
            Authority::parse(&"a".repeat(254)),
            Err(AuthorityError::BadName)
        );
    }

    #[test]
    fn every_address_localhost_and_the_host_name_are_answered_on_any_port_and_other_names_not() {
        let hosts = AllowedHosts::with_hostname(&[], Some("Opex-17"));
        for ok in [
            "127.0.0.1:8080",
            "10.0.0.5",
            "[::1]:8080",
            "[fe80::1]",
            "localhost:8080",
            "LOCALHOST",
            "localhost.",
            "opex-17:9000",
            "opex-17.local:8080",
        ] {
            assert!(hosts.allows(&a(ok)), "{ok}");
        }
        for refused in [
            "evil.example:8080",
            "localhost.evil.example",
            "opex-17.evil",
            "local",
        ] {
            assert!(!hosts.allows(&a(refused)), "{refused}");
        }
        assert!(!AllowedHosts::with_hostname(&[], None).allows(&a("opex-17")));
        let fqdn = AllowedHosts::with_hostname(&[], Some("opex-17.plant.example"));
        for ok in ["opex-17.plant.example", "opex-17", "opex-17.local"] {
            assert!(fqdn.allows(&a(ok)), "{ok}");
        }
        assert!(!fqdn.allows(&a("plant.example")));
    }

    #[test]
    fn a_listed_name_is_answered_on_any_port_and_a_listed_name_with_a_port_on_that_port_only() {
        let hosts = AllowedHosts::with_hostname(&[a("box.plant"), a("gw.plant:443")], None);
        assert!(hosts.allows(&a("box.plant:8080")));
        assert!(hosts.allows(&a("BOX.plant")));
        assert!(hosts.allows(&a("gw.plant:443")));
        assert!(hosts.allows(&a("gw.plant")), "no port: the default one");
        assert!(!hosts.allows(&a("gw.plant:8080")));
        assert!(!hosts.allows(&a("sub.box.plant")));
    }

    #[test]
    fn dns_rebinding_a_request_for_another_name_is_misdirected_and_counted() {
        let hosts = AllowedHosts::with_hostname(&[], None);
        let stats = HttpStats::default();
        let mut req = request(Some("evil.example:8080"), Version::HTTP_11);
        let resp = hosts.refusal(&mut req, &stats).unwrap();
        assert_eq!(resp.status(), StatusCode::MISDIRECTED_REQUEST);
        assert!(req.extensions().get::<AdmittedHost>().is_none());
        // An absolute target names the host, whatever the header says.
        let mut req = Request::builder()
            .uri("http://evil.example/api/status")
            .header(HOST, "127.0.0.1")
            .body(())
            .unwrap();
        let resp = hosts.refusal(&mut req, &stats).unwrap();
        assert_eq!(resp.status(), StatusCode::MISDIRECTED_REQUEST);
        assert_eq!(stats.host_refused_total.load(Ordering::Relaxed), 2);

        let mut req = request(Some("127.0.0.1:8080"), Version::HTTP_11);
        assert!(hosts.refusal(&mut req, &stats).is_none());
        let admitted = req.extensions().get::<AdmittedHost>().unwrap();
        assert_eq!(admitted.0, a("127.0.0.1:8080"));
    }

    #[test]
    fn a_missing_double_or_malformed_host_is_400_except_a_missing_one_on_http_1_0() {
        let hosts = AllowedHosts::with_hostname(&[], None);
        let stats = HttpStats::default();
        for mut req in [
            request(None, Version::HTTP_11),
            request(Some("box:x"), Version::HTTP_11),
            request(Some("a b"), Version::HTTP_10),
        ] {
            let resp = hosts.refusal(&mut req, &stats).unwrap();
            assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
        }
        let mut two = request(Some("localhost"), Version::HTTP_11);
        two.headers_mut().append(HOST, "localhost".parse().unwrap());
        assert_eq!(
            hosts.refusal(&mut two, &stats).unwrap().status(),
            StatusCode::BAD_REQUEST
        );
        let mut old = request(None, Version::HTTP_10);
        assert!(hosts.refusal(&mut old, &stats).is_none());
        assert!(old.extensions().get::<AdmittedHost>().is_none());
        assert_eq!(stats.host_refused_total.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn only_the_connectors_own_origin_or_a_listed_one_may_read_the_live_view() {
        let host = a("10.0.0.5:8080");
        let own = Some(&host);
        assert!(origin_allowed("http://10.0.0.5:8080", own, &[]));
        assert!(origin_allowed("https://10.0.0.5:8080", own, &[]));
        let named = a("box.local");
        assert!(origin_allowed("https://Box.local", Some(&named), &[]));
        // Another service of the same box or of the browser's machine is another site.
        assert!(!origin_allowed("http://10.0.0.5:3000", own, &[]));
        assert!(!origin_allowed("http://localhost:3000", own, &[]));
        assert!(!origin_allowed("http://evil.example", own, &[]));
        assert!(!origin_allowed(
            "http://10.0.0.5:8080.evil.example",
            own,
            &[]
        ));
        assert!(!origin_allowed("http://10.0.0.5:8080/", own, &[]));
        assert!(!origin_allowed("null", own, &[]));
        assert!(!origin_allowed("ftp://10.0.0.5:8080", own, &[]));
        assert!(!origin_allowed("http://10.0.0.5:8080", None, &[]));
        // Behind a reverse proxy that rewrites Host, the proxy's name must be listed with its
        // port; a name listed without one is answered, but its pages need their own Host.
        let listed = [a("gw.plant:443"), a("ops.plant")];
        assert!(origin_allowed("https://gw.plant", own, &listed));
        assert!(origin_allowed("http://gw.plant:443", own, &listed));
        assert!(!origin_allowed("http://gw.plant", own, &listed));
        assert!(!origin_allowed("http://ops.plant:9000", own, &listed));
        let ops = a("ops.plant:9000");
        assert!(origin_allowed("http://ops.plant:9000", Some(&ops), &listed));
    }
}
