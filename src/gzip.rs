//! Inflating what `build.rs` compressed: the status page's files and the config schema are
//! in the binary as gzip members only, and are inflated on demand (a client that does not
//! take gzip, `opex-connector schema`).

/// The text of a gzip member as `build.rs` writes it: a 10-byte header without optional
/// fields, a deflate stream, then the CRC-32 and the length of the text (RFC 1952). `None`
/// when it is not one, is longer than `max` bytes, or its length does not match.
pub fn inflate(gzip: &[u8], max: usize) -> Option<Vec<u8>> {
    let (header, rest) = gzip.split_at_checked(10)?;
    // ID1, ID2, CM = deflate, FLG = no optional fields.
    if header[..4] != [0x1f, 0x8b, 8, 0] {
        return None;
    }
    let (deflate, trailer) = rest.split_at_checked(rest.len().checked_sub(8)?)?;
    let text = miniz_oxide::inflate::decompress_to_vec_with_limit(deflate, max).ok()?;
    let size = u32::from_le_bytes(trailer.get(4..8)?.try_into().ok()?);
    (text.len() as u64 == u64::from(size)).then_some(text)
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
