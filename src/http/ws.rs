//! The server side of RFC 6455 (WebSocket), only as much as the live view needs: the opening
//! handshake, unfragmented text frames out, and in: ping (answered with pong), pong, close,
//! and text or binary frames (read and ignored). Continuation frames are refused.
//!
//! Written here rather than taken from a crate because it is about 200 lines and the live
//! view needs none of the rest (client side, fragmentation, extensions); SHA-1 comes from
//! `ring` and base64 from the crate already in the tree.
//!
//! Client frames must be masked (RFC 6455 5.1) and carry at most [`MAX_IN_PAYLOAD`] bytes:
//! the page sends nothing but control frames, so anything larger ends the connection.

use base64::Engine as _;

/// The GUID of RFC 6455 section 1.3, appended to the client's key.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/// Largest payload accepted in a client frame.
pub const MAX_IN_PAYLOAD: usize = 1024;

/// Frame opcodes the server knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// A text message.
    Text,
    /// A binary message.
    Binary,
    /// Close, with an optional code and reason.
    Close,
    /// Ping: answer with a pong carrying the same payload.
    Ping,
    /// Pong.
    Pong,
}

impl Opcode {
    fn bits(self) -> u8 {
        match self {
            Self::Text => 0x1,
            Self::Binary => 0x2,
            Self::Close => 0x8,
            Self::Ping => 0x9,
            Self::Pong => 0xA,
        }
    }

    fn from_bits(b: u8) -> Option<Self> {
        Some(match b {
            0x1 => Self::Text,
            0x2 => Self::Binary,
            0x8 => Self::Close,
            0x9 => Self::Ping,
            0xA => Self::Pong,
            _ => return None,
        })
    }

    fn is_control(self) -> bool {
        matches!(self, Self::Close | Self::Ping | Self::Pong)
    }
}

/// One frame from the client, unmasked.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    /// What it is.
    pub opcode: Opcode,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// Why a client's bytes are not an acceptable frame; each maps to a close code.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameError {
    /// Reserved bits set, an unknown or continuation opcode, a fragmented message, an unmasked
    /// frame or an oversized control frame (close code 1002).
    Protocol(&'static str),
    /// The payload is larger than [`MAX_IN_PAYLOAD`] (close code 1009).
    TooBig(u64),
}

impl FrameError {
    /// The close code to send before hanging up.
    pub fn close_code(&self) -> u16 {
        match self {
            Self::Protocol(_) => 1002,
            Self::TooBig(_) => 1009,
        }
    }
}

/// The `Sec-WebSocket-Accept` answer to a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let mut input = Vec::with_capacity(key.len() + GUID.len());
    input.extend_from_slice(key.trim().as_bytes());
    input.extend_from_slice(GUID.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &input);
    base64::engine::general_purpose::STANDARD.encode(digest.as_ref())
}

/// True when `key` is what RFC 6455 asks for: 16 bytes, base64 encoded.
pub fn key_is_valid(key: &str) -> bool {
    base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .is_ok_and(|k| k.len() == 16)
}

