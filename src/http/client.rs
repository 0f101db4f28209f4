//! The connector's own HTTP/1.1 client, blocking, for its few outgoing requests: the push
//! uplink, ClickHouse inserts and alert webhooks. It sends one request at a time over one
//! kept-alive connection per [`Client`], `http://` or `https://` (rustls with ring and the
//! Mozilla roots, as the Postgres sink without a `ca_file`).
//!
//! Small on purpose (the field build's 6 MiB): no redirects (a redirect is an answer like any
//! other, which the callers take as a configuration problem), no compression, no cookies.
//!
//! An HTTP proxy is taken from the environment, as curl takes it: `https_proxy` (or
//! `HTTPS_PROXY`) for `https://` URLs, reached through a `CONNECT` tunnel, `http_proxy` (or
//! `HTTP_PROXY`) for `http://` URLs, `all_proxy` (or `ALL_PROXY`) for both when those are
//! not set, `http://[user:password@]host[:port]` each (port 80 when not given; the user and
//! password go as Basic credentials), and `no_proxy` (or `NO_PROXY`): host names, with their
//! subdomains, and addresses reached directly, comma-separated, `*` for every host. This box
//! itself (`localhost`, loopback addresses) is always reached directly. Bounded: one timeout for the whole request (connect, send and
//! answer), an answer's header at most [`MAX_HEADER`] bytes, a body kept up to the request's
//! `max_body` and read past it only to [`MAX_DRAIN`] to keep the connection (else closed).
//!
//! A kept connection the server closed while idle fails the next request before any byte of
//! the answer: that request is sent once more on a fresh connection. A timeout is never sent
//! again (the server may be working on it).

use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

/// Most bytes of an answer's status line and header fields.
pub const MAX_HEADER: usize = 64 * 1024;
/// Most header fields in an answer.
const MAX_FIELDS: usize = 64;
/// Most bytes of a body read (and thrown away) past `max_body` to keep the connection.
pub const MAX_DRAIN: usize = 64 * 1024;
/// A request's `max_body` unless it says otherwise.
const DEFAULT_MAX_BODY: usize = 64 * 1024;
/// Bytes written per call, so that the deadline is looked at while a large body goes out.
const WRITE_PIECE: usize = 64 * 1024;

/// Why a request got no answer.
#[derive(Debug)]
pub enum ClientError {
    /// The URL is not `http://host[:port][/path]` or `https://...`.
    Url(String),
    /// The host name does not resolve.
    HostNotFound(String, io::Error),
    /// No connection could be made to any of the host's addresses.
    Connect(io::Error),
    /// The request took longer than its timeout.
    Timeout(Duration),
    /// The TLS handshake or a TLS record failed (an untrusted certificate, say).
    Tls(rustls::Error),
    /// The connection failed while sending or reading.
    Io(io::Error),
    /// The answer is not HTTP/1.x as the client reads it.
    Answer(String),
    /// A header of the request cannot be sent (a line break in a value, say).
    Header(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Url(why) => write!(f, "bad URL: {why}"),
            Self::HostNotFound(host, e) => write!(f, "host name {host} does not resolve: {e}"),
            Self::Connect(e) => write!(f, "connect failed: {e}"),
            Self::Timeout(t) => write!(f, "timed out after {}s", t.as_secs_f32()),
            Self::Tls(e) => write!(f, "TLS: {e}"),
            Self::Io(e) => write!(f, "connection failed: {e}"),
            Self::Answer(why) => write!(f, "bad answer: {why}"),
            Self::Header(why) => write!(f, "bad request header: {why}"),
        }
    }
}

impl std::error::Error for ClientError {}

/// One request: build it with [`Request::get`] or [`Request::post`], send it with
/// [`Client::send`].
pub struct Request<'a> {
    method: &'static str,
    url: &'a str,
    headers: Vec<(&'a str, &'a str)>,
    body: Option<&'a [u8]>,
    timeout: Option<Duration>,
    max_body: usize,
}

impl<'a> Request<'a> {
    /// A `GET` of `url`.
    pub fn get(url: &'a str) -> Self {
        Self {
            method: "GET",
            url,
            headers: Vec::new(),
            body: None,
            timeout: None,
            max_body: DEFAULT_MAX_BODY,
        }
    }

    /// A `POST` of `body` to `url`.
    pub fn post(url: &'a str, body: &'a [u8]) -> Self {
        Self {
            method: "POST",
            body: Some(body),
            ..Self::get(url)
        }
    }

    /// Adds a header field.
    pub fn header(mut self, name: &'a str, value: &'a str) -> Self {
        self.headers.push((name, value));
        self
    }

    /// This request's timeout instead of the client's.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Most bytes of the answer's body kept [64 KiB].
    pub fn max_body(mut self, max: usize) -> Self {
        self.max_body = max;
        self
    }
}

