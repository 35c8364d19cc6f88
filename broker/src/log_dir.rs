//! The identity and the lock of a broker's log directory (`log_dirs`), as Kafka's
//! `MetaProperties` (`meta.properties` in every log directory, KIP-631; `directory.id`,
//! KIP-858) and `LogManager`'s per-directory lock.
//!
//! [`LogDir::open`] runs before anything else touches the directory: it takes an exclusive
//! lock held for the life of the process ([`keel_metadata_log::data_dir::try_lock_dir`]),
//! then reads `meta.properties` and refuses a directory that belongs to another node id. On a
//! first start it writes the file with this node id and a new random directory id. Once the
//! controllers have reported the cluster id, [`LogDir::record_cluster_id`] refuses a
//! directory of another cluster, or records the id (Kafka writes it in its format step,
//! `kafka-storage format`; Keel has no format step, so the first start learns it). Only then
//! are partition logs opened, so a refused broker never truncates or deletes anything.
//!
//! Format (the syntax of [`keel_metadata_log::data_dir::parse_properties`]; Kafka's keys):
//!
//! ```text
//! version=1
//! node.id=1
//! directory.id=3f0c5a8e-5d8b-4a38-9f1e-0e5b6f1d2c7a
//! cluster.id=6f0d3c2e-...
//! ```
//!
//! - `version`: 1, the only version written and read;
//! - `node.id`: the broker's `node_id`, 0..=2147483647;
//! - `directory.id`: a random UUID (KIP-858), written as UUID text (Kafka writes the same
//!   128 bits in base64); an older file without one gets one at start, as Kafka does; the nil
//!   UUID and Kafka's other reserved ids (below 100: `DirectoryId.UNASSIGNED`, `LOST`,
//!   `MIGRATING`) are refused;
//! - `cluster.id`: absent until the controllers report it; then 1..=64 characters of
//!   `[A-Za-z0-9_-]` ([`keel_proto::limits::MAX_CLUSTER_ID_LEN`]).
//!
//! Unknown keys are ignored (and dropped when the file is rewritten).

use std::fs::File;
use std::path::{Path, PathBuf};

use keel_proto::limits::{MAX_CLUSTER_ID_LEN, clip};
use uuid::Uuid;

/// File name inside the log directory.
pub const FILE_NAME: &str = "meta.properties";

/// The only format version written and read.
pub const VERSION: u32 = 1;

/// Contents of a broker's `meta.properties`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    /// The broker's `node_id` (`node.id`), 0..=i32::MAX.
    pub node_id: i32,
    /// The directory id (`directory.id`, KIP-858); `None` only in a file read from an older
    /// Keel, before [`LogDir::open`] adds one.
    pub directory_id: Option<Uuid>,
    /// The cluster id (`cluster.id`), once the controllers reported it.
    pub cluster_id: Option<String>,
}

/// Why a log directory was refused. `Display` is one line naming the directory or file, the
/// key and both values.
#[derive(Debug, thiserror::Error)]
pub enum LogDirError {
    /// Another process holds the directory's lock.
    #[error(
        "log_dirs {dir} is locked by another process{}: is another keel-broker using this \
         directory?",
        holder.map(|h| format!(" (node.id {h} in its {FILE_NAME})")).unwrap_or_default()
    )]
    Locked {
        /// The directory.
        dir: PathBuf,
        /// Node id in the directory's `meta.properties`, when readable.
        holder: Option<i32>,
    },
    /// The directory belongs to another node id.
    #[error(
        "{path}: node.id is {stored} in this file but node_id is {configured} in the \
         configuration (the directory belongs to another broker)"
    )]
    NodeId {
        /// The file.
        path: PathBuf,
        /// `node_id` of the configuration.
        configured: i32,
        /// `node.id` in the file.
        stored: i32,
    },
    /// The directory belongs to another cluster than the controllers'.
    #[error(
        "{path}: {key} is {stored} in this file but {reported} at the controllers (the \
         directory belongs to another cluster)"
    )]
    ClusterId {
        /// The file (`meta.properties`, or the local metadata snapshot).
        path: PathBuf,
        /// The key in that file (`cluster.id`, or `cluster_id` for the snapshot).
        key: &'static str,
        /// Value in the file (clipped to 64 characters).
        stored: String,
        /// Value the controllers reported.
        reported: String,
    },
    /// The controllers reported a cluster id that cannot be stored.
    #[error(
        "the controllers report cluster id `{0}`, which is not 1..=64 characters of [A-Za-z0-9_-]"
    )]
    InvalidClusterId(String),
    /// The file is not a valid `meta.properties`.
    #[error("{path}: {problem}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The directory or file could not be created, read or written.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The directory or file.
        path: PathBuf,
        /// The operation.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Checks a cluster id reported by the controllers or read from the file.
