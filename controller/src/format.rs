//! `keel-controller format`: prepares an empty metadata log directory before the controller's
//! first start, as Kafka's `kafka-storage format` does (KIP-631; the voter options of
//! KIP-853).
//!
//! ```text
//! keel-controller format --config controller.toml --standalone
//! keel-controller format --config controller.toml --initial-controllers 1@h1:9093:DIR1,2@h2:9093:DIR2,3@h3:9093:DIR3
//! keel-controller format --config controller.toml --no-initial-controllers
//! keel-controller format --config controller.toml            # static voters
//! ```
//!
//! It writes `meta.properties` ([`crate::meta_properties`]) and nothing else:
//! - `--standalone`: this node alone is the first voter (with a new directory id); grow the
//!   quorum with `keelctl quorum add-controller`.
//! - `--initial-controllers`: every initial voter with its directory id; each of them is
//!   formatted with the same list and takes its own directory id from it, so the quorum's
//!   first membership records every voter's replica key and a voter that comes back with
//!   another disk is refused from the start.
//! - `--no-initial-controllers`: a node to be added later; it never initializes a quorum,
//!   even if `controller_quorum_voters` lists it.
//! - none of these: the voters of `controller_quorum_voters` (static, as before KIP-853; the
//!   active controller records their directory ids once they answer). A first start without
//!   `format` does the same.
//!
//! Refused (exit 1, one line, nothing written): a directory that is already formatted (exit 0
//! with `--ignore-formatted`, for scripts that run `format` before every start), one that
//! holds a Raft log or snapshots without `meta.properties`, an `--initial-controllers` list
//! without this node, with a repeated node id or directory id, or a malformed entry.

use std::path::Path;
use std::process::ExitCode;

use clap::{Arg, ArgAction, ArgGroup};
use keel_metadata_log::raft_types::{ControllerNode, directory_id_text};
use keel_runtime::settings::{Binary, Schema};

use crate::config::ControllerConfig;
use crate::membership::{InitialController, parse_initial_controllers, render_initial_controllers};
use crate::meta_properties::{self, MetaProperties};

/// Which voters a formatted directory starts a quorum with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Voters {
    /// `controller_quorum_voters` (no flag).
    Static,
    /// `--standalone`.
    Standalone,
    /// `--initial-controllers`.
    Initial(Vec<InitialController>),
    /// `--no-initial-controllers`.
    None,
}

/// The `meta.properties` to write for node `config` with `voters`; `new_dir` is the directory
/// id to use unless the list gives this node's. Pure.
///
/// Errors: an `--initial-controllers` list without `config.node_id`; no flag with
/// `controller_quorum_bootstrap_servers` (there are no static voters to start from).
pub fn plan(
    config: &ControllerConfig,
    voters: Voters,
    new_dir: uuid::Uuid,
) -> Result<MetaProperties, String> {
    let (directory_id, initial_controllers) = match voters {
        // Kafka's kafka-storage format, too, needs one of the three flags for a dynamic quorum.
        Voters::Static if !config.controller_quorum_bootstrap_servers.is_empty() => {
            return Err(
                "controller_quorum_bootstrap_servers is set (a dynamic quorum, KIP-853): \
                        give --standalone (the first controller), --initial-controllers, or \
                        --no-initial-controllers (a controller to be added later)"
                    .into(),
            );
        }
        Voters::Static => (new_dir, None),
        Voters::None => (new_dir, Some(Vec::new())),
        Voters::Standalone => {
            let endpoint = ControllerNode::new(&config.advertised_listeners, None)
                .map_err(|e| format!("advertised_listeners: {e}"))?
                .addr;
            (
                new_dir,
                Some(vec![InitialController {
                    id: config.node_id,
                    endpoint,
                    directory_id: new_dir,
                }]),
            )
        }
        Voters::Initial(list) => {
            let Some(own) = list.iter().find(|c| c.id == config.node_id) else {
                return Err(format!(
                    "--initial-controllers does not list this node (node_id {})",
                    config.node_id
                ));
            };
            (own.directory_id, Some(list))
        }
    };
    Ok(MetaProperties {
        node_id: config.node_id,
        voter_ids: config.controller_quorum_voters.keys().copied().collect(),
        cluster_id: None,
        directory_id: Some(directory_id),
        initial_controllers,
    })
}

