//! Reading a process's TOML config file (shared by `keel-controller` and `keel-broker`).
//!
//! Keel's config keys are Kafka's names with `_` for `.` (`log.dirs` -> `log_dirs`). TOML
//! reads a Kafka-style key `log.dirs = "/data"` as a key `dirs` inside a table `log`, so serde
//! would report only "unknown field `log`"; [`read_toml`] names the whole dotted key and the
//! Keel key to write instead.

use std::path::Path;

use serde::de::DeserializeOwned;

/// Why a config file could not be read into its struct.
#[derive(Debug, thiserror::Error)]
pub enum ConfigFileError {
    /// The file could not be read.
    #[error("{0}")]
    Read(#[from] std::io::Error),
    /// Not valid TOML, an unknown key, or a value of the wrong type: one line naming the key
    /// and the byte offset.
    #[error("{0}")]
    Parse(String),
}

/// Reads `path` into `T` (a struct with `#[serde(deny_unknown_fields)]`).
///
/// Errors: [`ConfigFileError::Read`] when the file cannot be read; [`ConfigFileError::Parse`]
/// with toml's message and `(at byte N)`, or, for a Kafka-style dotted key whose underscore
/// form is a known key, `unknown key "log.dirs": Keel writes Kafka's dotted names with
/// underscores, use log_dirs`.
pub fn read_toml<T: DeserializeOwned>(path: &Path) -> Result<T, ConfigFileError> {
    let text = std::fs::read_to_string(path)?;
    parse_toml(&text)
}

/// [`read_toml`] on text already read.
pub fn parse_toml<T: DeserializeOwned>(text: &str) -> Result<T, ConfigFileError> {
    toml::from_str(text).map_err(|e| {
        let start = e.span().map(|s| s.start);
        let message = start
            .and_then(|at| dotted_key_hint(text, at, e.message()))
            .unwrap_or_else(|| e.message().to_string());
        ConfigFileError::Parse(
            message
                + &start
                    .map(|at| format!(" (at byte {at})"))
                    .unwrap_or_default(),
        )
    })
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
        parse_toml::<Conf>(text).unwrap_err().to_string()
    }

    #[test]
    fn dotted_kafka_keys_name_the_keel_key() {
        assert_eq!(
            err("node_id = 1\nlog.dirs = \"/data\"\n"),
            "unknown key \"log.dirs\": Keel writes Kafka's dotted names with underscores, \
             use log_dirs (at byte 12)"
        );
        let e = err("log.segment.bytes = 5\n");
        assert!(e.contains("use log_segment_bytes"), "{e}");
        // A dotted key with no Keel counterpart keeps toml's message, naming the table.
        let e = err("bogus.key = 5\n");
        assert!(e.starts_with("unknown field `bogus`"), "{e}");
        // Plain unknown keys and wrong types are toml's own one-line messages.
        let e = err("node_idd = 1\n");
        assert!(
            e.starts_with("unknown field `node_idd`") && e.ends_with("(at byte 0)"),
            "{e}"
        );
        assert!(!err("node_id = \"one\"\n").contains('\n'));
        assert!(parse_toml::<Conf>("log_dirs = \"/d\"\n").is_ok());
    }
}
