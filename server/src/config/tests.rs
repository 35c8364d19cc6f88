//! The combined config file's rules, one refusal per rule.

use super::*;

const VOTERS: &str = "1@127.0.0.1:9093,2@127.0.0.1:9094,3@127.0.0.1:9095";

/// A valid combined config.
fn combined() -> String {
    format!(
        "process_roles = [\"broker\", \"controller\"]\nnode_id = 1\n\
         controller_quorum_voters = \"{VOTERS}\"\ndata_dir = \"/srv/keel\"\n\
         metrics_listener = \"127.0.0.1:9393\"\n\n\
         [controller]\nlisteners = \"127.0.0.1:9093\"\n\n\
         [broker]\nlisteners = \"GRPC://127.0.0.1:9192,PLAINTEXT://127.0.0.1:9293\"\n"
    )
}

fn err(text: &str) -> String {
    let e = parse(text).unwrap_err();
    assert!(!e.contains('\n'), "one line: {e}");
    e
}

#[test]
fn a_combined_config_gives_both_roles_the_shared_keys_and_separate_dirs() {
    let c = parse(&combined()).unwrap();
    assert_eq!(
        c.roles(),
        vec![ProcessRole::Broker, ProcessRole::Controller]
    );
    assert_eq!(c.node_id, 1);
    assert_eq!(c.metrics_listener, Some("127.0.0.1:9393".parse().unwrap()));
    let ctl = c.controller.as_ref().unwrap();
    let brk = c.broker.as_ref().unwrap();
    assert_eq!(ctl.node_id, 1);
    assert_eq!(brk.node_id, 1);
    assert_eq!(ctl.metadata_log_dir, PathBuf::from("/srv/keel/controller"));
    assert_eq!(brk.log_dir, PathBuf::from("/srv/keel/broker"));
    assert_eq!(ctl.controller_quorum_voters.len(), 3);
    // The process serves metrics; neither role binds its own listener.
    assert_eq!(ctl.metrics_listener, None);
    assert_eq!(brk.metrics_listener, None);
    assert_eq!(brk.listeners, "127.0.0.1:9192".parse().unwrap());
    assert_eq!(c.default_log_filter(), "info,openraft=off");
}

#[test]
fn explicit_role_dirs_replace_the_defaults_and_must_not_overlap() {
    let text = combined().replace("data_dir = \"/srv/keel\"\n", "") + "log_dirs = \"/b\"\n" + "\n"; // (appended to [broker])
    let e = err(&text);
    assert!(e.starts_with("missing required config data_dir"), "{e}");
    assert!(e.contains("[controller] metadata_log_dir"), "{e}");
    let text = combined().replace(
        "[controller]\n",
        "[controller]\nmetadata_log_dir = \"/c\"\n",
    ) + "log_dirs = \"/b\"\n";
    let c = parse(&text).unwrap();
    assert_eq!(c.controller.unwrap().metadata_log_dir, PathBuf::from("/c"));
    assert_eq!(c.broker.unwrap().log_dir, PathBuf::from("/b"));
    for (ctl, brk) in [("/d", "/d"), ("/d", "/d/b"), ("/d/c", "/d")] {
        let text = combined().replace(
            "[controller]\n",
            &format!("[controller]\nmetadata_log_dir = \"{ctl}\"\n"),
        ) + &format!("log_dirs = \"{brk}\"\n");
        let e = err(&text);
        assert!(e.contains("overlap"), "{ctl} {brk}: {e}");
    }
}

#[test]
fn process_roles_must_be_a_non_empty_list_of_distinct_known_roles() {
    let body = combined();
    let with = |roles: &str| body.replace("[\"broker\", \"controller\"]", roles);
    let e = err(&body.replace("process_roles = [\"broker\", \"controller\"]\n", ""));
    assert!(
        e.starts_with("missing required config process_roles"),
        "{e}"
    );
    assert!(err(&with("[]")).starts_with("process_roles is empty"));
    let e = err(&with("[\"broker\", \"zookeeper\"]"));
    assert!(e.contains("unknown role \"zookeeper\""), "{e}");
    let e = err(&with("[\"broker\", \"broker\"]"));
    assert!(e.contains("\"broker\" is listed twice"), "{e}");
    assert!(err(&with("\"broker,controller\"")).starts_with("process_roles: expected an array"));
    assert!(err(&with("[1]")).contains("expected role names"));
}

#[test]
fn each_role_needs_its_table_and_only_its_roles_have_one() {
    let no_broker = combined().replace(
        "\n[broker]\nlisteners = \"GRPC://127.0.0.1:9192,PLAINTEXT://127.0.0.1:9293\"\n",
        "",
    );
    let e = err(&no_broker);
    assert!(e.starts_with("missing table [broker]"), "{e}");
    // One role alone runs just that role; the other role's table is refused.
    let e = err(&combined().replace("[\"broker\", \"controller\"]", "[\"controller\"]"));
    assert!(
        e.starts_with("table [broker] given but process_roles has no \"broker\""),
        "{e}"
    );
    let only_controller = no_broker.replace("[\"broker\", \"controller\"]", "[\"controller\"]");
    let c = parse(&only_controller).unwrap();
    assert_eq!(c.roles(), vec![ProcessRole::Controller]);
    assert!(c.broker.is_none());
    let e = err(&combined().replace("[controller]\n", "controller = 5\n[x]\n"));
    assert!(e.starts_with("controller: expected a table"), "{e}");
}

