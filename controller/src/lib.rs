//! `keel-controller`: the Raft node, the quorum controller logic and its gRPC services
//! (DESIGN §4). Modules arrive issue by issue.
