//! One connection to one PLC: open (TCP, ISO connect, setup communication), read a planned
//! group, write a set of items, close. One request is in flight at a time, and each has the
//! endpoint's timeout; any [`Error`] leaves the connection unusable (drop it, open a new
//! one with the breaker's backoff).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::address::Width;
use super::endpoint::Endpoint;
use super::error::{Error, ItemError, WriteError};
use super::frame::{self, Span, TPKT_LEN};
use super::plan::{part_len, plan, Item, Plan};
use super::types::Value;

/// Most bytes of one reassembled answer: above any PDU (960 at most) with room for headers;
/// a PLC that sends more is not speaking S7comm.
const MAX_MESSAGE: usize = 4096;

/// Each item's value, or its own error.
pub type Values = Vec<Result<Value, ItemError>>;

/// An open connection.
#[derive(Debug)]
pub struct Connection {
    stream: TcpStream,
    /// The PDU size the PLC granted.
    pdu: u16,
    seq: u16,
    timeout: Duration,
    /// ReadVar requests sent (whole items and parts alike).
    reads: u64,
}

impl Connection {
    /// Connects, makes the ISO connection with the endpoint's TSAPs and negotiates the PDU.
    pub async fn open(ep: &Endpoint) -> Result<Connection, Error> {
        let addr = (ep.host.as_str(), ep.port);
        let stream = tokio::time::timeout(ep.timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| Error::Timeout { what: "connect" })?
            .map_err(|e| Error::Io(format!("{}:{}: {e}", ep.host, ep.port)))?;
        // Requests are small and answered one at a time: no Nagle delay.
        let _ = stream.set_nodelay(true);
        let mut conn = Connection {
            stream,
            pdu: ep.pdu_size,
            seq: 0,
            reads: 0,
            timeout: ep.timeout,
        };
        let confirm = conn
            .exchange(
                "connect",
                &frame::connect_request(ep.local_tsap, ep.remote_tsap),
                true,
            )
            .await?;
        frame::check_connect_confirm(&confirm)?;
        let seq = conn.next_seq();
        let answer = conn
            .exchange(
                "setup communication",
                &frame::setup_request(seq, ep.pdu_size),
                false,
            )
            .await?;
        match frame::parse_setup(&answer, seq)? {
            Ok(granted) if granted >= 64 => conn.pdu = granted.min(ep.pdu_size),
            Ok(granted) => return Err(Error::Protocol(format!("a PDU size of {granted} bytes"))),
            Err(code) => {
                return Err(Error::Refused(format!(
                    "setup communication refused (S7 error {code:#06X})"
                )))
            }
        }
        Ok(conn)
    }

    /// ReadVar requests sent on this connection so far, answered or not.
    pub fn reads_sent(&self) -> u64 {
        self.reads
    }

    /// The PDU size the PLC granted (plan with it).
    pub fn pdu_size(&self) -> u16 {
        self.pdu
    }

    /// Plans `items` for this connection's PDU.
    pub fn plan(&self, items: &[Item]) -> Plan {
        plan(items, self.pdu)
    }

    /// Reads `items` as `plan` packs them (planned again when it was made for another PDU):
    /// each item's value or its own error, in the order of `items`.
    pub async fn read(&mut self, items: &[Item], plan: &Plan) -> Result<Values, Error> {
        let replanned;
        let plan = if plan.pdu == self.pdu {
            plan
        } else {
            replanned = self.plan(items);
            &replanned
        };
        let mut out: Values = vec![Err(ItemError::Decode("not read".into())); items.len()];
        for &i in &plan.in_parts {
            if let Some(item) = items.get(i) {
                out[i] = self.read_in_parts(item).await?;
            }
        }
        for request in &plan.requests {
            let members: Vec<(usize, &Item)> = request
                .iter()
                .filter_map(|&i| items.get(i).map(|it| (i, it)))
                .collect();
            let spans: Vec<Span> = members.iter().map(|(_, it)| it.span()).collect();
            let seq = self.next_seq();
            self.reads += 1;
            let answer = self
                .exchange("read", &frame::read_request(seq, &spans), false)
                .await?;
            match frame::parse_read(&answer, seq, spans.len())? {
                Err(code) => {
                    for (i, _) in &members {
                        out[*i] = Err(ItemError::Request { code });
                    }
                }
                Ok(results) => {
                    for ((i, item), result) in members.iter().zip(results) {
                        out[*i] = match result {
                            Ok(bytes) => {
                                let bit = match item.address.width {
                                    Width::Bit(b) => b,
                                    _ => 0,
                                };
                                item.data_type.decode(&bytes, bit).map_err(|e| {
                                    ItemError::Decode(format!("{}: {e}", item.address))
                                })
                            }
                            Err(code) => Err(ItemError::Refused {
                                address: item.address,
                                code,
                            }),
                        };
                    }
                }
            }
        }
        Ok(out)
    }