/// An answer: its status, header fields and body (at most the request's `max_body` bytes).
#[derive(Debug)]
pub struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// A 2xx status.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first header field named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body, cut at the request's `max_body`.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A blocking HTTP/1.1 client with one kept-alive connection.
pub struct Client {
    timeout: Duration,
    tls: Option<Arc<ClientConfig>>,
    proxies: Proxies,
    kept: Option<(Origin, Transport)>,
}

impl Client {
    /// A client whose requests time out after `timeout` unless they say otherwise, through
    /// the proxies of the environment.
    pub fn new(timeout: Duration) -> Self {
        Self {
            timeout,
            tls: None,
            proxies: Proxies::of_env(),
            kept: None,
        }
    }

    /// Sends `request` and reads its answer, whatever its status.
    pub fn send(&mut self, request: Request<'_>) -> Result<Response, ClientError> {
        let target = Target::parse(request.url)?;
        let proxy = self.proxies.of(&target.origin).cloned();
        let head = head(&request, &target, proxy.as_ref())?;
        let timeout = request.timeout.unwrap_or(self.timeout);
        let deadline = Instant::now() + timeout;
        let kept = match self.kept.take() {
            Some((origin, transport)) if origin == target.origin => Some(transport),
            _ => None,
        };
        let reused = kept.is_some();
        let mut transport = match kept {
            Some(t) => t,
            None => self.connect(&target, proxy.as_ref(), deadline, timeout)?,
        };
        let mut outcome = exchange(&mut transport, &head, &request, deadline);
        if reused
            && matches!(&outcome, Err(Failed { answered: false, error }) if !is_timeout(error))
        {
            // The server closed the idle connection: once more on a fresh one.
            transport = self.connect(&target, proxy.as_ref(), deadline, timeout)?;
            outcome = exchange(&mut transport, &head, &request, deadline);
        }
        match outcome {
            Ok((response, keep)) => {
                if keep {
                    self.kept = Some((target.origin, transport));
                }
                Ok(response)
            }
            Err(Failed { error, .. }) => Err(classify(error, timeout)),
        }
    }

    /// A connection to `target`, directly or through `proxy` (a tunnel for `https://`).
    fn connect(
        &mut self,
        target: &Target<'_>,
        proxy: Option<&Proxy>,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Transport, ClientError> {
        let host = target.origin.host.as_str();
        let stream = match proxy {
            None => tcp(host, target.origin.port, deadline, timeout)?,
            Some(proxy) => {
                let stream = tcp(&proxy.host, proxy.port, deadline, timeout)?;
                if target.origin.tls {
                    tunnel(stream, target, proxy, deadline, timeout)?
                } else {
                    stream
                }
            }
        };
        if !target.origin.tls {
            return Ok(Transport::Plain(stream));
        }
        let config = self.tls.get_or_insert_with(mozilla_tls).clone();
        let name = ServerName::try_from(host.to_string())
            .map_err(|e| ClientError::Url(format!("{host}: {e}")))?;
        let conn = ClientConnection::new(config, name).map_err(ClientError::Tls)?;
        Ok(Transport::Tls(Box::new(StreamOwned::new(conn, stream))))
    }
}

/// A TCP connection to `host:port`, trying each of its addresses until `deadline`.
fn tcp(
    host: &str,
    port: u16,
    deadline: Instant,
    timeout: Duration,
) -> Result<TcpStream, ClientError> {
    let addrs = (host, port)
        .to_socket_addrs()
        .map_err(|e| ClientError::HostNotFound(host.to_string(), e))?;
    let mut last = io::Error::new(ErrorKind::NotFound, "the host name has no address");
    let mut stream = None;
    for addr in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ClientError::Timeout(timeout));
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) if is_timeout(&e) => return Err(ClientError::Timeout(timeout)),
            Err(e) => last = e,
        }
    }
    let stream = stream.ok_or(ClientError::Connect(last))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Asks `proxy`, on `stream`, for a tunnel to `target`: the stream once the proxy said yes.
fn tunnel(
    stream: TcpStream,
    target: &Target<'_>,
    proxy: &Proxy,
    deadline: Instant,
    timeout: Duration,
) -> Result<TcpStream, ClientError> {
    let origin = &target.origin;
    let authority = if origin.host.contains(':') {
        format!("[{}]:{}", origin.host, origin.port)
    } else {
        format!("{}:{}", origin.host, origin.port)
    };
    let mut ask = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
    if let Some(auth) = &proxy.auth {
        ask.push_str(&format!("Proxy-Authorization: {auth}\r\n"));
    }
    ask.push_str("\r\n");
    let mut transport = Transport::Plain(stream);
    let failed = |error: io::Error| match classify(error, timeout) {
        ClientError::Io(e) => ClientError::Connect(e),
        other => other,
    };
    transport
        .write_all(ask.as_bytes(), deadline)
        .map_err(failed)?;
    let mut reader = Reader {
        transport: &mut transport,
        deadline,
        buf: Vec::with_capacity(1024),
        start: 0,
    };
    let head = reader.head().map_err(|f| failed(f.error))?;
    if !(200..300).contains(&head.status) || !reader.unread().is_empty() {
        return Err(ClientError::Connect(io::Error::other(format!(
            "the proxy {}:{} answered {} to CONNECT {authority}",
            proxy.host, proxy.port, head.status
        ))));
    }
    let Transport::Plain(stream) = transport else {
        return Err(ClientError::Answer("a tunnel that is not plain TCP".into()));
    };
    Ok(stream)
}

