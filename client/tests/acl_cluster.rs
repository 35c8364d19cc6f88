//! Authorization (issue #23, "Acceptance"), on a real local cluster with TLS and the standard
//! authorizer (`keelctl cluster up --tls --authorizer`): a principal without ACLs gets the
//! exact *_AUTHORIZATION_FAILED code for produce, consume, create, alter-isr, elect and ACL
//! changes, and nothing changes; after `keelctl acl add` the same calls succeed; a broker's
//! certificate cannot register, heartbeat or fetch as another broker; a Kafka client on the
//! SSL Kafka listener is the principal of its certificate and needs ACLs too (kcat, which
//! must be installed: `scripts/test` does it), and a plaintext one is not served.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Fixture, KEELCTL};
use keel_proto::ErrorCode;

/// keelctl as the certificate `name` of the cluster's `tls/` directory.
fn run_as(f: &Fixture, tls: &Path, name: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut cmd = Command::new(KEELCTL);
    cmd.args(["--api-timeout-ms", "10000"])
        .args(args)
        .env("KEEL_BOOTSTRAP_CONTROLLERS", f.controllers())
        .env("KEEL_BOOTSTRAP_BROKERS", f.brokers().join(","))
        .env("KEEL_TLS_CA_FILE", tls.join("ca.pem"))
        .env("KEEL_TLS_CERT_FILE", tls.join(format!("{name}.pem")))
        .env("KEEL_TLS_KEY_FILE", tls.join(format!("{name}-key.pem")))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run keelctl");
    let mut input = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).unwrap();
    }
    drop(input);
    // keelctl's own budget is 10 s per call; a run past 60 s is a hang, and this test's
    // failure (not the suite's).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("keelctl {args:?} as {name} hung past 60 s\n{}", f.logs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
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

/// The failure line of a refused run; it must name `code`.
fn refused(o: &Output, code: ErrorCode) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        !o.status.success(),
        "succeeded: {}",
        String::from_utf8_lossy(&o.stdout)
    );
    let wanted = format!("{} ({})", code.name(), code.code());
    assert!(err.contains(&wanted), "wanted {wanted}: {err}");
    err
}

/// kcat with a deadline ([`common::kcat`]); (success, stdout, stderr).
fn kcat(args: &[&str], stdin: &str) -> (bool, String, String) {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    common::kcat(&args, stdin)
}

/// A gRPC channel with the certificate `name` of `tls`.
async fn channel(tls: &Path, name: &str, addr: &str) -> tonic::transport::Channel {
    use keel_runtime::tls::{ClientAuth, Dialer, TlsContext, TlsFiles};
    let files = TlsFiles {
        ca: tls.join("ca.pem"),
        identity: Some((
            tls.join(format!("{name}.pem")),
            tls.join(format!("{name}-key.pem")),
        )),
    };
    let dialer = Dialer::new(Some(TlsContext::load(files, ClientAuth::None).unwrap()));
    dialer
        .connect(&Dialer::endpoint(addr).unwrap())
        .await
        .expect("TLS channel")
}

