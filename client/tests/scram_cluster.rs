//! SASL/SCRAM (issue #23, "Acceptance": kcat and confluent-kafka over `SASL_SSL://` with
//! SCRAM), on a real local cluster with TLS, the standard authorizer and SASL_SSL Kafka
//! listeners (`keelctl cluster up --tls --authorizer --sasl`): users set with
//! `keelctl user scram set` authenticate with SCRAM-SHA-256 and SCRAM-SHA-512, are
//! `User:<name>` to the authorizer, and need ACLs; a wrong password, an unknown user and a
//! client that skips SASL are refused with the cause; `user scram delete` locks a user out;
//! the metadata log never shows a key; keelctl takes its TLS and SASL settings from a Kafka
//! client properties file (`--command-config`); keelctl's own gRPC requests authenticate as a
//! SCRAM user with a session token (`--sasl-username`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Fixture, KEELCTL};

/// keelctl as the cluster's keelctl certificate (a super user).
fn admin(f: &Fixture, tls: &Path, args: &[&str]) -> Output {
    Command::new(KEELCTL)
        .args(["--api-timeout-ms", "10000"])
        .args(args)
        .env("KEEL_BOOTSTRAP_CONTROLLERS", f.controllers())
        .env("KEEL_BOOTSTRAP_BROKERS", f.brokers().join(","))
        .env("KEEL_TLS_CA_FILE", tls.join("ca.pem"))
        .env("KEEL_TLS_CERT_FILE", tls.join("keelctl.pem"))
        .env("KEEL_TLS_KEY_FILE", tls.join("keelctl-key.pem"))
        .output()
        .expect("run keelctl")
}

