//! The Kafka APIs the listener serves and the version ranges it advertises in ApiVersions
//! (KIP-35, KIP-511): every version in a range is decoded by `kafka-protocol`, passes the
//! [`super::guard`] schema and is answered; nothing is advertised that is not served
//! (`kafka-protocol`'s own `valid_versions()` claims versions its structs cannot decode, so
//! the ranges are Keel's, not the crate's).

use kafka_protocol::messages::ApiKey;
use kafka_protocol::messages::api_versions_response::{ApiVersion, ApiVersionsResponse};

/// One served API: `[min, max]` is advertised; versions below `served_min` are advertised but
/// answered with UNSUPPORTED_VERSION (Produce v0-2: Kafka 4 removed them but still advertises
/// them, because older librdkafka releases check for Produce v0 before enabling compression,
/// KAFKA-18659).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// The API.
    pub key: ApiKey,
    /// Lowest advertised version.
    pub min: i16,
    /// Highest advertised and served version.
    pub max: i16,
    /// Lowest served version (`min..served_min` are refused).
    pub served_min: i16,
}

const fn api(key: ApiKey, min: i16, max: i16) -> Served {
    Served {
        key,
        min,
        max,
        served_min: min,
    }
}

/// Every API of the listener, in ApiVersions order (by key).
pub const SERVED: &[Served] = &[
    Served {
        key: ApiKey::Produce,
        min: 0,
        max: 11,
        served_min: 3,
    },
    api(ApiKey::Fetch, 4, 12),
    api(ApiKey::ListOffsets, 1, 10),
    api(ApiKey::Metadata, 0, 12),
    api(ApiKey::OffsetCommit, 2, 8),
    api(ApiKey::OffsetFetch, 1, 8),
    api(ApiKey::FindCoordinator, 0, 4),
    api(ApiKey::JoinGroup, 0, 9),
    api(ApiKey::Heartbeat, 0, 4),
    api(ApiKey::LeaveGroup, 0, 5),
    api(ApiKey::SyncGroup, 0, 5),
    api(ApiKey::DescribeGroups, 0, 5),
    api(ApiKey::ListGroups, 0, 5),
    // v0 (raw SASL tokens after the handshake, no SaslAuthenticate) is advertised because
    // librdkafka enables SASL only when the broker's range includes v0 (its feature table),
    // and answered UNSUPPORTED_VERSION by [`super::sasl`]; clients use v1 (KIP-152).
    api(ApiKey::SaslHandshake, 0, 1),
    api(ApiKey::ApiVersions, 0, 4),
    api(ApiKey::CreateTopics, 2, 7),
    api(ApiKey::DeleteTopics, 1, 6),
    // KIP-107 (`kafka-delete-records`); answered by each partition's leader.
    api(ApiKey::DeleteRecords, 0, 2),
    api(ApiKey::InitProducerId, 0, 5),
    api(ApiKey::OffsetForLeaderEpoch, 2, 4),
    api(ApiKey::DescribeAcls, 1, 3),
    api(ApiKey::CreateAcls, 1, 3),
    api(ApiKey::DeleteAcls, 1, 3),
    api(ApiKey::DescribeConfigs, 1, 4),
    // The legacy whole-set replace; KIP-339 deprecates it for IncrementalAlterConfigs.
    api(ApiKey::AlterConfigs, 0, 2),
    api(ApiKey::DescribeLogDirs, 1, 4),
    api(ApiKey::SaslAuthenticate, 0, 2),
    api(ApiKey::CreatePartitions, 0, 3),
    api(ApiKey::DeleteGroups, 0, 2),
    api(ApiKey::ElectLeaders, 0, 2),
    api(ApiKey::IncrementalAlterConfigs, 0, 1),
    // v0 only: v1's AllowReplicationFactorChange (KIP-860) is not served; Kafka's clients send
    // v0 unless asked to refuse a replication factor change.
    api(ApiKey::AlterPartitionReassignments, 0, 0),
    api(ApiKey::ListPartitionReassignments, 0, 0),
    // KIP-496 (`kafka-consumer-groups --delete-offsets`); v0 is the only version.
    api(ApiKey::OffsetDelete, 0, 0),
    api(ApiKey::DescribeUserScramCredentials, 0, 0),
    api(ApiKey::AlterUserScramCredentials, 0, 0),
    api(ApiKey::DescribeCluster, 0, 2),
];

/// The served range of `key`, if the listener serves it.
pub fn served(key: ApiKey) -> Option<Served> {
    SERVED.iter().copied().find(|s| s.key == key)
}

