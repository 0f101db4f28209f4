//! Bearer tokens, compared in constant time.

use hyper::header::AUTHORIZATION;
use hyper::HeaderMap;

/// True when `headers` carry `Authorization: Bearer <expected>`.
pub fn bearer_ok(headers: &HeaderMap, expected: &str) -> bool {
    let Some(presented) = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    ct_eq(presented.trim().as_bytes(), expected.as_bytes())
}

/// Compares two byte strings in time that depends only on their lengths.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_bearer_token_passes() {
        let mut h = HeaderMap::new();
        assert!(!bearer_ok(&h, "secret-token"));
        h.insert(AUTHORIZATION, "Bearer secret-tokex".parse().unwrap());
        assert!(!bearer_ok(&h, "secret-token"));
        h.insert(AUTHORIZATION, "Basic secret-token".parse().unwrap());
        assert!(!bearer_ok(&h, "secret-token"));
        h.insert(AUTHORIZATION, "Bearer secret-token".parse().unwrap());
        assert!(bearer_ok(&h, "secret-token"));
    }
}
