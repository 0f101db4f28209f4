//! The Prometheus text exposition format, written by hand: a few dozen lines do not need a crate.

use std::fmt::Write;

/// Builds one `/metrics` page.
#[derive(Debug, Default)]
pub struct Page {
    out: String,
    /// Families written so far: a family written twice makes the page invalid.
    names: Vec<String>,
}

/// A counter family read off items of type `T`: its name, its help, the counter of an item.
pub type Family<T> = (&'static str, &'static str, fn(&T) -> u64);

/// Metric types.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    /// Only goes up; name ends in `_total`.
    Counter,
    /// Goes up and down.
    Gauge,
}

impl Page {
    /// Writes a metric family with one sample per label set. Label values are escaped.
    pub fn family(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        samples: &[(&[(&str, &str)], f64)],
    ) {
        debug_assert!(
            !self.names.iter().any(|n| n == name),
            "metric family {name} written twice"
        );
        self.names.push(name.to_string());
        let kind = match kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        };
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            self.out.push_str(name);
            if !labels.is_empty() {
                self.out.push('{');
                for (i, (k, v)) in labels.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    let _ = write!(self.out, "{k}=\"{}\"", escape(v));
                }
                self.out.push('}');
            }
            let _ = writeln!(self.out, " {value}");
        }
    }

    /// One counter family per entry of `families` (name, help, the counter of an item), with
    /// one sample per item of `items`, labelled `label="<the item's name>"`.
    pub fn counters<T>(&mut self, label: &str, items: &[(&str, &T)], families: &[Family<T>]) {
        for (name, help, pick) in families {
            let labels: Vec<[(&str, &str); 1]> = items.iter().map(|(n, _)| [(label, *n)]).collect();
            let samples: Vec<(&[(&str, &str)], f64)> = labels
                .iter()
                .zip(items)
                .map(|(l, (_, item))| (l.as_slice(), pick(item) as f64))
                .collect();
            self.family(name, Kind::Counter, help, &samples);
        }
    }

    /// One unlabelled sample.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: f64) {
        self.family(name, kind, help, &[(&[], value)]);
    }

    /// The finished page.
    pub fn finish(self) -> String {
        self.out
    }
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let mut p = Page::default();
        p.family("x_total", Kind::Counter, "x", &[(&[("a", "q\"\n")], 1.0)]);
        assert!(p.finish().contains("x_total{a=\"q\\\"\\n\"} 1"));
    }
}
