//! `meta.properties`: the identity of a controller's `metadata_log_dir`, like Kafka's file
//! of the same name (`MetaProperties.java`, KIP-631; Kafka stores `node.id`, `cluster.id`
//! and a version in every log directory).
//!
//! Written on first start; on later starts a directory that belongs to another node id or
//! another voter set is refused before anything else is opened, so copying a data directory
//! to the wrong node, or starting a node with a changed `controller_quorum_voters`, fails
//! with one line instead of corrupting the quorum.
//!
//! Format (Java properties, `key=value` lines, `#` comments; the syntax is
//! [`keel_metadata_log::data_dir::parse_properties`], shared with the broker's log dirs):
//!
//! ```text
//! version=1
//! node_id=1
//! controller_quorum_voters=1,2,3
//! directory_id=pbvuBlaTTwKRxS5NLJwRFQ
//! cluster_id=6f0d3c2e-...
//! ```
//!
//! `controller_quorum_voters` keeps only the voter ids the directory was formatted or first
//! started with (addresses may change between starts). They are checked only while the
//! directory holds no membership ([`MetaProperties::check_voters`]: a start would initialize
//! the quorum with the configured set); afterwards the membership in the metadata log decides
//! who votes (KIP-853, `keelctl quorum add-controller`) and a different list is logged.
//! `directory_id` (Kafka's `directory.id`, KIP-858/KIP-853) is a random id made when the
//! directory is first used (or added to a file of an earlier build); with the node id it is
//! this voter's key in the quorum's membership, so a replaced or emptied directory is a new
//! directory id that the other controllers refuse as that voter.
//! `cluster_id` appears once the quorum has committed its `ClusterIdRecord`.
//! `initial_controllers` is written by `keel-controller format` ([`crate::format`] writes it): the
//! voters, with their directory ids, this node initializes a new quorum with
//! (`id@host:port:directory-id,...`, as Kafka's `--initial-controllers`); empty for a node
//! formatted with `--no-initial-controllers`, which never initializes a quorum and waits to
//! be added. Without the key the node initializes from `controller_quorum_voters`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// File name inside `metadata_log_dir`.
pub const FILE_NAME: &str = "meta.properties";

/// The only format version written and read.
pub const VERSION: u32 = 1;

/// Contents of `meta.properties`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    /// This controller's id (`node_id`).
    pub node_id: u64,
    /// Ids of the static voters (`controller_quorum_voters` without addresses).
    pub voter_ids: BTreeSet<u64>,
    /// The cluster id, once known.
    pub cluster_id: Option<String>,
    /// This directory's id; `None` only in files of builds before directory ids (start-up
    /// then makes one and rewrites the file).
    pub directory_id: Option<uuid::Uuid>,
    /// The voters a new quorum starts with (`keel-controller format`); `Some(empty)`: never
    /// initialize; `None`: initialize from `controller_quorum_voters`.
    pub initial_controllers: Option<Vec<crate::membership::InitialController>>,
}

/// Why `meta.properties` refused a start. `Display` is one line naming the file and key.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The configuration disagrees with the directory.
    #[error(
        "{path}: {key} is {configured} in the configuration but {stored} in this directory \
         (it belongs to another node or quorum)"
    )]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// The key (`node_id`, `controller_quorum_voters`, `cluster_id`).
        key: &'static str,
        /// Value from the configuration (or, for `cluster_id`, from the metadata log).
        configured: String,
        /// Value stored in the file.
        stored: String,
    },
    /// The file names another cluster than the metadata log in the same directory.
    #[error(
        "{path}: cluster_id is {stored} in this file but {log} in the metadata log (the \
         directory mixes files of two clusters)"
    )]
    ClusterId {
        /// The file.
        path: PathBuf,
        /// Cluster id stored in the file.
        stored: String,
        /// Cluster id in the metadata log (its snapshot).
        log: String,
    },
    /// The file is not a valid `meta.properties`.
    #[error("{path}: {problem}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The file could not be read or written.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The operation.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

impl MetaProperties {
    /// Renders the file contents.
    pub fn render(&self) -> String {
        let voters: Vec<String> = self.voter_ids.iter().map(u64::to_string).collect();
        let mut s = format!(
            "# Identity of this keel-controller data directory; do not edit.\n\
             version={VERSION}\nnode_id={}\ncontroller_quorum_voters={}\n",
            self.node_id,
            voters.join(",")
        );
        if let Some(d) = self.directory_id {
            s += &format!(
                "directory_id={}\n",
                keel_metadata_log::raft_types::directory_id_text(d)
            );
        }
        if let Some(list) = &self.initial_controllers {
            s += &format!(
                "initial_controllers={}\n",
                crate::membership::render_initial_controllers(list)
            );
        }
        if let Some(c) = &self.cluster_id {
            s += &format!("cluster_id={c}\n");
        }
        s
    }