fn ok(o: &Output, f: &Fixture) -> String {
    assert!(
        o.status.success(),
        "failed: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        f.logs()
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// kcat over SASL_SSL as `user` with `password` and `mechanism`; (success, stdout, stderr).
fn kcat(
    tls: &Path,
    bootstrap: &str,
    (user, password, mechanism): (&str, &str, &str),
    args: &[&str],
    stdin: &str,
) -> (bool, String, String) {
    let mut all: Vec<String> = vec!["-b".into(), bootstrap.into()];
    all.extend(args.iter().map(|a| a.to_string()));
    for p in [
        "security.protocol=SASL_SSL".to_string(),
        format!("ssl.ca.location={}", tls.join("ca.pem").display()),
        format!("sasl.mechanism={mechanism}"),
        format!("sasl.username={user}"),
        format!("sasl.password={password}"),
    ] {
        all.extend(["-X".to_string(), p]);
    }
    common::kcat(&all, stdin)
}

/// Runs a confluent-kafka `script` (argv: bootstrap, CA, user, password, mechanism) against
/// the SASL_SSL Kafka listener `kafka` as `user`; its stdout, after asserting it exited 0.
fn confluent_sasl(
    f: &Fixture,
    script: &str,
    kafka: &str,
    tls: &Path,
    (user, password, mechanism): (&str, &str, &str),
) -> String {
    let o = Command::new(common::kafka_python())
        .args(["-c", script, kafka])
        .arg(tls.join("ca.pem"))
        .args([user, password, mechanism])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "confluent-kafka over SASL_SSL as {user}: {out}{}\n{}",
        String::from_utf8_lossy(&o.stderr),
        f.logs()
    );
    out
}

#[test]
fn scram_users_produce_and_consume_over_sasl_ssl_with_acls() {
    let f = Fixture::fresh();
    let up = f.cluster(
        "up",
        &["--tls", "--authorizer", "--sasl", "--timeout-secs", "120"],
    );
    assert_eq!(up["kafka_security_protocol"], "SASL_SSL", "{up}");
    let tls = PathBuf::from(up["tls_dir"].as_str().expect("tls_dir in the report"));
    let kafka = up["kafka_bootstrap_servers"].as_str().unwrap().to_string();
    let admin = |args: &[&str]| admin(&f, &tls, args);
    ok(
        &admin(&[
            "topic",
            "create",
            "orders",
            "--partitions",
            "1",
            "--replication-factor",
            "3",
        ]),
        &f,
    );

    // Two users, one per mechanism; the password of one from the environment variable.
    let set = ok(
        &admin(&[
            "user",
            "scram",
            "set",
            "--user",
            "alice",
            "--password",
            "alice-secret",
        ]),
        &f,
    );
    assert!(
        set.contains("Set SCRAM-SHA-256 credential of user alice (4096 iterations)"),
        "{set}"
    );
    let o = Command::new(KEELCTL)
        .args([
            "user",
            "scram",
            "set",
            "--user",
            "bob",
            "--mechanism",
            "SCRAM-SHA-512",
            "--iterations",
            "8192",
        ])
        .env("KEEL_BOOTSTRAP_CONTROLLERS", f.controllers())
        .env("KEEL_TLS_CA_FILE", tls.join("ca.pem"))
        .env("KEEL_TLS_CERT_FILE", tls.join("keelctl.pem"))
        .env("KEEL_TLS_KEY_FILE", tls.join("keelctl-key.pem"))
        .env("KEEL_SCRAM_PASSWORD", "bob-secret")
        .output()
        .unwrap();
    ok(&o, &f);
    let listed: serde_json::Value =
        serde_json::from_str(&ok(&admin(&["--json", "user", "scram", "list"]), &f)).unwrap();
    assert_eq!(
        listed,
        serde_json::json!([
            {"user": "alice", "mechanisms": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]},
            {"user": "bob", "mechanisms": [{"mechanism": "SCRAM-SHA-512", "iterations": 8192}]},
        ])
    );
    // Bad input is refused before anything is sent, naming the flag.
    let o = admin(&[
        "user",
        "scram",
        "set",
        "--user",
        "carol",
        "--password",
        "x",
        "--iterations",
        "100",
    ]);
    assert!(
        !o.status.success()
            && String::from_utf8_lossy(&o.stderr)
                .contains("--iterations: iterations 100 is outside 4096..=16384"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let alice = ("alice", "alice-secret", "SCRAM-SHA-256");
    let bob = ("bob", "bob-secret", "SCRAM-SHA-512");
    let produce = |who, line: &str| {
        kcat(
            &tls,
            &kafka,
            who,
            &["-P", "-t", "orders", "-p", "0"],
            &format!("{line}\n"),
        )
    };
    // Authenticated, but no ACL yet: Kafka's authorization error.
    let (done, _, err) = produce(alice, "a0");
    assert!(!done && err.contains("authorization failed"), "{err}");
    ok(
        &admin(&[
            "acl",
            "add",
            "--allow-principal",
            "User:alice",
            "--producer",
            "--topic",
            "orders",
        ]),
        &f,
    );
    for i in 1..=3 {
        let (done, _, err) = produce(alice, &format!("a{i}"));
        assert!(done && !err.contains("failed"), "{err}\n{}", f.logs());
    }
    // A wrong password and an unknown user: SASL's error with Kafka's words, nothing written.
    let refused = "Authentication failed during authentication due to invalid credentials \
                   with SASL mechanism SCRAM-SHA-256";
    let (done, _, err) = produce(("alice", "guess", "SCRAM-SHA-256"), "x");
    assert!(!done && err.contains(refused), "{err}");
    let (done, _, err) = produce(("mallory", "alice-secret", "SCRAM-SHA-256"), "x");
    assert!(!done && err.contains(refused), "{err}");
    // Alice's credential is SHA-256 only.
    let (done, _, err) = produce(("alice", "alice-secret", "SCRAM-SHA-512"), "x");
    assert!(!done && err.contains("SCRAM-SHA-512"), "{err}");

    // Bob reads in a consumer group with confluent-kafka over SCRAM-SHA-512.
    ok(
        &admin(&[
            "acl",
            "add",
            "--allow-principal",
            "User:bob",
            "--consumer",
            "--topic",
            "orders",
            "--group",
            "g1",
        ]),
        &f,
    );
    let got = confluent_sasl(&f, CONFLUENT_SCRAM_CONSUME, &kafka, &tls, bob);
    assert_eq!(got.lines().collect::<Vec<_>>(), ["a1", "a2", "a3"], "{got}");
    // Bob may read, not write.
    let (done, _, err) = produce(bob, "b0");
    assert!(!done && err.contains("authorization failed"), "{err}");

    // Kafka's own way to manage SCRAM users (KIP-554): alice, granted ALTER and DESCRIBE on
    // the cluster, sets carol's credential with confluent-kafka's admin client over the
    // SASL_SSL Kafka listener (it sends the salted password, never the password), reads it
    // back, and carol then logs in with kcat.
    for op in ["Alter", "Describe"] {
        ok(
            &admin(&[
                "acl",
                "add",
                "--allow-principal",
                "User:alice",
                "--operation",
                op,
                "--cluster",
            ]),
            &f,
        );
    }
    let got = confluent_sasl(&f, CONFLUENT_SCRAM_ADMIN, &kafka, &tls, alice);
    assert_eq!(
        got.lines().collect::<Vec<_>>(),
        ["altered carol", "described carol SCRAM_SHA_256 8192"],
        "{got}"
    );
    let carol = ("carol", "carol-secret", "SCRAM-SHA-256");
    let (done, out, err) = kcat(&tls, &kafka, carol, &["-L", "-m", "10"], "");
    assert!(
        done && out.contains("brokers:"),
        "carol's login: {out}{err}"
    );

    // A client that does not do SASL gets nothing from the SASL_SSL listener.
    let mut plain_ssl = Command::new("kcat")
        .args(["-L", "-b", &kafka, "-m", "5", "-X", "security.protocol=SSL"])
        .arg("-X")
        .arg(format!("ssl.ca.location={}", tls.join("ca.pem").display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while plain_ssl.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "kcat -L hung");
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = plain_ssl.wait_with_output().unwrap();
    assert!(
        !o.status.success(),
        "kcat without SASL read the metadata: {}",
        String::from_utf8_lossy(&o.stdout)
    );

    // The metadata log has the credential records, never their keys or salts.
    let log = ok(&admin(&["--json", "metadata", "log"]), &f);
    assert!(log.contains("UserScramCredentialRecord"), "{log}");
    for secret in ["stored_key", "server_key", "salt"] {
        assert!(!log.contains(secret), "{secret} in the metadata log output");
    }

    // Deleting alice's credential locks her out; bob is untouched.
    let deleted = ok(&admin(&["user", "scram", "delete", "--user", "alice"]), &f);
    assert!(
        deleted.contains("Deleted SCRAM-SHA-256 credential of user alice"),
        "{deleted}"
    );
    let mut locked_out = false;
    for _ in 0..50 {
        // Brokers apply the removal from the metadata log within moments.
        let (done, _, err) = produce(alice, "late");
        if !done && err.contains(refused) {
            locked_out = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(locked_out, "alice could still authenticate after delete");
    let o = admin(&["user", "scram", "delete", "--user", "alice"]);
    assert!(
        !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("RESOURCE_NOT_FOUND"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // keelctl's TLS settings from a Kafka client properties file (--command-config), no
    // KEEL_TLS_* variables: librdkafka's names; a SASL key is refused naming its line.
    let props = f.dir.path().join("client.properties");
    std::fs::write(
        &props,
        format!(
            "# as for kcat\nsecurity.protocol=SSL\nssl.ca.location={}\n\
             ssl.certificate.location={}\nssl.key.location={}\nclient.id=ops\n",
            tls.join("ca.pem").display(),
            tls.join("keelctl.pem").display(),
            tls.join("keelctl-key.pem").display()
        ),
    )
    .unwrap();
    let via_file = |file: &Path| {
        Command::new(KEELCTL)
            .args(["--api-timeout-ms", "10000", "--command-config"])
            .arg(file)
            .args(["--json", "user", "scram", "list"])
            .env("KEEL_BOOTSTRAP_CONTROLLERS", f.controllers())
            .env_remove("KEEL_TLS_CA_FILE")
            .env_remove("KEEL_TLS_CERT_FILE")
            .env_remove("KEEL_TLS_KEY_FILE")
            .output()
            .unwrap()
    };
    let o = via_file(&props);
    let listed: serde_json::Value = serde_json::from_str(&ok(&o, &f)).unwrap();
    assert_eq!(listed[0]["user"], "bob", "{listed}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("ignoring client.id"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let plain = f.dir.path().join("plain.properties");
    std::fs::write(
        &plain,
        "security.protocol=SASL_SSL\nssl.ca.location=/x\nsasl.mechanism=PLAIN\n\
         sasl.username=bob\nsasl.password=bob-secret\n",
    )
    .unwrap();
    let o = via_file(&plain);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("line 3: sasl.mechanism"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // SASL/SCRAM for keelctl's own gRPC connections: a session token from the controllers,
    // sent on every request, makes the caller User:bob (the TLS client certificate still
    // opens the connection: the cluster requires one), on controllers and brokers alike.
    let as_bob = |args: &[&str], password: &str| {
        Command::new(KEELCTL)
            .args(["--api-timeout-ms", "10000"])
            .args([
                "--sasl-username",
                "bob",
                "--sasl-mechanism",
                "SCRAM-SHA-512",
            ])
            .args(args)
            .env("KEEL_BOOTSTRAP_CONTROLLERS", f.controllers())
            .env("KEEL_BOOTSTRAP_BROKERS", f.brokers().join(","))
            .env("KEEL_TLS_CA_FILE", tls.join("ca.pem"))
            .env("KEEL_TLS_CERT_FILE", tls.join("keelctl.pem"))
            .env("KEEL_TLS_KEY_FILE", tls.join("keelctl-key.pem"))
            .env("KEEL_SASL_PASSWORD", password)
            .output()
            .unwrap()
    };
    let o = as_bob(
        &["topic", "create", "bobs", "--partitions", "1"],
        "bob-secret",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success()
            && err.contains("TOPIC_AUTHORIZATION_FAILED")
            && err.contains("User:bob"),
        "{err}"
    );
    let o = as_bob(
        &["consume", "--topic", "orders", "--group", "other"],
        "bob-secret",
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("GROUP_AUTHORIZATION_FAILED"),
        "bob may read in group g1 only: {err}"
    );
    let read = ok(&as_bob(&["consume", "--topic", "orders"], "bob-secret"), &f);
    assert_eq!(
        read.lines().collect::<Vec<_>>(),
        ["a1", "a2", "a3"],
        "{read}"
    );
    let o = as_bob(&["topic", "list"], "wrong");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("SASL_AUTHENTICATION_FAILED (58)"),
        "{err}"
    );
    // The same user from a properties file (librdkafka's names).
    let sasl_props = f.dir.path().join("sasl.properties");
    std::fs::write(
        &sasl_props,
        format!(
            "security.protocol=SASL_SSL\nssl.ca.location={}\nssl.certificate.location={}\n\
             ssl.key.location={}\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=bob\n\
             sasl.password=bob-secret\n",
            tls.join("ca.pem").display(),
            tls.join("keelctl.pem").display(),
            tls.join("keelctl-key.pem").display()
        ),
    )
    .unwrap();
    let o = Command::new(KEELCTL)
        .args(["--api-timeout-ms", "10000", "--command-config"])
        .arg(&sasl_props)
        .args(["topic", "create", "bobs", "--partitions", "1"])
        .env("KEEL_BOOTSTRAP_CONTROLLERS", f.controllers())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("User:bob"), "{err}");
}

/// confluent-kafka: reads `orders` from the beginning in group g1 over SASL_SSL until three
/// records came, printing each value; argv: bootstrap, CA, user, password, mechanism.
/// confluent-kafka's admin client over SASL_SSL as argv's user: sets user carol's
/// SCRAM-SHA-256 credential (password `carol-secret`, 8192 iterations) and describes it;
/// argv: bootstrap, CA, user, password, mechanism.
const CONFLUENT_SCRAM_ADMIN: &str = r#"
import sys
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)
bootstrap, ca, user, password, mechanism = sys.argv[1:6]
a = AdminClient({
    "bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
    "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
})
upsert = UserScramCredentialUpsertion(
    "carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"carol-secret")
for name, f in a.alter_user_scram_credentials([upsert]).items():
    f.result(timeout=30)
    print("altered", name)
for name, f in a.describe_user_scram_credentials(["carol"]).items():
    d = f.result(timeout=30)
    for info in d.scram_credential_infos:
        print("described", name, info.mechanism.name, info.iterations)
"#;

const CONFLUENT_SCRAM_CONSUME: &str = r#"
import sys, time
from confluent_kafka import Consumer
bootstrap, ca, user, password, mechanism = sys.argv[1:6]
c = Consumer({
    "bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
    "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
    "group.id": "g1", "auto.offset.reset": "earliest",
})
c.subscribe(["orders"])
got, deadline = [], time.time() + 60
while len(got) < 3 and time.time() < deadline:
    m = c.poll(1.0)
    if m is None:
        continue
    if m.error():
        sys.exit("consume error: %s" % m.error())
    got.append(m.value().decode())
c.commit(asynchronous=False)
c.close()
print("\n".join(got))
if len(got) < 3:
    sys.exit("only %d records" % len(got))
"#;
