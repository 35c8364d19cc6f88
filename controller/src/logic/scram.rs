//! AlterUserScramCredentials and DescribeUserScramCredentials (Kafka: `ScramControlManager`,
//! KIP-554): a user's SCRAM credential per mechanism is a `UserScramCredentialRecord`
//! (replaced by the next one for the same user and mechanism) and goes away with a
//! `RemoveUserScramCredentialRecord`. Credential checks are [`keel_metadata_log::scram`]'s.
//!
//! - Alter: results are per user, in order of first appearance. A user's deletions and
//!   upsertions are applied together or not at all; the first refusal among them is the
//!   user's result (UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL, DUPLICATE_RESOURCE,
//!   RESOURCE_NOT_FOUND, POLICY_VIOLATION past [`MAX_SCRAM_USERS`]); other users' changes are
//!   still written. Deletions are judged against the image before the request, as Kafka does.
//! - Describe: the named users (RESOURCE_NOT_FOUND without a credential, DUPLICATE_RESOURCE
//!   when named twice), or every user with a credential, sorted; mechanisms and iterations
//!   only, never keys or salts.

use std::collections::{BTreeMap, BTreeSet};

use keel_metadata_log::MetadataImage;
use keel_metadata_log::scram::{self, MAX_SCRAM_USERS, Mechanism, ScramCredential, ScramError};
use keel_proto::ErrorCode;
use keel_proto::common::Error as WireError;
use keel_proto::controller::{
    AlterUserScramCredentialsReply, AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResult, DescribeUserScramCredentialsReply,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResult, ScramCredentialInfo,
};
use keel_proto::metadata::{MetadataRecord, metadata_record::Record};

use super::ControllerResult;

/// Most deletions plus upsertions in one AlterUserScramCredentials, and users in one
/// DescribeUserScramCredentials.
pub const MAX_SCRAM_CHANGES_PER_REQUEST: usize = 1000;

fn unacceptable(e: &ScramError) -> WireError {
    ErrorCode::UnacceptableCredential.to_proto(e.to_string())
}

fn mechanism(user: &str, v: i32) -> Result<Mechanism, WireError> {
    Mechanism::from_proto(v).ok_or_else(|| {
        ErrorCode::UnsupportedSaslMechanism.to_proto(format!(
            "user {user:?}: mechanism {v} is not SCRAM-SHA-256 (1) or SCRAM-SHA-512 (2)"
        ))
    })
}

/// AlterUserScramCredentials (module doc).
pub fn alter_user_scram_credentials(
    image: &MetadataImage,
    req: &AlterUserScramCredentialsRequest,
) -> ControllerResult<AlterUserScramCredentialsReply> {
    // Per user, in order of first appearance: its records, or its first refusal.
    let mut order: Vec<&str> = Vec::new();
    let mut outcome: BTreeMap<&str, Result<Vec<Record>, WireError>> = BTreeMap::new();
    let mut seen: BTreeSet<(&str, Mechanism)> = BTreeSet::new();
    for d in &req.deletions {
        let user = d.name.as_str();
        if !outcome.contains_key(user) {
            order.push(user);
        }
        let change = (|| {
            scram::validate_user(user).map_err(|e| unacceptable(&e))?;
            let m = mechanism(user, d.mechanism)?;
            if !seen.insert((user, m)) {
                return Err(duplicate(user, m));
            }
            if image.scram_credential(user, m).is_none() {
                return Err(ErrorCode::ResourceNotFound
                    .to_proto(format!("user {user:?} has no {m} credential to delete")));
            }
            Ok(Record::RemoveUserScramCredential(scram::removal_record(
                user, m,
            )))
        })();
        add(&mut outcome, user, change);
    }
    for u in &req.upsertions {
        let user = u.name.as_str();
        if !outcome.contains_key(user) {
            order.push(user);
        }
        let change = (|| {
            scram::validate_user(user).map_err(|e| unacceptable(&e))?;
            let m = mechanism(user, u.mechanism)?;
            if !seen.insert((user, m)) {
                return Err(duplicate(user, m));
            }
            let c = ScramCredential::from_salted_password(
                m,
                &u.salted_password,
                &u.salt,
                i64::from(u.iterations),
            )
            .map_err(|e| {
                ErrorCode::UnacceptableCredential.to_proto(format!("user {user:?}: {e}"))
            })?;
            Ok(Record::UserScramCredential(c.to_record(user)))
        })();
        add(&mut outcome, user, change);
    }
    // The user count after the request, for MAX_SCRAM_USERS.
    let mut users: BTreeSet<&str> = image
        .scram_credentials()
        .keys()
        .map(|(u, _)| u.as_str())
        .collect();
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(order.len());
    for user in order {
        let error = match outcome.remove(user) {
            Some(Ok(recs)) => {
                let adds = recs
                    .iter()
                    .any(|r| matches!(r, Record::UserScramCredential(_)));
                if adds && !users.contains(user) && users.len() >= MAX_SCRAM_USERS {
                    Some(ErrorCode::PolicyViolation.to_proto(format!(
                        "the cluster holds credentials of {MAX_SCRAM_USERS} users, the most it \
                         keeps"
                    )))
                } else {
                    if adds {
                        users.insert(user);
                    }
                    records.extend(recs.into_iter().map(|r| MetadataRecord { record: Some(r) }));
                    None
                }
            }
            Some(Err(e)) => Some(e),
            None => None,
        };
        results.push(AlterUserScramCredentialsResult {
            user: user.to_owned(),
            error,
        });
    }
    ControllerResult::new(
        records,
        AlterUserScramCredentialsReply {
            results,
            ..Default::default()
        },
    )
}