/// Runs a confluent-kafka `script` (argv: bootstrap, CA, certificate, key) against the SSL
/// Kafka listener `kafka` with `name`'s certificate; its stdout, after asserting it exited 0.
fn confluent_ssl(script: &str, kafka: &str, tls: &Path, name: &str) -> String {
    let o = Command::new(common::kafka_python())
        .args(["-c", script, kafka])
        .arg(tls.join("ca.pem"))
        .arg(tls.join(format!("{name}.pem")))
        .arg(tls.join(format!("{name}-key.pem")))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "confluent-kafka over SSL as {name}: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

fn code(e: Option<&keel_proto::common::Error>) -> ErrorCode {
    ErrorCode::from_proto(e).unwrap_or(ErrorCode::UnknownServerError)
}

#[test]
fn without_acls_nothing_is_allowed_and_acl_add_opens_exactly_what_it_names() {
    let f = Fixture::fresh();
    let up = f.cluster("up", &["--tls", "--authorizer", "--timeout-secs", "120"]);
    assert_eq!(up["authorizer"], true, "{up}");
    let tls = PathBuf::from(up["tls_dir"].as_str().expect("tls_dir in the report"));
    let admin = |args: &[&str]| run_as(&f, &tls, "keelctl", args, None);
    ok(
        &admin(&[
            "topic",
            "create",
            "orders",
            "--partitions",
            "2",
            "--replication-factor",
            "3",
        ]),
        &f,
    );
    let o = Command::new(KEELCTL)
        .args(["tls", "dev-certs", "--dir"])
        .arg(&tls)
        .arg("alice")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let alice = |args: &[&str], stdin: Option<&str>| run_as(&f, &tls, "alice", args, stdin);

    // No ACLs: every call refused with its exact code.
    refused(
        &alice(&["topic", "create", "fresh", "--partitions", "1"], None),
        ErrorCode::TopicAuthorizationFailed,
    );
    refused(
        &alice(&["produce", "--topic", "orders"], Some("a\nb\n")),
        ErrorCode::TopicAuthorizationFailed,
    );
    refused(
        &alice(&["consume", "--topic", "orders"], None),
        ErrorCode::TopicAuthorizationFailed,
    );
    let describe = |p: i32| {
        let v: serde_json::Value =
            serde_json::from_str(&ok(&admin(&["--json", "topic", "describe", "orders"]), &f))
                .unwrap();
        let t = if v.is_array() { v[0].clone() } else { v };
        t["partitions"][p as usize].clone()
    };
    // The brokers host the new partitions a moment after the controllers committed them
    // (until then the describe has no high watermark from them): compare from there.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut before = describe(0);
    while before["high_watermark"].is_null() {
        assert!(
            std::time::Instant::now() < deadline,
            "partition 0 of orders not hosted: {before}"
        );
        std::thread::sleep(Duration::from_millis(100));
        before = describe(0);
    }
    let line = refused(
        &alice(
            &[
                "partition",
                "alter-isr",
                "--topic",
                "orders",
                "--partition",
                "0",
                "--isr",
                &before["leader"].to_string(),
            ],
            None,
        ),
        ErrorCode::ClusterAuthorizationFailed,
    );
    assert!(line.contains("User:alice may not ALTER CLUSTER"), "{line}");
    refused(
        &alice(
            &["partition", "elect", "--preferred", "--topic", "orders"],
            None,
        ),
        ErrorCode::ClusterAuthorizationFailed,
    );
    refused(
        &alice(
            &[
                "acl",
                "add",
                "--allow-principal",
                "User:alice",
                "--cluster",
                "--operation",
                "All",
            ],
            None,
        ),
        ErrorCode::ClusterAuthorizationFailed,
    );
    // Nothing changed: no topic, no records, the same ISR and epochs, no ACL.
    refused(
        &admin(&["topic", "describe", "fresh"]),
        ErrorCode::UnknownTopicOrPartition,
    );
    let records = ok(&admin(&["consume", "--topic", "orders"]), &f);
    assert_eq!(records, "", "records were written");
    assert_eq!(describe(0), before);
    assert_eq!(ok(&admin(&["--json", "acl", "list"]), &f).trim(), "[]");

    // The ACLs Kafka's tools would add, then the same calls succeed.
    for args in [
        &["--producer", "--topic", "orders"][..],
        &["--consumer", "--topic", "orders", "--group", "g1"][..],
        &["--operation", "Create", "--topic", "fresh"][..],
        &["--operation", "Alter", "--cluster"][..],
    ] {
        let mut full = vec!["acl", "add", "--allow-principal", "User:alice"];
        full.extend(args);
        ok(&admin(&full), &f);
    }
    let listed = ok(&admin(&["acl", "list", "--principal", "User:alice"]), &f);
    assert!(
        listed.contains(
            "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`"
        ) && listed.contains("(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)"),
        "{listed}"
    );
    ok(
        &alice(&["topic", "create", "fresh", "--partitions", "1"], None),
        &f,
    );
    ok(
        &alice(&["produce", "--topic", "orders"], Some("a\nb\n")),
        &f,
    );
    let read = ok(&alice(&["consume", "--topic", "orders"], None), &f);
    assert_eq!(read.lines().count(), 2, "{read}");
    // Producer and consumer ACLs do not let records be deleted: that is DELETE on the topic.
    refused(
        &alice(
            &["topic", "delete-records", "orders", "--offset", "1"],
            None,
        ),
        ErrorCode::TopicAuthorizationFailed,
    );
    let read = ok(&alice(&["consume", "--topic", "orders"], None), &f);
    assert_eq!(read.lines().count(), 2, "nothing deleted: {read}");
    ok(
        &alice(
            &[
                "partition",
                "alter-isr",
                "--topic",
                "orders",
                "--partition",
                "0",
                "--isr",
                &before["isr"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ],
            None,
        ),
        &f,
    );
    // Group ACL: a group she has no READ on is refused, g1 works.
    refused(
        &alice(&["consume", "--topic", "orders", "--group", "other"], None),
        ErrorCode::GroupAuthorizationFailed,
    );
    let read = ok(
        &alice(&["consume", "--topic", "orders", "--group", "g1"], None),
        &f,
    );
    assert_eq!(read.lines().count(), 2, "{read}");
    // Removing an ACL takes the right away again.
    ok(
        &admin(&[
            "acl",
            "remove",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--topic",
            "orders",
        ]),
        &f,
    );
    refused(
        &alice(&["consume", "--topic", "orders"], None),
        ErrorCode::TopicAuthorizationFailed,
    );
    // A topic's configs need DESCRIBE_CONFIGS on the topic only (Kafka), not DESCRIBE on the
    // cluster: keelctl then asks the controllers instead of a broker, with a warning. Carol
    // has no other ACL (alice's Alter on the cluster implies Describe).
    let o = Command::new(KEELCTL)
        .args(["tls", "dev-certs", "--dir"])
        .arg(&tls)
        .arg("carol")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let carol = |args: &[&str]| run_as(&f, &tls, "carol", args, None);
    refused(
        &carol(&["config", "describe", "--topic", "orders"]),
        ErrorCode::TopicAuthorizationFailed,
    );
    ok(
        &admin(&[
            "acl",
            "add",
            "--allow-principal",
            "User:carol",
            "--operation",
            "DescribeConfigs",
            "--topic",
            "orders",
        ]),
        &f,
    );
    let o = carol(&["config", "describe", "--topic", "orders", "--all"]);
    assert!(
        ok(&o, &f).contains("min.insync.replicas"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not allowed to list the brokers"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    // The Kafka listener of a TLS cluster is SSL: kcat with a certificate is its principal.
    assert_eq!(up["kafka_security_protocol"], "SSL", "{up}");
    let kafka = up["kafka_bootstrap_servers"].as_str().unwrap().to_string();
    let ssl = |name: &str| -> Vec<String> {
        [
            "security.protocol=SSL".to_string(),
            format!("ssl.ca.location={}", tls.join("ca.pem").display()),
            format!(
                "ssl.certificate.location={}",
                tls.join(format!("{name}.pem")).display()
            ),
            format!(
                "ssl.key.location={}",
                tls.join(format!("{name}-key.pem")).display()
            ),
        ]
        .into_iter()
        .flat_map(|p| ["-X".to_string(), p])
        .collect()
    };
    let kcat_as = |name: &str, args: &[&str], stdin: &str| {
        let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        all.extend(ssl(name));
        let all: Vec<&str> = all.iter().map(String::as_str).collect();
        kcat(&all, stdin)
    };
    // Alice may write (--producer) but no longer read.
    let (done, _, err) = kcat_as(
        "alice",
        &["-P", "-b", &kafka, "-t", "orders", "-p", "0"],
        "k1\n",
    );
    assert!(done && !err.contains("failed"), "{err}");
    let (done, _, err) = kcat_as(
        "alice",
        &[
            "-C",
            "-b",
            &kafka,
            "-t",
            "orders",
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
        ],
        "",
    );
    assert!(!done && err.contains("Topic authorization failed"), "{err}");
    // Bob has no ACL at all; `acl add --producer` lets him write.
    let o = Command::new(KEELCTL)
        .args(["tls", "dev-certs", "--dir"])
        .arg(&tls)
        .arg("bob")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (done, _, err) = kcat_as(
        "bob",
        &["-P", "-b", &kafka, "-t", "orders", "-p", "1"],
        "b1\n",
    );
    assert!(!done && err.contains("authorization failed"), "{err}");
    ok(
        &admin(&[
            "acl",
            "add",
            "--allow-principal",
            "User:bob",
            "--producer",
            "--topic",
            "orders",
        ]),
        &f,
    );
    let (done, _, err) = kcat_as(
        "bob",
        &["-P", "-b", &kafka, "-t", "orders", "-p", "1"],
        "b1\n",
    );
    assert!(done && !err.contains("failed"), "{err}");
    // confluent-kafka (librdkafka in its wheel) over SSL as bob: an idempotent producer
    // (KIP-679: WRITE on a topic is enough for InitProducerId).
    confluent_ssl(CONFLUENT_SSL_PRODUCE, &kafka, &tls, "bob");
    // bob may write to `orders` but not alter it or the cluster: confluent-kafka's admin
    // calls on the Kafka listener are refused with Kafka's codes, and nothing changes.
    let out = confluent_ssl(CONFLUENT_SSL_ADMIN, &kafka, &tls, "bob");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "create_partitions TOPIC_AUTHORIZATION_FAILED",
            "incremental_alter_configs TOPIC_AUTHORIZATION_FAILED",
            "elect_leaders CLUSTER_AUTHORIZATION_FAILED",
        ],
        "{out}"
    );
    // The super user manages ACLs with confluent-kafka's admin client over the Kafka listener
    // (CreateAcls, DescribeAcls, DeleteAcls).
    let out = confluent_ssl(CONFLUENT_SSL_ACLS, &kafka, &tls, "keelctl");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "created",
            "described TOPIC audit LITERAL User:dave * READ ALLOW",
            "deleted 1",
            "described 0",
        ],
        "{out}"
    );
    // What they wrote is there, read by the super user over SSL.
    let (done, out, err) = kcat_as(
        "keelctl",
        &[
            "-C",
            "-b",
            &kafka,
            "-t",
            "orders",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%s\n",
        ],
        "",
    );
    assert!(done, "{err}");
    let mut got: Vec<&str> = out.lines().collect();
    got.sort_unstable();
    let mut want = vec!["a", "b", "b1", "k1"];
    let py: Vec<String> = (0..10).map(|i| format!("py{i}")).collect();
    want.extend(py.iter().map(String::as_str));
    want.sort_unstable();
    assert_eq!(got, want, "{out}");
    // Committed offsets of a topic the caller may not DESCRIBE are not shown (Kafka's
    // OffsetFetch; found by the session-45 trial: any user with DESCRIBE on a group read the
    // names and offsets of topics hidden from them). Carol may describe group g1, which
    // committed offsets of `orders` above, but not `orders` itself.
    ok(
        &admin(&[
            "acl",
            "add",
            "--allow-principal",
            "User:carol",
            "--operation",
            "Describe",
            "--group",
            "g1",
        ]),
        &f,
    );
    let out = confluent_ssl(CONFLUENT_SSL_OFFSETS, &kafka, &tls, "carol");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "all []",
            "named [('orders', 0, 'TOPIC_AUTHORIZATION_FAILED')]"
        ],
        "{out}"
    );
    let out = confluent_ssl(CONFLUENT_SSL_OFFSETS, &kafka, &tls, "keelctl");
    assert!(
        out.starts_with("all [('orders', "),
        "the super user sees them: {out}"
    );
    let o = carol(&["--json", "group", "describe", "g1"]);
    let described: serde_json::Value = serde_json::from_str(&ok(&o, &f)).unwrap();
    assert_eq!(
        described["partitions"],
        serde_json::json!([]),
        "{described}"
    );
    let o = admin(&["--json", "group", "describe", "g1"]);
    let described: serde_json::Value = serde_json::from_str(&ok(&o, &f)).unwrap();
    assert_eq!(described["partitions"][0]["topic"], "orders", "{described}");

    // A plaintext Kafka client gets no answer from an SSL listener.
    let (done, _, err) = kcat(&["-L", "-b", &kafka, "-m", "5"], "");
    assert!(
        !done,
        "a plaintext kcat read the metadata of an SSL listener: {err}"
    );
}

