//! Command-line parsing shared by `keel-controller` and `keel-broker`: a bad flag or
//! environment value stops the start with one line on stderr (`<program>: <what>`, exit 2),
//! like a bad key in the config file does (exit 1), instead of clap's multi-line usage
//! error. `--help` and `--version` print as usual. A bad value that came from an environment
//! variable (the flag was not on the command line) is reported under the variable's name.

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue, ErrorKind};

/// Parses the process arguments (and the environment variables the flags name) with `cmd`
/// (the settings' command, [`crate::settings::Schema::command`]); exits as described in the
/// module doc on failure.
pub fn matches_or_exit(cmd: clap::Command, program: &str) -> clap::ArgMatches {
    matches_from_or_exit(cmd, std::env::args_os(), program)
}

/// Like [`matches_or_exit`], for the arguments `args` (the first is the program name), e.g. a
/// subcommand's after its name.
pub fn matches_from_or_exit(
    cmd: clap::Command,
    args: impl IntoIterator<Item = OsString>,
    program: &str,
) -> clap::ArgMatches {
    match cmd.clone().try_get_matches_from(args) {
        Ok(m) => m,
        Err(e) => exit_on(&cmd, &e, program),
    }
}

/// Prints help or version, or the one-line error (exit 2).
fn exit_on(cmd: &clap::Command, e: &clap::Error, program: &str) -> ! {
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        _ => {
            let mut line = one_line(&e.to_string());
            let argv: Vec<OsString> = std::env::args_os().collect();
            if let Some((shown, env)) =
                env_source(cmd, e, &argv, |name| std::env::var_os(name).is_some())
            {
                line = line.replacen(&format!("'{shown}'"), &env, 1);
            }
            eprintln!("{program}: {line}");
            std::process::exit(2);
        }
    }
}

/// For an invalid-value or value-validation error whose flag is absent from `argv` but whose environment variable
/// is set (`env_is_set`), returns the flag as the error shows it (`--name <NAME>`) and the
/// variable's name: the value came from the environment.
fn env_source(
    cmd: &clap::Command,
    e: &clap::Error,
    argv: &[OsString],
    env_is_set: impl Fn(&std::ffi::OsStr) -> bool,
) -> Option<(String, String)> {
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(shown)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = shown.split_whitespace().next()?.strip_prefix("--")?;
    let arg = cmd.get_arguments().find(|a| a.get_long() == Some(long))?;
    let env = arg.get_env()?;
    let flag = format!("--{long}");
    let on_command_line = argv.iter().skip(1).any(|a| {
        a.to_str()
            .is_some_and(|a| a == flag || a.starts_with(&format!("{flag}=")))
    });
    (!on_command_line && env_is_set(env))
        .then(|| (shown.clone(), env.to_string_lossy().into_owned()))
}

/// The first non-empty line of a clap error, without its `error: ` prefix, followed by its
/// `tip:` (a similar flag's name), if any, in parentheses.
fn one_line(message: &str) -> String {
    let mut lines = message.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or(message);
    let first = first.strip_prefix("error: ").unwrap_or(first);
    match lines.find_map(|l| l.strip_prefix("tip: ")) {
        Some(tip) => format!("{first} ({tip})"),
        None => first.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Debug, Parser)]
    struct Args {
        #[arg(long, env = "KEEL_TEST_SEGMENT_BYTES")]
        segment_bytes: Option<u64>,
    }

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn a_bad_value_from_the_environment_names_the_variable() {
        let cmd = Args::command();
        let e = cmd
            .clone()
            .try_get_matches_from(["p", "--segment-bytes", "abc"])
            .unwrap_err();
        let shown = "--segment-bytes <SEGMENT_BYTES>".to_string();
        let env = "KEEL_TEST_SEGMENT_BYTES".to_string();
        // The flag was not given: the value came from the set variable.
        assert_eq!(
            env_source(&cmd, &e, &os(&["p"]), |_| true),
            Some((shown, env))
        );
        // Given on the command line (both spellings), or the variable unset: the flag.
        for argv in [
            &["p", "--segment-bytes", "abc"][..],
            &["p", "--segment-bytes=abc"],
        ] {
            assert_eq!(env_source(&cmd, &e, &os(argv), |_| true), None);
        }
        assert_eq!(env_source(&cmd, &e, &os(&["p"]), |_| false), None);
        // Other errors are left alone.
        let unknown = cmd.try_get_matches_from(["p", "--nope"]).unwrap_err();
        assert_eq!(
            env_source(&Args::command(), &unknown, &os(&["p"]), |_| true),
            None
        );
    }

    #[test]
    fn keeps_the_first_line_without_the_prefix() {
        let clap_text = "error: invalid value 'abc' for '--log-segment-bytes <LOG_SEGMENT_BYTES>': \
                         invalid digit found in string\n\nFor more information, try '--help'.\n";
        assert_eq!(
            one_line(clap_text),
            "invalid value 'abc' for '--log-segment-bytes <LOG_SEGMENT_BYTES>': invalid digit \
             found in string"
        );
        assert_eq!(one_line("\n  plain\nmore"), "plain");
        let unknown = "error: unexpected argument '--election-timeout-ms' found\n\n  tip: a \
                       similar argument exists: '--election-timeout-max-ms'\n\nUsage: x\n";
        assert_eq!(
            one_line(unknown),
            "unexpected argument '--election-timeout-ms' found (a similar argument exists: \
             '--election-timeout-max-ms')"
        );
    }
}
