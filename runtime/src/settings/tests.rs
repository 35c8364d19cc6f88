//! Tests of the declaration, the loader and the rules.

use super::keys::{int, ms};
use super::*;

#[test]
fn the_declaration_is_consistent() {
    let mut names = BTreeSet::new();
    for s in SETTINGS {
        assert!(names.insert(s.name), "{} declared twice", s.name);
        assert!(
            s.name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{}: not snake_case",
            s.name
        );
        assert!(!s.doc.is_empty(), "{}: no doc", s.name);
        // Every default passes its own rule, and the unit is in the name.
        if let Some(v) = s.default_value() {
            assert_eq!(s.check(&v), Ok(()), "{}", s.name);
        }
        if let Kind::Duration(unit) = s.kind {
            assert!(s.name.ends_with(unit.name()), "{}", s.name);
        }
        if let Kind::Int { ty, min, max, .. } = s.kind {
            let type_min = match ty {
                IntType::U32 | IntType::U64 => 0,
                IntType::I32 => i32::MIN.into(),
                IntType::I64 => i64::MIN.into(),
            };
            assert!(
                type_min <= min && min <= max && max <= ty.max(),
                "{}",
                s.name
            );
        }
    }
    for b in Binary::ALL {
        assert!(settings_of(b).count() > 10);
    }
}

/// Loads `argv` (program name first) with `schema`, `file` as the config file.
fn load(schema: &Schema, file: Option<&str>, argv: &[&str]) -> Result<Settings, String> {
    let dir = tempfile::tempdir().unwrap();
    let mut args: Vec<String> = std::iter::once(schema.program().to_string())
        .chain(argv.iter().map(|a| a.to_string()))
        .collect();
    if let Some(text) = file {
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        args.push(format!("--config={}", path.display()));
    }
    let matches = schema
        .command()
        .try_get_matches_from(args)
        .map_err(|e| e.to_string().lines().next().unwrap().to_string())?;
    schema.load(&matches).map_err(|e| e.to_string())
}

/// The required keys of `schema` with some valid value, as file text.
fn required(schema: &Schema) -> String {
    schema
        .settings()
        .iter()
        .filter(|s| s.default == DefaultValue::Required)
        .map(|s| match s.kind {
            Kind::Voters => format!("{} = \"1@h:1\"\n", s.name),
            Kind::HostPortList => format!("{} = \"h:1,h:2\"\n", s.name),
            Kind::Int { .. } => format!("{} = 1\n", s.name),
            _ => format!("{} = \"/d\"\n", s.name),
        })
        .collect()
}

#[test]
fn a_shared_key_has_the_same_forms_and_errors_in_both_binaries() {
    let schemas = Binary::ALL.map(Schema::of);
    // key, flag, variable, a good value in TOML and as a flag, a value out of range in
    // TOML and as a flag, the error.
    let cases = [
        (
            "broker_session_timeout_ms",
            "--broker-session-timeout-ms",
            "KEEL_BROKER_SESSION_TIMEOUT_MS",
            ("3000", "4000"),
            ("86400001", "86400001"),
            "invalid value for broker_session_timeout_ms: 86400001 is more than a day (86400000)",
        ),
        (
            "log_format",
            "--log-format",
            "KEEL_LOG_FORMAT",
            ("\"json\"", "text"),
            ("\"xml\"", "xml"),
            "invalid value for log_format: \"xml\" is not one of \"text\", \"json\"",
        ),
    ];
    let shown = |s: &Settings, key: &str| s.value(key).map(Value::to_string);
    for (key, flag, env, (file_good, flag_good), (file_bad, flag_bad), want) in cases {
        for schema in &schemas {
            let who = format!("{} {key}", schema.program());
            let base = required(schema);
            // One flag, one variable, one file key.
            let cmd = schema.command();
            let arg = cmd.get_arguments().find(|a| a.get_id() == key).unwrap();
            assert_eq!(arg.get_long(), flag.strip_prefix("--"), "{who}");
            assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(env), "{who}");
            assert!(schema.env_names().contains(env), "{who}");
            let file = format!("{base}{key} = {file_good}\n");
            let s = load(schema, Some(&file), &[]).unwrap();
            assert_eq!(shown(&s, key).as_deref(), Some(file_good), "{who}");
            // The flag wins over the file.
            let s = load(schema, Some(&file), &[&format!("{flag}={flag_good}")]).unwrap();
            let from_flag = shown(&s, key).unwrap();
            assert_eq!(from_flag.trim_matches('"'), flag_good, "{who}");
            // The same range error from the file and from the flag.
            let file = format!("{base}{key} = {file_bad}\n");
            assert_eq!(load(schema, Some(&file), &[]).unwrap_err(), want, "{who}");
            let flag = format!("{flag}={flag_bad}");
            assert_eq!(
                load(schema, Some(&base), &[&flag]).unwrap_err(),
                want,
                "{who}"
            );
        }
        // A value the flag's type cannot hold: clap's line, the same for both.
        let lines: Vec<String> = schemas
            .iter()
            .map(|s| {
                s.command()
                    .try_get_matches_from([s.program(), flag, "-x"])
                    .map(|_| "parsed".to_string())
                    .unwrap_or_else(|e| e.to_string().lines().next().unwrap().to_string())
            })
            .collect();
        assert_eq!(lines[0], lines[1], "{key}");
    }
}

