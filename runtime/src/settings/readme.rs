//! The README's configuration tables, rendered from the declaration.

use super::{Binary, DefaultValue, Kind, Schema, Setting};

impl Schema {
    /// The README table of the settings (Markdown, one row per key, declaration order), ending
    /// with a newline. Integer ranges narrower than their type are shown in the meaning.
    pub fn markdown_table(&self) -> String {
        let mut out =
            String::from("| Keel key | Kafka name | default | meaning |\n|---|---|---|---|\n");
        for s in &self.settings {
            let kafka = if s.kafka.is_empty() {
                "—".to_string()
            } else {
                format!("`{}`", s.kafka)
            };
            let mut meaning = s.doc.to_string();
            match s.kind {
                Kind::Int { ty, min, max, .. } if max < ty.max() => {
                    meaning.push_str(&format!("; {min}..={max}"));
                }
                Kind::Int { min, .. } if min > 1 => meaning.push_str(&format!("; at least {min}")),
                _ => {}
            }
            out.push_str(&format!(
                "| `{}` | {kafka} | {} | {meaning} |\n",
                s.name,
                default_cell(s, self.binary)
            ));
        }
        out
    }
}

/// The README's default cell: the value, with a readable size or duration beside it.
fn default_cell(s: &Setting, binary: Option<Binary>) -> String {
    match s.default {
        DefaultValue::Required => "(required)".into(),
        DefaultValue::Bool(b) => b.to_string(),
        DefaultValue::Text(t) => format!("`{t}`"),
        DefaultValue::Unset(means) => format!("unset ({means})"),
        DefaultValue::Derived { controller, broker } => match binary {
            Some(Binary::Controller) => controller.into(),
            Some(Binary::Broker) => broker.into(),
            None => format!("controller: {controller}; broker: {broker}"),
        },
        DefaultValue::Int(v) => {
            let unit = match s.kind {
                Kind::Int { unit, .. } => unit,
                Kind::Duration(u) => u.name(),
                _ => "",
            };
            const MIB: i128 = 1 << 20;
            const DAY_MS: i128 = 86_400_000;
            match unit {
                "bytes" if v >= 1 << 30 && v % (1 << 30) == 0 => format!("{v} ({} GiB)", v >> 30),
                "bytes" if v >= MIB && v % MIB == 0 => format!("{v} ({} MiB)", v >> 20),
                "ms" if v >= DAY_MS && v % DAY_MS == 0 => format!("{v} ({} days)", v / DAY_MS),
                _ => v.to_string(),
            }
        }
    }
}