///
/// Errors: empty, longer than [`MAX_CLUSTER_ID_LEN`] (64), or a character outside
/// `[A-Za-z0-9_-]` (Kafka's cluster ids are base64url UUIDs; Keel's are UUID text).
pub fn validate_cluster_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_CLUSTER_ID_LEN {
        return Err(format!(
            "cluster.id `{}` is not 1..={MAX_CLUSTER_ID_LEN} characters long",
            clip(id)
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "cluster.id `{}` has the character {c:?} (allowed: [A-Za-z0-9_-])",
            clip(id)
        ));
    }
    Ok(())
}

/// Whether `id` is one of Kafka's reserved UUIDs (`Uuid.RESERVED`: the 100 values with the
/// high 64 bits zero and the low below 100; `DirectoryId.UNASSIGNED` = 0, `LOST` = 1,
/// `MIGRATING` = 2). A random directory id is never one of them.
pub fn is_reserved_uuid(id: &Uuid) -> bool {
    id.as_u128() < 100
}

impl MetaProperties {
    /// Renders the file contents.
    pub fn render(&self) -> String {
        let mut s = format!(
            "# Identity of this keel-broker log directory; do not edit.\n\
             version={VERSION}\nnode.id={}\n",
            self.node_id
        );
        if let Some(d) = &self.directory_id {
            s += &format!("directory.id={d}\n");
        }
        if let Some(c) = &self.cluster_id {
            s += &format!("cluster.id={c}\n");
        }
        s
    }

    /// Parses file contents. `Err` is the problem in words (the caller adds the path).
    ///
    /// Errors: bad syntax, a missing or unparsable `version` or `node.id`, a version other
    /// than [`VERSION`], a negative `node.id`, a `directory.id` that is not a UUID or is
    /// reserved, a `cluster.id` refused by [`validate_cluster_id`]. Echoed values are clipped
    /// to 64 characters.
    pub fn parse(text: &str) -> Result<Self, String> {
        let kv = keel_metadata_log::data_dir::parse_properties(text)?;
        let get = |k: &str| {
            kv.get(k)
                .map(String::as_str)
                .ok_or_else(|| format!("{k} is missing"))
        };
        let version = get("version")?;
        if version.parse::<u32>().ok() != Some(VERSION) {
            return Err(format!(
                "version `{}` is not supported (expected {VERSION})",
                clip(version)
            ));
        }
        let node = get("node.id")?;
        let node_id = node
            .parse::<i32>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| format!("node.id `{}` is not in 0..=2147483647", clip(node)))?;
        let directory_id = match kv.get("directory.id") {
            None => None,
            Some(d) => {
                let id = Uuid::try_parse(d)
                    .map_err(|_| format!("directory.id `{}` is not a UUID", clip(d)))?;
                if is_reserved_uuid(&id) {
                    return Err(format!("directory.id {id} is a reserved id"));
                }
                Some(id)
            }
        };
        let cluster_id = match kv.get("cluster.id") {
            None => None,
            Some(c) => {
                validate_cluster_id(c)?;
                Some(c.clone())
            }
        };
        Ok(Self {
            node_id,
            directory_id,
            cluster_id,
        })
    }

    /// Checks the configured `node_id` against the file.
    ///
    /// Errors: [`LogDirError::NodeId`] with both values.
    pub fn check_node_id(&self, path: &Path, configured: i32) -> Result<(), LogDirError> {
        if self.node_id == configured {
            return Ok(());
        }
        Err(LogDirError::NodeId {
            path: path.to_path_buf(),
            configured,
            stored: self.node_id,
        })
    }
}

