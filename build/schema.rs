//! The config file's JSON Schema and its reference page, read from the config types
//! themselves: every `Raw*` struct and enum under `src/` that derives `Deserialize`, its
//! fields, their types, `#[serde(rename)]`s and doc comments. The doc comment of a field is
//! the user documentation of its key, so the schema's descriptions and the page are that
//! text. From it, by the conventions the docs follow:
//!
//! - a default: `Default 1000.`, ``Default `u16` ``, `(default 1)`, or `` `none` (default) ``;
//! - allowed values: a doc that opens (after a `Modbus RTU: ` kind of qualifier) with the
//!   choices, `` `none` (default), `even` or `odd`. ``, each a word (`` `table` or
//!   `database.table` `` shows shapes, not values);
//! - a required key: `Required.` (also `Required;` and `Required,`), unless the doc opens
//!   with a qualifier (`OPC-UA: ...`): such a key is required only for one kind of entry.
//!
//! Every struct refuses unknown keys (`additionalProperties: false`), as the config reader
//! does (each ignored key is a problem with its path). Three keys are read as JSON values
//! first and then as a type; they are named in [`READ_AS`]. Their entries are tagged (`type`
//! of a sink, `protocol` of a device): each kind is an object of its own keys, chosen by the
//! tag with `if`/`then`, so a validator names the very key that is wrong. A device that
//! names a `template` may leave the tag and its required keys to it: without the tag, it
//! must fit one of the kinds. A template is a device with every key optional.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// Keys read as JSON values, then as a type: `(struct, field, what an entry is)`.
const READ_AS: [(&str, &str, Entry); 3] = [
    ("RawConfig", "sinks", Entry::Tagged(SINKS)),
    ("RawConfig", "devices", Entry::Tagged(DEVICES)),
    ("RawConfig", "templates", Entry::Template(DEVICES)),
];

/// `sinks[]`: `name`, `type` and the kind's keys.
const SINKS: Tagged = Tagged {
    kinds: "RawSinkKind",
    tag: "type",
    tag_doc: "The sink's kind.",
    common: None,
    defers_to: None,
};

/// `devices[]`: the keys every device has, `protocol` and the protocol's keys.
const DEVICES: Tagged = Tagged {
    kinds: "RawDeviceKind",
    tag: "protocol",
    tag_doc: "The device's protocol; required here or in its template.",
    common: Some("RawDeviceCommon"),
    defers_to: Some("template"),
};

/// A list whose entries are tagged by a key.
#[derive(Clone, Copy)]
struct Tagged {
    /// The enum of the kinds: each variant's tag (lowercase unless renamed) is a value of the
    /// tag key, its type the kind's keys.
    kinds: &'static str,
    /// The tag key.
    tag: &'static str,
    /// The tag key's description.
    tag_doc: &'static str,
    /// The struct of the keys every entry has besides the tag (`name` among them); without
    /// one, an entry has `name`.
    common: Option<&'static str>,
    /// A key that, when given, leaves the tag and the required keys to what it names (a
    /// device's `template`).
    defers_to: Option<&'static str>,
}

/// What an entry of a [`READ_AS`] list is.
#[derive(Clone, Copy)]
enum Entry {
    /// An entry of the tagged list.
    Tagged(Tagged),
    /// A template of such an entry: `name` and any of its keys, none required.
    Template(Tagged),
}

impl Entry {
    fn tagged(self) -> Tagged {
        match self {
            Entry::Tagged(t) | Entry::Template(t) => t,
        }
    }

    /// The field type of one entry.
    fn ty(self) -> Ty {
        match self {
            Entry::Tagged(t) => Ty::Tagged(t.kinds.to_string()),
            Entry::Template(t) => Ty::Template(t.kinds.to_string()),
        }
    }
}

/// The tagged list whose kinds are the enum `kinds`, if any.
fn tagged_by(kinds: &str) -> Option<Tagged> {
    READ_AS
        .iter()
        .map(|(_, _, e)| e.tagged())
        .find(|t| t.kinds == kinds)
}