#[test]
fn a_key_in_the_wrong_place_is_named_with_where_it_belongs() {
    // A broker key in [controller], and the other way round.
    let e = err(&combined().replace("[controller]\n", "[controller]\nlog_segment_bytes = 4096\n"));
    assert_eq!(
        e,
        "[controller] log_segment_bytes is a broker key: move it into [broker]"
    );
    let e = err(&(combined() + "election_timeout_max_ms = 900\n"));
    assert_eq!(
        e,
        "[broker] election_timeout_max_ms is a controller key: move it into [controller]"
    );
    // A shared key inside a table.
    let e = err(&(combined() + "node_id = 2\n"));
    assert!(e.starts_with("[broker] node_id: one per process"), "{e}");
    assert!(e.contains("node.id"), "{e}");
    // A role's key at the top level.
    let e = err(&combined().replace("node_id = 1\n", "node_id = 1\nrack = \"a\"\n"));
    assert_eq!(e, "rack is a broker key: move it into [broker]");
    let e = err(&combined().replace(
        "node_id = 1\n",
        "node_id = 1\nlisteners = \"127.0.0.1:1\"\n",
    ));
    assert!(e.starts_with("listeners is set per role"), "{e}");
    // A top-level-only key in a table, an unknown key, a Kafka dotted key.
    let e = err(&(combined() + "data_dir = \"/x\"\n"));
    assert!(e.starts_with("[broker] data_dir: a top-level key"), "{e}");
    let e = err(&(combined() + "bogus = 1\n"));
    assert_eq!(e, "[broker] unknown key bogus");
    let e = err(&(combined() + "log.segment.bytes = 4096\n"));
    assert!(e.contains("use log_segment_bytes"), "{e}");
}

#[test]
fn values_are_checked_by_the_role_schema_and_name_the_table() {
    let e = err(&(combined() + "log_segment_bytes = 1\n"));
    assert!(
        e.starts_with("[broker] invalid value for log_segment_bytes: 1 is not in"),
        "{e}"
    );
    let e = err(&(combined() + "log_segment_bytes = \"big\"\n"));
    assert_eq!(
        e,
        "[broker] log_segment_bytes: expected an integer, found string"
    );
    // The typed config's own cross-key rules, under the role's table.
    let e = err(&combined().replace(
        "[controller]\n",
        "[controller]\nbroker_session_timeout_ms = 1000\nbroker_heartbeat_interval_ms = 2000\n",
    ));
    assert!(e.starts_with("[controller] "), "{e}");
    // Shared keys are checked once, at the top level.
    let e = err(&combined().replace("node_id = 1", "node_id = -1"));
    assert!(e.starts_with("invalid value for node_id"), "{e}");
    let e = err(&combined().replace(&format!("controller_quorum_voters = \"{VOTERS}\"\n"), ""));
    assert!(
        e.starts_with("missing required config controller_quorum_voters"),
        "{e}"
    );
    let e = err(&combined().replace("node_id = 1", "node_id = 7"));
    assert!(
        e.starts_with("[controller] invalid value for controller_quorum_voters"),
        "{e}"
    );
}

#[test]
fn every_shared_key_is_a_setting_of_both_binaries() {
    for key in SHARED_KEYS {
        let s = setting(key).unwrap_or_else(|| panic!("{key} is not declared"));
        assert_eq!(s.used_by, UsedBy::Both, "{key}");
    }
}

#[test]
fn load_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.toml");
    let e = load(&path).unwrap_err();
    assert!(
        e.starts_with(&format!("config file {}: ", path.display())),
        "{e}"
    );
    std::fs::write(&path, combined() + "bogus = 1\n").unwrap();
    let e = load(&path).unwrap_err();
    assert!(e.ends_with("[broker] unknown key bogus"), "{e}");
}

#[test]
fn the_shipped_sample_files_are_valid_and_the_readme_shows_the_first() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for id in 1..=3 {
        let path = root.join(format!("deploy/combined/server-{id}.toml"));
        let c = load(&path).unwrap();
        assert_eq!(c.node_id, id);
        assert_eq!(c.roles(), ProcessRole::ALL);
    }
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let first = std::fs::read_to_string(root.join("deploy/combined/server-1.toml")).unwrap();
    assert!(
        readme.contains(&format!("```toml\n{first}```")),
        "README \"Combined mode\" shows deploy/combined/server-1.toml byte for byte"
    );
}
