//! `keel-client`: the client library of Keel and the `keelctl` CLI (DESIGN §1).
//!
//! - [`admin`]: [`admin::Admin`], the operator client of the controller API;
//! - [`format`](mod@format): pure formatting of admin results as text tables and JSON rows;
//! - [`local_cluster`]: the process and file layout of `keelctl cluster up|down|status`;
//! - [`cli`]: the `keelctl` command line (the binary only calls [`cli::main`]).
//!
//! Producer and consumer clients arrive with the produce/fetch issue.

pub mod admin;
pub mod cli;
pub mod format;
pub mod local_cluster;
