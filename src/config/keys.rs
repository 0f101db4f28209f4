//! The keys valid at a path of a raw struct, read from the type itself, and the one an
//! unknown key was most likely meant to be (`did you mean `interval_ms`?`).
//!
//! No second, hand-written list of keys: serde's derive hands every struct's field names to
//! the deserializer (`deserialize_struct(name, FIELDS, visitor)`). [`keys_at`] deserializes
//! the type from a probe that holds only a path: at each step it offers the one key or list
//! item the path goes through, and at the end of the path it stops with the field names it
//! was handed. A type the probe cannot see into (an untagged enum, a free-form map) gives
//! `None`, and the unknown key is then reported without a suggestion.

use std::fmt;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, EnumAccess, IntoDeserializer, MapAccess, SeqAccess,
    VariantAccess, Visitor,
};

/// One step of a path into a config tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    /// A key of a mapping.
    Key(String),
    /// An item of a list.
    Index(usize),
}

/// The field names of the struct `T` has at `path` (from the root of `T`); `None` when
/// there is no struct there or the probe cannot see it.
pub fn keys_at<T: DeserializeOwned>(path: &[Seg]) -> Option<&'static [&'static str]> {
    match T::deserialize(Probe { path }) {
        Err(Stop::Fields(fields)) => Some(fields),
        _ => None,
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

/// Why the probe stopped: with the field names at the end of the path, or anywhere else.
#[derive(Debug)]
enum Stop {
    Fields(&'static [&'static str]),
    Other,
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("probe stopped")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Stop::Other
    }
}

/// A value that is only a path: a one-entry map or a one-item list down to its end.
struct Probe<'a> {
    path: &'a [Seg],
}

impl<'de> de::Deserializer<'de> for Probe<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        match self.path.split_first() {
            Some((Seg::Key(key), rest)) => visitor.visit_map(OneEntry {
                key: Some(key),
                rest,
            }),
            Some((Seg::Index(_), rest)) => visitor.visit_seq(OneItem { rest, done: false }),
            None => Err(Stop::Other),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        match self.path.first() {
            None => Err(Stop::Fields(fields)),
            // A struct read from a list would take its fields by position: not a path.
            Some(Seg::Index(_)) => Err(Stop::Other),
            Some(Seg::Key(_)) => self.deserialize_any(visitor),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Stop> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Stop> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        match self.path.split_first() {
            Some((Seg::Key(variant), rest)) => visitor.visit_enum(Variant { variant, rest }),
            _ => Err(Stop::Other),
        }
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map identifier ignored_any
    }
}

/// The one key the path goes through, and the probe of its value.
struct OneEntry<'a> {
    key: Option<&'a str>,
    rest: &'a [Seg],
}

impl<'de> MapAccess<'de> for OneEntry<'_> {
    type Error = Stop;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Stop> {
        match self.key.take() {
            Some(key) => seed.deserialize(key.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Stop> {
        seed.deserialize(Probe { path: self.rest })
    }
}

/// The one list item the path goes through.
struct OneItem<'a> {
    rest: &'a [Seg],
    done: bool,
}

impl<'de> SeqAccess<'de> for OneItem<'_> {
    type Error = Stop;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Stop> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(None);
        }
        seed.deserialize(Probe { path: self.rest }).map(Some)
    }
}

/// An externally tagged enum's variant: the key the path goes through.
struct Variant<'a> {
    variant: &'a str,
    rest: &'a [Seg],
}

impl<'de, 'a> EnumAccess<'de> for Variant<'a> {
    type Error = Stop;
    type Variant = Probe<'a>;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Probe<'a>), Stop> {
        let value = seed.deserialize(self.variant.into_deserializer())?;
        Ok((value, Probe { path: self.rest }))
    }
}

impl<'de> VariantAccess<'de> for Probe<'_> {
    type Error = Stop;

    fn unit_variant(self) -> Result<(), Stop> {
        Err(Stop::Other)
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, Stop> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, _visitor: V) -> Result<V::Value, Stop> {
        Err(Stop::Other)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Stop> {
        de::Deserializer::deserialize_struct(self, "", fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::raw::RawConfig;

    fn path(text: &str) -> Vec<Seg> {
        text.split('.')
            .filter(|s| !s.is_empty())
            .map(|s| match s.parse() {
                Ok(i) => Seg::Index(i),
                Err(_) => Seg::Key(s.to_string()),
            })
            .collect()
    }

    #[test]
    fn the_keys_at_a_path_come_from_the_raw_structs_themselves() {
        let push_queue = keys_at::<RawConfig>(&path("connector.push_queue")).unwrap_or_default();
        assert!(push_queue.contains(&"on_full"), "{push_queue:?}");
        let source = keys_at::<RawConfig>(&path("ingest.sources.3")).unwrap_or_default();
        assert!(source.contains(&"token"), "{source:?}");
        // Into a tagged enum's variant: the keys of that protocol's groups.
        let group = keys_at::<crate::sources::devices::RawDeviceKind>(&path("opcua.groups.0"))
            .unwrap_or_default();
        assert!(group.contains(&"subscribe"), "{group:?}");
        let root = keys_at::<RawConfig>(&[]).unwrap_or_default();
        assert!(
            root.contains(&"devices") && root.contains(&"flows"),
            "{root:?}"
        );
        // A free-form value has no keys to offer.
        assert_eq!(keys_at::<RawConfig>(&path("sinks.0")), None);
        assert_eq!(keys_at::<RawConfig>(&path("devices.0")), None);
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
