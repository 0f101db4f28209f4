//! Templates: the values a `map` node sets, with `{{path}}` references to the record.
//!
//! A string that is exactly one reference (`"{{payload.amount}}"`) keeps the referenced value's
//! JSON type; any other string with references is rendered to text (strings as they are, other
//! values as compact JSON). Lists and maps are templates too, element by element. Templates are
//! checked once, when the config is validated; rendering fails, naming the field, only when a
//! referenced field is missing on the record.
//!
//! A topic or subject is rendered with [`Template::render_confined`]: a value taken from the
//! record (a key from `X-Opex-Key`, a payload field) is data, so it must stay inside the one
//! level it is spliced into. A value that would add a level or a wildcard (`/`, `+`, `#` in an
//! MQTT topic; `.`, `*`, `>` or white space in a NATS subject) is refused, never cleaned up
//! into something else. The template's own text is written by the operator and may hold
//! separators (`plant/{{key}}/orders`, `plant.{{key}}.orders`).

use serde_json::{Map, Value};

use super::path::{FieldPath, Fields, Root};

/// A checked template.
#[derive(Debug, Clone, PartialEq)]
pub enum Template {
    /// A value without references, used as it is.
    Literal(Value),
    /// Exactly one reference: the referenced value, with its type.
    Field(FieldPath),
    /// Text with references in it.
    Text(Vec<Piece>),
    /// A list whose elements are templates.
    List(Vec<Template>),
    /// A map whose values are templates.
    Map(Vec<(String, Template)>),
}

/// A part of a text template.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// Text as written.
    Lit(String),
    /// A reference, rendered to text.
    Field(FieldPath),
}

impl Template {
    /// Checks a configured value: every `{{` closed, every reference a valid path.
    pub fn parse(value: &Value) -> Result<Self, String> {
        match value {
            Value::String(s) => parse_text(s),
            Value::Array(items) => {
                let list = items
                    .iter()
                    .map(Template::parse)
                    .collect::<Result<_, _>>()?;
                Ok(lift(Template::List(list), value))
            }
            Value::Object(m) => {
                let map = m
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), Template::parse(v)?)))
                    .collect::<Result<_, String>>()?;
                Ok(lift(Template::Map(map), value))
            }
            other => Ok(Template::Literal(other.clone())),
        }
    }

    /// The value for one record; fails, naming the field, when a reference is missing.
    pub fn render(&self, fields: &Fields<'_>) -> Result<Value, String> {
        match self {
            Template::Literal(v) => Ok(v.clone()),
            Template::Field(path) => fields
                .get(path)
                .map(|v| v.into_owned())
                .ok_or_else(|| missing(path)),
            Template::Text(pieces) => {
                let mut out = String::new();
                for piece in pieces {
                    match piece {
                        Piece::Lit(s) => out.push_str(s),
                        Piece::Field(path) => match fields.get(path).as_deref() {
                            Some(Value::String(s)) => out.push_str(s),
                            Some(v) => out.push_str(&v.to_string()),
                            None => return Err(missing(path)),
                        },
                    }
                }
                Ok(Value::String(out))
            }
            Template::List(items) => items
                .iter()
                .map(|t| t.render(fields))
                .collect::<Result<_, _>>()
                .map(Value::Array),
            Template::Map(entries) => {
                let mut m = Map::new();
                for (k, t) in entries {
                    m.insert(k.clone(), t.render(fields)?);
                }
                Ok(Value::Object(m))
            }
        }
    }
}

/// Where a rendered text goes, and so which characters a substituted value must not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confine {
    /// An MQTT topic: `/` separates levels, `+` and `#` are wildcards, NUL is not allowed.
    MqttTopic,
    /// A NATS subject: `.` separates tokens, `*` and `>` are wildcards, white space (and any
    /// other control character) ends the subject on the wire.
    NatsSubject,
}