/// Why `format` did not write anything.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `meta.properties` exists (exit 0 with `--ignore-formatted`).
    AlreadyFormatted(String),
    /// Anything else (exit 1).
    Error(String),
}

/// Formats `dir` with `props` unless it is formatted already or holds Raft state.
///
/// Errors: [`Refusal`].
pub fn format_dir(dir: &Path, props: &MetaProperties) -> Result<(), Refusal> {
    if let Some(existing) = meta_properties::read(dir).map_err(|e| Refusal::Error(e.to_string()))? {
        return Err(Refusal::AlreadyFormatted(format!(
            "{} is already formatted (node_id {}, directory_id {})",
            dir.display(),
            existing.node_id,
            existing
                .directory_id
                .map_or("none".into(), directory_id_text)
        )));
    }
    for part in ["raft", "snapshots"] {
        if dir.join(part).exists() {
            return Err(Refusal::Error(format!(
                "{} holds {part}/ but no meta.properties: it is not empty; formatting it would \
                 mix a new identity with old state (restore meta.properties from a backup, or \
                 empty the directory)",
                dir.display()
            )));
        }
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| Refusal::Error(format!("{}: cannot create: {e}", dir.display())))?;
    meta_properties::write(dir, props).map_err(|e| Refusal::Error(e.to_string()))
}