/// An HTTP proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proxy {
    host: String,
    port: u16,
    /// `Basic ...` when the proxy's URL has a user.
    auth: Option<String>,
}

impl Proxy {
    /// `http://[user:password@]host[:port][/]` (the scheme may be left out); `None` for
    /// another scheme or no host.
    fn parse(url: &str) -> Option<Self> {
        let url = url.trim();
        let rest = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
            Some(_) => return None,
            None => url,
        };
        let rest = rest.trim_end_matches('/');
        let (user, hostport) = match rest.rsplit_once('@') {
            Some((user, hostport)) => (Some(user), hostport),
            None => (None, rest),
        };
        let url = format!("http://{hostport}/");
        let target = Target::parse(&url).ok()?;
        let auth = user.map(|u| {
            use base64::Engine as _;
            let (name, password) = u.split_once(':').unwrap_or((u, ""));
            let plain = format!(
                "{}:{}",
                super::percent_decode(name),
                super::percent_decode(password)
            );
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(plain)
            )
        });
        Some(Self {
            host: target.origin.host,
            port: target.origin.port,
            auth,
        })
    }
}

/// The proxies of the environment (see the module's doc).
#[derive(Debug, Clone, Default)]
struct Proxies {
    http: Option<Proxy>,
    https: Option<Proxy>,
    /// Hosts reached directly, lower case, without a leading dot; `*` for all.
    direct: Vec<String>,
}

impl Proxies {
    /// The environment's proxies, read (and logged) once per process: every client, an
    /// alert webhook's for each attempt included, gets a copy.
    fn of_env() -> Self {
        static ENV: OnceLock<Proxies> = OnceLock::new();
        ENV.get_or_init(Self::from_env).clone()
    }

    fn from_env() -> Self {
        let var = |lower: &str, upper: &str| {
            std::env::var(lower)
                .or_else(|_| std::env::var(upper))
                .ok()
                .filter(|v| !v.trim().is_empty())
        };
        let proxies = Self::parse(
            var("http_proxy", "HTTP_PROXY").as_deref(),
            var("https_proxy", "HTTPS_PROXY").as_deref(),
            var("all_proxy", "ALL_PROXY").as_deref(),
            var("no_proxy", "NO_PROXY").as_deref(),
        );
        for (which, proxy) in [("http", &proxies.http), ("https", &proxies.https)] {
            if let Some(p) = proxy {
                log::info!(
                    "{which}:// requests go through the proxy of the environment: proxy={}:{}",
                    p.host,
                    p.port
                );
            }
        }
        proxies
    }

    fn parse(
        http: Option<&str>,
        https: Option<&str>,
        all: Option<&str>,
        none: Option<&str>,
    ) -> Self {
        let proxy = |v: Option<&str>| {
            let v = v.or(all)?;
            let p = Proxy::parse(v);
            if p.is_none() {
                log::warn!("proxy setting not used (only http:// proxies are): proxy={v:?}");
            }
            p
        };
        let direct = none
            .unwrap_or("")
            .split(',')
            .map(|h| {
                let h = h.trim().trim_start_matches('.').to_ascii_lowercase();
                // A port in an entry is not looked at: the host is.
                match h.rsplit_once(':') {
                    Some((host, port)) if !host.contains(':') && port.parse::<u16>().is_ok() => {
                        host.to_string()
                    }
                    _ => h.trim_start_matches('[').trim_end_matches(']').to_string(),
                }
            })
            .filter(|h| !h.is_empty())
            .collect();
        Self {
            http: proxy(http),
            https: proxy(https),
            direct,
        }
    }

    /// The proxy for `origin`, unless its host is reached directly: named in `no_proxy`, or
    /// this box itself (`localhost`, a loopback address), which no proxy can reach.
    fn of(&self, origin: &Origin) -> Option<&Proxy> {
        let proxy = if origin.tls { &self.https } else { &self.http };
        let host = origin.host.to_ascii_lowercase();
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|a| a.is_loopback());
        let direct = loopback
            || self.direct.iter().any(|d| {
                d == "*"
                    || host == *d
                    || host
                        .strip_suffix(d.as_str())
                        .is_some_and(|sub| sub.ends_with('.'))
            });
        proxy.as_ref().filter(|_| !direct)
    }
}

/// The rustls client config trusting the Mozilla roots, built once per process.
fn mozilla_tls() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        tls_config(roots)
    });
    Arc::clone(config)
}

/// The rustls client config: ring, trusting `roots`.
fn tls_config(roots: rustls::RootCertStore) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        // ring supports the default versions: this cannot fail.
        .expect("ring supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(config)
}