/// confluent-kafka: 10 records to `orders` partition 1 with an idempotent acks=all producer
/// over SSL; argv: bootstrap, CA, certificate, key. Exits non-zero on any delivery error.
const CONFLUENT_SSL_PRODUCE: &str = r#"
import sys
from confluent_kafka import Producer
bootstrap, ca, cert, key = sys.argv[1:5]
p = Producer({
    "bootstrap.servers": bootstrap, "security.protocol": "SSL",
    "ssl.ca.location": ca, "ssl.certificate.location": cert, "ssl.key.location": key,
    "enable.idempotence": True, "acks": "all",
})
errors = []
for i in range(10):
    p.produce("orders", value=b"py%d" % i, partition=1,
              on_delivery=lambda err, msg: errors.append(str(err)) if err else None)
left = p.flush(30)
if errors or left:
    sys.exit("delivery failed: %s, %d not delivered" % (errors, left))
"#;

/// confluent-kafka's admin client over SSL: allows `User:dave` to READ topic `audit`, lists
/// the ACLs of `User:dave`, deletes them and lists again, printing one line per step; argv:
/// bootstrap, CA, certificate, key.
const CONFLUENT_SSL_ACLS: &str = r#"
import sys
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                   AdminClient, ResourcePatternType, ResourceType)
bootstrap, ca, cert, key = sys.argv[1:5]
a = AdminClient({
    "bootstrap.servers": bootstrap, "security.protocol": "SSL",
    "ssl.ca.location": ca, "ssl.certificate.location": cert, "ssl.key.location": key,
})
acl = AclBinding(ResourceType.TOPIC, "audit", ResourcePatternType.LITERAL, "User:dave", "*",
                 AclOperation.READ, AclPermissionType.ALLOW)