/// `keel-controller format ...`: `args` are the process arguments with `format` removed.
pub fn main(args: Vec<std::ffi::OsString>) -> ExitCode {
    let program = "keel-controller format";
    let schema = Schema::of(Binary::Controller);
    let cmd = schema
        .command()
        .name(program)
        .about("Prepare an empty metadata_log_dir before the first start (kafka-storage format)")
        .arg(
            Arg::new("standalone")
                .long("standalone")
                .action(ArgAction::SetTrue)
                .help("This node alone is the first voter (KIP-853)"),
        )
        .arg(
            Arg::new("initial-controllers")
                .long("initial-controllers")
                .value_name("ID@HOST:PORT:DIRECTORY_ID,...")
                .help("The first voters with their directory ids (KIP-853)"),
        )
        .arg(
            Arg::new("no-initial-controllers")
                .long("no-initial-controllers")
                .action(ArgAction::SetTrue)
                .help("A controller to be added later with keelctl quorum add-controller"),
        )
        .group(
            ArgGroup::new("voters")
                .args([
                    "standalone",
                    "initial-controllers",
                    "no-initial-controllers",
                ])
                .multiple(false),
        )
        .arg(
            Arg::new("ignore-formatted")
                .long("ignore-formatted")
                .action(ArgAction::SetTrue)
                .help("Exit 0 when the directory is already formatted"),
        );
    let matches = keel_runtime::cli::matches_from_or_exit(cmd, args, program);
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("{program}: {e}");
        ExitCode::FAILURE
    };
    let config = match schema
        .load(&matches)
        .and_then(|s| ControllerConfig::from_settings(&s))
    {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let voters = if matches.get_flag("standalone") {
        Voters::Standalone
    } else if matches.get_flag("no-initial-controllers") {
        Voters::None
    } else if let Some(list) = matches.get_one::<String>("initial-controllers") {
        match parse_initial_controllers(list) {
            Ok(l) => Voters::Initial(l),
            Err(e) => return fail(&format!("--initial-controllers: {e}")),
        }
    } else {
        Voters::Static
    };
    let props = match plan(&config, voters, uuid::Uuid::new_v4()) {
        Ok(p) => p,
        Err(e) => return fail(&e),
    };
    match format_dir(&config.metadata_log_dir, &props) {
        Ok(()) => {
            println!(
                "formatted {}: node_id {}, directory_id {}{}",
                config.metadata_log_dir.display(),
                props.node_id,
                props.directory_id.map_or(String::new(), directory_id_text),
                match &props.initial_controllers {
                    None => " (voters from controller_quorum_voters)".to_string(),
                    Some(l) if l.is_empty() =>
                        " (no initial controllers: waits to be added)".into(),
                    Some(l) => format!(", initial controllers {}", render_initial_controllers(l)),
                }
            );
            ExitCode::SUCCESS
        }
        Err(Refusal::AlreadyFormatted(m)) if matches.get_flag("ignore-formatted") => {
            println!("{m}; left as it is (--ignore-formatted)");
            ExitCode::SUCCESS
        }
        Err(Refusal::AlreadyFormatted(m)) => {
            fail(&format!("{m}; --ignore-formatted to accept that"))
        }
        Err(Refusal::Error(m)) => fail(&m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(n: u128) -> uuid::Uuid {
        uuid::Uuid::from_u128(n)
    }

    fn config(node_id: u64) -> ControllerConfig {
        let s = Schema::of(Binary::Controller)
            .resolve(keel_runtime::settings::Layer(
                [
                    (
                        "node_id",
                        keel_runtime::settings::Value::Int(node_id as i128),
                    ),
                    (
                        "controller_quorum_voters",
                        keel_runtime::settings::Value::Text("1@h1:9093,2@h2:9093".into()),
                    ),
                    (
                        "metadata_log_dir",
                        keel_runtime::settings::Value::Text("/d".into()),
                    ),
                ]
                .into(),
            ))
            .unwrap();
        ControllerConfig::from_settings(&s).unwrap()
    }

    #[test]
    fn the_plan_takes_this_nodes_directory_id_from_the_list() {
        let c = config(2);
        let list = vec![
            InitialController {
                id: 1,
                endpoint: "h1:9093".into(),
                directory_id: dir(11),
            },
            InitialController {
                id: 2,
                endpoint: "h2:9093".into(),
                directory_id: dir(22),
            },
        ];
        let p = plan(&c, Voters::Initial(list.clone()), dir(99)).unwrap();
        assert_eq!(p.directory_id, Some(dir(22)));
        assert_eq!(p.initial_controllers, Some(list.clone()));
        let e = plan(&config(1), Voters::Initial(list[1..].to_vec()), dir(99)).unwrap_err();
        assert!(e.contains("does not list this node (node_id 1)"), "{e}");
        let p = plan(&c, Voters::Standalone, dir(99)).unwrap();
        assert_eq!(
            p.initial_controllers,
            Some(vec![InitialController {
                id: 2,
                endpoint: "h2:9093".into(),
                directory_id: dir(99)
            }])
        );
        assert_eq!(
            plan(&c, Voters::None, dir(99)).unwrap().initial_controllers,
            Some(vec![])
        );
        assert_eq!(
            plan(&c, Voters::Static, dir(99))
                .unwrap()
                .initial_controllers,
            None
        );
    }

    #[test]
    fn a_dynamic_quorum_needs_one_of_the_flags() {
        use keel_runtime::settings::Value;
        let s = Schema::of(Binary::Controller)
            .resolve(keel_runtime::settings::Layer(
                [
                    ("node_id", Value::Int(4)),
                    (
                        "controller_quorum_bootstrap_servers",
                        Value::Text("h1:9093, h2:9093".into()),
                    ),
                    ("metadata_log_dir", Value::Text("/d".into())),
                    ("listeners", Value::Text("0.0.0.0:9093".into())),
                    ("advertised_listeners", Value::Text("h4:9093".into())),
                ]
                .into(),
            ))
            .unwrap();
        let c = ControllerConfig::from_settings(&s).unwrap();
        assert!(c.controller_quorum_voters.is_empty());
        assert_eq!(
            c.controller_quorum_bootstrap_servers,
            ["h1:9093", "h2:9093"]
        );
        let e = plan(&c, Voters::Static, dir(9)).unwrap_err();
        assert!(
            e.contains("--standalone") && e.contains("--no-initial-controllers"),
            "{e}"
        );
        let p = plan(&c, Voters::Standalone, dir(9)).unwrap();
        assert!(p.voter_ids.is_empty());
        assert_eq!(p.initial_controllers.unwrap()[0].endpoint, "h4:9093");
    }

    #[test]
    fn formatted_or_partial_directories_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let props = plan(&config(1), Voters::Standalone, dir(5)).unwrap();
        format_dir(&d.path().join("new"), &props).unwrap();
        assert!(matches!(
            format_dir(&d.path().join("new"), &props),
            Err(Refusal::AlreadyFormatted(_))
        ));
        std::fs::create_dir_all(d.path().join("old/raft")).unwrap();
        match format_dir(&d.path().join("old"), &props) {
            Err(Refusal::Error(m)) => assert!(m.contains("holds raft/"), "{m}"),
            other => panic!("{other:?}"),
        }
        assert!(!d.path().join("old/meta.properties").exists());
    }
}