/// A field's type, as far as the schema tells it.
#[derive(Clone, Debug)]
enum Ty {
    Str,
    Bool,
    Unsigned,
    Signed,
    Float,
    Any,
    List(Box<Ty>),
    Map(Box<Ty>),
    Def(String),
    Tagged(String),
    Template(String),
}

#[derive(Clone)]
struct Field {
    key: String,
    ty: Ty,
    doc: String,
}

enum Shape {
    Struct(Vec<Field>),
    /// `#[serde(untagged)]`: any of the variants' types.
    Untagged(Vec<Ty>),
    /// Externally tagged newtype variants: `(tag, doc, type)`.
    Variants(Vec<(String, String, Ty)>),
}

struct Def {
    doc: String,
    shape: Shape,
}

/// What `build.rs` writes: the schema (pretty JSON) and the reference page.
pub struct Generated {
    pub schema: String,
    pub page: String,
    /// The files the types were read from (the build reruns when one changes).
    pub sources: Vec<PathBuf>,
}

fn doc_of(attrs: &[syn::Attribute]) -> String {
    let mut lines = Vec::new();
    for a in attrs {
        if !a.path().is_ident("doc") {
            continue;
        }
        if let syn::Meta::NameValue(nv) = &a.meta {
            if let syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(s),
                ..
            }) = &nv.value
            {
                lines.push(s.value().trim().to_string());
            }
        }
    }
    lines.join(" ").trim().to_string()
}

/// The `serde(...)` words of `attrs`: `("rename", Some("type"))`, `("untagged", None)`.
fn serde_of(attrs: &[syn::Attribute]) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    for a in attrs.iter().filter(|a| a.path().is_ident("serde")) {
        let _ = a.parse_nested_meta(|m| {
            let name = m
                .path
                .get_ident()
                .map(|i| i.to_string())
                .unwrap_or_default();
            let value = match m.value() {
                Ok(v) => v.parse::<syn::LitStr>().ok().map(|s| s.value()),
                Err(_) => None,
            };
            out.push((name, value));
            Ok(())
        });
    }
    out
}

fn derives_deserialize(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("derive"))
        .any(|a| {
            let mut found = false;
            let _ = a.parse_nested_meta(|m| {
                found |= m
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "Deserialize");
                Ok(())
            });
            found
        })
}

