//! Logging set-up shared by both processes: `tracing` to stdout, filtered by `KEEL_LOG`
//! (`EnvFilter` syntax, e.g. `info,keel_controller=debug`), as plain text or one JSON object
//! per line (`log_format = "json"`), with ANSI colours only when stdout is a terminal.

use std::io::IsTerminal;
use std::str::FromStr;

use tracing_subscriber::EnvFilter;

/// Environment variable holding the log filter.
pub const LOG_FILTER_ENV: &str = "KEEL_LOG";

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (the default).
    #[default]
    Text,
    /// One JSON object per line (for log shippers).
    Json,
}

impl FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("{other:?} is not one of \"text\", \"json\"")),
        }
    }
}

/// Why logging could not be set up. `Display` is one line.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// `KEEL_LOG` is not a valid filter.
    #[error("invalid value for {LOG_FILTER_ENV}: {0}")]
    Filter(String),
    /// A global subscriber was already installed in this process.
    #[error("a logger is already installed: {0}")]
    AlreadyInstalled(String),
}

/// The filter of `KEEL_LOG`, or `default_filter` when it is unset or empty.
fn filter_from_env(default_filter: &str) -> Result<EnvFilter, LoggingError> {
    match std::env::var(LOG_FILTER_ENV) {
        Ok(s) if !s.trim().is_empty() => {
            EnvFilter::try_new(&s).map_err(|e| LoggingError::Filter(format!("{s:?}: {e}")))
        }
        _ => EnvFilter::try_new(default_filter)
            .map_err(|e| LoggingError::Filter(format!("default {default_filter:?}: {e}"))),
    }
}

/// Installs the global subscriber. `default_filter` applies when `KEEL_LOG` is unset or empty
/// (e.g. `"info"`, or `"info,openraft=warn"`).
///
/// Errors: `KEEL_LOG` does not parse; a subscriber is already installed.
pub fn init_logging(format: LogFormat, default_filter: &str) -> Result<(), LoggingError> {
    let filter = filter_from_env(default_filter)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stdout);
    let installed = match format {
        LogFormat::Text => builder
            .with_ansi(std::io::stdout().is_terminal())
            .try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .try_init(),
    };
    installed.map_err(|e| LoggingError::AlreadyInstalled(e.to_string()))
}

/// Installs a subscriber for a command-line tool: one line per event on stderr (stdout stays
/// the command's output), `<program>: warning: <message>` (level in lower case, then the
/// event's fields), filtered by `KEEL_LOG` or `default_filter` (e.g. `"warn"`). Errors as
/// [`init_logging`].
pub fn init_cli_logging(program: &'static str, default_filter: &str) -> Result<(), LoggingError> {
    tracing_subscriber::fmt()
        .with_env_filter(filter_from_env(default_filter)?)
        .event_format(CliLine { program })
        .with_writer(std::io::stderr)
        .try_init()
        .map_err(|e| LoggingError::AlreadyInstalled(e.to_string()))
}

/// The line format of [`init_cli_logging`].
struct CliLine {
    program: &'static str,
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for CliLine
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = match *event.metadata().level() {
            tracing::Level::ERROR => "error",
            tracing::Level::WARN => "warning",
            tracing::Level::INFO => "info",
            tracing::Level::DEBUG => "debug",
            tracing::Level::TRACE => "trace",
        };
        write!(writer, "{}: {level}: ", self.program)?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_formats() {
        assert_eq!("text".parse(), Ok(LogFormat::Text));
        assert_eq!("json".parse(), Ok(LogFormat::Json));
        assert!(
            "JSON"
                .parse::<LogFormat>()
                .unwrap_err()
                .contains("\"text\", \"json\"")
        );
    }
}
