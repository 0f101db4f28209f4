//! Each group's last values, kept small: a slot per point of the group, found by name without
//! a map of its own, and most entries (`{"value": <value>, "quality": "good"|"bad"}`) kept
//! as their value and quality rather than as a JSON object. A gateway polling 10 000 points
//! keeps about 50 bytes a point instead of about 400, and a poll replaces a good number
//! without allocating. The JSON of `/api/status` is made when it is asked for.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use crate::sources::catalogue::PointDef;

/// A point's last entry and the time it came.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    entry: Entry,
    /// Unix milliseconds of the poll (or notification) it came with.
    pub ts_ms: u64,
}

/// An entry as it is kept.
#[derive(Debug, Clone, PartialEq)]
enum Entry {
    /// `{"value": value, "quality": "good"}` (or `"bad"`), without its object.
    Plain { value: Value, good: bool },
    /// Any other entry (a unit, a bad point's reason, a device's status text), as it came.
    Full(Value),
}

impl Kept {
    /// Entry `v` of a poll at `ts_ms`.
    pub fn new(v: &Value, ts_ms: u64) -> Kept {
        let plain = v.as_object().filter(|o| o.len() == 2).and_then(|o| {
            let good = match o.get("quality")?.as_str()? {
                "good" => true,
                "bad" => false,
                _ => return None,
            };
            Some(Entry::Plain {
                value: o.get("value")?.clone(),
                good,
            })
        });
        Kept {
            entry: plain.unwrap_or_else(|| Entry::Full(v.clone())),
            ts_ms,
        }
    }

    /// The value (`null` when bad).
    pub fn value(&self) -> Value {
        match &self.entry {
            Entry::Plain { value, .. } => value.clone(),
            Entry::Full(v) => v.get("value").cloned().unwrap_or(Value::Null),
        }
    }

    /// True when the device answered it good.
    pub fn good(&self) -> bool {
        match &self.entry {
            Entry::Plain { good, .. } => *good,
            Entry::Full(v) => v.get("quality").is_some_and(|q| q == "good"),
        }
    }

    /// The entry when it carries more than its value and quality; `null` otherwise.
    pub fn detail(&self) -> Value {
        match &self.entry {
            Entry::Plain { .. } => Value::Null,
            Entry::Full(v) => v.clone(),
        }
    }

    /// The entry as the group's record carried it.
    pub fn json(&self) -> Value {
        match &self.entry {
            Entry::Plain { value, good } => {
                json!({"value": value, "quality": if *good { "good" } else { "bad" }})
            }
            Entry::Full(v) => v.clone(),
        }
    }
}

/// One group's last values.
#[derive(Debug, Default)]
pub struct GroupValues {
    /// True once a poll of the group came in.
    read: bool,
    /// The index in the device's points of each slot's point, in config order.
    points: Vec<usize>,
    /// The slots in their points' name order: the lookup by name.
    by_name: Vec<usize>,
    /// Each slot's last entry, once read.
    slots: Vec<Option<Kept>>,
    /// Points the device sent that the config does not name in this group.
    others: BTreeMap<String, Kept>,
}

impl GroupValues {
    /// Group `group`'s slots for the points of `defs` in it.
    pub fn new(group: &str, defs: &[PointDef]) -> GroupValues {
        let points: Vec<usize> = (0..defs.len())
            .filter(|&i| defs.get(i).is_some_and(|p| p.group == group))
            .collect();
        let mut by_name: Vec<usize> = (0..points.len()).collect();
        by_name.sort_by(|&a, &b| name(defs, &points, a).cmp(name(defs, &points, b)));
        GroupValues {
            read: false,
            slots: vec![None; points.len()],
            points,
            by_name,
            others: BTreeMap::new(),
        }
    }

    /// The slot of point `point`.
    fn slot(&self, defs: &[PointDef], point: &str) -> Option<usize> {
        let at = self
            .by_name
            .binary_search_by(|&s| name(defs, &self.points, s).cmp(point))
            .ok()?;
        self.by_name.get(at).copied()
    }