fn ty_of(ty: &syn::Type) -> Ty {
    let syn::Type::Path(p) = ty else {
        return Ty::Any;
    };
    let Some(last) = p.path.segments.last() else {
        return Ty::Any;
    };
    let args: Vec<&syn::Type> = match &last.arguments {
        syn::PathArguments::AngleBracketed(a) => a
            .args
            .iter()
            .filter_map(|g| match g {
                syn::GenericArgument::Type(t) => Some(t),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let name = last.ident.to_string();
    match (name.as_str(), args.as_slice()) {
        ("Option" | "Box", [inner]) => ty_of(inner),
        ("Vec", [inner]) => Ty::List(Box::new(ty_of(inner))),
        ("BTreeMap" | "HashMap", [_, value]) => Ty::Map(Box::new(ty_of(value))),
        ("String", _) => Ty::Str,
        ("bool", _) => Ty::Bool,
        ("u8" | "u16" | "u32" | "u64" | "usize", _) => Ty::Unsigned,
        ("i8" | "i16" | "i32" | "i64" | "isize", _) => Ty::Signed,
        ("f32" | "f64", _) => Ty::Float,
        ("Value", _) => Ty::Any,
        (n, _) if n.starts_with("Raw") => Ty::Def(n.to_string()),
        _ => Ty::Any,
    }
}

fn collect(items: &[syn::Item], defs: &mut BTreeMap<String, Def>) -> bool {
    let mut any = false;
    for item in items {
        match item {
            syn::Item::Struct(s)
                if s.ident.to_string().starts_with("Raw") && derives_deserialize(&s.attrs) =>
            {
                let syn::Fields::Named(named) = &s.fields else {
                    continue;
                };
                let fields = named
                    .named
                    .iter()
                    .filter_map(|f| {
                        let serde = serde_of(&f.attrs);
                        if serde
                            .iter()
                            .any(|(n, _)| n == "skip" || n == "skip_deserializing")
                        {
                            return None;
                        }
                        let ident = f.ident.as_ref()?.to_string();
                        let key = serde
                            .iter()
                            .find(|(n, _)| n == "rename")
                            .and_then(|(_, v)| v.clone())
                            .unwrap_or(ident);
                        Some(Field {
                            key,
                            ty: ty_of(&f.ty),
                            doc: doc_of(&f.attrs),
                        })
                    })
                    .collect();
                defs.insert(
                    s.ident.to_string(),
                    Def {
                        doc: doc_of(&s.attrs),
                        shape: Shape::Struct(fields),
                    },
                );
                any = true;
            }
            syn::Item::Enum(e)
                if e.ident.to_string().starts_with("Raw") && derives_deserialize(&e.attrs) =>
            {
                let serde = serde_of(&e.attrs);
                let lowercase = serde
                    .iter()
                    .any(|(n, v)| n == "rename_all" && v.as_deref() == Some("lowercase"));
                let variants = e.variants.iter().map(|v| {
                    let ty = v.fields.iter().next().map_or(Ty::Any, |f| ty_of(&f.ty));
                    let tag = serde_of(&v.attrs)
                        .into_iter()
                        .find(|(n, _)| n == "rename")
                        .and_then(|(_, v)| v)
                        .unwrap_or_else(|| {
                            let name = v.ident.to_string();
                            if lowercase {
                                name.to_lowercase()
                            } else {
                                name
                            }
                        });
                    (tag, doc_of(&v.attrs), ty)
                });
                let shape = if serde.iter().any(|(n, _)| n == "untagged") {
                    Shape::Untagged(variants.map(|(_, _, t)| t).collect())
                } else {
                    Shape::Variants(variants.collect())
                };
                defs.insert(
                    e.ident.to_string(),
                    Def {
                        doc: doc_of(&e.attrs),
                        shape,
                    },
                );
                any = true;
            }
            syn::Item::Mod(m) => {
                let test = m.attrs.iter().any(|a| {
                    a.path().is_ident("cfg")
                        && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test")
                });
                if let (false, Some((_, inner))) = (test, &m.content) {
                    any |= collect(inner, defs);
                }
            }
            _ => {}
        }
    }
    any
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            walk(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

// ------------------------------------------------------------ what the docs say

/// The doc without a leading `Kind: ` qualifier (`Modbus RTU: `, `` `sink` nodes: ``), and
/// whether it had one (`` `big` (default: ...`` is a choice, not a qualifier).
fn unqualified(doc: &str) -> (&str, bool) {
    match doc.split_once(": ") {
        Some((head, rest))
            if !head.contains(['.', '(']) && head.len() <= 40 && !head.is_empty() =>
        {
            (rest, true)
        }
        _ => (doc, false),
    }
}

/// The choices a doc opens with: `` `a` (default), `b` or `c`. ``
fn choices(doc: &str) -> Vec<String> {
    let (text, _) = unqualified(doc);
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let Some(r) = rest.strip_prefix('`') else {
            return Vec::new();
        };
        let Some(end) = r.find('`') else {
            return Vec::new();
        };
        out.push(r[..end].to_string());
        rest = &r[end + 1..];
        if let Some(r) = rest.strip_prefix(" (") {
            let Some(close) = r.find(')') else {
                return Vec::new();
            };
            let inside = &r[..close];
            if let Some(more) = inside.strip_prefix("or ") {
                // `(or `x`)`: one more choice.
                out.extend(more.split('`').skip(1).step_by(2).map(String::from));
            }
            rest = &r[close + 1..];
        }
        if let Some(r) = rest
            .strip_prefix(", or ")
            .or(rest.strip_prefix(", "))
            .or(rest.strip_prefix(" or "))
        {
            rest = r;
            continue;
        }
        let ends = rest.is_empty() || rest.starts_with('.') || rest.starts_with(';');
        // Choices are words: `table` or `database.table` shows shapes, not values.
        let words = out
            .iter()
            .all(|c| !c.is_empty() && c.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_'));
        return if ends && words && out.len() >= 2 {
            out
        } else {
            Vec::new()
        };
    }
}

/// The default a doc names, as a value of type `ty`.
fn default_of(doc: &str, ty: &Ty) -> Option<Value> {
    let text = |s: &str| -> Option<Value> {
        match ty {
            Ty::Str => Some(Value::String(s.to_string())),
            Ty::Unsigned | Ty::Signed => s.parse::<i64>().ok().map(Value::from),
            Ty::Float => s.parse::<f64>().ok().map(Value::from),
            Ty::Bool => s.parse::<bool>().ok().map(Value::from),
            _ => None,
        }
    };
    if let Some(at) = doc.find("Default ") {
        let rest = &doc[at + "Default ".len()..];
        if let Some(r) = rest.strip_prefix('`') {
            return r.find('`').and_then(|end| text(&r[..end]));
        }
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '.' || *c == '-')
            .collect();
        let word = word.trim_end_matches('.');
        if !matches!(ty, Ty::Str) {
            if let Some(v) = text(word) {
                return Some(v);
            }
        }
    }
    if let Some(at) = doc.find("(default ") {
        let rest = &doc[at + "(default ".len()..];
        if let Some(v) = rest.split_once(')').and_then(|(word, _)| text(word)) {
            if !matches!(ty, Ty::Str) {
                return Some(v);
            }
        }
    }
    let at = doc.find("` (default")?;
    let start = doc[..at].rfind('`')?;
    text(&doc[start + 1..at])
}

fn required(doc: &str) -> bool {
    let (_, qualified) = unqualified(doc);
    !qualified
        && ["Required.", "Required;", "Required,"]
            .iter()
            .any(|r| doc.contains(r))
        || doc.ends_with("Required")
}

// ------------------------------------------------------------ the schema

fn schema_of(ty: &Ty) -> Value {
    match ty {
        Ty::Str => json!({"type": "string"}),
        Ty::Bool => json!({"type": "boolean"}),
        Ty::Unsigned => json!({"type": "integer", "minimum": 0}),
        Ty::Signed => json!({"type": "integer"}),
        Ty::Float => json!({"type": "number"}),
        Ty::Any => json!({}),
        Ty::List(inner) => json!({"type": "array", "items": schema_of(inner)}),
        Ty::Map(inner) => json!({"type": "object", "additionalProperties": schema_of(inner)}),
        Ty::Def(name) | Ty::Tagged(name) | Ty::Template(name) => {
            json!({"$ref": format!("#/$defs/{}", def_name(ty, name))})
        }
    }
}

/// The `$defs` name of a type: the struct's, or for a [`READ_AS`] entry its own.
fn def_name(ty: &Ty, name: &str) -> String {
    match ty {
        Ty::Tagged(_) => format!("{name}Entry"),
        Ty::Template(_) => format!("{name}Template"),
        _ => name.to_string(),
    }
}

fn field_schema(f: &Field) -> Value {
    let mut s = schema_of(&f.ty);
    let Value::Object(map) = &mut s else {
        return s;
    };
    if !f.doc.is_empty() {
        map.insert("description".into(), Value::String(f.doc.clone()));
    }
    if let Some(d) = default_of(&f.doc, &f.ty) {
        map.insert("default".into(), d);
    }
    if matches!(f.ty, Ty::Str) {
        let c = choices(&f.doc);
        if !c.is_empty() {
            map.insert("enum".into(), json!(c));
        }
    }
    s
}

fn object(
    doc: &str,
    fields: &[Field],
    extra: Vec<(String, Value)>,
    required_keys: Vec<String>,
) -> Value {
    let mut properties = Map::new();
    for (k, v) in extra {
        properties.insert(k, v);
    }
    let mut required_keys = required_keys;
    for f in fields {
        properties.insert(f.key.clone(), field_schema(f));
        if required(&f.doc) {
            required_keys.push(f.key.clone());
        }
    }
    let mut s = json!({
        "type": "object",
        "additionalProperties": false,
        "properties": properties,
    });
    if !doc.is_empty() {
        s["description"] = Value::String(doc.to_string());
    }
    if !required_keys.is_empty() {
        s["required"] = json!(required_keys);
    }
    s
}

/// The fields of the struct `name` (none for another shape).
fn fields_of<'d>(defs: &'d BTreeMap<String, Def>, name: &str) -> &'d [Field] {
    match defs.get(name).map(|d| &d.shape) {
        Some(Shape::Struct(fields)) => fields,
        _ => &[],
    }
}

const NAME_DOC: &str = "Its name: 1 to 64 letters, digits, `-` or `_`, unique.";

/// The `name` of an entry whose kinds share no struct of common keys.
fn name_field() -> (String, Value) {
    (
        "name".to_string(),
        json!({"type": "string", "description": NAME_DOC}),
    )
}

fn def_schema(defs: &BTreeMap<String, Def>, name: &str, def: &Def) -> Value {
    match &def.shape {
        Shape::Struct(fields) => object(&def.doc, fields, Vec::new(), Vec::new()),
        Shape::Untagged(types) => json!({
            "description": def.doc,
            "anyOf": types.iter().map(schema_of).collect::<Vec<_>>(),
        }),
        Shape::Variants(variants) => json!({
            "description": def.doc,
            "oneOf": variants.iter().map(|(tag, doc, ty)| {
                let inner = match ty { Ty::Def(n) => fields_of(defs, n), _ => &[] };
                let _ = name;
                object(doc, inner, vec![(tag.clone(), json!({}))], Vec::new())
            }).collect::<Vec<_>>(),
        }),
    }
}

/// The `$defs` of a [`READ_AS`] entry: its own (by [`def_name`]) and one per kind
/// (`<its own>_<tag>`), which its `if`/`then`s name.
fn entry_schema(defs: &BTreeMap<String, Def>, entry: Entry) -> Vec<(String, Value)> {
    let t = entry.tagged();
    let template = matches!(entry, Entry::Template(_));
    let own = def_name(&entry.ty(), t.kinds);
    let Some(Def {
        doc,
        shape: Shape::Variants(variants),
    }) = defs.get(t.kinds)
    else {
        return vec![(own, json!({}))];
    };
    // A template cannot name another template.
    let common: Vec<Field> = t
        .common
        .map(|c| fields_of(defs, c))
        .unwrap_or_default()
        .iter()
        .filter(|f| !(template && Some(f.key.as_str()) == t.defers_to))
        .cloned()
        .collect();
    let mut out = Vec::new();
    let mut kinds = Vec::new();
    let mut all_of = Vec::new();
    for (tag, vdoc, ty) in variants {
        let inner = match ty {
            Ty::Def(n) => fields_of(defs, n),
            _ => &[],
        };
        let fields: Vec<Field> = common
            .iter()
            .chain(inner)
            .map(|f| Field {
                doc: if template {
                    f.doc.replace("Required", "Required of the device")
                } else {
                    f.doc.clone()
                },
                ..f.clone()
            })
            .collect();
        let mut extra = Vec::new();
        if t.common.is_none() {
            extra.push(name_field());
        }
        extra.push((
            t.tag.to_string(),
            json!({"const": tag, "description": t.tag_doc}),
        ));
        let mut kind = object(vdoc, &fields, extra, Vec::new());
        let required = kind
            .as_object_mut()
            .and_then(|m| m.remove("required"))
            .and_then(|r| serde_json::from_value::<Vec<String>>(r).ok())
            .unwrap_or_default();
        let always: Vec<String> = ["name", t.tag]
            .into_iter()
            .chain(required.iter().map(String::as_str))
            .map(String::from)
            .collect();
        match (template, t.defers_to) {
            (true, _) => kind["required"] = json!(["name"]),
            (false, None) => kind["required"] = json!(always),
            (false, Some(key)) => {
                kind["required"] = json!(["name"]);
                kind["if"] = json!({"not": {"required": [key]}});
                kind["then"] = json!({"required": always});
            }
        }
        let name = format!("{own}_{tag}");
        let at = json!({"$ref": format!("#/$defs/{name}")});
        all_of.push(json!({
            "if": {"properties": {t.tag: {"const": tag}}, "required": [t.tag]},
            "then": at,
        }));
        kinds.push((tag.clone(), at));
        out.push((name, kind));
    }
    let tags: Vec<&String> = kinds.iter().map(|(tag, _)| tag).collect();
    let any: Vec<&Value> = kinds.iter().map(|(_, at)| at).collect();
    let required = match (template, t.defers_to) {
        (false, None) => json!(["name", t.tag]),
        _ => json!(["name"]),
    };
    if template || t.defers_to.is_some() {
        let mut then = json!({"anyOf": any});
        if let (false, Some(key)) = (template, t.defers_to) {
            then["required"] = json!([key]);
        }
        all_of.push(json!({"if": {"not": {"required": [t.tag]}}, "then": then}));
    }
    let description = if template {
        format!(
            "A template of a `{}` entry: a name and any of its keys, none required.",
            t.tag
        )
    } else {
        doc.clone()
    };
    out.insert(
        0,
        (
            own,
            json!({
                "description": description,
                "type": "object",
                "properties": {t.tag: {"enum": tags, "description": t.tag_doc}},
                "required": required,
                "allOf": all_of,
            }),
        ),
    );
    out
}

/// Replaces the [`READ_AS`] fields' `Any` by what their entries are.
fn read_as(defs: &mut BTreeMap<String, Def>) {
    for (owner, key, entry) in READ_AS {
        if let Some(Def {
            shape: Shape::Struct(fields),
            ..
        }) = defs.get_mut(owner)
        {
            for f in fields.iter_mut().filter(|f| f.key == key) {
                f.ty = Ty::List(Box::new(entry.ty()));
            }
        }
    }
}

/// The defs reachable from `RawConfig`, in the order a reader meets them.
fn reachable(defs: &BTreeMap<String, Def>) -> Vec<String> {
    fn visit(defs: &BTreeMap<String, Def>, ty: &Ty, out: &mut Vec<String>) {
        match ty {
            Ty::List(t) | Ty::Map(t) => visit(defs, t, out),
            Ty::Def(n) | Ty::Tagged(n) => add(defs, n, out),
            Ty::Template(n) => {
                if let Some(Def {
                    shape: Shape::Variants(v),
                    ..
                }) = defs.get(n)
                {
                    for (_, _, t) in v {
                        visit(defs, t, out);
                    }
                }
                if let Some(Def {
                    shape: Shape::Struct(fields),
                    ..
                }) = defs.get(n)
                {
                    for f in fields {
                        visit(defs, &f.ty, out);
                    }
                }
            }
            _ => {}
        }
    }
    fn add(defs: &BTreeMap<String, Def>, name: &str, out: &mut Vec<String>) {
        if out.iter().any(|n| n == name) {
            return;
        }
        out.push(name.to_string());
        match defs.get(name).map(|d| &d.shape) {
            Some(Shape::Struct(fields)) => {
                for f in fields {
                    visit(defs, &f.ty, out);
                }
            }
            Some(Shape::Untagged(types)) => {
                for t in types {
                    visit(defs, t, out);
                }
            }
            Some(Shape::Variants(v)) => {
                for (_, _, t) in v {
                    visit(defs, t, out);
                }
            }
            None => {}
        }
    }
    let mut out = Vec::new();
    add(defs, "RawConfig", &mut out);
    out
}

// ------------------------------------------------------------ the page

fn type_text(ty: &Ty, anchors: &BTreeMap<String, String>) -> String {
    match ty {
        Ty::Str => "string".into(),
        Ty::Bool => "boolean".into(),
        Ty::Unsigned => "integer ≥ 0".into(),
        Ty::Signed => "integer".into(),
        Ty::Float => "number".into(),
        Ty::Any => "any".into(),
        Ty::List(t) => format!("list of {}", type_text(t, anchors)),
        Ty::Map(t) => format!("map of {}", type_text(t, anchors)),
        Ty::Def(n) | Ty::Tagged(n) | Ty::Template(n) => match anchors.get(n) {
            Some(a) => format!("[object](#{a})"),
            None => "object".into(),
        },
    }
}

fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

fn page(defs: &BTreeMap<String, Def>, order: &[String]) -> String {
    // Each def's section is named by the first path that reaches it.
    let mut paths: BTreeMap<String, String> = BTreeMap::new();
    fn walk_paths(
        defs: &BTreeMap<String, Def>,
        name: &str,
        path: &str,
        paths: &mut BTreeMap<String, String>,
    ) {
        if paths.contains_key(name) {
            return;
        }
        paths.insert(name.to_string(), path.to_string());
        let fields: Vec<(String, Ty)> = match defs.get(name).map(|d| &d.shape) {
            Some(Shape::Struct(f)) => f.iter().map(|f| (f.key.clone(), f.ty.clone())).collect(),
            Some(Shape::Variants(v)) => {
                let tag = tagged_by(name).map_or("type", |t| t.tag);
                v.iter()
                    .map(|(t, _, ty)| (format!("[{tag}: {t}]"), ty.clone()))
                    .collect()
            }
            _ => Vec::new(),
        };
        for (key, ty) in fields {
            let mut ty = ty;
            let mut p = if path.is_empty() {
                key.clone()
            } else if key.starts_with('[') {
                format!("{path}{key}")
            } else {
                format!("{path}.{key}")
            };
            loop {
                match ty {
                    Ty::List(t) => {
                        p.push_str("[]");
                        ty = *t;
                    }
                    Ty::Map(t) => {
                        p.push_str(".*");
                        ty = *t;
                    }
                    _ => break,
                }
            }
            if let Ty::Def(n) | Ty::Tagged(n) | Ty::Template(n) = &ty {
                walk_paths(defs, n, &p, paths);
            }
        }
    }
    walk_paths(defs, "RawConfig", "", &mut paths);
    let anchors: BTreeMap<String, String> = paths
        .iter()
        .map(|(n, p)| {
            let title = if p.is_empty() {
                "top level".to_string()
            } else {
                p.clone()
            };
            let anchor: String = title
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    'a'..='z' | '0'..='9' | '_' | '-' => Some(c),
                    ' ' => Some('-'),
                    _ => None,
                })
                .collect();
            (n.clone(), anchor)
        })
        .collect();
    let mut out = String::from("<!-- Written from the config types (their doc comments) by build.rs; `UPDATE_REFERENCE=1 cargo test --test config_schema` rewrites it: edit the doc comments, not this page. -->\n\n# Configuration\n\nThe config file is YAML. This page lists every key: its type, its default, the values it allows and what it does, written from the config types themselves, as `opex-connector validate` reads them, so it cannot drift from the binary. An unknown key is an error (`validate` names the nearest valid key). `opex-connector schema` prints the same as a JSON Schema (2020-12), which the release ships as `opex-connector.schema.json` (on a box, `opex-connector schema > opex-connector.schema.json` writes it beside the config): with the YAML extension of VS Code (or any editor that speaks the YAML language server), a config whose first line is\n\n```text\n# yaml-language-server: $schema=opex-connector.schema.json\n```\n\ncompletes keys, shows these descriptions on hover and marks unknown keys and wrong types as you type. Values the schema cannot see (a range, a duration's text, whether a source exists) are checked by `opex-connector validate`, which the systemd unit runs before every start.\n");
    for name in order {
        let Some(def) = defs.get(name) else { continue };
        let path = paths.get(name).cloned().unwrap_or_default();
        let title = if path.is_empty() {
            "top level".to_string()
        } else {
            path.clone()
        };
        let _ = write!(out, "\n## {}\n\n", title);
        if !def.doc.is_empty() && !def.doc.starts_with('`') {
            let _ = writeln!(out, "{}\n", def.doc);
        }
        let rows: Vec<(String, &Ty, &str)> = match &def.shape {
            Shape::Struct(fields) => fields
                .iter()
                .map(|f| (f.key.clone(), &f.ty, f.doc.as_str()))
                .collect(),
            Shape::Variants(v) => {
                let tagged = tagged_by(name);
                let tag = tagged.map_or("type", |t| t.tag);
                let common = tagged
                    .and_then(|t| t.common)
                    .map(|c| fields_of(defs, c))
                    .unwrap_or_default();
                if common.is_empty() {
                    let _ = writeln!(out, "One of these, by `{tag}`, with `name`:\n");
                } else {
                    let _ = writeln!(
                        out,
                        "The keys every entry has, and those of its `{tag}`, one of these:\n"
                    );
                }
                common
                    .iter()
                    .map(|f| (f.key.clone(), &f.ty, f.doc.as_str()))
                    .chain(
                        v.iter()
                            .map(|(t, d, ty)| (format!("{tag}: {t}"), ty, d.as_str())),
                    )
                    .collect()
            }
            Shape::Untagged(types) => {
                let list: Vec<String> = types.iter().map(|t| type_text(t, &anchors)).collect();
                let _ = writeln!(out, "Either {}.", list.join(" or "));
                continue;
            }
        };
        out.push_str(
            "| key | type | default | allowed | description |\n| --- | --- | --- | --- | --- |\n",
        );
        for (key, ty, doc) in rows {
            let default = default_of(doc, ty)
                .map(|v| {
                    format!(
                        "`{}`",
                        match v {
                            Value::String(s) => s,
                            v => v.to_string(),
                        }
                    )
                })
                .unwrap_or_default();
            let allowed = if matches!(ty, Ty::Str) {
                choices(doc)
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            } else {
                String::new()
            };
            let req = if required(doc) { " **Required.**" } else { "" };
            let _ = writeln!(
                out,
                "| `{key}` | {} | {default} | {allowed} | {}{} |",
                cell(&type_text(ty, &anchors)),
                cell(doc),
                if doc.contains("Required") { "" } else { req }
            );
        }
    }
    out
}

