//! `keel-broker` process entry point. The process logic lands with its issue; for now the
//! binary parses its command line so `--help` documents what it will accept.

use clap::Parser;

/// Command line of `keel-broker`.
#[derive(Debug, Parser)]
#[command(
    name = "keel-broker",
    version,
    about = "Keel broker (not yet runnable: see the README's status section)"
)]
struct Args {
    /// TOML configuration file (keys: see the README's configuration table).
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
}

fn main() {
    let args = Args::parse();
    eprintln!(
        "keel-broker: not implemented yet (config: {:?})",
        args.config
    );
    std::process::exit(2);
}