/// Where a connection goes: requests to the same origin share it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    tls: bool,
    host: String,
    port: u16,
}

/// A parsed URL.
#[derive(Debug)]
struct Target<'a> {
    origin: Origin,
    /// The `Host` field: the authority as the URL gives it.
    authority: &'a str,
    /// Path and query, `/` at least.
    path: String,
}

impl<'a> Target<'a> {
    fn parse(url: &'a str) -> Result<Self, ClientError> {
        let bad = |why: &str| ClientError::Url(format!("{url:?}: {why}"));
        let (tls, rest) = if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else {
            return Err(bad("expected http:// or https://"));
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let path = path.split('#').next().unwrap_or("");
        if authority.is_empty() {
            return Err(bad("no host"));
        }
        if authority.contains('@') {
            return Err(bad(
                "user names in URLs are not taken: use the config's token",
            ));
        }
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(bad("spaces or control characters in the path"));
        }
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (host, after) = v6.split_once(']').ok_or_else(|| bad("unclosed '['"))?;
                (host, after.strip_prefix(':'))
            }
            None => match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            },
        };
        let port = match port {
            None => {
                if tls {
                    443
                } else {
                    80
                }
            }
            Some(p) => p.parse().map_err(|_| bad("bad port"))?,
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        // `http://h` and `http://h?q` ask for `/` and `/?q`.
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        Ok(Self {
            origin: Origin {
                tls,
                host: host.to_string(),
                port,
            },
            authority,
            path,
        })
    }
}

/// The request line and header fields, checked; through a proxy to an `http://` URL, the
/// request line names the whole URL and the proxy's credentials go with it.
fn head(
    request: &Request<'_>,
    target: &Target<'_>,
    proxy: Option<&Proxy>,
) -> Result<Vec<u8>, ClientError> {
    let mut head = Vec::with_capacity(256);
    let via = proxy.filter(|_| !target.origin.tls);
    let _ = write!(head, "{} ", request.method);
    if via.is_some() {
        let _ = write!(head, "http://{}", target.authority);
    }
    let _ = write!(
        head,
        "{} HTTP/1.1\r\nHost: {}\r\nUser-Agent: opex-connector/{}\r\n",
        target.path,
        target.authority,
        env!("CARGO_PKG_VERSION")
    );
    if let Some(auth) = via.and_then(|p| p.auth.as_deref()) {
        let _ = write!(head, "Proxy-Authorization: {auth}\r\n");
    }
    if let Some(body) = request.body {
        let _ = write!(head, "Content-Length: {}\r\n", body.len());
    }
    for (name, value) in &request.headers {
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err(ClientError::Header(format!("{name:?} is not a field name")));
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(ClientError::Header(format!(
                "the value of {name} has a line break"
            )));
        }
        let _ = write!(head, "{name}: {value}\r\n");
    }
    head.extend_from_slice(b"\r\n");
    Ok(head)
}

/// A connection, plain or TLS.
enum Transport {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Transport {
    /// The socket's read and write timeouts set to what is left before `deadline`.
    fn until(&mut self, deadline: Instant) -> io::Result<()> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        let socket = match self {
            Self::Plain(s) => &*s,
            Self::Tls(s) => &s.sock,
        };
        socket.set_read_timeout(Some(left))?;
        socket.set_write_timeout(Some(left))
    }

    fn read(&mut self, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
        self.until(deadline)?;
        match self {
            Self::Plain(s) => s.read(buf),
            // A server that closes without TLS's close_notify ends a close-delimited body.
            Self::Tls(s) => match s.read(buf) {
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
        }
    }

    fn write_all(&mut self, mut data: &[u8], deadline: Instant) -> io::Result<()> {
        while !data.is_empty() {
            self.until(deadline)?;
            let piece = &data[..data.len().min(WRITE_PIECE)];
            match self {
                Self::Plain(s) => s.write_all(piece)?,
                Self::Tls(s) => s.write_all(piece)?,
            }
            data = &data[piece.len()..];
        }
        self.until(deadline)?;
        match self {
            Self::Plain(s) => s.flush(),
            Self::Tls(s) => s.flush(),
        }
    }
}

/// A failed exchange: whether any byte of the answer had come.
struct Failed {
    answered: bool,
    error: io::Error,
}

impl From<io::Error> for Failed {
    fn from(error: io::Error) -> Self {
        Self {
            answered: true,
            error,
        }
    }
}

fn answer_error(why: impl Into<String>) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, AnswerError(why.into()))
}

/// A malformed answer, carried inside an `io::Error` until [`classify`].
#[derive(Debug)]
struct AnswerError(String);

impl fmt::Display for AnswerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AnswerError {}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock)
}

fn classify(error: io::Error, timeout: Duration) -> ClientError {
    if is_timeout(&error) {
        return ClientError::Timeout(timeout);
    }
    if let Some(inner) = error.get_ref() {
        if let Some(a) = inner.downcast_ref::<AnswerError>() {
            return ClientError::Answer(a.0.clone());
        }
        if let Some(t) = inner.downcast_ref::<rustls::Error>() {
            return ClientError::Tls(t.clone());
        }
    }
    ClientError::Io(error)
}

