//! Templates: the values a `map` node sets, with `{{path}}` references to the record.
//!
//! A string that is exactly one reference (`"{{payload.amount}}"`) keeps the referenced value's
//! JSON type; any other string with references is rendered to text (strings as they are, other
//! values as compact JSON). Lists and maps are templates too, element by element. Templates are
//! checked once, when the config is validated; rendering fails, naming the field, only when a
//! referenced field is missing on the record.

use serde_json::{Map, Value};

use super::path::{FieldPath, Fields};

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