impl Confine {
    /// Why `c` may not be part of a substituted value, or `None` when it may.
    fn refuses(self, c: char) -> Option<&'static str> {
        match (self, c) {
            (Confine::MqttTopic, '/') => Some("would add an MQTT topic level"),
            (Confine::MqttTopic, '+' | '#') => Some("is an MQTT wildcard"),
            (Confine::MqttTopic, '\0') => Some("is not allowed in an MQTT topic"),
            (Confine::MqttTopic, _) => None,
            (Confine::NatsSubject, '.') => Some("would add a NATS subject token"),
            (Confine::NatsSubject, '*' | '>') => Some("is a NATS wildcard"),
            (Confine::NatsSubject, c) if c.is_whitespace() => {
                Some("is white space, which ends a NATS subject")
            }
            (Confine::NatsSubject, c) if c.is_control() => {
                Some("is a control character, not allowed in a NATS subject")
            }
            (Confine::NatsSubject, _) => None,
        }
    }

    /// Checks one substituted value, naming its field and the first character refused.
    fn check(self, path: &FieldPath, value: &str) -> Result<(), String> {
        match value
            .chars()
            .find_map(|c| self.refuses(c).map(|why| (c, why)))
        {
            None => Ok(()),
            Some((c, why)) => {
                // Long values (a whole payload field) are cut in the message.
                let shown: String = value.chars().take(MAX_SHOWN).collect();
                let more = if value.chars().count() > MAX_SHOWN {
                    "..."
                } else {
                    ""
                };
                Err(format!(
                    "template field {path}: value {shown:?}{more} has {c:?}, which {why}"
                ))
            }
        }
    }
}

/// Most characters of a refused value quoted in the error.
const MAX_SHOWN: usize = 64;