/// Sends the request and reads the answer; the answer and whether the connection can be kept.
fn exchange(
    transport: &mut Transport,
    head: &[u8],
    request: &Request<'_>,
    deadline: Instant,
) -> Result<(Response, bool), Failed> {
    let unanswered = |error| Failed {
        answered: false,
        error,
    };
    transport.write_all(head, deadline).map_err(unanswered)?;
    if let Some(body) = request.body {
        transport.write_all(body, deadline).map_err(unanswered)?;
    }
    let mut reader = Reader {
        transport,
        deadline,
        buf: Vec::with_capacity(4096),
        start: 0,
    };
    let Head {
        status,
        version,
        headers,
    } = loop {
        let head = reader.head()?;
        // 1xx answers (100 Continue, 103 Early Hints) come before the real one.
        if !(100..200).contains(&head.status) || head.status == 101 {
            break head;
        }
    };
    let mut body = Body {
        kept: Vec::new(),
        max: request.max_body,
        seen: 0,
    };
    let field = |name: &str| {
        headers
            .iter()
            .find(|(n, _): &&(String, String)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    let close = version == 0
        || field("connection")
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case("close")));
    let chunked = field("transfer-encoding").is_some_and(|v| {
        v.rsplit(',')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("chunked"))
    });
    let whole = if status == 204 || status == 304 || status == 101 {
        true
    } else if chunked {
        reader.chunked(&mut body)?
    } else if let Some(length) = field("content-length") {
        let length: u64 = length
            .parse()
            .map_err(|_| answer_error(format!("Content-Length {length:?}")))?;
        reader.exact(length, &mut body)?
    } else {
        reader.until_close(&mut body)?;
        false
    };
    let keep = whole && !close && status != 101;
    Ok((
        Response {
            status,
            headers,
            body: body.kept,
        },
        keep,
    ))
}

/// Keeps up to `max` bytes of a body and counts the rest.
struct Body {
    kept: Vec<u8>,
    max: usize,
    seen: usize,
}

impl Body {
    /// Takes `data`; false once more than is worth reading has come.
    fn take(&mut self, data: &[u8]) -> bool {
        let room = self.max.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&data[..data.len().min(room)]);
        self.seen = self.seen.saturating_add(data.len());
        self.seen <= self.max.max(MAX_DRAIN)
    }
}

/// An answer's status line and header fields.
struct Head {
    status: u16,
    /// The minor version: 0 for HTTP/1.0.
    version: u8,
    headers: Vec<(String, String)>,
}

/// Reads an answer from a connection through a buffer.
struct Reader<'t> {
    transport: &'t mut Transport,
    deadline: Instant,
    buf: Vec<u8>,
    /// Where the unread part of `buf` starts.
    start: usize,
}