/// Checks a cluster id stored in `path` under `key` against the one the controllers report;
/// an absent stored id passes.
///
/// Errors: [`LogDirError::ClusterId`] when both are known and differ.
pub fn check_cluster_id(
    path: &Path,
    key: &'static str,
    stored: Option<&str>,
    reported: &str,
) -> Result<(), LogDirError> {
    match stored {
        Some(s) if s != reported => Err(LogDirError::ClusterId {
            path: path.to_path_buf(),
            key,
            stored: clip(s).into_owned(),
            reported: clip(reported).into_owned(),
        }),
        _ => Ok(()),
    }
}

/// Path of the file in `dir`.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(FILE_NAME)
}

/// Reads `dir/meta.properties`; `None` when it does not exist.
///
/// Errors: unreadable ([`LogDirError::Io`]) or invalid ([`LogDirError::Malformed`]).
pub fn read(dir: &Path) -> Result<Option<MetaProperties>, LogDirError> {
    let path = path_in(dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LogDirError::Io {
                path,
                op: "read",
                source,
            });
        }
    };
    MetaProperties::parse(&text)
        .map(Some)
        .map_err(|problem| LogDirError::Malformed { path, problem })
}

/// Writes `dir/meta.properties` atomically (temp file, fsync, rename, fsync of the directory:
/// a crash leaves the old or the new file).
///
/// Errors: [`LogDirError::Io`].
pub fn write(dir: &Path, props: &MetaProperties) -> Result<(), LogDirError> {
    let path = path_in(dir);
    keel_runtime::fs::write_atomic(&path, props.render().as_bytes()).map_err(|e| LogDirError::Io {
        path: e.path,
        op: e.op,
        source: e.source,
    })
}

/// An open, locked log directory whose `meta.properties` names this node. Keep it for the
/// life of the process: dropping it releases the lock.
#[derive(Debug)]
pub struct LogDir {
    dir: PathBuf,
    props: MetaProperties,
    _lock: File,
}

