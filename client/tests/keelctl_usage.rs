//! Refused command lines of keelctl, run on the real binary with no cluster: each is a usage
//! error (exit 2) with one line naming what was wrong, and nothing is sent: the bootstrap
//! addresses point at a listener of this test, which must see no connection.

use std::net::TcpListener;
use std::process::Command;

const KEELCTL: &str = env!("CARGO_BIN_EXE_keelctl");

/// A listener standing in for every controller and broker; `contacted` tells whether
/// keelctl connected to it.
struct Bait {
    listener: TcpListener,
    addr: String,
}

impl Bait {
    fn new() -> Bait {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        Bait { listener, addr }
    }

    fn contacted(&self) -> bool {
        match self.listener.accept() {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
            Err(e) => panic!("accept: {e}"),
        }
    }

    /// Runs keelctl with `args`, stdin empty, and the bootstrap flags and a 3 s api timeout
    /// unless `args` gives them.
    fn run(&self, args: &[&str]) -> (Option<i32>, String) {
        let mut cmd = Command::new(KEELCTL);
        for (flag, value) in [
            ("--bootstrap-controllers", self.addr.as_str()),
            ("--bootstrap-brokers", self.addr.as_str()),
            ("--api-timeout-ms", "3000"),
        ] {
            if !args.contains(&flag) {
                cmd.args([flag, value]);
            }
        }
        let out = cmd
            .args(args)
            .env_remove("KEEL_BOOTSTRAP_CONTROLLERS")
            .env_remove("KEEL_BOOTSTRAP_BROKERS")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run keelctl");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

#[test]
fn refused_input_is_a_usage_error_and_sends_nothing() {
    let bait = Bait::new();
    // (arguments, the one line keelctl must print)
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["produce", "--topic", "t", "--linger-ms", "120000"],
            "keelctl: --delivery-timeout-ms 120000 must be at least --linger-ms 120000 + \
             --request-timeout-ms 10000 = 130000 (Kafka: delivery.timeout.ms >= linger.ms + \
             request.timeout.ms): raise --delivery-timeout-ms or lower the others",
        ),
        (
            vec![
                "--bootstrap-controllers",
                "127.0.0.1:99999",
                "quorum",
                "status",
            ],
            "keelctl: --bootstrap-controllers: \"127.0.0.1:99999\" is not host:port (port 99999 is not in 1..=65535)",
        ),
        (
            vec!["--bootstrap-controllers", "127.0.0.1:abc", "broker", "list"],
            "keelctl: --bootstrap-controllers: \"127.0.0.1:abc\" is not host:port (port \"abc\" is not a number)",
        ),
        (
            vec!["--bootstrap-controllers", "127.0.0.1:", "broker", "list"],
            "keelctl: --bootstrap-controllers: \"127.0.0.1:\" is not host:port (no port after ':')",
        ),
        (
            vec!["--bootstrap-controllers", "bogus", "broker", "list"],
            "keelctl: --bootstrap-controllers: \"bogus\" is not host:port (no port: give host:port)",
        ),
        (
            vec![
                "--bootstrap-controllers",
                "http://127.0.0.1:41093",
                "broker",
                "list",
            ],
            "keelctl: --bootstrap-controllers: \"http://127.0.0.1:41093\" is not host:port (give host:port without a scheme)",
        ),
        (
            vec!["--bootstrap-controllers", "", "broker", "list"],
            "keelctl: --bootstrap-controllers: no address given (host:port, comma separated)",
        ),
        (
            vec![
                "--bootstrap-brokers",
                "127.0.0.1:0",
                "consume",
                "--topic",
                "t",
            ],
            "keelctl: --bootstrap-brokers: \"127.0.0.1:0\" is not host:port (port 0 is not in 1..=65535)",
        ),
        (
            vec!["verify", "--topic", "t", "--records", "0"],
            "", // clap's own message (several lines), checked below
        ),
        (
            vec!["metadata", "log", "--from", "-1"],
            "keelctl: --from -1 must be >= 0",
        ),
        (
            vec!["metadata", "log", "--topic", ""],
            "keelctl: --topic: empty topic name (omit --topic for every record)",
        ),
        (
            vec![
                "config",
                "alter",
                "--topic",
                "t",
                "--add-config",
                "cleanup.policy=[compact,delete",
            ],
            "keelctl: --add-config \"cleanup.policy=[compact,delete\": a '[' is not closed by ']'",
        ),
        (
            vec![
                "config",
                "alter",
                "--entity-type",
                "topics",
                "--add-config",
                "retention.ms=1",
            ],
            "keelctl: --entity-type topics needs --entity-name (or, for brokers, --entity-default)",
        ),
        (
            vec!["topic", "alter-config", "t", "--add-config", "nokey"],
            "keelctl: --add-config \"nokey\": \"nokey\" is not key=value",
        ),
        (
            vec!["partition", "elect", "--all", "--election-type", "bogus"],
            "",
        ),
        // Privileged and overflowing base ports (`up` exited 1 here, session 34's trial).
        (vec!["cluster", "up", "--base-port", "80"], ""),
        (vec!["cluster", "status", "--base-port", "65223"], ""),
    ];
    for (args, want) in cases {
        let (code, stderr) = bait.run(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        if want.is_empty() {
            assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
        } else {
            assert_eq!(stderr, format!("{want}\n"), "{args:?}");
        }
        assert!(
            !bait.contacted(),
            "{args:?} connected to a bootstrap address"
        );
    }
    // The harness can tell: a command that is not refused does connect.
    let (code, _) = bait.run(&["--api-timeout-ms", "300", "broker", "list"]);
    assert_eq!(code, Some(1));
    assert!(bait.contacted(), "a valid command reaches the listener");
}

/// Kafka's spellings are accepted (their parsing is unit-tested; here: the binary takes
/// them, so a command gets past the command line and fails only for want of a cluster).
#[test]
fn kafka_spellings_get_past_the_command_line() {
    let bait = Bait::new();
    for args in [
        &[
            "partition",
            "elect",
            "--all",
            "--election-type",
            "preferred",
        ][..],
        &[
            "partition",
            "elect",
            "--topic",
            "t",
            "--election-type",
            "unclean",
        ][..],
        &["topic", "describe", "--topic", "a", "--topic", "b"][..],
        &["config", "describe", "--entity-type", "topics"][..],
        &["config", "describe", "--entity-type", "brokers"][..],
        &[
            "config",
            "alter",
            "--topic",
            "t",
            "--add-config",
            "cleanup.policy=[compact,delete]",
        ][..],
        &[
            "topic",
            "alter-config",
            "t",
            "--delete-config",
            "retention.ms",
        ][..],
    ] {
        let mut all = vec!["--api-timeout-ms", "300"];
        all.extend(args);
        let (code, stderr) = bait.run(&all);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("cannot reach any controller") || stderr.contains(&bait.addr),
            "{args:?}: {stderr}"
        );
    }
}