    /// Reads one item larger than an answer in parts of [`part_len`] bytes, one request
    /// each.
    async fn read_in_parts(&mut self, item: &Item) -> Result<Result<Value, ItemError>, Error> {
        let whole = item.span();
        let step = part_len(self.pdu);
        let mut bytes = Vec::with_capacity(usize::from(whole.len));
        while bytes.len() < usize::from(whole.len) {
            let len = step.min(usize::from(whole.len) - bytes.len());
            let span = Span {
                area: whole.area,
                start: whole.start + bytes.len() as u32,
                len: len as u16,
            };
            let seq = self.next_seq();
            self.reads += 1;
            let answer = self
                .exchange("read", &frame::read_request(seq, &[span]), false)
                .await?;
            match frame::parse_read(&answer, seq, 1)? {
                Err(code) => return Ok(Err(ItemError::Request { code })),
                Ok(mut results) => match results.pop() {
                    Some(Ok(part)) if part.len() == len => bytes.extend(part),
                    Some(Err(code)) => {
                        return Ok(Err(ItemError::Refused {
                            address: item.address,
                            code,
                        }))
                    }
                    _ => {
                        return Err(Error::Protocol(
                            "a part of another length than asked".into(),
                        ))
                    }
                },
            }
        }
        Ok(item
            .data_type
            .decode(&bytes, 0)
            .map_err(|e| ItemError::Decode(format!("{}: {e}", item.address))))
    }

    /// Writes each item of `writes` with its own WriteVar request, in order (one item per
    /// request: each result is the PLC's own answer for that item). A value that does not
    /// fit is refused before anything is sent. After a connection failure nothing more is
    /// sent, and the item in flight is [`WriteError::Unanswered`].
    pub async fn write(
        &mut self,
        writes: &[(Item, serde_json::Value)],
    ) -> Vec<Result<(), WriteError>> {
        let mut out = Vec::with_capacity(writes.len());
        let mut broken: Option<Error> = None;
        for (item, value) in writes {
            if let Some(e) = &broken {
                out.push(Err(WriteError::NotSent(e.clone())));
                continue;
            }
            let bytes = match item.data_type.encode(value) {
                Ok(b) => b,
                Err(e) => {
                    out.push(Err(WriteError::Refused(ItemError::Invalid(format!(
                        "{}: {e}",
                        item.address
                    )))));
                    continue;
                }
            };
            let seq = self.next_seq();
            let request = frame::write_request(seq, &item.address, &bytes);
            // The S7 part of the request (after TPKT and COTP) must fit the PDU.
            let max = usize::from(self.pdu).saturating_sub(frame::WRITE_OVERHEAD);
            if bytes.len() > max {
                out.push(Err(WriteError::Refused(ItemError::TooLarge {
                    address: item.address,
                    bytes: bytes.len(),
                    max,
                })));
                continue;
            }
            let answer = match self.exchange("write", &request, false).await {
                Ok(a) => frame::parse_write(&a, seq),
                Err(e) => Err(e),
            };
            out.push(match answer {
                Ok(Ok(0xFF)) => Ok(()),
                Ok(Ok(code)) => Err(WriteError::Refused(ItemError::Refused {
                    address: item.address,
                    code,
                })),
                Ok(Err(code)) => Err(WriteError::Refused(ItemError::Request { code })),
                Err(e) => {
                    broken = Some(e.clone());
                    Err(WriteError::Unanswered(e))
                }
            });
        }
        out
    }

    /// Closes the TCP connection (the PLC frees its connection resource).
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(self.timeout, self.stream.shutdown()).await;
    }

    fn next_seq(&mut self) -> u16 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    /// Sends `request` and returns the answer within the timeout: the COTP frame after TPKT
    /// (`raw`, for the connect) or the reassembled S7 message.
    async fn exchange(
        &mut self,
        what: &'static str,
        request: &[u8],
        raw: bool,
    ) -> Result<Vec<u8>, Error> {
        let timeout = self.timeout;
        tokio::time::timeout(timeout, async {
            self.stream.write_all(request).await.map_err(io)?;
            if raw {
                return self.tpkt().await;
            }
            let mut message = Vec::new();
            loop {
                let unit = self.tpkt().await?;
                let (payload, last) = frame::data_unit(&unit)?;
                if message.len() + payload.len() > MAX_MESSAGE {
                    return Err(Error::Protocol(format!(
                        "an answer over {MAX_MESSAGE} bytes"
                    )));
                }
                message.extend_from_slice(payload);
                if last {
                    return Ok(message);
                }
            }
        })
        .await
        .map_err(|_| Error::Timeout { what })?
    }

    /// One TPKT frame's payload.
    async fn tpkt(&mut self) -> Result<Vec<u8>, Error> {
        let mut head = [0u8; TPKT_LEN];
        self.stream.read_exact(&mut head).await.map_err(io)?;
        let len = usize::from(u16::from_be_bytes([head[2], head[3]]));
        if head[0] != 3 || len < TPKT_LEN + 2 {
            return Err(Error::Protocol(
                "not a TPKT frame (is this port an S7 PLC?)".into(),
            ));
        }
        let mut body = vec![0u8; len - TPKT_LEN];
        self.stream.read_exact(&mut body).await.map_err(io)?;
        Ok(body)
    }
}

fn io(e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::Io("the PLC closed the connection".into()),
        _ => Error::Io(e.to_string()),
    }
}