/// A server frame (never masked, always final) carrying `payload`.
pub fn encode(opcode: Opcode, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    out.push(0x80 | opcode.bits());
    let len = payload.len();
    if len < 126 {
        out.push(len as u8);
    } else if let Ok(short) = u16::try_from(len) {
        out.push(126);
        out.extend_from_slice(&short.to_be_bytes());
    } else {
        out.push(127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    out.extend_from_slice(payload);
    out
}

/// A close frame with `code` and a short reason.
pub fn close_frame(code: u16, reason: &str) -> Vec<u8> {
    let mut payload = code.to_be_bytes().to_vec();
    // Control payloads are at most 125 bytes: 2 for the code, the rest for the reason.
    let reason = reason.as_bytes();
    payload.extend_from_slice(&reason[..reason.len().min(123)]);
    encode(Opcode::Close, &payload)
}

/// Parses one client frame from the front of `buf`: `Ok(None)` while more bytes are needed,
/// else the frame and how many bytes it took.
pub fn parse(buf: &[u8]) -> Result<Option<(Frame, usize)>, FrameError> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let (b0, b1) = (buf[0], buf[1]);
    if b0 & 0x70 != 0 {
        return Err(FrameError::Protocol("reserved bits set"));
    }
    let fin = b0 & 0x80 != 0;
    let Some(opcode) = Opcode::from_bits(b0 & 0x0F) else {
        return Err(FrameError::Protocol("unknown or continuation opcode"));
    };
    if !fin {
        return Err(FrameError::Protocol("fragmented messages are not accepted"));
    }
    if b1 & 0x80 == 0 {
        return Err(FrameError::Protocol("client frames must be masked"));
    }
    let (len, mut at) = match b1 & 0x7F {
        126 => {
            let Some(b) = buf.get(2..4) else {
                return Ok(None);
            };
            (u64::from(u16::from_be_bytes([b[0], b[1]])), 4)
        }
        127 => {
            let Some(b) = buf.get(2..10) else {
                return Ok(None);
            };
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            (u64::from_be_bytes(a), 10)
        }
        n => (u64::from(n), 2),
    };
    if opcode.is_control() && len > 125 {
        return Err(FrameError::Protocol("control frame longer than 125 bytes"));
    }
    if len > MAX_IN_PAYLOAD as u64 {
        return Err(FrameError::TooBig(len));
    }
    let len = len as usize;
    let Some(mask) = buf.get(at..at + 4) else {
        return Ok(None);
    };
    let mask = [mask[0], mask[1], mask[2], mask[3]];
    at += 4;
    let Some(data) = buf.get(at..at + len) else {
        return Ok(None);
    };
    let payload = data
        .iter()
        .enumerate()
        .map(|(i, b)| b ^ mask[i % 4])
        .collect();
    Ok(Some((Frame { opcode, payload }, at + len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client frame, masked with `mask`.
    fn client_frame(first: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
        let mut f = vec![first];
        let len = payload.len();
        if len < 126 {
            f.push(0x80 | len as u8);
        } else if len <= 0xFFFF {
            f.push(0x80 | 126);
            f.extend_from_slice(&(len as u16).to_be_bytes());
        } else {
            f.push(0x80 | 127);
            f.extend_from_slice(&(len as u64).to_be_bytes());
        }
        f.extend_from_slice(&mask);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
        f
    }

    #[test]
    fn the_accept_key_is_the_one_of_the_rfc_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert!(key_is_valid("dGhlIHNhbXBsZSBub25jZQ=="));
        assert!(!key_is_valid("c2hvcnQ="));
        assert!(!key_is_valid("not base64 at all!"));
    }

    #[test]
    fn the_rfc_masked_hello_is_read_and_needs_all_its_bytes() {
        // RFC 6455 5.7: a single-frame masked text message "Hello".
        let bytes = [
            0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58,
        ];
        for cut in 0..bytes.len() {
            assert_eq!(parse(&bytes[..cut]), Ok(None), "cut at {cut}");
        }
        let (frame, used) = parse(&bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(frame.opcode, Opcode::Text);
        assert_eq!(frame.payload, b"Hello");
    }

    #[test]
    fn server_frames_use_the_three_length_forms_unmasked() {
        assert_eq!(encode(Opcode::Text, b"Hello"), b"\x81\x05Hello");
        let mid = encode(Opcode::Text, &[b'a'; 300]);
        assert_eq!(&mid[..4], &[0x81, 126, 0x01, 0x2C]);
        assert_eq!(mid.len(), 304);
        let big = encode(Opcode::Text, &vec![b'a'; 70_000]);
        assert_eq!(&big[..2], &[0x81, 127]);
        assert_eq!(&big[2..10], &70_000u64.to_be_bytes());
        assert_eq!(big.len(), 70_010);
        assert_eq!(close_frame(1000, ""), vec![0x88, 0x02, 0x03, 0xE8]);
    }

    #[test]
    fn pings_and_closes_are_read_with_their_payloads() {
        let ping = client_frame(0x89, b"are you there", [1, 2, 3, 4]);
        let close = client_frame(0x88, &[0x03, 0xE8], [9, 9, 9, 9]);
        let mut both = ping.clone();
        both.extend_from_slice(&close);
        let (f, used) = parse(&both).unwrap().unwrap();
        assert_eq!(
            (f.opcode, f.payload.as_slice()),
            (Opcode::Ping, &b"are you there"[..])
        );
        let (f, _) = parse(&both[used..]).unwrap().unwrap();
        assert_eq!((f.opcode, f.payload), (Opcode::Close, vec![0x03, 0xE8]));
    }

    #[test]
    fn unmasked_fragmented_reserved_and_oversized_frames_are_refused() {
        assert_eq!(
            parse(b"\x81\x05Hello"),
            Err(FrameError::Protocol("client frames must be masked"))
        );
        let fragment = client_frame(0x01, b"Hel", [0; 4]);
        assert!(matches!(parse(&fragment), Err(FrameError::Protocol(_))));
        let continuation = client_frame(0x80, b"lo", [0; 4]);
        assert!(matches!(parse(&continuation), Err(FrameError::Protocol(_))));
        let reserved = client_frame(0xC1, b"x", [0; 4]);
        assert!(matches!(parse(&reserved), Err(FrameError::Protocol(_))));
        let long_ping = client_frame(0x89, &[0; 126], [0; 4]);
        assert!(matches!(parse(&long_ping), Err(FrameError::Protocol(_))));
        // Refused from its header alone, before the payload arrives.
        let big = client_frame(0x82, &vec![0; MAX_IN_PAYLOAD + 1], [0; 4]);
        assert_eq!(
            parse(&big[..8]),
            Err(FrameError::TooBig(MAX_IN_PAYLOAD as u64 + 1))
        );
        assert_eq!(FrameError::TooBig(0).close_code(), 1009);
        let huge = [0x82, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF];
        assert!(matches!(parse(&huge), Err(FrameError::TooBig(_))));
    }
}