#[test]
fn flag_over_env_over_file_over_default() {
    let schema = Schema::of(Binary::Broker);
    let base = "node_id = 1\ncontroller_quorum_voters = \"1@h:1\"\nlog_dirs = \"/d\"\n";
    let s = load(&schema, Some(base), &[]).unwrap();
    assert_eq!(s.get::<u64>("broker_session_timeout_ms"), Some(9000));
    assert_eq!(s.get::<u64>("log_flush_interval_ms"), None);
    let file = format!("{base}broker_session_timeout_ms = 5000\n");
    let s = load(&schema, Some(&file), &[]).unwrap();
    assert_eq!(s.get::<u64>("broker_session_timeout_ms"), Some(5000));
    let s = load(
        &schema,
        Some(&file),
        &["--broker-session-timeout-ms", "6000"],
    )
    .unwrap();
    assert_eq!(s.get::<u64>("broker_session_timeout_ms"), Some(6000));
    // A bad value is reported before a missing key.
    let e = load(&schema, None, &["--num-partitions=3"]);
    assert!(
        e.unwrap_err()
            .starts_with("error: unexpected argument '--num-partitions'")
    );
    let e = load(&schema, None, &["--min-insync-replicas=0"]).unwrap_err();
    assert_eq!(e, "invalid value for min_insync_replicas: 0 is less than 1");
}

#[test]
fn each_kind_has_one_rule() {
    let key = |name| *SETTINGS.iter().find(|s| s.name == name).unwrap();
    let check = |name, v: Value| key(name).check(&v);
    assert_eq!(
        check("broker_heartbeat_interval_ms", Value::Int(0)),
        Err("must be greater than 0".into())
    );
    assert_eq!(
        check(
            "leader_imbalance_check_interval_seconds",
            Value::Int(86_401)
        ),
        Err("86401 is more than a day (86400)".into())
    );
    assert_eq!(check("num_partitions", Value::Int(9982)), Ok(()));
    assert_eq!(
        check("num_partitions", Value::Int(0)),
        Err("0 is not in 1..=9982".into())
    );
    assert_eq!(check("log_retention_ms", Value::Int(-1)), Ok(()));
    assert!(check("listeners", Value::Text("localhost".into())).is_err());
    assert_eq!(
        check("advertised_listeners", Value::Text("h:0".into())),
        Err("GRPC: \"h:0\": the port must be 1-65535".into())
    );
    assert_eq!(
        check(
            "controller_quorum_bootstrap_servers",
            Value::Text("127.0.0.1:0".into())
        ),
        Err("\"127.0.0.1:0\": the port must be 1-65535".into())
    );
    assert_eq!(
        check("advertised_listeners", Value::Text(":9".into())),
        Err("GRPC: \":9\" is not host:port (no host)".into())
    );
    assert_eq!(
        check("advertised_listeners", Value::Text("h:1".into())),
        Ok(())
    );
    assert!(check("controller_quorum_voters", Value::Text("1@h".into())).is_err());
    assert!(check("auto_leader_rebalance_enable", Value::Bool(false)).is_ok());
}

#[test]
fn file_errors_are_one_line_naming_the_key() {
    let schema = Schema::of(Binary::Controller);
    let e = schema
        .parse_toml("node_id = 1\nnode_idd = 2\n")
        .unwrap_err();
    assert_eq!(
        e,
        "unknown key \"node_idd\": did you mean node_id? (line 2)"
    );
    let e = schema
        .parse_toml("metadata.log.dir = \"/d\"\n")
        .unwrap_err();
    assert!(e.contains("use metadata_log_dir"), "{e}");
    let e = schema.parse_toml("node_id = \"one\"\n").unwrap_err();
    assert!(
        e.starts_with("node_id: invalid type: string \"one\", expected an integer"),
        "{e}"
    );
    let e = schema.parse_toml("listeners = 5\n").unwrap_err();
    assert!(e.starts_with("listeners: invalid type: integer `5`"), "{e}");
    // A broker key is unknown to the controller.
    let e = schema.parse_toml("log_dirs = \"/d\"\n").unwrap_err();
    assert!(
        e.starts_with("unknown key \"log_dirs\" (the README's settings tables list every key"),
        "{e}"
    );
    // u64 values above i64::MAX are numbers (then out of range), not type errors.
    let l = schema
        .parse_toml("election_timeout_max_ms = 18446744073709551615\n")
        .unwrap();
    assert_eq!(l.0["election_timeout_max_ms"], Value::Int(u64::MAX.into()));
}

