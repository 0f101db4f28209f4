//! Reads a raw struct out of the generic tree in one pass, with the paths the operator needs.
//!
//! A [`Read`] is a serde deserializer over a borrowed [`Value`] that knows where in the tree it
//! stands. It does the work of three layers in one: serde_json's own deserializer of a
//! `Value`, noting every unknown key (a struct hands its field names to
//! `deserialize_struct`, so a key that is not one of them is unknown, and the nearest field
//! name is the suggestion), and the path of a wrong-typed value. One layer means the raw
//! structs' visitors are compiled once for it, not once per wrapper: the field build is
//! counted in bytes (docs/src/deployment/build-size.md).
//!
//! Messages are serde_json's: `invalid type: string "lots", expected u64`, `null` for a
//! missing value.

use std::cell::RefCell;
use std::fmt;

use serde::de::{
    self, DeserializeSeed, EnumAccess, MapAccess, SeqAccess, Unexpected, VariantAccess, Visitor,
};
use serde_json::{Map, Value};

use super::keys::{nearest, Seg};

/// Where a [`Read`] stands: a chain of steps back to the root, on the stack.
#[derive(Clone, Copy)]
enum At<'a> {
    Root,
    Key(&'a At<'a>, &'a str),
    Index(&'a At<'a>, usize),
}

impl At<'_> {
    fn segs(&self) -> Vec<Seg> {
        let mut out = Vec::new();
        let mut here = self;
        loop {
            match here {
                At::Root => break,
                At::Key(parent, key) => {
                    out.push(Seg::Key((*key).to_string()));
                    here = parent;
                }
                At::Index(parent, index) => {
                    out.push(Seg::Index(*index));
                    here = parent;
                }
            }
        }
        out.reverse();
        out
    }
}

/// An unknown key: its path and the message (with the suggestion, when there is one).
pub type Unknown = (Vec<Seg>, String);

/// Why reading stopped: the message, and the path of the value it is about (set by the
/// innermost [`Read`] the error passes through).
#[derive(Debug)]
pub struct Fail {
    pub path: Option<Vec<Seg>>,
    pub message: String,
}

impl Fail {
    fn or_at(mut self, at: &At<'_>) -> Self {
        if self.path.is_none() {
            self.path = Some(at.segs());
        }
        self
    }
}

impl fmt::Display for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Fail {}

impl de::Error for Fail {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Fail {
            path: None,
            message: msg.to_string(),
        }
    }

    // A YAML `~` or an empty value is `null` to the operator, not serde's "unit value".
    fn invalid_type(unexp: Unexpected<'_>, exp: &dyn de::Expected) -> Self {
        match unexp {
            Unexpected::Unit => {
                de::Error::custom(format_args!("invalid type: null, expected {exp}"))
            }
            other => de::Error::custom(format_args!("invalid type: {other}, expected {exp}")),
        }
    }
}

/// Reads `T` from `tree`; every unknown key is pushed to `unknown` (the rest goes on), the
/// first wrong-typed value stops it with its path.
pub fn read<T: de::DeserializeOwned>(tree: &Value, unknown: &mut Vec<Unknown>) -> Result<T, Fail> {
    let found = RefCell::new(std::mem::take(unknown));
    let result = T::deserialize(Read {
        value: tree,
        at: At::Root,
        unknown: &found,
    });
    *unknown = found.into_inner();
    result
}

/// A deserializer of one value of the tree (`'de`), at its path (`'p`, on the stack).
struct Read<'de, 'p> {
    value: &'de Value,
    at: At<'p>,
    unknown: &'p RefCell<Vec<Unknown>>,
}

impl<'de> Read<'de, '_> {
    fn unexpected(&self) -> Unexpected<'de> {
        match self.value {
            Value::Null => Unexpected::Unit,
            Value::Bool(b) => Unexpected::Bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => Unexpected::Unsigned(u),
                (_, Some(i)) => Unexpected::Signed(i),
                _ => Unexpected::Float(n.as_f64().unwrap_or_default()),
            },
            Value::String(s) => Unexpected::Str(s),
            Value::Array(_) => Unexpected::Seq,
            Value::Object(_) => Unexpected::Map,
        }
    }

    fn map<V: Visitor<'de>>(
        &self,
        map: &'de Map<String, Value>,
        fields: Option<&'static [&'static str]>,
        visitor: V,
    ) -> Result<V::Value, Fail> {
        visitor.visit_map(Entries {
            entries: map.iter(),
            value: None,
            fields,
            at: &self.at,
            unknown: self.unknown,
        })
    }
}

