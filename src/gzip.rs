//! Inflating what `build.rs` compressed: the status page's files, the OpenAPI document and
//! the config schema are in the binary as gzip members only, and are inflated on demand (a
//! client that does not take gzip, `opex-connector schema`).
//!
//! The inflater is our own, after Mark Adler's `puff.c` (the reference decoder that ships
//! with zlib): canonical Huffman codes decoded a bit at a time, no lookup tables. It is a few
//! hundred bytes of code where a general library is about 15 KB, and speed does not matter
//! for a few files inflated once each. Every read is checked, so bytes that are not a valid
//! deflate stream give `None`, never a panic.

/// The text of a gzip member as `build.rs` writes it: a 10-byte header without optional
/// fields, a deflate stream (RFC 1951), then the CRC-32 and the length of the text (RFC
/// 1952). `None` when it is not one, is longer than `max` bytes, or its length does not
/// match.
pub fn inflate(gzip: &[u8], max: usize) -> Option<Vec<u8>> {
    let (header, rest) = gzip.split_at_checked(10)?;
    // ID1, ID2, CM = deflate, FLG = no optional fields.
    if header.get(..4)? != [0x1f, 0x8b, 8, 0] {
        return None;
    }
    let (deflate, trailer) = rest.split_at_checked(rest.len().checked_sub(8)?)?;
    let text = Inflater::new(deflate, max).run()?;
    let size = u32::from_le_bytes(trailer.get(4..8)?.try_into().ok()?);
    (text.len() as u64 == u64::from(size)).then_some(text)
}

/// The longest Huffman code deflate allows.
const MAX_BITS: usize = 15;

/// A canonical Huffman code: how many codes of each length, and the symbols in code order.
struct Huffman {
    count: [u16; MAX_BITS + 1],
    symbol: Vec<u16>,
}

impl Huffman {
    /// The code of `lengths` (one per symbol, 0 for an unused symbol); `None` when the
    /// lengths over-subscribe the code space.
    fn new(lengths: &[u8]) -> Option<Self> {
        let mut count = [0u16; MAX_BITS + 1];
        for &l in lengths {
            *count.get_mut(usize::from(l))? += 1;
        }
        let mut left: i32 = 1;
        for &c in &count[1..] {
            left = left * 2 - i32::from(c);
            if left < 0 {
                return None;
            }
        }
        let mut offsets = [0u16; MAX_BITS + 2];
        for len in 1..=MAX_BITS {
            offsets[len + 1] = offsets[len] + count[len];
        }
        let mut symbol = vec![0u16; lengths.len()];
        for (s, &l) in lengths.iter().enumerate() {
            if l != 0 {
                let at = &mut offsets[usize::from(l)];
                *symbol.get_mut(usize::from(*at))? = s as u16;
                *at += 1;
            }
        }
        Some(Self { count, symbol })
    }
}

/// Base lengths and extra bits of the length symbols 257 to 285.
const LENGTH_BASE: [u16; 29] = [
    3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131,
    163, 195, 227, 258,
];
const LENGTH_EXTRA: [u8; 29] = [
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
];
/// Base distances and extra bits of the distance symbols 0 to 29.
const DIST_BASE: [u16; 30] = [
    1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
    2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577,
];
const DIST_EXTRA: [u8; 30] = [
    0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13,
    13,
];
/// The order in which a dynamic block lists its code length code lengths.
const CODE_ORDER: [usize; 19] = [
    16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15,
];

struct Inflater<'a> {
    input: &'a [u8],
    /// The next byte of `input` to read.
    at: usize,
    /// Bits read from `input` and not used yet, the first in the lowest bit.
    bits: u32,
    nbits: u32,
    out: Vec<u8>,
    max: usize,
}

impl<'a> Inflater<'a> {
    fn new(input: &'a [u8], max: usize) -> Self {
        Self {
            input,
            at: 0,
            bits: 0,
            nbits: 0,
            out: Vec::new(),
            max,
        }
    }

    /// The next `n` bits (at most 16), the first in the lowest bit.
    fn take(&mut self, n: u32) -> Option<u32> {
        while self.nbits < n {
            let byte = *self.input.get(self.at)?;
            self.at += 1;
            self.bits |= u32::from(byte) << self.nbits;
            self.nbits += 8;
        }
        let v = self.bits & ((1u32 << n) - 1);
        self.bits >>= n;
        self.nbits -= n;
        Some(v)
    }

    fn push(&mut self, byte: u8) -> Option<()> {
        (self.out.len() < self.max).then(|| self.out.push(byte))
    }

    fn run(mut self) -> Option<Vec<u8>> {
        loop {
            let last = self.take(1)?;
            match self.take(2)? {
                0 => self.stored()?,
                1 => {
                    let mut lengths = [8u8; 288];
                    lengths[144..256].fill(9);
                    lengths[256..280].fill(7);
                    let lengths_code = Huffman::new(&lengths)?;
                    let dist_code = Huffman::new(&[5u8; 30])?;
                    self.codes(&lengths_code, &dist_code)?;
                }
                2 => self.dynamic()?,
                _ => return None,
            }
            if last == 1 {
                return Some(self.out);
            }
        }
    }

    fn stored(&mut self) -> Option<()> {
        // The rest of the current byte is padding.
        self.bits = 0;
        self.nbits = 0;
        let header = self.input.get(self.at..self.at + 4)?;
        let len = u16::from_le_bytes([header[0], header[1]]);
        let nlen = u16::from_le_bytes([header[2], header[3]]);
        if len != !nlen {
            return None;
        }
        self.at += 4;
        let end = self.at + usize::from(len);
        let bytes = self.input.get(self.at..end)?;
        if self.out.len() + bytes.len() > self.max {
            return None;
        }
        self.out.extend_from_slice(bytes);
        self.at = end;
        Some(())
    }

