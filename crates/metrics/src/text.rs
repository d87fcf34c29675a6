//! The Prometheus text exposition format, version 0.0.4: for each family a `# HELP`
//! and a `# TYPE` line, then one line per sample, `name{label="value",...} number`.

use std::fmt::Write;

/// The `Content-Type` of an exposition.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a family's samples are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (from the process's start): Prometheus takes its `rate()`.
    Counter,
    /// Goes up and down: a value now.
    Gauge,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
        }
    }
}

/// An exposition being written.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

/// One family of an [`Exposition`], to add samples to.
#[derive(Debug)]
pub struct Family<'a> {
    text: &'a mut String,
    name: &'a str,
    kind: Kind,
    help: &'a str,
    /// Whether the HELP and TYPE lines are written.
    started: bool,
}

impl Exposition {
    /// An empty exposition.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts family `name`: its samples follow. Its HELP and TYPE lines are written
    /// with its first sample, so that a family without any is left out (parsers differ
    /// on a family with no sample; Prometheus sees none either way).
    ///
    /// Names come from hetch's code, never from a client: one that the format does not
    /// allow is a bug, and panics.
    pub fn family<'a>(&'a mut self, name: &'a str, kind: Kind, help: &'a str) -> Family<'a> {
        assert!(is_name(name, true), "bad metric name {name:?}");
        Family {
            text: &mut self.text,
            name,
            kind,
            help,
            started: false,
        }
    }

    /// A family of one sample without labels.
    pub fn single(&mut self, name: &str, kind: Kind, help: &str, value: u64) {
        self.family(name, kind, help).sample(&[], value);
    }

    /// The text to serve.
    pub fn into_text(self) -> String {
        self.text
    }
}

impl Family<'_> {
    /// Adds the sample of this family with `labels` (names from hetch's code, checked as
    /// [`Exposition::family`] checks names; values escaped, whatever they hold).
    pub fn sample(&mut self, labels: &[(&str, &str)], value: u64) -> &mut Self {
        if !self.started {
            self.started = true;
            self.head();
        }
        self.text.push_str(self.name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (name, v)) in labels.iter().enumerate() {
                assert!(is_name(name, false), "bad label name {name:?}");
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{name}=\"");
                push_escaped(self.text, v, true);
                self.text.push('"');
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {value}");
        self
    }

    /// The HELP and TYPE lines.
    fn head(&mut self) {
        let name = self.name;
        let _ = write!(self.text, "# HELP {name} ");
        push_escaped(self.text, self.help, false);
        let _ = writeln!(self.text, "\n# TYPE {name} {}", self.kind.as_str());
    }
}

/// Appends `v` escaped as the format says: a backslash and a line break always, a
/// double quote in label values (`quote`), not in HELP text.
fn push_escaped(out: &mut String, v: &str, quote: bool) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// A metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`) or, without colons, a label name; names
/// starting with `__` are Prometheus' own.
fn is_name(name: &str, metric: bool) -> bool {
    let ok = |c: char, first: bool| {
        c.is_ascii_alphabetic()
            || c == '_'
            || (metric && c == ':')
            || (!first && c.is_ascii_digit())
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| ok(c, true))
        && chars.all(|c| ok(c, false))
        && !name.starts_with("__")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sample as the parser reads it: (name, labels, value).
    type Parsed = (String, Vec<(String, String)>, f64);

    /// The samples of `text` as a real Prometheus text parser reads them; the whole
    /// text must parse.
    fn parse(text: &str) -> Vec<Parsed> {
        let (rest, families) =
            nom_openmetrics::parser::prometheus(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert!(rest.is_empty(), "left over: {rest:?}");
        families
            .iter()
            .flat_map(|f| f.samples.iter())
            .map(|s| {
                let labels = s
                    .labels()
                    .iter()
                    .map(|l| (l.name.to_string(), l.value.clone()))
                    .collect();
                (s.name().to_string(), labels, s.number())
            })
            .collect()
    }

    #[test]
    fn families_and_samples_parse_back_as_written() {
        let mut e = Exposition::new();
        e.single("up_total", Kind::Counter, "How often it went up.", 3);
        e.family("by_kind", Kind::Gauge, "Things by kind.")
            .sample(&[("kind", "a")], 1)
            .sample(&[("kind", "b"), ("state", "on")], u64::MAX);
        e.family("never", Kind::Counter, "No sample: left out.");
        let text = e.into_text();
        assert!(!text.contains("never"), "{text}");
        assert!(text.contains("# TYPE up_total counter\n"), "{text}");
        assert!(text.contains("# TYPE by_kind gauge\n"), "{text}");
        let samples = parse(&text);
        let got: Vec<_> = samples
            .iter()
            .map(|(n, l, v)| (n.as_str(), l.len(), *v))
            .collect();
        assert_eq!(
            got,
            [
                ("up_total", 0, 3.0),
                ("by_kind", 1, 1.0),
                ("by_kind", 2, u64::MAX as f64)
            ]
        );
    }

    /// Whatever a label value holds comes back whole, and cannot end the value, the
    /// line or the sample early: quotes, backslashes, line breaks, braces, commas.
    #[test]
    fn label_values_are_escaped_and_help_text_too() {
        let hostile = [
            "plain",
            "a\"b",
            "back\\slash",
            "line\nbreak",
            "} 99\nforged_total 1\n",
            "\\\"",
            "x\",other=\"y",
            "ünïcödé",
            "",
        ];
        let mut e = Exposition::new();
        let mut f = e.family("things", Kind::Gauge, "Help with \\ and\na line break.");
        for (i, v) in hostile.iter().enumerate() {
            f.sample(&[("v", v)], i as u64);
        }
        let text = e.into_text();
        assert!(text.starts_with("# HELP things Help with \\\\ and\\na line break.\n"));
        let samples = parse(&text);
        assert_eq!(samples.len(), hostile.len(), "{text}");
        for (i, (name, labels, value)) in samples.iter().enumerate() {
            assert_eq!(name, "things");
            assert_eq!(labels, &[("v".to_string(), hostile[i].to_string())]);
            assert_eq!(*value, i as f64);
        }
    }

    #[test]
    fn names_the_format_does_not_allow_are_refused() {
        for good in ["a", "a_b:c", "_x9"] {
            assert!(is_name(good, true), "{good}");
        }
        assert!(!is_name("a:b", false));
        for bad in ["", "9a", "a-b", "a b", "__reserved", "a{b"] {
            assert!(!is_name(bad, true), "{bad}");
        }
        let r = std::panic::catch_unwind(|| {
            let mut e = Exposition::new();
            e.family("ok", Kind::Gauge, "")
                .sample(&[("bad-label", "v")], 1);
        });
        assert!(r.is_err());
    }
}