static WIDGET: [Setting; 2] = [
    Setting {
        name: "node_id",
        kafka: "node.id",
        kind: int(IntType::I32, 0, i32::MAX as i128, ""),
        default: DefaultValue::Required,
        doc: "id",
        used_by: UsedBy::Both,
    },
    ms(
        "widget_flush_interval_ms",
        "widget.flush.interval.ms",
        250,
        "how often widgets flush",
        UsedBy::Broker,
    ),
];

#[test]
fn adding_a_key_is_one_declaration() {
    // A key declared once gets its flag, variable, file key, default, rule and README row.
    let schema = Schema::new("keel-test", "test", WIDGET.iter());
    let help = schema.command().render_long_help().to_string();
    assert!(
        help.contains("--widget-flush-interval-ms <WIDGET_FLUSH_INTERVAL_MS>"),
        "{help}"
    );
    assert!(help.contains("KEEL_WIDGET_FLUSH_INTERVAL_MS"), "{help}");
    assert!(schema.env_names().contains("KEEL_WIDGET_FLUSH_INTERVAL_MS"));
    let s = load(&schema, Some("node_id = 1\n"), &[]).unwrap();
    assert_eq!(s.get::<u64>("widget_flush_interval_ms"), Some(250));
    let s = load(
        &schema,
        Some("node_id = 1\nwidget_flush_interval_ms = 40\n"),
        &[],
    )
    .unwrap();
    assert_eq!(s.get::<u64>("widget_flush_interval_ms"), Some(40));
    let s = load(
        &schema,
        Some("node_id = 1\n"),
        &["--widget-flush-interval-ms=41"],
    )
    .unwrap();
    assert_eq!(s.require::<u64>("widget_flush_interval_ms"), 41);
    assert_eq!(
        load(
            &schema,
            None,
            &["--node-id=1", "--widget-flush-interval-ms=0"]
        )
        .unwrap_err(),
        "invalid value for widget_flush_interval_ms: must be greater than 0"
    );
    let e = schema
        .parse_toml("widget.flush.interval.ms = 5\n")
        .unwrap_err();
    assert!(e.contains("use widget_flush_interval_ms"), "{e}");
    assert!(
        schema.markdown_table().ends_with(
            "| `widget_flush_interval_ms` | `widget.flush.interval.ms` | 250 | how often widgets flush |\n"
        ),
        "{}",
        schema.markdown_table()
    );
}

#[test]
#[should_panic(expected = "keel-test declares no setting log_dirs")]
fn reading_an_undeclared_key_is_a_bug() {
    let schema = Schema::new("keel-test", "test", WIDGET.iter());
    let s = load(&schema, Some("node_id = 1\n"), &[]).unwrap();
    let _ = s.get::<String>("log_dirs");
}

#[test]
fn the_example_configs_in_deploy_load() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy");
    for dir in [root.join("config"), root.join("by-hand")] {
        assert_eq!(example_configs_loaded(&dir), 6, "{}", dir.display());
    }
}

/// Loads every `controller*` and `broker*` file of `dir` with its binary's schema; panics
/// naming the file that does not load. Returns how many it loaded.
fn example_configs_loaded(dir: &std::path::Path) -> usize {
    let mut loaded = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let binary = if name.starts_with("controller") {
            Binary::Controller
        } else if name.starts_with("broker") {
            Binary::Broker
        } else {
            continue;
        };
        let schema = Schema::of(binary);
        let layer = schema.read_file(&path).unwrap();
        schema
            .resolve(layer)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        loaded += 1;
    }
    loaded
}

#[test]
fn a_declared_key_nobody_reads_is_reported() {
    // What each binary's `every_declared_key_is_read` test relies on.
    let schema = Schema::new("keel-test", "test", WIDGET.iter());
    let s = load(&schema, Some("node_id = 1\n"), &[]).unwrap();
    let _: i32 = s.require("node_id");
    assert_eq!(s.unread(), ["widget_flush_interval_ms"]);
    let _ = s.get::<u64>("widget_flush_interval_ms");
    assert!(s.unread().is_empty());
}