impl Template {
    /// Renders a topic or subject template for one record, refusing a substituted value that
    /// could change the shape of the result (see [`Confine`]): the text as written in the
    /// template passes unchecked, each `{{path}}` value is checked (but `{{source}}`, which only
    /// the config names). Values render to text as
    /// in [`render`](Self::render) (strings as they are, others as compact JSON, so `1.5` is
    /// refused in a NATS subject). Fails naming the field when a reference is missing, the
    /// value and the reason when a value is refused, and for a list or map template (a topic
    /// is text).
    pub fn render_confined(&self, fields: &Fields<'_>, confine: Confine) -> Result<String, String> {
        let text = |path: &FieldPath| -> Result<String, String> {
            let value = fields.get(path).ok_or_else(|| missing(path))?;
            let text = match value.as_ref() {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            // The source is the connector's own `<kind>/<name>` (names are validated, and no
            // node can write it): its one `/` is meant, as in `opex/{{source}}/{{key}}`.
            if path.root() != Root::Source {
                confine.check(path, &text)?;
            }
            Ok(text)
        };
        match self {
            Template::Literal(Value::String(s)) => Ok(s.clone()),
            Template::Literal(other) => Ok(other.to_string()),
            Template::Field(path) => text(path),
            Template::Text(pieces) => {
                let mut out = String::new();
                for piece in pieces {
                    match piece {
                        Piece::Lit(s) => out.push_str(s),
                        Piece::Field(path) => out.push_str(&text(path)?),
                    }
                }
                Ok(out)
            }
            Template::List(_) | Template::Map(_) => {
                Err("a topic or subject template must be text, not a list or map".into())
            }
        }
    }
}

fn missing(path: &FieldPath) -> String {
    format!("template field {path} is missing")
}

/// A list or map without any reference in it stays one literal.
fn lift(t: Template, original: &Value) -> Template {
    let literal = match &t {
        Template::List(items) => items.iter().all(|i| matches!(i, Template::Literal(_))),
        Template::Map(entries) => entries
            .iter()
            .all(|(_, i)| matches!(i, Template::Literal(_))),
        _ => false,
    };
    if literal {
        Template::Literal(original.clone())
    } else {
        t
    }
}

fn parse_text(s: &str) -> Result<Template, String> {
    let mut pieces = Vec::new();
    let mut rest = s;
    while let Some(open) = rest.find("{{") {
        let (lit, after) = rest.split_at(open);
        let inner = after.get(2..).unwrap_or_default();
        let close = inner
            .find("}}")
            .ok_or_else(|| format!("{s:?}: `{{{{` without a closing `}}}}`"))?;
        let name = inner.get(..close).unwrap_or_default().trim();
        let path = FieldPath::parse(name).map_err(|e| format!("{s:?}: {e}"))?;
        if !lit.is_empty() {
            pieces.push(Piece::Lit(lit.to_string()));
        }
        pieces.push(Piece::Field(path));
        rest = inner.get(close + 2..).unwrap_or_default();
    }
    if pieces.is_empty() {
        return Ok(Template::Literal(Value::String(s.to_string())));
    }
    if !rest.is_empty() {
        pieces.push(Piece::Lit(rest.to_string()));
    }
    if let [Piece::Field(path)] = pieces.as_slice() {
        return Ok(Template::Field(path.clone()));
    }
    Ok(Template::Text(pieces))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;
    use serde_json::json;

    fn render(t: &Value, payload: Value) -> Result<Value, String> {
        let r = Record::from_value("webhook/stripe", "k-7", &payload);
        Template::parse(t).unwrap().render(&Fields::read(&r))
    }

    #[test]
    fn a_single_reference_keeps_the_json_type() {
        let p = json!({"amount": 12.5, "tags": ["a"], "ok": false});
        assert_eq!(
            render(&json!("{{payload.amount}}"), p.clone()),
            Ok(json!(12.5))
        );
        assert_eq!(
            render(&json!("{{ payload.tags }}"), p.clone()),
            Ok(json!(["a"]))
        );
        assert_eq!(render(&json!("{{payload.ok}}"), p), Ok(json!(false)));
    }

    #[test]
    fn text_templates_render_every_reference_to_text() {
        let p = json!({"order": 42, "who": "ann", "o": {"x": 1}});
        let t = json!("{{key}}-{{payload.order}} by {{payload.who}} {{payload.o}}");
        assert_eq!(render(&t, p.clone()), Ok(json!(r#"k-7-42 by ann {"x":1}"#)));
        assert_eq!(render(&json!(" {{payload.order}}"), p), Ok(json!(" 42")));
    }

    #[test]
    fn a_missing_field_fails_naming_it() {
        let err = render(&json!("{{key}}-{{payload.order}}"), json!({})).unwrap_err();
        assert_eq!(err, "template field payload.order is missing");
        let err = render(&json!({"a": ["{{payload.x.0}}"]}), json!({"x": []})).unwrap_err();
        assert_eq!(err, "template field payload.x.0 is missing");
    }

    #[test]
    fn lists_and_maps_render_their_elements_and_literals_stay_as_written() {
        let t = json!({"site": "plant-3", "ids": ["{{key}}", 1], "n": null});
        assert_eq!(
            render(&t, json!({})),
            Ok(json!({"site": "plant-3", "ids": ["k-7", 1], "n": null}))
        );
        let lit = json!({"a": [1, "b"]});
        assert_eq!(Template::parse(&lit), Ok(Template::Literal(lit)));
    }

    fn confined(t: &str, key: &str, payload: Value, c: Confine) -> Result<String, String> {
        let r = Record::from_value("webhook/stripe", key, &payload);
        Template::parse(&json!(t))
            .unwrap()
            .render_confined(&Fields::read(&r), c)
    }

    #[test]
    fn confined_values_pass_when_they_stay_inside_their_level() {
        let p = json!({"line": "press_3", "n": 42, "site": "Zürich-Nord"});
        assert_eq!(
            confined(
                "plant/{{key}}/{{payload.line}}",
                "ord-7",
                p.clone(),
                Confine::MqttTopic
            ),
            Ok("plant/ord-7/press_3".into())
        );
        assert_eq!(
            confined(
                "plant.{{key}}.{{payload.n}}",
                "ord-7",
                p.clone(),
                Confine::NatsSubject
            ),
            Ok("plant.ord-7.42".into())
        );
        // What MQTT allows in a level, NATS may not, and the other way round.
        assert_eq!(
            confined("a/{{key}}", "v1.2", p.clone(), Confine::MqttTopic),
            Ok("a/v1.2".into())
        );
        assert_eq!(
            confined("a.{{key}}", "x/y", p.clone(), Confine::NatsSubject),
            Ok("a.x/y".into())
        );
        // A single reference is text too.
        assert_eq!(
            confined("{{payload.site}}", "k", p, Confine::MqttTopic),
            Ok("Zürich-Nord".into())
        );
    }

    #[test]
    fn the_templates_own_separators_and_wildcards_are_not_checked() {
        assert_eq!(
            confined("plant/+/x/#", "k", json!({}), Confine::MqttTopic),
            Ok("plant/+/x/#".into())
        );
        assert_eq!(
            confined("plant.*.{{key}}.>", "k", json!({}), Confine::NatsSubject),
            Ok("plant.*.k.>".into())
        );
    }

    #[test]
    fn a_substituted_value_that_adds_an_mqtt_level_or_wildcard_is_refused_naming_it() {
        for (key, c, why) in [
            ("a/b", '/', "would add an MQTT topic level"),
            ("ord/../x", '/', "would add an MQTT topic level"),
            ("+", '+', "is an MQTT wildcard"),
            ("all#", '#', "is an MQTT wildcard"),
            ("nul\0", '\0', "is not allowed in an MQTT topic"),
        ] {
            let err =
                confined("plant/{{key}}/orders", key, json!({}), Confine::MqttTopic).unwrap_err();
            assert_eq!(
                err,
                format!("template field key: value {key:?} has {c:?}, which {why}")
            );
        }
        let err = confined(
            "p/{{payload.o}}",
            "k",
            json!({"o": {"a": "x/y"}}),
            Confine::MqttTopic,
        )
        .unwrap_err();
        assert!(err.starts_with("template field payload.o: value"), "{err}");
    }

    #[test]
    fn a_substituted_value_that_adds_a_nats_token_or_wildcard_is_refused_naming_it() {
        for (key, c, why) in [
            ("a.b", '.', "would add a NATS subject token"),
            ("*", '*', "is a NATS wildcard"),
            ("x>", '>', "is a NATS wildcard"),
            (
                "two words",
                ' ',
                "is white space, which ends a NATS subject",
            ),
            (
                "line\r\nPUB x 1",
                '\r',
                "is white space, which ends a NATS subject",
            ),
            (
                "tab\there",
                '\t',
                "is white space, which ends a NATS subject",
            ),
            (
                "nul\0",
                '\0',
                "is a control character, not allowed in a NATS subject",
            ),
        ] {
            let err =
                confined("plant.{{key}}.orders", key, json!({}), Confine::NatsSubject).unwrap_err();
            assert_eq!(
                err,
                format!("template field key: value {key:?} has {c:?}, which {why}")
            );
        }
        // A number renders as JSON: a fraction would split the token.
        let err = confined(
            "t.{{payload.v}}",
            "k",
            json!({"v": 1.5}),
            Confine::NatsSubject,
        )
        .unwrap_err();
        assert_eq!(
            err,
            "template field payload.v: value \"1.5\" has '.', which would add a NATS subject token"
        );
    }

    #[test]
    fn a_confined_render_names_a_missing_field_cuts_long_values_and_refuses_lists() {
        assert_eq!(
            confined("a/{{payload.line}}", "k", json!({}), Confine::MqttTopic),
            Err("template field payload.line is missing".into())
        );
        let long = format!("{}/", "x".repeat(100));
        let err = confined("a/{{key}}", &long, json!({}), Confine::MqttTopic).unwrap_err();
        assert!(
            err.starts_with(&format!(
                "template field key: value \"{}\"...",
                "x".repeat(64)
            )),
            "{err}"
        );
        let list = Template::parse(&json!(["{{key}}"])).unwrap();
        let r = Record::from_value("webhook/stripe", "k", &json!({}));
        assert!(list
            .render_confined(&Fields::read(&r), Confine::MqttTopic)
            .unwrap_err()
            .contains("must be text"));
    }

    #[test]
    fn bad_templates_are_refused_when_checked() {
        assert!(Template::parse(&json!("{{payload.a"))
            .unwrap_err()
            .contains("closing"));
        assert!(Template::parse(&json!("{{}}"))
            .unwrap_err()
            .contains("empty path"));
        assert!(Template::parse(&json!("x {{body.a}}")).is_err());
        assert!(Template::parse(&json!(["ok", "{{nope}}"])).is_err());
    }
}
