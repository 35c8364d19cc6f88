//! Reading a process's TOML config file (shared by `keel-controller` and `keel-broker`).
//!
//! Keel's config keys are Kafka's names with `_` for `.` (`log.dirs` -> `log_dirs`). TOML
//! reads a Kafka-style key `log.dirs = "/data"` as a key `dirs` inside a table `log`, so serde
//! would report only "unknown field `log`"; [`parse_toml`] names the whole dotted key and the
//! Keel key to write instead.

use std::path::{Path, PathBuf};

use serde::de::{DeserializeOwned, DeserializeSeed};

/// Why a config file could not be read into its struct. `Display` is one line:
/// `config file PATH: REASON`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("config file {}: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// Not valid TOML, an unknown key, or a value of the wrong type.
    #[error("config file {}: {message}", .path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key and the line (see [`parse_toml`]).
        message: String,
    },
}

/// Reads `path` and parses its text with `parse` (e.g. the settings schema's
/// [`crate::settings::Schema::parse_toml`]).
///
/// Errors: [`ConfigFileError::Read`] when the file cannot be read; [`ConfigFileError::Parse`]
/// with `parse`'s message.
pub fn read_with<V>(
    path: &Path,
    parse: impl FnOnce(&str) -> Result<V, String>,
) -> Result<V, ConfigFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigFileError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text).map_err(|message| ConfigFileError::Parse {
        path: path.to_path_buf(),
        message,
    })
}

/// Parses config text into `T`. The error is one line: toml's message (prefixed with the
/// key when toml names only a type) and `(line N)`, or, for a Kafka-style dotted key whose
/// underscore form is a known key, `unknown key "log.dirs": Keel writes Kafka's dotted names
/// with underscores, use log_dirs (line N)`.
pub fn parse_toml<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    parse_toml_seed(text, std::marker::PhantomData::<T>)
}

/// [`parse_toml`] with a serde seed (the settings schema deserializes a file that way), with
/// the same one-line errors.
pub fn parse_toml_seed<'de, S: DeserializeSeed<'de>>(
    text: &'de str,
    seed: S,
) -> Result<S::Value, String> {
    toml::Deserializer::parse(text)
        .and_then(|d| seed.deserialize(d))
        .map_err(|e| {
            let Some(at) = e.span().map(|s| s.start) else {
                return e.message().to_string();
            };
            let message = dotted_key_hint(text, at, e.message())
                .or_else(|| unknown_key(e.message()))
                .unwrap_or_else(|| {
                    // A wrong value type names only the type: say whose value it is.
                    match key_of_line(text, at) {
                        Some(key) => format!("{key}: {}", e.message()),
                        None => e.message().to_string(),
                    }
                });
            let line = text
                .get(..at)
                .map_or(1, |before| before.matches('\n').count() + 1);
            format!("{message} (line {line})")
        })
}

/// serde's "unknown field `X`, expected one of `a`, `b`, ..." (every known key, 45 for the
/// broker) shortened to `unknown key "X"` and the closest known key when one is near
/// (Levenshtein distance at most a third of the key, at least 2: `log_retention_hour` ->
/// `log_retention_ms`), else a pointer to the list. `None` for other messages.
fn unknown_key(message: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (key, expected) = rest.split_once('`')?;
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let closest = known
        .iter()
        .map(|k| (strsim::levenshtein(key, k), *k))
        .min()
        .filter(|(d, _)| *d <= (key.len() / 3).max(2));
    Some(match closest {
        Some((_, k)) => format!("unknown key \"{key}\": did you mean {k}?"),
        None => format!(
            "unknown key \"{key}\" (the README's settings tables list every key, {} here)",
            known.len()
        ),
    })
}

/// The key assigned on the line holding byte `at` (`key = value`), if that line is one.
fn key_of_line(text: &str, at: usize) -> Option<&str> {
    let start = text.get(..at)?.rfind('\n').map_or(0, |i| i + 1);
    let line = text[start..].lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key = key.trim().trim_matches('"');
    (!key.is_empty() && !key.starts_with('#') && !key.starts_with('[')).then_some(key)
}

/// When the error at byte `at` is an unknown table opened by a dotted key (`log.dirs`) whose
/// underscore form (`log_dirs`) is among the expected keys of `message`, the line to report.
fn dotted_key_hint(text: &str, at: usize, message: &str) -> Option<String> {
    if !message.starts_with("unknown field") {
        return None;
    }
    let rest = text.get(at..)?;
    let key: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .collect();
    if !key.contains('.') {
        return None;
    }
    let keel = key.replace(['.', '-'], "_");
    message.contains(&format!("`{keel}`")).then(|| {
        format!(
            "unknown key \"{key}\": Keel writes Kafka's dotted names with underscores, use {keel}"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Conf {
        node_id: Option<i32>,
        log_dirs: Option<String>,
        log_segment_bytes: Option<u64>,
    }

    fn err(text: &str) -> String {
        parse_toml::<Conf>(text).unwrap_err()
    }

    #[test]
    fn dotted_kafka_keys_name_the_keel_key() {
        assert_eq!(
            err("node_id = 1\nlog.dirs = \"/data\"\n"),
            "unknown key \"log.dirs\": Keel writes Kafka's dotted names with underscores, \
             use log_dirs (line 2)"
        );
        let e = err("log.segment.bytes = 5\n");
        assert!(e.contains("use log_segment_bytes"), "{e}");
        // A dotted key with no Keel counterpart names the table toml saw.
        assert_eq!(
            err("bogus.key = 5\n"),
            "unknown key \"bogus\" (the README's settings tables list every key, 3 here) (line 1)"
        );
        // An unknown key near a known one names it instead of listing every key.
        assert_eq!(
            err("node_id = 1\nnode_idd = 1\n"),
            "unknown key \"node_idd\": did you mean node_id? (line 2)"
        );
        assert_eq!(
            err("log_segment_byte = 1\n"),
            "unknown key \"log_segment_byte\": did you mean log_segment_bytes? (line 1)"
        );
        // A value of the wrong type is named by its key.
        let e = err("node_id = 1\nlog_dirs = [\"/a\", \"/b\"]\n");
        assert!(e.starts_with("log_dirs: invalid type: sequence"), "{e}");
        assert!(e.ends_with("(line 2)"), "{e}");
        assert!(!err("node_id = \"one\"\n").contains('\n'));
        assert!(parse_toml::<Conf>("log_dirs = \"/d\"\n").is_ok());
    }
}