/// Reads the types under `src` and writes the schema and the page.
pub fn generate(src: &Path) -> Generated {
    let mut files = Vec::new();
    walk(src, &mut files);
    let mut defs = BTreeMap::new();
    let mut sources = Vec::new();
    for file in files {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        if !(text.contains("struct Raw") || text.contains("enum Raw")) {
            continue;
        }
        let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if collect(&parsed.items, &mut defs) {
            sources.push(file);
        }
    }
    read_as(&mut defs);
    let order = reachable(&defs);
    let root = defs
        .get("RawConfig")
        .expect("src/config/raw.rs defines RawConfig");
    let Shape::Struct(root_fields) = &root.shape else {
        panic!("RawConfig is a struct")
    };
    let mut schema = object(&root.doc, root_fields, Vec::new(), Vec::new());
    let mut all = Map::new();
    for name in order.iter().skip(1) {
        if let Some(def) = defs.get(name) {
            all.insert(name.clone(), def_schema(&defs, name, def));
        }
    }
    for (_, _, entry) in READ_AS {
        all.extend(entry_schema(&defs, entry));
    }
    let mut top = Map::new();
    top.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    top.insert("title".into(), json!("opex-connector config"));
    if let Value::Object(m) = &mut schema {
        for (k, v) in std::mem::take(m) {
            top.insert(k, v);
        }
    }
    top.insert("$defs".into(), Value::Object(all));
    let mut text = serde_json::to_string_pretty(&Value::Object(top)).expect("JSON");
    text.push('\n');
    Generated {
        schema: text,
        page: page(&defs, &order),
        sources,
    }
}