a.create_acls([acl])[acl].result(timeout=30)
print("created")
dave = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:dave", None,
                        AclOperation.ANY, AclPermissionType.ANY)
for b in a.describe_acls(dave).result(timeout=30):
    print("described", b.restype.name, b.name, b.resource_pattern_type.name, b.principal,
          b.host, b.operation.name, b.permission_type.name)
print("deleted", len(a.delete_acls([dave])[dave].result(timeout=30)))
print("described", len(a.describe_acls(dave).result(timeout=30)))
"#;

/// confluent-kafka's admin client over SSL: the committed offsets of group `g1`, all of them
/// and then `orders`-0 by name, one line each (a list of (topic, partition, offset or error
/// name), or the request's error name); argv: bootstrap, CA, certificate, key.
const CONFLUENT_SSL_OFFSETS: &str = r#"
import sys
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
bootstrap, ca, cert, key = sys.argv[1:5]
a = AdminClient({
    "bootstrap.servers": bootstrap, "security.protocol": "SSL",
    "ssl.ca.location": ca, "ssl.certificate.location": cert, "ssl.key.location": key,
})
def offsets(request):
    try:
        r = a.list_consumer_group_offsets([request])["g1"].result(timeout=30)
        return sorted((tp.topic, tp.partition, tp.error.name() if tp.error else tp.offset)
                      for tp in r.topic_partitions)
    except KafkaException as e:
        return e.args[0].name()
