//! Command-line parsing shared by `keel-controller` and `keel-broker`: a bad flag or
//! environment value stops the start with one line on stderr (`<program>: <what>`, exit 2),
//! like a bad key in the config file does (exit 1), instead of clap's multi-line usage
//! error. `--help` and `--version` print as usual.

use clap::error::ErrorKind;

/// Parses the process arguments (and the environment variables the flags name); exits as
/// described in the module doc on failure.
pub fn parse_or_exit<A: clap::Parser>(program: &str) -> A {
    match A::try_parse() {
        Ok(args) => args,
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
            _ => {
                eprintln!("{program}: {}", one_line(&e.to_string()));
                std::process::exit(2);
            }
        },
    }
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