    /// Parses file contents. `Err` is the problem in words (the caller adds the path).
    ///
    /// Errors: a line without `=`, a repeated key, a missing or unparsable `version`,
    /// `node_id` or `controller_quorum_voters`, or a version other than [`VERSION`].
    pub fn parse(text: &str) -> Result<Self, String> {
        let kv = keel_metadata_log::data_dir::parse_properties(text)?;
        let get = |k: &str| {
            kv.get(k)
                .map(String::as_str)
                .ok_or_else(|| format!("{k} is missing"))
        };
        let version: u32 = get("version")?
            .parse()
            .map_err(|_| format!("version `{}` is not a number", kv["version"]))?;
        if version != VERSION {
            return Err(format!(
                "version {version} is not supported (expected {VERSION})"
            ));
        }
        let node_id = get("node_id")?
            .parse()
            .map_err(|_| format!("node_id `{}` is not a number", kv["node_id"]))?;
        // Empty for a controller of a dynamic quorum (controller_quorum_bootstrap_servers):
        // its voters are in the metadata log only.
        let voter_ids = get("controller_quorum_voters")?
            .split(',')
            .filter(|id| !id.trim().is_empty())
            .map(|id| {
                id.trim()
                    .parse::<u64>()
                    .map_err(|_| format!("controller_quorum_voters id `{id}` is not a number"))
            })
            .collect::<Result<BTreeSet<_>, _>>()?;
        let cluster_id = kv
            .get("cluster_id")
            .filter(|c| !c.is_empty())
            .map(|c| c.to_string());
        let directory_id = kv
            .get("directory_id")
            .map(|d| {
                keel_metadata_log::raft_types::parse_directory_id(d)
                    .map_err(|e| format!("directory_id: {e}"))
            })
            .transpose()?;
        let initial_controllers = kv
            .get("initial_controllers")
            .map(|l| match l.as_str() {
                "" => Ok(Vec::new()),
                l => crate::membership::parse_initial_controllers(l)
                    .map_err(|e| format!("initial_controllers: {e}")),
            })
            .transpose()?;
        Ok(Self {
            node_id,
            voter_ids,
            cluster_id,
            directory_id,
            initial_controllers,
        })
    }

    /// Checks a configuration's `node_id` against this file.
    ///
    /// Errors: [`IdentityError::Mismatch`] when it differs.
    pub fn check(&self, path: &Path, node_id: u64) -> Result<(), IdentityError> {
        if self.node_id != node_id {
            return Err(IdentityError::Mismatch {
                path: path.to_path_buf(),
                key: "node_id",
                configured: node_id.to_string(),
                stored: self.node_id.to_string(),
            });
        }
        Ok(())
    }

    /// Checks the configured voter ids against the ids this directory was formatted or first
    /// started with (used while the directory holds no membership yet).
    ///
    /// Errors: [`IdentityError::Mismatch`] on `controller_quorum_voters`.
    pub fn check_voters(
        &self,
        path: &Path,
        voter_ids: &BTreeSet<u64>,
    ) -> Result<(), IdentityError> {
        if &self.voter_ids != voter_ids {
            let ids = |s: &BTreeSet<u64>| s.iter().map(u64::to_string).collect::<Vec<_>>();
            return Err(IdentityError::Mismatch {
                path: path.to_path_buf(),
                key: "controller_quorum_voters",
                configured: format!("voter ids {}", ids(voter_ids).join(",")),
                stored: format!("voter ids {}", ids(&self.voter_ids).join(",")),
            });
        }
        Ok(())
    }
}

impl MetaProperties {
    /// Checks the stored cluster id against the one the metadata log holds; either unknown
    /// passes.
    ///
    /// Errors: [`IdentityError::ClusterId`] when both are known and differ.
    pub fn check_cluster_id(&self, path: &Path, log: Option<&str>) -> Result<(), IdentityError> {
        match (&self.cluster_id, log) {
            (Some(stored), Some(log)) if stored != log => Err(IdentityError::ClusterId {
                path: path.to_path_buf(),
                stored: stored.clone(),
                log: log.to_string(),
            }),
            _ => Ok(()),
        }
    }
}

