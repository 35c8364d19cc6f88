//! The `main` of `keel-controller` and `keel-broker`: parse the command line, load and type the
//! settings, set up logging, start the tokio runtime, serve until the shutdown signal.
//!
//! Exit codes: 0 after a clean shutdown; 1 with one line `<program>: <error>` on stderr for a
//! bad config, a logging set-up error, a runtime that cannot start or an error of the server;
//! 2 (one line, see [`crate::cli`]) for a flag or variable clap cannot parse.

use std::fmt::Display;
use std::process::ExitCode;

use crate::LogFormat;
use crate::settings::{Binary, ConfigError, Schema, Settings};

/// Runs `binary`: `config` turns the validated [`Settings`] into the binary's typed config,
/// `log_format` reads the log format from it, `serve` runs the server on the runtime.
pub fn main<C, F, E>(
    binary: Binary,
    config: impl FnOnce(&Settings) -> Result<C, ConfigError>,
    log_format: impl FnOnce(&C) -> LogFormat,
    serve: impl FnOnce(C) -> F,
) -> ExitCode
where
    F: Future<Output = Result<(), E>>,
    E: Display,
{
    let schema = Schema::of(binary);
    main_with(
        binary.program(),
        schema.command(),
        |matches| {
            schema
                .load(matches)
                .and_then(|s| config(&s))
                .map_err(|e| e.to_string())
        },
        |c| (log_format(c), binary.default_log_filter()),
        serve,
    )
}

/// [`main`] for a program with its own command line (the combined `keel-server`): `command`
/// is parsed (one-line errors, exit 2, [`crate::cli`]); `load` turns the matches into the
/// typed config (its error is the one line printed, exit 1); `logging` gives the log format
/// and the default log filter (used when `KEEL_LOG` is unset); `serve` runs on a
/// multi-threaded tokio runtime. Exit codes as the module doc says.
pub fn main_with<C, F, E>(
    program: &'static str,
    command: clap::Command,
    load: impl FnOnce(&clap::ArgMatches) -> Result<C, String>,
    logging: impl FnOnce(&C) -> (LogFormat, &'static str),
    serve: impl FnOnce(C) -> F,
) -> ExitCode
where
    F: Future<Output = Result<(), E>>,
    E: Display,
{
    let matches = crate::cli::matches_or_exit(command, program);
    let fail = |e: &dyn Display| {
        eprintln!("{program}: {e}");
        ExitCode::FAILURE
    };
    let config = match load(&matches) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let (format, filter) = logging(&config);
    if let Err(e) = crate::init_logging(format, filter) {
        return fail(&e);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&format!("cannot start the runtime: {e}")),
    };
    match rt.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Resolves on SIGTERM or SIGINT (logged). If SIGTERM cannot be listened for (logged as an
/// error), on SIGINT only.
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM; use SIGINT");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
    }
}
