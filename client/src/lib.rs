//! `keel-client`: the client library of Keel (DESIGN §1).
//!
//! - [`admin`]: [`admin::Admin`], the operator client of the controller API.
//!
//! Producer and consumer clients arrive with the produce/fetch issue.

pub mod admin;