impl<'de> de::Deserializer<'de> for Read<'de, '_> {
    type Error = Fail;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fail> {
        let result = match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => match (n.as_u64(), n.as_i64()) {
                (Some(u), _) => visitor.visit_u64(u),
                (_, Some(i)) => visitor.visit_i64(i),
                _ => visitor.visit_f64(n.as_f64().unwrap_or_default()),
            },
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(items) => visitor.visit_seq(Items {
                items: items.iter().enumerate(),
                at: &self.at,
                unknown: self.unknown,
            }),
            Value::Object(map) => self.map(map, None, visitor),
        };
        result.map_err(|e| e.or_at(&self.at))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fail> {
        let at = self.at;
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
        .map_err(|e| e.or_at(&at))
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Fail> {
        let at = self.at;
        visitor.visit_newtype_struct(self).map_err(|e| e.or_at(&at))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Fail> {
        match self.value {
            Value::Object(map) => self
                .map(map, Some(fields), visitor)
                .map_err(|e| e.or_at(&self.at)),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Fail> {
        let result = match self.value {
            Value::String(variant) => visitor.visit_enum(Variant {
                variant,
                content: None,
                at: &self.at,
                unknown: self.unknown,
            }),
            Value::Object(map) if map.len() == 1 => {
                let (variant, content) = map.iter().next().expect("one entry");
                visitor.visit_enum(Variant {
                    variant,
                    content: Some(content),
                    at: &self.at,
                    unknown: self.unknown,
                })
            }
            Value::Object(_) => Err(de::Error::invalid_value(
                Unexpected::Map,
                &"a map with a single key",
            )),
            _ => Err(de::Error::invalid_type(self.unexpected(), &"string or map")),
        };
        result.map_err(|e| e.or_at(&self.at))
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Fail> {
        visitor.visit_unit()
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map identifier
    }
}

/// A mapping's entries; with `fields` (a struct's), the keys not among them are noted as
/// unknown and skipped.
struct Entries<'de, 'p, I> {
    entries: I,
    value: Option<(&'de str, &'de Value)>,
    fields: Option<&'static [&'static str]>,
    at: &'p At<'p>,
    unknown: &'p RefCell<Vec<Unknown>>,
}

impl<'de, I: Iterator<Item = (&'de String, &'de Value)>> MapAccess<'de> for Entries<'de, '_, I> {
    type Error = Fail;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Fail> {
        for (key, value) in self.entries.by_ref() {
            if let Some(fields) = self.fields.filter(|f| !f.contains(&key.as_str())) {
                let message = match nearest(key, fields) {
                    Some(near) => format!("unknown key; did you mean `{near}`?"),
                    None => "unknown key".into(),
                };
                self.unknown
                    .borrow_mut()
                    .push((At::Key(self.at, key).segs(), message));
                continue;
            }
            self.value = Some((key, value));
            let key: de::value::BorrowedStrDeserializer<'de, Fail> =
                de::value::BorrowedStrDeserializer::new(key);
            return seed.deserialize(key).map(Some);
        }
        Ok(None)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Fail> {
        let (key, value) = self
            .value
            .take()
            .ok_or_else(|| de::Error::custom("a value without its key"))?;
        seed.deserialize(Read {
            value,
            at: At::Key(self.at, key),
            unknown: self.unknown,
        })
    }
}

/// A list's items.
struct Items<'p, I> {
    items: I,
    at: &'p At<'p>,
    unknown: &'p RefCell<Vec<Unknown>>,
}

impl<'de, I: Iterator<Item = (usize, &'de Value)>> SeqAccess<'de> for Items<'_, I> {
    type Error = Fail;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Fail> {
        match self.items.next() {
            Some((index, value)) => seed
                .deserialize(Read {
                    value,
                    at: At::Index(self.at, index),
                    unknown: self.unknown,
                })
                .map(Some),
            None => Ok(None),
        }
    }
}

/// An externally tagged enum's variant: a string alone, or the one key of a mapping and its
/// content (whose path goes through the variant, as the operator wrote it).
struct Variant<'de, 'p> {
    variant: &'de str,
    content: Option<&'de Value>,
    at: &'p At<'p>,
    unknown: &'p RefCell<Vec<Unknown>>,
}

impl<'de> EnumAccess<'de> for Variant<'de, '_> {
    type Error = Fail;
    type Variant = Self;

    fn variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<(S::Value, Self), Fail> {
        let name: de::value::BorrowedStrDeserializer<'de, Fail> =
            de::value::BorrowedStrDeserializer::new(self.variant);
        Ok((seed.deserialize(name)?, self))
    }
}

impl<'de: 'p, 'p> Variant<'de, 'p> {
    fn content(&self) -> Result<Read<'de, 'p>, Fail> {
        match self.content {
            Some(value) => Ok(Read {
                value,
                at: At::Key(self.at, self.variant),
                unknown: self.unknown,
            }),
            None => Err(de::Error::invalid_type(
                Unexpected::UnitVariant,
                &"a variant with content",
            )),
        }
    }
}

impl<'de> VariantAccess<'de> for Variant<'de, '_> {
    type Error = Fail;

    fn unit_variant(self) -> Result<(), Fail> {
        match self.content {
            None | Some(Value::Null) => Ok(()),
            Some(_) => Err(de::Error::invalid_type(Unexpected::Map, &"a unit variant")),
        }
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, Fail> {
        seed.deserialize(self.content()?)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Fail> {
        de::Deserializer::deserialize_seq(self.content()?, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Fail> {
        de::Deserializer::deserialize_struct(self.content()?, "", fields, visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Inner {
        interval_ms: Option<u64>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    enum Kind {
        Plain,
        With(Inner),
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outer {
        name: Option<String>,
        items: Option<Vec<Inner>>,
        kind: Option<Kind>,
        tags: Option<std::collections::BTreeMap<String, String>>,
    }

    fn read_yaml(yaml: &str) -> (Result<Outer, Fail>, Vec<Unknown>) {
        let tree: Value = serde_saphyr::from_str(yaml).expect("YAML");
        let mut unknown = Vec::new();
        (read::<Outer>(&tree, &mut unknown), unknown)
    }

    #[test]
    fn unknown_keys_are_noted_with_their_path_and_the_rest_is_read() {
        let (outer, unknown) = read_yaml(
            "name: a\ncolour: blue\nitems:\n  - {interval_ms: 5}\n  - {intervall_ms: 6}\nkind: {With: {interval_ms: 1, x: 2}}\ntags: {free: form}\n",
        );
        let outer = outer.expect("read");
        assert_eq!(outer.name.as_deref(), Some("a"));
        assert_eq!(
            outer.kind,
            Some(Kind::With(Inner {
                interval_ms: Some(1)
            }))
        );
        assert_eq!(outer.tags.map(|t| t.len()), Some(1));
        let key = |s: &str| Seg::Key(s.into());
        assert_eq!(
            unknown,
            [
                (vec![key("colour")], "unknown key".to_string()),
                (
                    vec![key("items"), Seg::Index(1), key("intervall_ms")],
                    "unknown key; did you mean `interval_ms`?".to_string()
                ),
                (
                    vec![key("kind"), key("With"), key("x")],
                    "unknown key".to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_wrong_type_stops_with_its_path_in_serde_json_words() {
        let (outer, _) = read_yaml("items:\n  - {interval_ms: 5}\n  - {interval_ms: lots}\n");
        let fail = outer.unwrap_err();
        let key = |s: &str| Seg::Key(s.into());
        assert_eq!(
            fail.path,
            Some(vec![key("items"), Seg::Index(1), key("interval_ms")])
        );
        assert_eq!(fail.message, "invalid type: string \"lots\", expected u64");
        let (outer, _) = read_yaml("name: ~\nkind: Plain\n");
        assert_eq!(outer.expect("read").kind, Some(Kind::Plain));
        let (outer, _) = read_yaml("kind: {Nope: 1}\n");
        let fail = outer.unwrap_err();
        assert_eq!(fail.path, Some(vec![key("kind")]));
        assert!(fail.message.starts_with("unknown variant `Nope`"), "{fail}");
        let (outer, _) = read_yaml("name: [1]\n");
        assert_eq!(
            outer.unwrap_err().message,
            "invalid type: sequence, expected a string"
        );
    }
}