    fn decode(&mut self, h: &Huffman) -> Option<u16> {
        let (mut code, mut first, mut index) = (0i32, 0i32, 0i32);
        for len in 1..=MAX_BITS {
            code |= self.take(1)? as i32;
            let count = i32::from(h.count[len]);
            if code - count < first {
                return h.symbol.get((index + code - first) as usize).copied();
            }
            index += count;
            first = (first + count) << 1;
            code <<= 1;
        }
        None
    }

    fn codes(&mut self, lengths: &Huffman, distances: &Huffman) -> Option<()> {
        loop {
            let symbol = usize::from(self.decode(lengths)?);
            match symbol {
                0..=255 => self.push(symbol as u8)?,
                256 => return Some(()),
                _ => {
                    let s = symbol - 257;
                    let len = usize::from(*LENGTH_BASE.get(s)?)
                        + self.take(u32::from(*LENGTH_EXTRA.get(s)?))? as usize;
                    let d = usize::from(self.decode(distances)?);
                    let dist = usize::from(*DIST_BASE.get(d)?)
                        + self.take(u32::from(*DIST_EXTRA.get(d)?))? as usize;
                    let from = self.out.len().checked_sub(dist)?;
                    for i in 0..len {
                        let byte = *self.out.get(from + i)?;
                        self.push(byte)?;
                    }
                }
            }
        }
    }

    fn dynamic(&mut self) -> Option<()> {
        let nlen = self.take(5)? as usize + 257;
        let ndist = self.take(5)? as usize + 1;
        let ncode = self.take(4)? as usize + 4;
        if nlen > 286 || ndist > 30 {
            return None;
        }
        let mut code_lengths = [0u8; 19];
        for &i in CODE_ORDER.iter().take(ncode) {
            code_lengths[i] = self.take(3)? as u8;
        }
        let code = Huffman::new(&code_lengths)?;
        let mut lengths = vec![0u8; nlen + ndist];
        let mut i = 0;
        while i < nlen + ndist {
            let symbol = self.decode(&code)?;
            let (value, repeat) = match symbol {
                0..=15 => (symbol as u8, 1),
                16 => (*lengths.get(i.checked_sub(1)?)?, 3 + self.take(2)? as usize),
                17 => (0, 3 + self.take(3)? as usize),
                _ => (0, 11 + self.take(7)? as usize),
            };
            for _ in 0..repeat {
                *lengths.get_mut(i)? = value;
                i += 1;
            }
        }
        // A block without an end-of-block code cannot end.
        if lengths[256] == 0 {
            return None;
        }
        let length_code = Huffman::new(&lengths[..nlen])?;
        let dist_code = Huffman::new(&lengths[nlen..])?;
        self.codes(&length_code, &dist_code)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    const MAX: usize = 1 << 20;

    /// A gzip member as `build.rs` writes it.
    fn member(text: &[u8]) -> Vec<u8> {
        let mut gz = flate2::GzBuilder::new()
            .mtime(0)
            .write(Vec::new(), flate2::Compression::best());
        gz.write_all(text).expect("compress");
        gz.finish().expect("compress")
    }

    proptest::proptest! {
        #[test]
        fn what_flate2_compresses_at_any_level_inflates_to_the_same_bytes(
            words in proptest::collection::vec(0u8..12, 0..3000),
            level in 0u32..10,
        ) {
            // Few distinct words, so the streams have long matches as well as literals.
            let text: Vec<u8> = words.iter().flat_map(|w| [b'a' + w, b' ']).collect();
            let mut gz = flate2::GzBuilder::new()
                .mtime(0)
                .write(Vec::new(), flate2::Compression::new(level));
            gz.write_all(&text).expect("compress");
            let member = gz.finish().expect("compress");
            proptest::prop_assert_eq!(inflate(&member, MAX), Some(text));
        }

        #[test]
        fn any_bytes_after_a_good_header_inflate_or_not_without_a_panic(
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
        ) {
            let mut member = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0];
            member.extend_from_slice(&tail);
            let _ = inflate(&member, MAX);
        }
    }

    #[test]
    fn a_text_with_every_kind_of_block_inflates() {
        let page = include_bytes!("http/page/page.js");
        for level in [0, 1, 6, 9] {
            let mut gz = flate2::GzBuilder::new()
                .mtime(0)
                .write(Vec::new(), flate2::Compression::new(level));
            gz.write_all(page).expect("compress");
            let member = gz.finish().expect("compress");
            assert_eq!(
                inflate(&member, MAX).as_deref(),
                Some(&page[..]),
                "level {level}"
            );
        }
    }

    #[test]
    fn bytes_that_are_not_a_gzip_member_as_the_build_writes_it_do_not_inflate() {
        let text = "a line of the page\n".repeat(50);
        let good = &member(text.as_bytes())[..];
        assert_eq!(inflate(good, MAX).as_deref(), Some(text.as_bytes()));
        assert_eq!(inflate(good, 100), None, "over the limit");
        assert_eq!(inflate(&[], MAX), None);
        assert_eq!(inflate(&good[..9], MAX), None);
        assert_eq!(inflate(&good[..good.len() - 1], MAX), None);
        let mut named = good.to_vec();
        named[3] = 0x08; // FNAME set
        assert_eq!(inflate(&named, MAX), None);
        let mut wrong_size = good.to_vec();
        let at = wrong_size.len() - 4;
        wrong_size[at] ^= 1;
        assert_eq!(inflate(&wrong_size, MAX), None);
        let mut garbage = good[..10].to_vec();
        garbage.extend_from_slice(&[0xff; 64]);
        assert_eq!(inflate(&garbage, MAX), None);
    }
}
