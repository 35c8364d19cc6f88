//! Metric definitions: one table per process, registered with the global recorder at
//! start-up so `/metrics` carries `# HELP` lines (and so names are chosen in one place).

use metrics::Unit;

/// The Prometheus type of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Monotonic count (`_total` suffix).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// A distribution of observations (`_seconds` suffix for latencies).
    Histogram,
}

/// One metric: name, kind, unit, help text and the Kafka metric it mirrors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricDef {
    /// Prometheus name, e.g. `keel_controller_active_controller_count`.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Unit (`None` for plain counts).
    pub unit: Option<Unit>,
    /// What it measures (the `# HELP` text).
    pub help: &'static str,
    /// The Kafka counterpart (JMX name), or `""` when Kafka has none.
    pub kafka: &'static str,
}

impl MetricDef {
    /// A definition (usable in `const` tables).
    pub const fn new(
        name: &'static str,
        kind: MetricKind,
        unit: Option<Unit>,
        help: &'static str,
        kafka: &'static str,
    ) -> Self {
        Self {
            name,
            kind,
            unit,
            help,
            kafka,
        }
    }
}

/// Describes every metric of `defs` to the installed recorder (a no-op without one).
pub fn describe_all(defs: &[MetricDef]) {
    for d in defs {
        match (d.kind, d.unit) {
            (MetricKind::Counter, Some(u)) => metrics::describe_counter!(d.name, u, d.help),
            (MetricKind::Counter, None) => metrics::describe_counter!(d.name, d.help),
            (MetricKind::Gauge, Some(u)) => metrics::describe_gauge!(d.name, u, d.help),
            (MetricKind::Gauge, None) => metrics::describe_gauge!(d.name, d.help),
            (MetricKind::Histogram, Some(u)) => metrics::describe_histogram!(d.name, u, d.help),
            (MetricKind::Histogram, None) => metrics::describe_histogram!(d.name, d.help),
        }
    }
}

/// Creates every unlabelled counter of `defs` at 0 (except the names in `labelled`, whose
/// series the caller creates with their labels), so a counter is exported from the start:
/// Prometheus `rate()`/`increase()` miss a series' first increment, and an alert cannot tell
/// "0" from "not exported".
pub fn zero_counters(defs: &[MetricDef], labelled: &[&str]) {
    for d in defs {
        if d.kind == MetricKind::Counter && !labelled.contains(&d.name) {
            metrics::counter!(d.name).increment(0);
        }
    }
}

/// Checks naming rules on a table (used by each process's unit test): prefix, counters end in
/// `_total`, second-based units end in `_seconds`, names unique.
pub fn check_names(defs: &[MetricDef], prefix: &str) -> Result<(), String> {
    let mut seen = std::collections::BTreeSet::new();
    for d in defs {
        if !d.name.starts_with(prefix) {
            return Err(format!("{} does not start with {prefix}", d.name));
        }
        if !seen.insert(d.name) {
            return Err(format!("{} is defined twice", d.name));
        }
        if (d.kind == MetricKind::Counter) != d.name.ends_with("_total") {
            return Err(format!("{}: only counters end in _total", d.name));
        }
        if d.unit == Some(Unit::Seconds) && !d.name.ends_with("_seconds") {
            return Err(format!("{}: a seconds metric must end in _seconds", d.name));
        }
        if !d
            .name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        {
            return Err(format!("{}: not snake_case", d.name));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn def(name: &'static str, kind: MetricKind, unit: Option<Unit>) -> MetricDef {
        MetricDef {
            name,
            kind,
            unit,
            help: "h",
            kafka: "",
        }
    }

    #[test]
    fn naming_rules_catch_each_mistake() {
        let ok = [
            def("keel_x_a_total", MetricKind::Counter, None),
            def(
                "keel_x_b_seconds",
                MetricKind::Histogram,
                Some(Unit::Seconds),
            ),
        ];
        assert_eq!(check_names(&ok, "keel_x_"), Ok(()));
        for (bad, why) in [
            (
                def("keel_y_a_total", MetricKind::Counter, None),
                "start with",
            ),
            (def("keel_x_a", MetricKind::Counter, None), "_total"),
            (def("keel_x_a_total", MetricKind::Gauge, None), "_total"),
            (
                def("keel_x_ms", MetricKind::Histogram, Some(Unit::Seconds)),
                "_seconds",
            ),
            (def("keel_x_Big", MetricKind::Gauge, None), "snake_case"),
        ] {
            let e = check_names(&[bad], "keel_x_").unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        let twice = [ok[0], ok[0]];
        assert!(
            check_names(&twice, "keel_x_")
                .unwrap_err()
                .contains("twice")
        );
    }
}