print("all", offsets(ConsumerGroupTopicPartitions("g1")))
print("named", offsets(ConsumerGroupTopicPartitions("g1", [TopicPartition("orders", 0)])))
"#;

/// confluent-kafka's admin client over SSL: adds a partition to `orders`, sets its
/// retention.ms and asks for a preferred election of `orders`-0, printing for each the error
/// name it got (or `ok`); argv: bootstrap, CA, certificate, key.
const CONFLUENT_SSL_ADMIN: &str = r#"
import sys
from confluent_kafka import ElectionType, KafkaException, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewPartitions)
bootstrap, ca, cert, key = sys.argv[1:5]
a = AdminClient({
    "bootstrap.servers": bootstrap, "security.protocol": "SSL",
    "ssl.ca.location": ca, "ssl.certificate.location": cert, "ssl.key.location": key,
})
def outcome(name, call):
    try:
        result = call()
        errors = [e for e in result.values() if e is not None] if isinstance(result, dict) else []
        print(name, errors[0].name() if errors else "ok")
    except KafkaException as e:
        print(name, e.args[0].name())
outcome("create_partitions",
        lambda: a.create_partitions([NewPartitions("orders", 3)])["orders"].result(timeout=30))
resource = ConfigResource("topic", "orders", incremental_configs=[
    ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
outcome("incremental_alter_configs",
        lambda: a.incremental_alter_configs([resource])[resource].result(timeout=30))
outcome("elect_leaders",
        lambda: a.elect_leaders(ElectionType.PREFERRED,
                                [TopicPartition("orders", 0)]).result(timeout=30))
"#;

#[test]
fn a_broker_certificate_cannot_act_as_another_broker() {
    let f = Fixture::fresh();
    let up = f.cluster("up", &["--tls", "--authorizer", "--timeout-secs", "120"]);
    let tls = PathBuf::from(up["tls_dir"].as_str().unwrap());
    let controllers: Vec<String> = f.controllers().split(',').map(String::from).collect();
    let brokers = f.brokers();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        use keel_proto::broker::broker_service_client::BrokerServiceClient;
        use keel_proto::controller::controller_service_client::ControllerServiceClient;
        use keel_proto::controller::*;
        // Any controller checks before it forwards or answers NOT_CONTROLLER.
        let mut c = ControllerServiceClient::new(channel(&tls, "broker-2", &controllers[0]).await);
        let r = c
            .register_broker(RegisterBrokerRequest {
                broker_id: 1,
                incarnation_id: vec![7u8; 16].into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            code(r.error.as_ref()),
            ErrorCode::ClusterAuthorizationFailed,
            "{r:?}"
        );
        assert!(
            r.error
                .as_ref()
                .unwrap()
                .message
                .contains("User:broker-2 may not act as broker 1"),
            "{r:?}"
        );
        let r = c
            .broker_heartbeat(BrokerHeartbeatRequest {
                broker_id: 1,
                broker_epoch: 1,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            code(r.error.as_ref()),
            ErrorCode::ClusterAuthorizationFailed,
            "{r:?}"
        );
        // As itself, the same heartbeat is judged on its merits (a wrong epoch), not refused.
        let r = c
            .broker_heartbeat(BrokerHeartbeatRequest {
                broker_id: 2,
                broker_epoch: 1,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_ne!(
            code(r.error.as_ref()),
            ErrorCode::ClusterAuthorizationFailed,
            "{r:?}"
        );
        // A follower fetch as broker 1 from broker 3.
        let mut b = BrokerServiceClient::new(channel(&tls, "broker-2", &brokers[2]).await);
        let r = b
            .fetch(keel_proto::broker::FetchRequest {
                replica_id: 1,
                broker_epoch: 1,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            code(r.error.as_ref()),
            ErrorCode::ClusterAuthorizationFailed,
            "{r:?}"
        );
        // keelctl's certificate (a super user) is not a broker either.
        let mut c = ControllerServiceClient::new(channel(&tls, "keelctl", &controllers[1]).await);
        let r = c
            .register_broker(RegisterBrokerRequest {
                broker_id: 3,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            code(r.error.as_ref()),
            ErrorCode::ClusterAuthorizationFailed,
            "{r:?}"
        );
    });
    // The real brokers kept their sessions: all three registered and unfenced.
    let list = ok(
        &run_as(&f, &tls, "keelctl", &["--json", "broker", "list"], None),
        &f,
    );
    let list: serde_json::Value = serde_json::from_str(&list).unwrap();
    let rows = list.as_array().expect("a list of brokers");
    assert_eq!(rows.len(), 3, "{list}");
    assert!(rows.iter().all(|b| b["fenced"] == false), "{list}");

    // A broker added later holds ClusterAction, not Describe (Kafka's nodes need no more): it
    // may still ask DescribeCluster for the cluster id before it registers (it waited for it
    // forever, found by the session-45 trial). Without either the refusal names Describe.
    let o = Command::new(KEELCTL)
        .args(["tls", "dev-certs", "--dir"])
        .arg(&tls)
        .arg("broker-9")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // `for_client`: sent as a broker forwarding that client's request (Kafka's envelope).
    let describe_for = |for_client: Option<&str>| {
        rt.block_on(async {
            use keel_proto::controller::controller_service_client::ControllerServiceClient;
            let mut c =
                ControllerServiceClient::new(channel(&tls, "broker-9", &controllers[0]).await);
            let mut request =
                tonic::Request::new(keel_proto::controller::DescribeClusterRequest::default());
            if let Some(p) = for_client {
                request.metadata_mut().insert_bin(
                    keel_metadata_log::authz::FORWARDED_PRINCIPAL,
                    tonic::metadata::MetadataValue::from_bytes(p.as_bytes()),
                );
            }
            c.describe_cluster(request).await.unwrap().into_inner()
        })
    };
    let describe = || describe_for(None);
    // Without ClusterAction it cannot forward for anyone, the super user included.
    let r = describe_for(Some("User:keelctl"));
    assert_eq!(
        code(r.error.as_ref()),
        ErrorCode::ClusterAuthorizationFailed,
        "{r:?}"
    );
    assert!(
        r.error
            .as_ref()
            .unwrap()
            .message
            .contains("a forwarded request needs ClusterAction"),
        "{r:?}"
    );
    let r = describe();
    assert_eq!(
        code(r.error.as_ref()),
        ErrorCode::ClusterAuthorizationFailed,
        "{r:?}"
    );
    assert!(
        r.error
            .as_ref()
            .unwrap()
            .message
            .contains("User:broker-9 may not DESCRIBE"),
        "{r:?}"
    );
    ok(
        &run_as(
            &f,
            &tls,
            "keelctl",
            &[
                "acl",
                "add",
                "--allow-principal",
                "User:broker-9",
                "--operation",
                "ClusterAction",
                "--cluster",
            ],
            None,
        ),
        &f,
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = describe();
        if code(r.error.as_ref()) == ErrorCode::None {
            assert!(!r.cluster_id.is_empty(), "{r:?}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "DescribeCluster with ClusterAction: {r:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Now it may forward: the controllers judge the client it names, not the broker (a
    // super user's request passes whichever broker it went through; found by the session-45
    // trial, where a request through a broker that was no super user was refused naming it).
    let r = describe_for(Some("User:keelctl"));
    assert_eq!(code(r.error.as_ref()), ErrorCode::None, "{r:?}");
    let r = describe_for(Some("User:nobody"));
    assert_eq!(
        code(r.error.as_ref()),
        ErrorCode::ClusterAuthorizationFailed,
        "{r:?}"
    );
    assert!(
        r.error
            .as_ref()
            .unwrap()
            .message
            .contains("User:nobody may not DESCRIBE"),
        "{r:?}"
    );
}
