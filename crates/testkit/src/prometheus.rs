//! A metrics endpoint's body read as Prometheus reads it: by a real parser of the text
//! exposition format (`nom-openmetrics`), not by matching lines, so that a test fails on
//! anything a scraper would reject or read otherwise (a stray line, a bad escape, a
//! sample without its family's TYPE).

use std::collections::BTreeMap;

/// One sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Its metric name.
    pub name: String,
    /// Its labels, unescaped.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
    /// Its family's TYPE (`counter`, `gauge`, ...).
    pub kind: String,
}

/// A parsed exposition.
#[derive(Debug, Clone)]
pub struct Scrape {
    /// Every sample, in order.
    pub samples: Vec<Sample>,
}

impl Scrape {
    /// Parses `text`; panics, showing it, unless all of it parses and every sample has
    /// a TYPE line of its own name.
    pub fn parse(text: &str) -> Scrape {
        let families = match nom_openmetrics::parser::prometheus(text) {
            Ok((_, f)) => f,
            Err(e) => panic!("not the Prometheus text format: {e}\n{text}"),
        };
        let mut samples = Vec::new();
        for f in &families {
            for s in &f.samples {
                let kind = f.descriptors.iter().find_map(|d| match d {
                    nom_openmetrics::MetricDescriptor::Type { metric, r#type } => {
                        (*metric == s.name()).then(|| r#type.to_string().to_lowercase())
                    }
                    _ => None,
                });
                let kind = kind.unwrap_or_else(|| panic!("{} has no TYPE\n{text}", s.name()));
                samples.push(Sample {
                    name: s.name().to_string(),
                    labels: s
                        .labels()
                        .iter()
                        .map(|l| (l.name.to_string(), l.value.clone()))
                        .collect(),
                    value: s.number(),
                    kind,
                });
            }
        }
        Scrape { samples }
    }

    /// The value of `name` with exactly `labels`, if there is such a sample.
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .map(|s| s.value)
    }

    /// The value of `name` with exactly `labels`, as a count; panics, showing every
    /// sample, when there is no such sample.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        match self.get(name, labels) {
            Some(v) => v as u64,
            None => panic!("no {name} {labels:?} in {:#?}", self.samples),
        }
    }

    /// The TYPE of `name`'s family; panics when there is no sample of it.
    pub fn kind(&self, name: &str) -> &str {
        match self.samples.iter().find(|s| s.name == name) {
            Some(s) => &s.kind,
            None => panic!("no {name} in {:#?}", self.samples),
        }
    }

    /// The sum of `name`'s samples over all their labels.
    pub fn sum(&self, name: &str) -> u64 {
        let of_name = self.samples.iter().filter(|s| s.name == name);
        of_name.map(|s| s.value).sum::<f64>() as u64
    }
}
