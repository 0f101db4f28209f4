//! The field names of a raw struct, read from the type itself, and the one an unknown key was
//! most likely meant to be (`did you mean `interval_ms`?`).
//!
//! No second, hand-written list of keys: serde's derive hands every struct's field names to
//! the deserializer (`deserialize_struct(name, FIELDS, visitor)`), where [`super::read`] checks
//! the keys as written against them and [`fields_of`] takes them.

use std::fmt;

use serde::de::{self, DeserializeOwned, Visitor};

/// One step of a path into a config tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    /// A key of a mapping.
    Key(String),
    /// An item of a list.
    Index(usize),
}

/// The field names of the struct `T`; empty when `T` is not a struct.
pub fn fields_of<T: DeserializeOwned>() -> &'static [&'static str] {
    match T::deserialize(Fields) {
        Err(Stop(fields)) => fields,
        Ok(_) => &[],
    }
}

/// The key among `valid` an unknown `key` was most likely meant to be: the nearest by edit
/// distance, when it is at most a third of the key's length (at least 1), as rustc does for
/// names; ties go to the first in declaration order.
pub fn nearest<'a>(key: &str, valid: &[&'a str]) -> Option<&'a str> {
    let limit = (key.chars().count() / 3).max(1);
    valid
        .iter()
        .map(|v| (distance(&key.to_lowercase(), v), *v))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, v)| v)
}

/// Levenshtein distance in characters.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Stops at the first call with the field names it was handed (none but a struct's).
#[derive(Debug)]
struct Stop(&'static [&'static str]);

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("not a struct")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Stop(&[])
    }
}

/// A deserializer that only asks for a struct's field names.
struct Fields;

impl<'de> de::Deserializer<'de> for Fields {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Stop> {
        Err(Stop(&[]))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Stop> {
        Err(Stop(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::RawConfig;

    #[test]
    fn the_field_names_come_from_the_raw_structs_themselves() {
        let root = fields_of::<RawConfig>();
        assert!(
            root.contains(&"devices") && root.contains(&"flows"),
            "{root:?}"
        );
        let common = fields_of::<crate::sources::devices::RawDeviceCommon>();
        assert!(common.contains(&"name"), "{common:?}");
        // A free-form value has no field names.
        assert!(fields_of::<serde_json::Value>().is_empty());
    }

    #[test]
    fn a_near_miss_is_suggested_and_a_far_one_is_not() {
        let keys = ["name", "interval_ms"];
        assert_eq!(nearest("intervall_ms", &keys), Some("interval_ms"));
        assert_eq!(nearest("interval", &keys), None);
        assert_eq!(nearest("Name", &keys), Some("name"));
        assert_eq!(nearest("colour", &keys), None);
        assert_eq!(distance("regster", "register"), 1);
    }
}