fn duplicate(user: &str, m: Mechanism) -> WireError {
    ErrorCode::DuplicateResource.to_proto(format!(
        "user {user:?} and {m} appear more than once in the request"
    ))
}

/// Adds one change to a user's outcome: the first refusal sticks and drops the user's records.
fn add<'a>(
    outcome: &mut BTreeMap<&'a str, Result<Vec<Record>, WireError>>,
    user: &'a str,
    change: Result<Record, WireError>,
) {
    let slot = outcome.entry(user).or_insert_with(|| Ok(Vec::new()));
    match (slot.as_mut(), change) {
        (Ok(recs), Ok(r)) => recs.push(r),
        (Ok(_), Err(e)) => *slot = Err(e),
        (Err(_), _) => {}
    }
}

/// DescribeUserScramCredentials (module doc).
pub fn describe_user_scram_credentials(
    image: &MetadataImage,
    req: &DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsReply {
    let all = scram::users(image.scram_credentials());
    let info = |creds: &Vec<(Mechanism, u32)>| {
        creds
            .iter()
            .map(|(m, i)| ScramCredentialInfo {
                mechanism: m.to_proto() as i32,
                iterations: i32::try_from(*i).unwrap_or(i32::MAX),
            })
            .collect()
    };
    let results = if req.users.is_empty() {
        all.iter()
            .map(|(user, creds)| DescribeUserScramCredentialsResult {
                user: (*user).to_owned(),
                error: None,
                credential_infos: info(creds),
            })
            .collect()
    } else {
        let mut count: BTreeMap<&str, usize> = BTreeMap::new();
        for u in &req.users {
            *count.entry(u.as_str()).or_default() += 1;
        }
        let mut done = BTreeSet::new();
        req.users
            .iter()
            .filter(|u| done.insert(u.as_str()))
            .map(|u| {
                let (error, credential_infos) = if count[u.as_str()] > 1 {
                    (
                        Some(
                            ErrorCode::DuplicateResource
                                .to_proto(format!("user {u:?} is named more than once")),
                        ),
                        Vec::new(),
                    )
                } else {
                    match all.get(u.as_str()) {
                        Some(creds) => (None, info(creds)),
                        None => (
                            Some(
                                ErrorCode::ResourceNotFound
                                    .to_proto(format!("user {u:?} has no SCRAM credential")),
                            ),
                            Vec::new(),
                        ),
                    }
                };
                DescribeUserScramCredentialsResult {
                    user: u.clone(),
                    error,
                    credential_infos,
                }
            })
            .collect()
    };
    DescribeUserScramCredentialsReply {
        results,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use keel_proto::controller::{ScramCredentialDeletion, ScramCredentialUpsertion};

    use super::*;

    fn upsert(user: &str, m: Mechanism, iterations: i32) -> ScramCredentialUpsertion {
        let salt = b"some-salt".to_vec();
        let sp = scram::salted_password(
            m,
            b"pw",
            &salt,
            NonZeroU32::new(u32::try_from(iterations.max(1)).unwrap()).unwrap(),
        );
        ScramCredentialUpsertion {
            name: user.into(),
            mechanism: m.to_proto() as i32,
            iterations,
            salt: salt.into(),
            salted_password: sp.into(),
        }
    }

    fn delete(user: &str, m: i32) -> ScramCredentialDeletion {
        ScramCredentialDeletion {
            name: user.into(),
            mechanism: m,
        }
    }

    fn apply(img: &MetadataImage, recs: &[MetadataRecord]) -> MetadataImage {
        img.with_records(img.provenance(), recs).unwrap()
    }

    fn codes(r: &AlterUserScramCredentialsReply) -> Vec<(String, i32)> {
        r.results
            .iter()
            .map(|r| (r.user.clone(), r.error.as_ref().map_or(0, |e| e.code)))
            .collect()
    }

    #[test]
    fn alter_is_per_user_all_or_nothing() {
        let img = MetadataImage::empty();
        let req = AlterUserScramCredentialsRequest {
            deletions: vec![delete("carol", 1)],
            upsertions: vec![
                upsert("alice", Mechanism::Sha256, 4096),
                upsert("alice", Mechanism::Sha512, 8192),
                upsert("bob", Mechanism::Sha256, 4096),
                upsert("bob", Mechanism::Sha512, 100),
                upsert("", Mechanism::Sha256, 4096),
                upsert("dave", Mechanism::Sha256, 4096),
                upsert("dave", Mechanism::Sha256, 4096),
            ],
        };
        let r = alter_user_scram_credentials(&img, &req);
        assert_eq!(
            codes(&r.response),
            vec![
                ("carol".into(), 91),
                ("alice".into(), 0),
                ("bob".into(), 93),
                ("".into(), 93),
                ("dave".into(), 92),
            ]
        );
        let img = apply(&img, &r.records);
        let users = scram::users(img.scram_credentials());
        assert_eq!(users.keys().copied().collect::<Vec<_>>(), vec!["alice"]);
        assert_eq!(
            users["alice"],
            vec![(Mechanism::Sha256, 4096), (Mechanism::Sha512, 8192)]
        );

        // Replace one, delete the other; an unknown mechanism is refused.
        let req = AlterUserScramCredentialsRequest {
            deletions: vec![delete("alice", 2), delete("erin", 7)],
            upsertions: vec![upsert("alice", Mechanism::Sha256, 16384)],
        };
        let r = alter_user_scram_credentials(&img, &req);
        assert_eq!(
            codes(&r.response),
            vec![("alice".into(), 0), ("erin".into(), 33)]
        );
        let img = apply(&img, &r.records);
        assert_eq!(
            scram::users(img.scram_credentials())["alice"],
            vec![(Mechanism::Sha256, 16384)]
        );

        let d = describe_user_scram_credentials(
            &img,
            &DescribeUserScramCredentialsRequest {
                users: vec!["alice".into(), "nobody".into(), "x".into(), "x".into()],
            },
        );
        let got: Vec<_> = d
            .results
            .iter()
            .map(|r| {
                (
                    r.user.as_str(),
                    r.error.as_ref().map_or(0, |e| e.code),
                    r.credential_infos.len(),
                )
            })
            .collect();
        assert_eq!(got, vec![("alice", 0, 1), ("nobody", 91, 0), ("x", 92, 0)]);
        let all = describe_user_scram_credentials(&img, &Default::default());
        assert_eq!(all.results.len(), 1);
    }
}
