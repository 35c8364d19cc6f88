//! Bad configurations fail at start with one line naming the key, and exit 1 (no cluster
//! needed: every check happens before the broker contacts a controller).

use std::process::Command;

use keel_tests::process::broker_bin;

/// Runs the broker with `args` (and `config` as a file if given); returns (status, stderr).
fn run(args: &[&str], config: Option<&str>) -> (std::process::ExitStatus, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(broker_bin());
    if let Some(text) = config {
        let p = dir.path().join("broker.toml");
        std::fs::write(&p, text).unwrap();
        cmd.arg("--config").arg(p);
    }
    let out = cmd
        .args(args)
        .env_remove("KEEL_LOG")
        .env("KEEL_LOG_DIRS", dir.path().join("data"))
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_one_line_naming(args: &[&str], config: Option<&str>, key: &str) {
    let (status, stderr) = run(args, config);
    assert_eq!(status.code(), Some(1), "{args:?}: {stderr}");
    let lines: Vec<_> = stderr.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{args:?}: one line expected, got:\n{stderr}"
    );
    assert!(
        lines[0].starts_with("keel-broker: ") && lines[0].contains(key),
        "{args:?}: {stderr}"
    );
}

#[test]
fn bad_configs_fail_with_one_line_naming_the_key() {
    let voters = "--controller-quorum-voters=1@127.0.0.1:1";
    let listen = "--listeners=127.0.0.1:0";
    // Unknown key in the file.
    assert_one_line_naming(
        &[],
        Some("node_id = 1\nlisteners_typo = \"x\"\n"),
        "listeners_typo",
    );
    // Bad voter strings.
    for bad in ["1@nohost", "x@h:1", "1@h:1,1@h:2", ""] {
        assert_one_line_naming(
            &[
                "--node-id=1",
                &format!("--controller-quorum-voters={bad}"),
                listen,
            ],
            None,
            "controller_quorum_voters",
        );
    }
    // Missing and invalid values.
    assert_one_line_naming(&[voters, listen], None, "node_id");
    assert_one_line_naming(
        &["--node-id=1", voters, "--listeners=nope"],
        None,
        "listeners",
    );
    assert_one_line_naming(
        &["--node-id=1", voters, "--listeners=0.0.0.0:0"],
        None,
        "advertised_listeners",
    );
    // flag > env > file: the flag's bad value wins over a good file value.
    assert_one_line_naming(
        &[
            "--broker-session-timeout-ms=1",
            "--broker-heartbeat-interval-ms=5",
        ],
        Some(
            "node_id = 1\ncontroller_quorum_voters = \"1@127.0.0.1:1\"\nlisteners = \"127.0.0.1:0\"\n",
        ),
        "broker_session_timeout_ms",
    );
}

#[test]
fn port_in_use_fails_with_one_line_naming_listeners() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    assert_one_line_naming(
        &[
            "--node-id=1",
            "--controller-quorum-voters=1@127.0.0.1:1",
            &format!("--listeners=127.0.0.1:{port}"),
        ],
        None,
        "listeners",
    );
}

/// A bad flag or environment value stops the start with one line naming the flag, exit 2
/// (clap's own error would take three lines).
#[test]
fn bad_flag_or_env_values_fail_with_one_line() {
    // The line names where the bad value came from: the flag, or the environment variable.
    for (args, env, names) in [
        (
            &["--log-segment-bytes", "abc"][..],
            None,
            " for '--log-segment-bytes <LOG_SEGMENT_BYTES>': ",
        ),
        (
            &[][..],
            Some(("KEEL_LOG_DROP_CACHE_BEHIND_BYTES", "-1")),
            " for KEEL_LOG_DROP_CACHE_BEHIND_BYTES: ",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new(broker_bin());
        cmd.args(args)
            .env_remove("KEEL_LOG")
            .env("KEEL_LOG_DIRS", dir.path().join("data"));
        if let Some((k, v)) = env {
            cmd.env(k, v);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        let lines: Vec<_> = stderr.lines().collect();
        assert_eq!(lines.len(), 1, "{args:?} {env:?}: {stderr}");
        assert!(
            lines[0].starts_with("keel-broker: invalid value ") && lines[0].contains(names),
            "{stderr}"
        );
    }
}

/// A key both binaries read has the same file key, variable and flag in each, and a value out of
/// its range gets the same line from each, whichever form set it.
#[test]
fn a_shared_key_is_read_and_refused_alike_by_both_binaries() {
    let controller = keel_tests::process::controller_bin();
    let broker = broker_bin();
    let dir = tempfile::tempdir().unwrap();
    // Each binary's required keys, valid; the shared key under test comes on top.
    let required = [
        (
            controller.as_path(),
            "keel-controller",
            format!(
                "node_id = 1\ncontroller_quorum_voters = \"1@127.0.0.1:1\"\nmetadata_log_dir = \"{}\"\n",
                dir.path().join("c").display()
            ),
        ),
        (
            broker.as_path(),
            "keel-broker",
            format!(
                "node_id = 1\ncontroller_quorum_voters = \"1@127.0.0.1:1\"\nlog_dirs = \"{}\"\nlisteners = \"127.0.0.1:0\"\n",
                dir.path().join("b").display()
            ),
        ),
    ];
    for (key, file_value, value, want) in [
        (
            "broker_session_timeout_ms",
            "86400001",
            "86400001",
            "invalid value for broker_session_timeout_ms: 86400001 is more than a day (86400000)",
        ),
        (
            "log_format",
            "\"xml\"",
            "xml",
            "invalid value for log_format: \"xml\" is not one of \"text\", \"json\"",
        ),
    ] {
        let env = format!("KEEL_{}", key.to_uppercase());
        let flag = format!("--{}={value}", key.replace('_', "-"));
        for (bin, program, base) in &required {
            let file = dir.path().join(format!("{program}.toml"));
            let run = |text: String, args: &[&str], env: Option<(&str, &str)>| {
                std::fs::write(&file, text).unwrap();
                let mut cmd = Command::new(bin);
                cmd.arg("--config")
                    .arg(&file)
                    .args(args)
                    .env_remove("KEEL_LOG");
                if let Some((k, v)) = env {
                    cmd.env(k, v);
                }
                let out = cmd.output().unwrap();
                (
                    out.status.code(),
                    String::from_utf8_lossy(&out.stderr).into_owned(),
                )
            };
            let want = (Some(1), format!("{program}: {want}\n"));
            let from_file = run(format!("{base}{key} = {file_value}\n"), &[], None);
            let from_env = run(base.clone(), &[], Some((&env, value)));
            let from_flag = run(base.clone(), &[&flag], None);
            assert_eq!(from_file, want, "{program} file {key}");
            assert_eq!(from_env, want, "{program} {env}");
            assert_eq!(from_flag, want, "{program} {flag}");
        }
    }
}
