//! TLS on every gRPC connection (issue #23), on a real local cluster (`keelctl cluster up
//! --tls`: 3 controllers and 3 brokers, each with its own certificate and
//! `ssl_client_auth = required`): Raft, broker registration and heartbeats, replication and
//! keelctl all over TLS; a plaintext client, a client trusting another CA and a client
//! without a certificate are refused with a line naming the cause; SIGHUP reloads a node's
//! certificate without a restart.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{Fixture, KEELCTL};

/// keelctl with the cluster's controllers and brokers as bootstrap and `tls` as its
/// KEEL_TLS_* variables (none set: plaintext).
fn run(f: &Fixture, tls: &[(&str, String)], args: &[&str]) -> Output {
    Command::new(KEELCTL)
        .args(args)
        .env("KEEL_BOOTSTRAP_CONTROLLERS", f.controllers())
        .env("KEEL_BOOTSTRAP_BROKERS", f.brokers().join(","))
        .env_remove("KEEL_TLS_CA_FILE")
        .env_remove("KEEL_TLS_CERT_FILE")
        .env_remove("KEEL_TLS_KEY_FILE")
        .envs(tls.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run keelctl")
}

fn tls_env(dir: &Path, ca: &Path, cert: Option<&str>) -> Vec<(&'static str, String)> {
    let mut env = vec![("KEEL_TLS_CA_FILE", ca.display().to_string())];
    if let Some(name) = cert {
        env.push((
            "KEEL_TLS_CERT_FILE",
            dir.join(format!("{name}.pem")).display().to_string(),
        ));
        env.push((
            "KEEL_TLS_KEY_FILE",
            dir.join(format!("{name}-key.pem")).display().to_string(),
        ));
    }
    env
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The last line of a failed run's stderr (the error; warnings come before it).
fn refusal(o: &Output) -> String {
    assert!(
        !o.status.success(),
        "succeeded: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    stderr(o).lines().last().unwrap_or_default().to_string()
}

#[test]
fn a_tls_cluster_replicates_and_refuses_clients_without_the_right_certificates() {
    let f = Fixture::fresh();
    let up = f.cluster("up", &["--tls", "--timeout-secs", "120"]);
    let tls_dir = Path::new(up["tls_dir"].as_str().expect("tls_dir in the report")).to_owned();
    let ca = tls_dir.join("ca.pem");
    let good = tls_env(&tls_dir, &ca, Some("keelctl"));

    // Data through TLS end to end: acks=all needs the followers' fetches (broker to broker,
    // TLS with client certificates) and the ISR changes (broker to controller).
    let o = run(
        &f,
        &good,
        &[
            "topic",
            "create",
            "secure",
            "--partitions",
            "3",
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=3",
        ],
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), f.logs());
    let o = run(
        &f,
        &good,
        &["verify", "--topic", "secure", "--records", "2000"],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("lost:         0"),
        "{out}\n{}\n{}",
        stderr(&o),
        f.logs()
    );

    let quick = ["--api-timeout-ms", "3000", "quorum", "status"];
    // Plaintext: refused, and the line says the server speaks TLS. A TLS mismatch is not
    // retried (as Kafka's clients stop on an SslAuthenticationException): the first attempt
    // answers, with the default 60 s budget too.
    let line = refusal(&run(&f, &[], &["quorum", "status"]));
    assert!(
        line.starts_with("keelctl: TLS handshake failed: ")
            && line.contains("the server speaks TLS"),
        "{line}"
    );

    // A CA the servers' certificates do not chain to.
    let other = f.dir.path().join("other-ca");
    let o = Command::new(KEELCTL)
        .args(["tls", "dev-certs", "--dir"])
        .arg(&other)
        .arg("intruder")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let line = refusal(&run(
        &f,
        &tls_env(&other, &other.join("ca.pem"), Some("intruder")),
        &["quorum", "status"],
    ));
    assert!(
        line.starts_with("keelctl: TLS handshake failed: ")
            && line.contains("not signed by the CA of --tls-ca-file"),
        "{line}"
    );

    // The right CA but a client certificate of another: the server refuses it.
    let line = refusal(&run(&f, &tls_env(&other, &ca, Some("intruder")), &quick));
    assert!(
        line.contains("does not trust the client certificate"),
        "{line}"
    );

    // No client certificate at all (the cluster requires one).
    let line = refusal(&run(&f, &tls_env(&tls_dir, &ca, None), &quick));
    assert!(line.contains("requires a client certificate"), "{line}");

    // A certificate usage error is a usage error (exit 2).
    let o = run(
        &f,
        &[("KEEL_TLS_CERT_FILE", "x.pem".to_string())],
        &["quorum", "status"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    // SIGHUP: controller 1 re-reads its (re-issued) certificate and keeps serving.
    let o = Command::new(KEELCTL)
        .args(["tls", "dev-certs", "--dir"])
        .arg(&tls_dir)
        .arg("controller-1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    f.signal("controller-1", "HUP");
    let log = Path::new(&f.data_dir()).join("controller-1.log");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("TLS certificates reloaded")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "no reload logged\n{}",
            f.logs()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let o = run(
        &f,
        &good,
        &[
            "--bootstrap-controllers",
            f.controllers().split(',').next().unwrap(),
            "quorum",
            "status",
        ],
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), f.logs());
    let o = run(
        &f,
        &good,
        &["verify", "--topic", "secure", "--records", "500"],
    );
    assert!(o.status.success(), "{}\n{}", stderr(&o), f.logs());
}
