//! The S7 time types: DATE_AND_TIME (8 BCD bytes, 1990 to 2089), DTL (12 binary bytes) and
//! S5TIME (a BCD count of 10 ms, 100 ms, 1 s or 10 s). Dates go both ways as RFC 3339 text
//! with milliseconds (the PLC stores no offset: it is shown as `Z`, and a write's offset is
//! folded into UTC).

use crate::time::{days_from_civil, parse_rfc3339, rfc3339, weekday, Civil};

/// A BCD byte's value, or an error naming it.
fn bcd(b: u8) -> Result<u32, String> {
    let (hi, lo) = (b >> 4, b & 0x0F);
    if hi > 9 || lo > 9 {
        return Err(format!("{b:#04x} is not a BCD byte"));
    }
    Ok(u32::from(hi * 10 + lo))
}

/// A value 0..=99 as a BCD byte.
fn to_bcd(n: u32) -> u8 {
    (((n / 10 % 10) << 4) | (n % 10)) as u8
}

/// The RFC 3339 text of checked calendar fields.
fn text(c: Civil) -> Result<String, String> {
    let ok = (1..=12).contains(&c.month)
        && (1..=crate::time::days_in_month(c.year, c.month)).contains(&c.day)
        && c.hour < 24
        && c.minute < 60
        && c.second < 60
        && c.millis < 1000;
    match c.to_ms() {
        Some(ms) if ok => Ok(rfc3339(ms)),
        _ => Err(format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} is not a valid date and time",
            c.year, c.month, c.day, c.hour, c.minute, c.second
        )),
    }
}

/// DATE_AND_TIME: year (90..99 → 19xx), month, day, hour, minute, second, then three
/// digits of milliseconds and the weekday in the last nibble.
pub fn date_and_time(b: &[u8]) -> Result<String, String> {
    let b = b.get(..8).ok_or("a DATE_AND_TIME has 8 bytes")?;
    let yy = bcd(b[0])?;
    let millis = bcd(b[6])? * 10 + u32::from(b[7] >> 4);
    if b[7] >> 4 > 9 {
        return Err("the milliseconds of a DATE_AND_TIME are not BCD".into());
    }
    text(Civil {
        year: i64::from(if yy >= 90 { 1900 + yy } else { 2000 + yy }),
        month: bcd(b[1])?,
        day: bcd(b[2])?,
        hour: bcd(b[3])?,
        minute: bcd(b[4])?,
        second: bcd(b[5])?,
        millis,
    })
}

/// DTL: year (2 bytes), month, day, weekday, hour, minute, second, nanoseconds (4 bytes).
pub fn dtl(b: &[u8]) -> Result<String, String> {
    let b = b.get(..12).ok_or("a DTL has 12 bytes")?;
    let nanos = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
    if nanos >= 1_000_000_000 {
        return Err(format!("{nanos} is not a DTL's nanoseconds"));
    }
    text(Civil {
        year: i64::from(u16::from_be_bytes([b[0], b[1]])),
        month: u32::from(b[2]),
        day: u32::from(b[3]),
        hour: u32::from(b[5]),
        minute: u32::from(b[6]),
        second: u32::from(b[7]),
        millis: nanos / 1_000_000,
    })
}

/// RFC 3339 text → UTC calendar fields within `years`.
fn civil(value: &str, years: std::ops::RangeInclusive<i64>) -> Result<(Civil, u32), String> {
    let ms = parse_rfc3339(value)
        .ok_or_else(|| format!("{value:?} is not RFC 3339 text (e.g. 2026-12-04T18:03:49Z)"))?;
    let c = Civil::from_ms(ms);
    if !years.contains(&c.year) {
        return Err(format!(
            "{value} is outside the years {}..={} this type holds",
            years.start(),
            years.end()
        ));
    }
    let day = weekday(days_from_civil(c.year, c.month, c.day));
    Ok((c, day))
}