/// Path of the file in `dir`.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Reads `dir/meta.properties`; `None` when it does not exist.
///
/// Errors: unreadable ([`IdentityError::Io`]) or invalid ([`IdentityError::Malformed`]).
pub fn read(dir: &Path) -> Result<Option<MetaProperties>, IdentityError> {
    let path = path_in(dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(IdentityError::Io {
                path,
                op: "read",
                source,
            });
        }
    };
    MetaProperties::parse(&text)
        .map(Some)
        .map_err(|problem| IdentityError::Malformed { path, problem })
}

/// Writes `dir/meta.properties` atomically: a temp file, fsync, rename over the old file,
/// fsync of the directory (a crash leaves the old or the new file, never a torn one).
///
/// Errors: [`IdentityError::Io`] naming the failed operation.
pub fn write(dir: &Path, props: &MetaProperties) -> Result<(), IdentityError> {
    let path = path_in(dir);
    keel_runtime::fs::write_atomic(&path, props.render().as_bytes()).map_err(|e| {
        IdentityError::Io {
            path: e.path,
            op: e.op,
            source: e.source,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props() -> MetaProperties {
        MetaProperties {
            node_id: 2,
            voter_ids: [1, 2, 3].into(),
            cluster_id: None,
            directory_id: Some(uuid::Uuid::from_u128(7)),
            initial_controllers: None,
        }
    }

    #[test]
    fn render_then_parse_round_trips() {
        let mut p = props();
        assert_eq!(MetaProperties::parse(&p.render()), Ok(p.clone()));
        p.cluster_id = Some("c-1".into());
        assert_eq!(MetaProperties::parse(&p.render()), Ok(p.clone()));
        p.initial_controllers = Some(Vec::new());
        assert_eq!(MetaProperties::parse(&p.render()), Ok(p.clone()));
        p.initial_controllers = Some(vec![crate::membership::InitialController {
            id: 2,
            endpoint: "h:9".into(),
            directory_id: uuid::Uuid::from_u128(7),
        }]);
        assert_eq!(MetaProperties::parse(&p.render()), Ok(p.clone()));
        // A controller of a dynamic quorum: no static voter ids.
        p.voter_ids.clear();
        assert_eq!(MetaProperties::parse(&p.render()), Ok(p.clone()));
        // A file of a build before directory ids.
        p.directory_id = None;
        p.initial_controllers = None;
        assert_eq!(MetaProperties::parse(&p.render()), Ok(p));
    }

    #[test]
    fn malformed_files_name_the_problem() {
        for (text, want) in [
            (
                "version=1\nnode_id=1\n",
                "controller_quorum_voters is missing",
            ),
            (
                "version=2\nnode_id=1\ncontroller_quorum_voters=1",
                "version 2",
            ),
            (
                "version=1\nnode_id=x\ncontroller_quorum_voters=1",
                "node_id `x`",
            ),
            ("version=1\nnode_id\n", "not key=value"),
            ("version=1\nversion=1\n", "appears twice"),
            (
                "version=1\nnode_id=1\ncontroller_quorum_voters=1\ndirectory_id=x",
                "directory_id: directory id \"x\"",
            ),
        ] {
            let e = MetaProperties::parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn check_names_the_first_mismatching_key_and_both_values() {
        let p = props();
        let path = Path::new("/d/meta.properties");
        assert!(p.check(path, 2).is_ok());
        let e = p.check(path, 5).unwrap_err().to_string();
        assert!(
            e.contains("node_id is 5 in the configuration but 2 in this directory"),
            "{e}"
        );
        assert!(p.check_voters(path, &[1, 2, 3].into()).is_ok());
        let e = p
            .check_voters(path, &[1, 2, 4].into())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "controller_quorum_voters is voter ids 1,2,4 in the configuration but voter ids \
                 1,2,3 in this directory"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_cluster_id_other_than_the_logs_is_refused() {
        let mut p = props();
        let path = Path::new("/d/meta.properties");
        assert!(p.check_cluster_id(path, Some("a")).is_ok());
        p.cluster_id = Some("a".into());
        assert!(p.check_cluster_id(path, Some("a")).is_ok());
        assert!(p.check_cluster_id(path, None).is_ok());
        let e = p.check_cluster_id(path, Some("b")).unwrap_err().to_string();
        assert_eq!(
            e,
            "/d/meta.properties: cluster_id is a in this file but b in the metadata log (the \
             directory mixes files of two clusters)"
        );
    }

    #[test]
    fn write_then_read_round_trips_and_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read(dir.path()).unwrap().is_none());
        write(dir.path(), &props()).unwrap();
        assert_eq!(read(dir.path()).unwrap(), Some(props()));
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from(FILE_NAME)]);
    }
}
