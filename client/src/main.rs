//! `keelctl`: the operator CLI. Commands land with the client issue; for now the binary parses
//! its command line so `--help` works.

use clap::Parser;

/// Command line of `keelctl`.
#[derive(Debug, Parser)]
#[command(
    name = "keelctl",
    version,
    about = "Keel operator CLI (commands not yet available)"
)]
struct Args {}

fn main() {
    let _args = Args::parse();
    eprintln!("keelctl: no commands implemented yet");
    std::process::exit(2);
}
