//! `keel-controller`: one voter of the metadata quorum.
//!
//! `keel-controller --config controller.toml` (every key also as `--flag` and `KEEL_*` env
//! var; flag > env > file > default). `keel-controller format --config controller.toml
//! [--standalone | --initial-controllers ... | --no-initial-controllers]` prepares the
//! metadata log directory first ([`keel_controller::format`]). Prints one line and exits 1 on a bad config, a
//! start-up failure (port in use, unreadable log dir, a `metadata_log_dir` that belongs to
//! another node or voter set, or holds only part of a node's state), or when Raft stops on a
//! fatal error while running. SIGTERM/SIGINT shut down cleanly.

use std::process::ExitCode;

use keel_controller::config::ControllerConfig;
use keel_controller::server;
use keel_runtime::process::shutdown_signal;
use keel_runtime::settings::Binary;

/// mimalloc instead of glibc malloc: under metadata write load glibc's malloc and free were
/// 15-20% of the controller's CPU; with mimalloc the active controller used ~25% less CPU per
/// AlterPartition request (`cargo bench -p keel-controller --bench quorum`, column CPU us/req).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // `keel-controller format ...` (kafka-storage format): prepare the metadata log directory.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "format") {
        args.remove(1);
        return keel_controller::format::main(args);
    }
    keel_runtime::process::main(
        Binary::Controller,
        ControllerConfig::from_settings,
        |config| config.log_format,
        |config| server::run(config, shutdown_signal()),
    )
}
