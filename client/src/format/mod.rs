//! Pure formatting for `keelctl`: rows in, text out. Nothing here does I/O, so every output
//! shape is unit-tested.

pub mod cluster;
pub mod data;
pub mod image;
pub mod log;
pub mod topics;

/// Renders `rows` under `headers` as left-aligned columns separated by two spaces, one line
/// per row, trailing spaces trimmed.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let pad = widths.get(i).copied().unwrap_or(0);
            for _ in cell.chars().count()..pad {
                line.push(' ');
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// [`table`] with one row per item of `items`, its cells as `cells` renders them.
pub fn table_of<T>(headers: &[&str], items: &[T], cells: impl Fn(&T) -> Vec<String>) -> String {
    let rows: Vec<Vec<String>> = items.iter().map(cells).collect();
    table(headers, &rows)
}

/// Broker ids as Kafka's tools print them: `1,2,3` (empty list: empty string).
/// `1 record`, `2 records`: `n` and `noun`, with an `s` unless `n` is 1.
pub fn count(n: impl Into<i128>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

pub fn ids(list: &[i32]) -> String {
    list.iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// A wall-clock time in ms since the Unix epoch as RFC 3339 UTC with milliseconds, or `-`
/// when unknown (negative).
pub fn timestamp_ms(ms: i64) -> String {
    if ms < 0 {
        return "-".into();
    }
    match chrono::DateTime::from_timestamp_millis(ms) {
        Some(t) => t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        None => "-".into(),
    }
}

/// A number that uses -1 (or any negative value) for "unknown", as `-` when unknown.
pub fn opt_num(v: i64) -> String {
    if v < 0 { "-".into() } else { v.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns_and_trims() {
        let t = table(
            &["ID", "NAME", "X"],
            &[
                vec!["1".into(), "alpha".into(), "".into()],
                vec!["10".into(), "b".into(), "yes".into()],
            ],
        );
        assert_eq!(t, "ID  NAME   X\n1   alpha\n10  b      yes\n");
    }

    #[test]
    fn timestamps_and_unknowns() {
        assert_eq!(timestamp_ms(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(timestamp_ms(-1), "-");
        assert_eq!(opt_num(-1), "-");
        assert_eq!(opt_num(7), "7");
        assert_eq!(ids(&[3, 1, 2]), "3,1,2");
        assert_eq!(ids(&[]), "");
    }
}