impl LogDir {
    /// Creates `dir` if needed, locks it, and reads and checks its `meta.properties` against
    /// `node_id` (writing the file on a first start, and adding a `directory.id` to a file
    /// without one). Nothing else in the directory is read or changed.
    ///
    /// Errors: [`LogDirError::Locked`] (another process holds it), [`LogDirError::NodeId`],
    /// [`LogDirError::Malformed`], [`LogDirError::Io`].
    pub fn open(dir: &Path, node_id: i32) -> Result<Self, LogDirError> {
        let io = |op: &'static str| {
            move |source| LogDirError::Io {
                path: dir.to_path_buf(),
                op,
                source,
            }
        };
        std::fs::create_dir_all(dir).map_err(io("create"))?;
        let Some(lock) = keel_metadata_log::data_dir::try_lock_dir(dir).map_err(io("lock"))? else {
            let holder = read(dir).ok().flatten().map(|p| p.node_id);
            return Err(LogDirError::Locked {
                dir: dir.to_path_buf(),
                holder,
            });
        };
        let props = match read(dir)? {
            Some(mut p) => {
                p.check_node_id(&path_in(dir), node_id)?;
                if p.directory_id.is_none() {
                    p.directory_id = Some(Uuid::new_v4());
                    write(dir, &p)?;
                }
                p
            }
            None => {
                let p = MetaProperties {
                    node_id,
                    directory_id: Some(Uuid::new_v4()),
                    cluster_id: None,
                };
                write(dir, &p)?;
                p
            }
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            props,
            _lock: lock,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file's contents (with a directory id).
    pub fn meta(&self) -> &MetaProperties {
        &self.props
    }

    /// Checks the cluster id the controllers report against `meta.properties` and against
    /// `snapshot` (path and cluster id of the local metadata snapshot, which a directory
    /// written by an older Keel may have without `cluster.id` in its file), then records it
    /// in `meta.properties` if the file had none.
    ///
    /// Errors: [`LogDirError::InvalidClusterId`], [`LogDirError::ClusterId`] naming the first
    /// file that differs, [`LogDirError::Io`]. Nothing is written on an error.
    pub fn record_cluster_id(
        &mut self,
        reported: &str,
        snapshot: Option<(&Path, &str)>,
    ) -> Result<(), LogDirError> {
        validate_cluster_id(reported)
            .map_err(|_| LogDirError::InvalidClusterId(clip(reported).into_owned()))?;
        check_cluster_id(
            &path_in(&self.dir),
            "cluster.id",
            self.props.cluster_id.as_deref(),
            reported,
        )?;
        if let Some((path, stored)) = snapshot {
            check_cluster_id(path, "cluster_id", Some(stored), reported)?;
        }
        if self.props.cluster_id.is_none() {
            let mut p = self.props.clone();
            p.cluster_id = Some(reported.to_string());
            write(&self.dir, &p)?;
            self.props = p;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props() -> MetaProperties {
        MetaProperties {
            node_id: 1,
            directory_id: Some(Uuid::from_u128(0x3f0c_5a8e_5d8b_4a38_9f1e_0e5b_6f1d_2c7a)),
            cluster_id: Some("6f0d3c2e-1111-4222-8333-444455556666".into()),
        }
    }

    #[test]
    fn render_then_parse_round_trips() {
        let mut p = props();
        assert_eq!(MetaProperties::parse(&p.render()), Ok(p.clone()));
        p.cluster_id = None;
        p.directory_id = None;
        assert_eq!(MetaProperties::parse(&p.render()), Ok(p));
    }

    #[test]
    fn kafka_key_names_are_written() {
        let text = props().render();
        for line in [
            "version=1",
            "node.id=1",
            "directory.id=3f0c5a8e-5d8b-4a38-9f1e-0e5b6f1d2c7a",
            "cluster.id=6f0d3c2e-1111-4222-8333-444455556666",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }

    #[test]
    fn malformed_files_name_the_problem() {
        let long = "9".repeat(5000);
        for (text, want) in [
            ("node.id=1\n", "version is missing"),
            ("version=2\nnode.id=1\n", "version `2` is not supported"),
            ("version=1\n", "node.id is missing"),
            (
                "version=1\nnode.id=x\n",
                "node.id `x` is not in 0..=2147483647",
            ),
            ("version=1\nnode.id=-1\n", "node.id `-1`"),
            ("version=1\nnode.id=2147483648\n", "node.id `2147483648`"),
            (
                "version=1\nnode.id=1\ndirectory.id=zz\n",
                "directory.id `zz` is not a UUID",
            ),
            (
                "version=1\nnode.id=1\ndirectory.id=00000000-0000-0000-0000-000000000001\n",
                "reserved",
            ),
            (
                "version=1\nnode.id=1\ncluster.id=\n",
                "not 1..=64 characters",
            ),
            ("version=1\nnode.id=1\ncluster.id=a b\n", "' '"),
            ("version=1\nnode.id\n", "not key=value"),
            ("version=1\nversion=1\n", "appears twice"),
            (&format!("version=1\nnode.id={long}\n"), "node.id `999"),
        ] {
            let e = MetaProperties::parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.len() < 200, "echoed input is clipped: {e}");
        }
    }

    #[test]
    fn another_node_id_is_refused_with_one_line_naming_file_key_and_both_values() {
        let p = props();
        let path = Path::new("/d/meta.properties");
        assert!(p.check_node_id(path, 1).is_ok());
        let e = p.check_node_id(path, 7).unwrap_err().to_string();
        assert_eq!(
            e,
            "/d/meta.properties: node.id is 1 in this file but node_id is 7 in the \
             configuration (the directory belongs to another broker)"
        );
    }

    #[test]
    fn another_cluster_id_is_refused_and_an_unknown_one_passes() {
        let path = Path::new("/d/meta.properties");
        assert!(check_cluster_id(path, "cluster.id", None, "b").is_ok());
        assert!(check_cluster_id(path, "cluster.id", Some("b"), "b").is_ok());
        let e = check_cluster_id(path, "cluster.id", Some("a"), "b")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "/d/meta.properties: cluster.id is a in this file but b at the controllers (the \
             directory belongs to another cluster)"
        );
    }

    #[test]
    fn first_open_writes_node_and_directory_ids_and_reopen_keeps_them() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("data");
        let d = LogDir::open(&dir, 3).unwrap();
        let first = d.meta().clone();
        assert_eq!(first.node_id, 3);
        assert!(first.directory_id.is_some());
        assert_eq!(first.cluster_id, None);
        assert_eq!(read(&dir).unwrap(), Some(first.clone()));
        drop(d);
        let d = LogDir::open(&dir, 3).unwrap();
        assert_eq!(d.meta(), &first, "the directory id is stable");
        drop(d);
        let other = LogDir::open(&tmp.path().join("other"), 3).unwrap();
        assert_ne!(other.meta().directory_id, first.directory_id);
    }

    #[test]
    fn open_refuses_another_node_id_and_changes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        drop(LogDir::open(tmp.path(), 1).unwrap());
        let before = std::fs::read(path_in(tmp.path())).unwrap();
        let e = LogDir::open(tmp.path(), 7).unwrap_err();
        assert!(
            matches!(
                e,
                LogDirError::NodeId {
                    configured: 7,
                    stored: 1,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(std::fs::read(path_in(tmp.path())).unwrap(), before);
    }

    #[test]
    fn a_second_open_while_locked_is_refused_naming_the_dir_and_holder() {
        let tmp = tempfile::tempdir().unwrap();
        let held = LogDir::open(tmp.path(), 1).unwrap();
        for node in [1, 7] {
            let e = LogDir::open(tmp.path(), node).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "log_dirs {} is locked by another process (node.id 1 in its \
                     meta.properties): is another keel-broker using this directory?",
                    tmp.path().display()
                )
            );
        }
        drop(held);
        assert!(LogDir::open(tmp.path(), 1).is_ok());
    }

    #[test]
    fn a_file_without_directory_id_gets_one() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(path_in(tmp.path()), "version=1\nnode.id=4\ncluster.id=c\n").unwrap();
        let d = LogDir::open(tmp.path(), 4).unwrap();
        let id = d.meta().directory_id.expect("added");
        let stored = read(tmp.path()).unwrap().unwrap();
        assert_eq!(stored.directory_id, Some(id));
        assert_eq!(stored.cluster_id.as_deref(), Some("c"));
    }