/// RFC 3339 text → DATE_AND_TIME bytes (weekday 1 = Sunday).
pub fn encode_date_and_time(value: &str) -> Result<Vec<u8>, String> {
    let (c, day) = civil(value, 1990..=2089)?;
    Ok(vec![
        to_bcd((c.year % 100) as u32),
        to_bcd(c.month),
        to_bcd(c.day),
        to_bcd(c.hour),
        to_bcd(c.minute),
        to_bcd(c.second),
        to_bcd(c.millis / 10),
        (((c.millis % 10) << 4) | (day + 1)) as u8,
    ])
}

/// RFC 3339 text → DTL bytes (weekday 1 = Sunday).
pub fn encode_dtl(value: &str) -> Result<Vec<u8>, String> {
    let (c, day) = civil(value, 1970..=2262)?;
    let mut out = (c.year as u16).to_be_bytes().to_vec();
    out.extend([
        c.month as u8,
        c.day as u8,
        (day + 1) as u8,
        c.hour as u8,
        c.minute as u8,
        c.second as u8,
    ]);
    out.extend((c.millis * 1_000_000).to_be_bytes());
    Ok(out)
}

/// The time bases of S5TIME, in milliseconds, by their two bits.
const S5_BASES: [i64; 4] = [10, 100, 1000, 10_000];

/// S5TIME → milliseconds.
pub fn s5time_ms(word: u16) -> Result<i64, String> {
    let [hi, lo] = word.to_be_bytes();
    let count = bcd(hi & 0x0F)? * 100 + bcd(lo)?;
    Ok(i64::from(count) * S5_BASES[usize::from((hi >> 4) & 0x03)])
}

/// Milliseconds → S5TIME, with the finest base that holds it; a value the base cannot hold
/// exactly is refused rather than rounded.
pub fn encode_s5time(ms: i64) -> Result<[u8; 2], String> {
    for (i, base) in S5_BASES.iter().enumerate() {
        if ms % base == 0 && ms / base <= 999 {
            let count = (ms / base) as u32;
            return Ok([((i as u8) << 4) | (count / 100) as u8, to_bcd(count % 100)]);
        }
    }
    Err(format!(
        "{ms} ms is not an S5TIME (at most 999 of 10 ms, 100 ms, 1 s or 10 s)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_and_time_is_bcd_and_reads_back_as_rfc3339() {
        let b = [0x26, 0x12, 0x04, 0x18, 0x03, 0x49, 0x12, 0x36];
        assert_eq!(date_and_time(&b), Ok("2026-12-04T18:03:49.123Z".into()));
        assert_eq!(
            encode_date_and_time("2026-12-04T18:03:49.123Z"),
            Ok(b.to_vec())
        );
        assert_eq!(
            date_and_time(&[0x95, 1, 1, 0, 0, 0, 0, 0]),
            Ok("1995-01-01T00:00:00Z".into())
        );
        assert!(date_and_time(&[0x26, 0x13, 0x01, 0, 0, 0, 0, 0]).is_err());
        assert!(date_and_time(&[0x2A, 0x01, 0x01, 0, 0, 0, 0, 0]).is_err());
    }

    #[test]
    fn dtl_is_binary_with_nanoseconds() {
        let b = encode_dtl("2026-12-04T18:03:49.5+01:00").unwrap_or_default();
        assert_eq!(b, [0x07, 0xEA, 12, 4, 6, 17, 3, 49, 0x1D, 0xCD, 0x65, 0x00]);
        assert_eq!(dtl(&b), Ok("2026-12-04T17:03:49.500Z".into()));
    }

    #[test]
    fn s5time_takes_the_finest_base_that_holds_the_value() {
        assert_eq!(encode_s5time(12_300), Ok([0x11, 0x23]));
        assert_eq!(s5time_ms(0x1123), Ok(12_300));
        assert_eq!(encode_s5time(9_990), Ok([0x09, 0x99]));
        assert_eq!(s5time_ms(0x3999), Ok(9_990_000));
        assert!(encode_s5time(10_001).is_err());
        assert!(s5time_ms(0x00AA).is_err());
    }
}
