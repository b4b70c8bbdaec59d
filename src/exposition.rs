//! The Prometheus text format of the state gauges a metrics page renders at scrape time
//! ([`Exposition`]). A leaf: every module that renders series (the metrics listener, the
//! span counts, the peer refusals) writes through it without depending on the listener.

use std::fmt::Write as _;

/// A Prometheus text-format writer for state gauges: one `# HELP`/`# TYPE` header per
/// family, then its samples, label values escaped.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// Starts the gauge family `name` with its help text.
    pub fn gauge(&mut self, name: &str, help: &str) -> &mut Self {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} gauge");
        self
    }

    /// Starts the counter family `name` (ending in `_total`) with its help text: a count
    /// kept by something that lives only as long as its series (a task instance), so it
    /// is rendered at scrape time like a gauge and `rate()` sees a reset when the instance
    /// is replaced.
    pub fn counter(&mut self, name: &str, help: &str) -> &mut Self {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} counter");
        self
    }

    /// One sample of the current family.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) -> &mut Self {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{k}=\"{}\"", escape_label(v));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
        self
    }

    /// The text written so far.
    pub fn into_text(self) -> String {
        self.text
    }
}

/// Escapes a label value as the text format requires (`\`, `"`, newline).
fn escape_label(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.contains(['\\', '"', '\n']) {
        return v.into();
    }
    let mut s = String::with_capacity(v.len() + 2);
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_escape_label_values() {
        let mut e = Exposition::default();
        e.gauge("wharf_x", "help")
            .sample("wharf_x", &[("connector", "a\"b\\c")], 2.0);
        assert_eq!(
            e.into_text(),
            "# HELP wharf_x help\n# TYPE wharf_x gauge\nwharf_x{connector=\"a\\\"b\\\\c\"} 2\n"
        );
    }
}