    #[test]
    fn the_cluster_id_is_recorded_once_and_checked_after() {
        let tmp = tempfile::tempdir().unwrap();
        let mut d = LogDir::open(tmp.path(), 1).unwrap();
        let snap = tmp.path().join("snap");
        // Invalid reported ids are refused and not written.
        for bad in ["", "a\nnode.id=9", &"c".repeat(65)] {
            let e = d.record_cluster_id(bad, None).unwrap_err();
            assert!(matches!(e, LogDirError::InvalidClusterId(_)), "{e}");
        }
        // A local snapshot of another cluster is refused, naming the snapshot.
        let e = d
            .record_cluster_id("c1", Some((&snap, "c0")))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("snap: cluster_id is c0 in this file but c1 at the controllers"),
            "{e}"
        );
        assert_eq!(read(tmp.path()).unwrap().unwrap().cluster_id, None);
        d.record_cluster_id("c1", Some((&snap, "c1"))).unwrap();
        assert_eq!(
            read(tmp.path()).unwrap().unwrap().cluster_id.as_deref(),
            Some("c1")
        );
        let e = d.record_cluster_id("c2", None).unwrap_err().to_string();
        assert!(
            e.contains("meta.properties: cluster.id is c1 in this file but c2 at the controllers"),
            "{e}"
        );
        drop(d);
        // The next start checks the recorded id.
        let mut d = LogDir::open(tmp.path(), 1).unwrap();
        assert!(d.record_cluster_id("c2", None).is_err());
        d.record_cluster_id("c1", None).unwrap();
    }
}
