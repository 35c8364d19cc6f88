//! `keelctl`: the Keel operator CLI. See `keelctl --help` and the README's "keelctl" section.

fn main() -> std::process::ExitCode {
    keel_client::cli::main()
}