    /// Keeps the points of one poll (by name, `{"value","quality",..}`) read at `ts_ms`.
    pub fn take(&mut self, defs: &[PointDef], points: &Map<String, Value>, ts_ms: u64) {
        self.read = true;
        for (point, v) in points {
            let kept = Kept::new(v, ts_ms);
            match self.slot(defs, point) {
                Some(s) => {
                    if let Some(slot) = self.slots.get_mut(s) {
                        *slot = Some(kept);
                    }
                }
                None => {
                    self.others.insert(point.clone(), kept);
                }
            }
        }
    }

    /// Point `point`'s last entry, once read.
    pub fn get(&self, defs: &[PointDef], point: &str) -> Option<&Kept> {
        match self.slot(defs, point) {
            Some(s) => self.slots.get(s)?.as_ref(),
            None => self.others.get(point),
        }
    }

    /// Every point read, by name, in config order (then the others): `null` before the
    /// group's first poll.
    pub fn json(&self, defs: &[PointDef]) -> Value {
        if !self.read {
            return Value::Null;
        }
        let mut out = Map::new();
        for (s, kept) in self.slots.iter().enumerate() {
            if let Some(kept) = kept {
                out.insert(name(defs, &self.points, s).to_string(), kept.json());
            }
        }
        for (n, kept) in &self.others {
            out.insert(n.clone(), kept.json());
        }
        Value::Object(out)
    }

    /// The points read bad, by name, with their entries.
    pub fn bad(&self, defs: &[PointDef]) -> Vec<(String, Value)> {
        let slots = self.slots.iter().enumerate().filter_map(|(s, k)| {
            let k = k.as_ref().filter(|k| !k.good())?;
            Some((name(defs, &self.points, s).to_string(), k.json()))
        });
        let others = self
            .others
            .iter()
            .filter(|(_, k)| !k.good())
            .map(|(n, k)| (n.clone(), k.json()));
        slots.chain(others).collect()
    }
}

/// The name of slot `s`'s point.
fn name<'a>(defs: &'a [PointDef], points: &[usize], s: usize) -> &'a str {
    points
        .get(s)
        .and_then(|&i| defs.get(i))
        .map_or("", |p| p.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(group: &str, name: &str) -> PointDef {
        PointDef {
            group: group.into(),
            name: name.into(),
            area: "holding_register",
            type_name: "u16".into(),
            kind: None,
            unit: None,
            scale: None,
            writable: false,
            min: None,
            max: None,
        }
    }

    #[test]
    fn entries_read_back_as_they_came_plain_or_not_and_unknown_points_are_kept_too() {
        let defs = vec![point("g", "b"), point("h", "x"), point("g", "a")];
        let mut g = GroupValues::new("g", &defs);
        assert_eq!(g.json(&defs), Value::Null);
        let mut points = Map::new();
        points.insert("a".into(), json!({"value": 1.5, "quality": "good"}));
        points.insert(
            "b".into(),
            json!({"value": null, "quality": "bad", "exception": 2}),
        );
        points.insert("z".into(), json!({"value": "on", "quality": "good"}));
        g.take(&defs, &points, 7);
        assert_eq!(
            g.json(&defs),
            json!({"b": {"value": null, "quality": "bad", "exception": 2},
                   "a": {"value": 1.5, "quality": "good"},
                   "z": {"value": "on", "quality": "good"}})
        );
        let a = g.get(&defs, "a").expect("a kept");
        assert_eq!((a.value(), a.good(), a.ts_ms), (json!(1.5), true, 7));
        assert_eq!(a.detail(), Value::Null);
        let b = g.get(&defs, "b").expect("b kept");
        assert!(!b.good());
        assert_eq!(b.detail()["exception"], json!(2));
        assert_eq!(g.get(&defs, "z").map(Kept::value), Some(json!("on")));
        assert!(g.get(&defs, "x").is_none());
        assert_eq!(
            g.bad(&defs),
            vec![(
                "b".to_string(),
                json!({"value": null, "quality": "bad", "exception": 2})
            )]
        );
        // A later poll replaces a point's entry and keeps the others'.
        let mut again = Map::new();
        again.insert("b".into(), json!({"value": 3, "quality": "good"}));
        g.take(&defs, &again, 9);
        assert!(g.bad(&defs).is_empty());
        assert_eq!(g.get(&defs, "b").map(|k| k.ts_ms), Some(9));
        assert_eq!(g.get(&defs, "a").map(|k| k.ts_ms), Some(7));
    }
}