/// The ApiVersions response: `error_code` NONE, or UNSUPPORTED_VERSION (35) for an
/// ApiVersions request of a version this listener does not know (then it is encoded as v0,
/// so any client can read the ranges and retry with one it shares, KIP-511).
pub fn api_versions_response(error_code: i16) -> ApiVersionsResponse {
    let api_keys = SERVED
        .iter()
        .map(|s| {
            ApiVersion::default()
                .with_api_key(s.key as i16)
                .with_min_version(s.min)
                .with_max_version(s.max)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::protocol::Message;

    use super::*;

    /// Every advertised version a client may send is one `kafka-protocol` can decode (its
    /// structs' `VERSIONS`), except the refused Produce v0-2, which are answered without the
    /// crate's decoder.
    #[test]
    fn every_served_version_is_decodable_by_the_codec() {
        use kafka_protocol::messages::*;
        for s in SERVED {
            let range = match s.key {
                ApiKey::Produce => ProduceRequest::VERSIONS,
                ApiKey::Fetch => FetchRequest::VERSIONS,
                ApiKey::ListOffsets => ListOffsetsRequest::VERSIONS,
                ApiKey::Metadata => MetadataRequest::VERSIONS,
                ApiKey::ApiVersions => ApiVersionsRequest::VERSIONS,
                ApiKey::FindCoordinator => FindCoordinatorRequest::VERSIONS,
                ApiKey::InitProducerId => InitProducerIdRequest::VERSIONS,
                ApiKey::OffsetForLeaderEpoch => OffsetForLeaderEpochRequest::VERSIONS,
                ApiKey::CreateTopics => CreateTopicsRequest::VERSIONS,
                ApiKey::DeleteTopics => DeleteTopicsRequest::VERSIONS,
                ApiKey::DescribeConfigs => DescribeConfigsRequest::VERSIONS,
                ApiKey::DescribeCluster => DescribeClusterRequest::VERSIONS,
                ApiKey::CreatePartitions => CreatePartitionsRequest::VERSIONS,
                ApiKey::IncrementalAlterConfigs => IncrementalAlterConfigsRequest::VERSIONS,
                ApiKey::AlterConfigs => AlterConfigsRequest::VERSIONS,
                ApiKey::DeleteRecords => DeleteRecordsRequest::VERSIONS,
                ApiKey::OffsetDelete => OffsetDeleteRequest::VERSIONS,
                ApiKey::ElectLeaders => ElectLeadersRequest::VERSIONS,
                ApiKey::DescribeAcls => DescribeAclsRequest::VERSIONS,
                ApiKey::DescribeLogDirs => DescribeLogDirsRequest::VERSIONS,
                ApiKey::DescribeUserScramCredentials => {
                    DescribeUserScramCredentialsRequest::VERSIONS
                }
                ApiKey::AlterUserScramCredentials => AlterUserScramCredentialsRequest::VERSIONS,
                ApiKey::CreateAcls => CreateAclsRequest::VERSIONS,
                ApiKey::DeleteAcls => DeleteAclsRequest::VERSIONS,
                ApiKey::AlterPartitionReassignments => AlterPartitionReassignmentsRequest::VERSIONS,
                ApiKey::ListPartitionReassignments => ListPartitionReassignmentsRequest::VERSIONS,
                ApiKey::OffsetCommit => OffsetCommitRequest::VERSIONS,
                ApiKey::OffsetFetch => OffsetFetchRequest::VERSIONS,
                ApiKey::JoinGroup => JoinGroupRequest::VERSIONS,
                ApiKey::Heartbeat => HeartbeatRequest::VERSIONS,
                ApiKey::LeaveGroup => LeaveGroupRequest::VERSIONS,
                ApiKey::SyncGroup => SyncGroupRequest::VERSIONS,
                ApiKey::DescribeGroups => DescribeGroupsRequest::VERSIONS,
                ApiKey::ListGroups => ListGroupsRequest::VERSIONS,
                ApiKey::DeleteGroups => DeleteGroupsRequest::VERSIONS,
                ApiKey::SaslHandshake => SaslHandshakeRequest::VERSIONS,
                ApiKey::SaslAuthenticate => SaslAuthenticateRequest::VERSIONS,
                other => panic!("no codec check for {other:?}"),
            };
            assert!(
                range.min <= s.served_min && s.max <= range.max,
                "{:?} {}..={} not within the codec's {range}",
                s.key,
                s.served_min,
                s.max
            );
            assert!(s.min <= s.served_min && s.served_min <= s.max);
        }
    }
}
