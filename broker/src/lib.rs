//! `keel-broker`: partition log storage, replica manager, ISR replication, produce/fetch and
//! the metadata tailer (DESIGN §5). Modules arrive issue by issue.

pub mod log;
