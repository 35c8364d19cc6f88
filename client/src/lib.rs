//! `keel-client`: producer, consumer and admin clients used by `keelctl` (DESIGN §1).
//! Modules arrive issue by issue.