impl Reader<'_> {
    /// Reads more into the buffer; false at the end of the stream.
    fn fill(&mut self) -> io::Result<bool> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let len = self.buf.len();
        self.buf.resize(len + 8192, 0);
        let n = self.transport.read(&mut self.buf[len..], self.deadline);
        self.buf.truncate(len + *n.as_ref().unwrap_or(&0));
        Ok(n? > 0)
    }

    fn unread(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The status line and header fields.
    fn head(&mut self) -> Result<Head, Failed> {
        loop {
            let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
            let mut parsed = httparse::Response::new(&mut fields);
            match parsed.parse(self.unread()) {
                Ok(httparse::Status::Complete(n)) => {
                    let status = parsed.code.unwrap_or(0);
                    let version = parsed.version.unwrap_or(0);
                    let headers = parsed
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_string(),
                                String::from_utf8_lossy(h.value).into_owned(),
                            )
                        })
                        .collect();
                    self.start += n;
                    return Ok(Head {
                        status,
                        version,
                        headers,
                    });
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => return Err(answer_error(format!("header: {e}")).into()),
            }
            if self.unread().len() > MAX_HEADER {
                return Err(answer_error(format!("header over {MAX_HEADER} bytes")).into());
            }
            let first = self.unread().is_empty() && self.start == 0;
            match self.fill() {
                Ok(true) => {}
                Ok(false) if first => {
                    return Err(Failed {
                        answered: false,
                        error: ErrorKind::ConnectionAborted.into(),
                    })
                }
                Ok(false) => return Err(answer_error("closed inside the header").into()),
                Err(error) if first => {
                    return Err(Failed {
                        answered: false,
                        error,
                    })
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// `length` bytes of body; false when it was cut short of reading to keep the connection.
    fn exact(&mut self, mut length: u64, body: &mut Body) -> io::Result<bool> {
        while length > 0 {
            if self.unread().is_empty() && !self.fill()? {
                return Err(answer_error("closed inside the body"));
            }
            let n = self
                .unread()
                .len()
                .min(usize::try_from(length).unwrap_or(usize::MAX));
            let more = body.take(&self.buf[self.start..self.start + n]);
            self.start += n;
            length -= n as u64;
            if !more && length > 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Everything until the server closes.
    fn until_close(&mut self, body: &mut Body) -> io::Result<()> {
        loop {
            let more = body.take(self.unread());
            self.start = self.buf.len();
            if !more || !self.fill()? {
                return Ok(());
            }
        }
    }

    /// One line (without its CRLF), at most 4 KiB.
    fn line(&mut self) -> io::Result<String> {
        loop {
            if let Some(end) = self.unread().windows(2).position(|w| w == b"\r\n") {
                let line = String::from_utf8_lossy(&self.unread()[..end]).into_owned();
                self.start += end + 2;
                return Ok(line);
            }
            if self.unread().len() > 4096 {
                return Err(answer_error("a chunk line over 4 KiB"));
            }
            if !self.fill()? {
                return Err(answer_error("closed inside a chunk line"));
            }
        }
    }

    /// A chunked body; false when it was cut short.
    fn chunked(&mut self, body: &mut Body) -> io::Result<bool> {
        loop {
            let line = self.line()?;
            let size = line.split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size, 16)
                .map_err(|_| answer_error(format!("chunk size {size:?}")))?;
            if size == 0 {
                // Trailer fields, up to the empty line.
                while !self.line()?.is_empty() {}
                return Ok(true);
            }
            if !self.exact(size, body)? {
                return Ok(false);
            }
            if !self.line()?.is_empty() {
                return Err(answer_error("no line break after a chunk"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// A server on loopback that answers each connection's requests with `answers`, in turn,
    /// and hands back every request it read.
    fn serve(answers: Vec<Vec<&'static [u8]>>) -> (String, thread::JoinHandle<Vec<String>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let handle = thread::spawn(move || {
            let mut seen = Vec::new();
            for per_connection in answers {
                let (mut s, _) = listener.accept().unwrap();
                for answer in per_connection {
                    seen.push(read_request(&mut s));
                    s.write_all(answer).unwrap();
                }
            }
            seen
        });
        (url, handle)
    }

    fn read_request(s: &mut TcpStream) -> String {
        let mut data = Vec::new();
        let mut byte = [0u8; 1];
        while !data.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut byte).unwrap();
            data.push(byte[0]);
        }
        let head = String::from_utf8(data).unwrap();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("Content-Length: "))
            .map_or(0, |v| v.parse().unwrap());
        let mut body = vec![0; length];
        s.read_exact(&mut body).unwrap();
        head + &String::from_utf8(body).unwrap()
    }

    #[test]
    fn a_post_goes_out_with_its_headers_and_the_answer_comes_back_over_one_connection() {
        let (url, server) = serve(vec![vec![
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-A: b\r\n\r\nok",
            b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\nRetry-After: 7\r\n\r\n4;x=y\r\nfull\r\n1\r\n!\r\n0\r\n\r\n",
        ]]);
        let mut client = Client::new(Duration::from_secs(5));
        let target = format!("{url}/in?x=1");
        let a = client
            .send(Request::post(&target, b"{\"a\":1}\n").header("Authorization", "Bearer t"))
            .unwrap();
        assert_eq!(
            (a.status(), a.is_success(), a.body()),
            (200, true, &b"ok"[..])
        );
        assert_eq!(a.header("x-a"), Some("b"));
        let b = client.send(Request::post(&target, b"")).unwrap();
        assert_eq!((b.status(), b.text().as_str()), (503, "full!"));
        assert_eq!(b.header("Retry-After"), Some("7"));
        let seen = server.join().unwrap();
        assert!(
            seen[0].starts_with("POST /in?x=1 HTTP/1.1\r\n"),
            "{}",
            seen[0]
        );
        assert!(seen[0].contains("Authorization: Bearer t\r\n"));
        assert!(seen[0].contains("Content-Length: 8\r\n"));
        assert!(seen[0].ends_with("\r\n\r\n{\"a\":1}\n"));
        assert!(seen[1].contains("Content-Length: 0\r\n"));
    }

    #[test]
    fn a_kept_connection_closed_by_the_server_is_replaced_once() {
        let (url, server) = serve(vec![
            vec![b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"],
            vec![b"HTTP/1.1 204 No Content\r\n\r\n"],
        ]);
        let mut client = Client::new(Duration::from_secs(5));
        assert_eq!(client.send(Request::get(&url)).unwrap().status(), 200);
        // The first connection is closed now (its thread moved on to the next accept).
        assert_eq!(client.send(Request::get(&url)).unwrap().status(), 204);
        assert_eq!(server.join().unwrap().len(), 2);
    }

    #[test]
    fn a_body_is_kept_to_its_limit_and_a_close_delimited_one_read_to_the_end() {
        let (url, server) = serve(vec![vec![
            b"HTTP/1.1 400 Bad\r\nConnection: close\r\n\r\nsomething went wrong",
        ]]);
        let mut client = Client::new(Duration::from_secs(5));
        let r = client.send(Request::get(&url).max_body(9)).unwrap();
        assert_eq!((r.status(), r.text().as_str()), (400, "something"));
        assert!(client.kept.is_none());
        server.join().unwrap();
    }

    #[test]
    fn a_server_that_does_not_answer_times_out_and_is_not_asked_again() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let held = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let request = read_request(&mut s);
            // No second connection comes: the accept would block; just hold this one open.
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            request
        });
        let mut client = Client::new(Duration::from_millis(200));
        let e = client.send(Request::post(&url, b"x")).unwrap_err();
        assert!(matches!(e, ClientError::Timeout(_)), "{e}");
        assert!(e.to_string().contains("timed out"));
        drop(client);
        assert!(held.join().unwrap().starts_with("POST / HTTP/1.1"));
    }

    #[test]
    fn nothing_listening_is_a_refused_connection_and_a_bad_answer_says_so() {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut client = Client::new(Duration::from_secs(5));
        let e = client
            .send(Request::get(&format!("http://127.0.0.1:{port}/")))
            .unwrap_err();
        assert!(matches!(e, ClientError::Connect(_)), "{e}");
        assert!(e.to_string().contains("refused"), "{e}");
        let (url, server) = serve(vec![vec![b"SMTP ready\r\n\r\n"]]);
        let e = client.send(Request::get(&url)).unwrap_err();
        assert!(matches!(e, ClientError::Answer(_)), "{e}");
        server.join().unwrap();
    }

    /// `openssl s_server -www` on loopback with a certificate for 127.0.0.1 made here: its
    /// URL and the certificate's PEM.
    fn openssl_server(dir: &std::path::Path) -> (std::process::Child, String, Vec<u8>) {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        // A self-signed certificate that is not a CA's (rustls refuses a CA's as a server's).
        const REQ: &str = "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
            -keyout key.pem -out cert.pem -days 2 -subj /CN=localhost \
            -addext subjectAltName=IP:127.0.0.1,DNS:uplink.test -addext basicConstraints=critical,CA:FALSE";
        let made = Command::new("openssl")
            .args(REQ.split_whitespace())
            .current_dir(dir)
            .stderr(Stdio::null())
            .status()
            .expect("the openssl tool");
        assert!(made.success(), "openssl req");
        let mut server = Command::new("openssl")
            .args(["s_server", "-accept", "127.0.0.1:0", "-cert", "cert.pem"])
            .args(["-key", "key.pem", "-www"])
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl s_server");
        let mut lines = std::io::BufReader::new(server.stdout.take().unwrap()).lines();
        let port = loop {
            let line = lines.next().expect("s_server said nothing").unwrap();
            if let Some(addr) = line.strip_prefix("ACCEPT ") {
                break addr.rsplit(':').next().unwrap().to_string();
            }
        };
        let pem = std::fs::read(dir.join("cert.pem")).unwrap();
        (server, format!("https://127.0.0.1:{port}/"), pem)
    }

    /// A client config trusting only the certificates in `pem`.
    fn trusting(pem: &[u8]) -> Arc<ClientConfig> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::CertificateDer;
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            roots.add(cert.unwrap()).unwrap();
        }
        tls_config(roots)
    }

    #[test]
    fn https_goes_through_rustls_and_a_certificate_not_trusted_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut server, url, pem) = openssl_server(dir.path());
        let e = Client::new(Duration::from_secs(10))
            .send(Request::get(&url))
            .unwrap_err();
        assert!(matches!(e, ClientError::Tls(_)), "{e}");
        assert!(e.to_string().contains("certificate"), "{e}");
        let mut client = Client::new(Duration::from_secs(10));
        client.tls = Some(trusting(&pem));
        let r = client.send(Request::get(&url)).unwrap();
        let _ = server.kill();
        let _ = server.wait();
        assert_eq!(r.status(), 200);
        assert!(r.text().contains("s_server"), "{}", r.text());
    }

    #[test]
    fn proxies_come_from_their_variables_and_no_proxy_names_the_hosts_reached_directly() {
        let p = Proxies::parse(
            Some("http://u%40plant:p%3Ass@10.0.0.5:3128/"),
            None,
            Some("proxy.site"),
            Some("localhost, .plant.local,10.1.2.3:8080,[::1]"),
        );
        let http = p.http.clone().unwrap();
        assert_eq!((http.host.as_str(), http.port), ("10.0.0.5", 3128));
        // base64 of "u@plant:p:ss"
        assert_eq!(http.auth.as_deref(), Some("Basic dUBwbGFudDpwOnNz"));
        let https = p.https.clone().unwrap();
        assert_eq!(
            (https.host.as_str(), https.port, https.auth.as_deref()),
            ("proxy.site", 80, None)
        );
        let origin = |tls, host: &str| Origin {
            tls,
            host: host.into(),
            port: 443,
        };
        assert_eq!(p.of(&origin(true, "cloud.example.com")), Some(&https));
        assert_eq!(p.of(&origin(false, "cloud.example.com")), Some(&http));
        for direct in [
            "localhost",
            "hist.plant.local",
            "plant.local",
            "10.1.2.3",
            "::1",
        ] {
            assert_eq!(p.of(&origin(true, direct)), None, "{direct}");
        }
        assert!(p.of(&origin(true, "notplant.local")).is_some());
        let all = Proxies::parse(Some("http://p:1"), None, None, Some("*"));
        assert_eq!(all.of(&origin(false, "anything")), None);
        for own in ["localhost", "127.0.0.1", "127.3.4.5", "::1"] {
            assert_eq!(p.of(&origin(true, own)), None, "{own} is this box");
        }
        let socks = Proxies::parse(None, Some("socks5://p:1080"), None, None);
        assert!(socks.https.is_none(), "only http:// proxies are spoken");
    }

    #[test]
    fn through_a_proxy_an_http_request_names_the_whole_url_and_carries_the_credentials() {
        let (proxy_url, server) = serve(vec![vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        ]]);
        let proxy = proxy_url.replace("http://", "http://line3:s3cret@");
        let mut client = Client::new(Duration::from_secs(5));
        client.proxies = Proxies::parse(Some(&proxy), None, None, None);
        // The host does not resolve: only the proxy is connected to.
        let r = client
            .send(Request::post("http://uplink.invalid:8080/in?a=1", b"x"))
            .unwrap();
        assert_eq!((r.status(), r.text().as_str()), (200, "ok"));
        let seen = server.join().unwrap();
        assert!(
            seen[0].starts_with("POST http://uplink.invalid:8080/in?a=1 HTTP/1.1\r\n"),
            "{}",
            seen[0]
        );
        assert!(seen[0].contains("Host: uplink.invalid:8080\r\n"));
        // base64 of "line3:s3cret"
        assert!(seen[0].contains("Proxy-Authorization: Basic bGluZTM6czNjcmV0\r\n"));
    }

    #[test]
    fn through_a_proxy_https_goes_in_a_connect_tunnel_and_a_refused_tunnel_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let (mut server, url, pem) = openssl_server(dir.path());
        let upstream = url
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_string();
        // A proxy that grants one tunnel to the TLS server, then refuses the next one.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let proxy_url = format!("http://{}", listener.local_addr().unwrap());
        let proxy = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let asked = read_request(&mut s);
            s.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                .unwrap();
            let to = TcpStream::connect(&upstream).unwrap();
            let (mut a, mut b) = (s.try_clone().unwrap(), to.try_clone().unwrap());
            let up = thread::spawn(move || {
                let _ = std::io::copy(&mut a, &mut b);
                let _ = b.shutdown(std::net::Shutdown::Write);
            });
            let (mut from, mut back) = (to, s);
            let _ = std::io::copy(&mut from, &mut back);
            let _ = back.shutdown(std::net::Shutdown::Both);
            let _ = up.join();
            let (mut s, _) = listener.accept().unwrap();
            let _ = read_request(&mut s);
            s.write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
                .unwrap();
            asked
        });
        let mut client = Client::new(Duration::from_secs(10));
        client.tls = Some(trusting(&pem));
        client.proxies = Proxies::parse(None, Some(&proxy_url), None, None);
        // A name only the proxy would resolve (loopback is always reached directly); the
        // certificate carries it.
        let url = url.replace("127.0.0.1", "uplink.test");
        let r = client.send(Request::get(&url)).unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.text().contains("s_server"), "{}", r.text());
        client.kept = None;
        let e = client.send(Request::get(&url)).unwrap_err();
        let _ = server.kill();
        let _ = server.wait();
        assert!(matches!(e, ClientError::Connect(_)), "{e}");
        assert!(e.to_string().contains("407"), "{e}");
        let asked = proxy.join().unwrap();
        let port = url.trim_end_matches('/').rsplit(':').next().unwrap();
        assert!(
            asked.starts_with(&format!("CONNECT uplink.test:{port} HTTP/1.1\r\n")),
            "{asked}"
        );
    }

    #[test]
    fn urls_and_headers_that_cannot_be_sent_are_refused_before_connecting() {
        let mut client = Client::new(Duration::from_secs(1));
        for url in [
            "ftp://h/",
            "http://",
            "http://u:p@h/",
            "http://h:x/",
            "http://[::1/",
        ] {
            let e = client.send(Request::get(url)).unwrap_err();
            assert!(matches!(e, ClientError::Url(_)), "{url}: {e}");
        }
        let e = client
            .send(Request::get("http://127.0.0.1:9/").header("X", "a\r\nEvil: 1"))
            .unwrap_err();
        assert!(matches!(e, ClientError::Header(_)), "{e}");
        let t = Target::parse("https://[::1]:8443/p?q").unwrap();
        assert_eq!((t.origin.host.as_str(), t.origin.port), ("::1", 8443));
        assert_eq!(t.path, "/p?q");
        let t = Target::parse("http://box?q").unwrap();
        assert_eq!(
            (t.origin.port, t.path.as_str(), t.authority),
            (80, "/?q", "box")
        );
    }
}
