//! Signing webhook requests as a sender does: `X-Opex-Signature: t=<unix secs>,v1=<hex
//! HMAC-SHA256 of "<t>.<raw body>">`, or of `"<t>.<key>.<raw body>"` when the request carries
//! `X-Opex-Key: <key>`. SHA-256 and HMAC are written out here (FIPS 180-4,
//! RFC 2104) so the tests do not depend on the crate's choice of hashing crates; `webhooks.rs`
//! checks them against RFC 4231 test vectors.

use std::time::{SystemTime, UNIX_EPOCH};

use super::{Daemon, Reply};

const K: [u32; 64] = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
];

/// SHA-256 of `data`.
pub fn sha256(data: &[u8]) -> [u8; 32] {
    let mut h: [u32; 8] = [
        0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab,
        0x5be0cd19,
    ];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, word) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16]
                .wrapping_add(s0)
                .wrapping_add(w[i - 7])
                .wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let s1 = e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25);
            let ch = (e & f) ^ (!e & g);
            let t1 = hh
                .wrapping_add(s1)
                .wrapping_add(ch)
                .wrapping_add(K[i])
                .wrapping_add(w[i]);
            let s0 = a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22);
            let maj = (a & b) ^ (a & c) ^ (b & c);
            let t2 = s0.wrapping_add(maj);
            hh = g;
            g = f;
            f = e;
            e = d.wrapping_add(t1);
            d = c;
            c = b;
            b = a;
            a = t1.wrapping_add(t2);
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 32];
    for (chunk, word) in out.chunks_exact_mut(4).zip(h) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    out
}

/// HMAC-SHA256 of `msg` under `key` (RFC 2104, block size 64).
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&sha256(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner: Vec<u8> = block.iter().map(|b| b ^ 0x36).collect();
    inner.extend_from_slice(msg);
    let mut outer: Vec<u8> = block.iter().map(|b| b ^ 0x5c).collect();
    outer.extend_from_slice(&sha256(&inner));
    sha256(&outer)
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Now, in Unix seconds.
pub fn unix_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// Now, in Unix milliseconds.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// The `X-Opex-Signature` value for `body` sent at `t` (Unix seconds), without a key.
pub fn signature(secret: &str, t: i64, body: &[u8]) -> String {
    let mut signed = format!("{t}.").into_bytes();
    signed.extend_from_slice(body);
    format!("t={t},v1={}", hex(&hmac_sha256(secret.as_bytes(), &signed)))
}

/// The `X-Opex-Signature` value for `body` sent at `t` with `X-Opex-Key: <key>`.
pub fn signature_keyed(secret: &str, t: i64, key: &str, body: &[u8]) -> String {
    let mut signed = format!("{t}.{key}.").into_bytes();
    signed.extend_from_slice(body);
    format!("t={t},v1={}", hex(&hmac_sha256(secret.as_bytes(), &signed)))
}

impl Daemon {
    /// POST `body` to `/api/hooks/{name}` with exactly `headers` (no bearer token).
    pub fn hook_raw(&self, name: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        self.request(
            "POST",
            &format!("/api/hooks/{name}"),
            None,
            headers,
            Some(body),
        )
    }

    /// POST `body` to `/api/hooks/{name}`, signed now with `secret`.
    pub fn hook(&self, name: &str, secret: &str, body: &str) -> Reply {
        let sig = signature(secret, unix_secs(), body.as_bytes());
        self.hook_raw(name, &[("X-Opex-Signature", &sig)], body.as_bytes())
    }

    /// [`Daemon::hook`] with an `X-Opex-Key` header, signed with the key.
    pub fn hook_keyed(&self, name: &str, secret: &str, key: &str, body: &str) -> Reply {
        let sig = signature_keyed(secret, unix_secs(), key, body.as_bytes());
        self.hook_raw(
            name,
            &[("X-Opex-Signature", &sig), ("X-Opex-Key", key)],
            body.as_bytes(),
        )
    }
}
