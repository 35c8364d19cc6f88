//! `keel-server --config server.toml`: Kafka's combined mode (KIP-833), a controller and a
//! broker in one process (`process_roles = ["broker", "controller"]`), or either role alone.
//! For development only (the crate doc says why). The file's format: [`keel_server::config`].
//!
//! Only the config file is read (`--config FILE` or `KEEL_CONFIG`), no per-key flags or
//! `KEEL_*` variables: the roles share key names with different values. Prints one line and
//! exits 1 on a bad config (`keel-server: config file F: [broker] ...`), a start-up failure
//! or a fatal error of either role (`keel-server: controller: ...`); 2 on a bad flag.
//! SIGTERM/SIGINT stop the broker (controlled shutdown) and then the controller, exit 0.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Arg, Command, value_parser};
use keel_runtime::process::shutdown_signal;
use keel_runtime::settings::CONFIG_ENV;
use keel_server::config::{self, PROGRAM};

/// mimalloc, as `keel-controller` uses (its doc has the measurement): the controller role
/// runs in this process.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let command = Command::new(PROGRAM)
        .version(env!("CARGO_PKG_VERSION"))
        .about(
            "Keel combined mode (KIP-833): a controller and a broker in one process; for \
             development only",
        )
        .arg(
            Arg::new("config")
                .long("config")
                .value_name("FILE")
                .env(CONFIG_ENV)
                .required(true)
                .value_parser(value_parser!(PathBuf))
                .help(
                    "TOML file: process_roles, the shared keys, [controller] and [broker] \
                     tables (README \"Combined mode\")",
                ),
        );
    keel_runtime::process::main_with(
        PROGRAM,
        command,
        |m| {
            let path = m
                .get_one::<PathBuf>("config")
                .expect("--config is required");
            config::load(path)
        },
        |c| (c.log_format, c.default_log_filter()),
        |c| keel_server::serve(c, shutdown_signal()),
    )
}
