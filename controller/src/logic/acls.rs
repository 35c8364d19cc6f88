//! CreateAcls, DescribeAcls and DeleteAcls (Kafka: `AclControlManager`, KIP-801): ACLs are
//! `AccessControlEntryRecord`s under fresh UUIDs and go away with
//! `RemoveAccessControlEntryRecord`s. Validation is [`keel_metadata_log::acl`]'s.
//!
//! - CreateAcls: each creation is validated alone; an invalid one is INVALID_REQUEST and the
//!   others are still added. A binding equal to an existing one (or to an earlier creation of
//!   the same request) adds nothing and succeeds. More than [`MAX_ACLS`] in the cluster:
//!   POLICY_VIOLATION, nothing added.
//! - DeleteAcls: each filter removes every ACL it matches; an ACL matched by several filters is
//!   removed once and reported under the first.
//! - DescribeAcls: the matching ACLs, sorted.

use std::collections::BTreeSet;

use keel_metadata_log::MetadataImage;
use keel_metadata_log::acl::{
    AclBinding, AclError, AclFilter, MAX_ACLS, Operation, PatternType, Permission, ResourceType,
};
use keel_proto::ErrorCode;
use keel_proto::controller::{
    AclBinding as WireAcl, AclCreationResult, CreateAclsReply, CreateAclsRequest,
    DeleteAclsFilterResult, DeleteAclsReply, DeleteAclsRequest,
};
use keel_proto::metadata::{
    MetadataRecord, RemoveAccessControlEntryRecord, metadata_record::Record,
};
use uuid::Uuid;

use super::ControllerResult;

/// Most creations in one CreateAcls and filters in one DeleteAcls.
pub const MAX_ACLS_PER_REQUEST: usize = 1000;

/// A binding from its wire form (validated).
pub fn binding_from_wire(w: &WireAcl) -> Result<AclBinding, AclError> {
    let concrete = |field: &str, v: i32| {
        AclError(format!(
            "{field} {v} is not a concrete value (ANY, MATCH and UNKNOWN are for filters)"
        ))
    };
    AclBinding::new(
        ResourceType::from_proto(w.resource_type)
            .ok_or_else(|| concrete("resource_type", w.resource_type))?,
        &w.resource_name,
        PatternType::from_proto(w.pattern_type)
            .ok_or_else(|| concrete("pattern_type", w.pattern_type))?,
        &w.principal,
        &w.host,
        Operation::from_proto(w.operation).ok_or_else(|| concrete("operation", w.operation))?,
        Permission::from_proto(w.permission_type)
            .ok_or_else(|| concrete("permission_type", w.permission_type))?,
    )
}

/// A binding's wire form.
pub fn binding_to_wire(b: &AclBinding) -> WireAcl {
    WireAcl {
        resource_type: b.resource_type.to_proto() as i32,
        resource_name: b.resource_name.clone(),
        pattern_type: b.pattern_type.to_proto() as i32,
        principal: b.principal.clone(),
        host: b.host.clone(),
        operation: b.operation.to_proto() as i32,
        permission_type: b.permission.to_proto() as i32,
    }
}

/// A filter from its wire form.
pub fn filter_from_wire(w: &WireAcl) -> Result<AclFilter, AclError> {
    AclFilter::from_wire(
        w.resource_type,
        &w.resource_name,
        w.pattern_type,
        &w.principal,
        &w.host,
        w.operation,
        w.permission_type,
    )
}

fn invalid(e: &AclError) -> Option<keel_proto::common::Error> {
    Some(ErrorCode::InvalidRequest.to_proto(e.to_string()))
}

/// CreateAcls (module doc); `new_id` names each added ACL.
pub fn create_acls(
    image: &MetadataImage,
    req: &CreateAclsRequest,
    new_id: &mut dyn FnMut() -> Uuid,
) -> ControllerResult<CreateAclsReply> {
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(req.creations.len());
    let mut added: BTreeSet<AclBinding> = BTreeSet::new();
    for w in &req.creations {
        let error = match binding_from_wire(w) {
            Err(e) => invalid(&e),
            Ok(b) => {
                if image.acls().find(&b).is_none() && !added.contains(&b) {
                    records.push(MetadataRecord {
                        record: Some(Record::AccessControlEntry(b.to_record(new_id()))),
                    });
                    added.insert(b);
                }
                None
            }
        };
        results.push(AclCreationResult { error });
    }
    if image.acls().len() + records.len() > MAX_ACLS {
        return ControllerResult::response_only(CreateAclsReply {
            error: Some(ErrorCode::PolicyViolation.to_proto(format!(
                "the cluster would hold {} ACLs; at most {MAX_ACLS}",
                image.acls().len() + records.len()
            ))),
            ..Default::default()
        });
    }
    ControllerResult::new(
        records,
        CreateAclsReply {
            results,
            ..Default::default()
        },
    )
}

/// DescribeAcls (module doc). `Err` for an invalid filter.
pub fn describe_acls(
    image: &MetadataImage,
    filter: Option<&WireAcl>,
) -> Result<Vec<WireAcl>, AclError> {
    let filter = match filter {
        Some(w) => filter_from_wire(w)?,
        None => AclFilter::any(),
    };
    let mut out: Vec<&AclBinding> = image
        .acls()
        .by_id()
        .values()
        .map(|b| b.as_ref())
        .filter(|b| filter.matches(b))
        .collect();
    out.sort();
    Ok(out.into_iter().map(binding_to_wire).collect())
}

/// DeleteAcls (module doc).
pub fn delete_acls(
    image: &MetadataImage,
    req: &DeleteAclsRequest,
) -> ControllerResult<DeleteAclsReply> {
    let mut removed: BTreeSet<Uuid> = BTreeSet::new();
    let mut records = Vec::new();
    let mut results = Vec::with_capacity(req.filters.len());
    for w in &req.filters {
        let result = match filter_from_wire(w) {
            Err(e) => DeleteAclsFilterResult {
                error: invalid(&e),
                matching_acls: Vec::new(),
            },
            Ok(f) => {
                let mut matching = Vec::new();
                for (id, b) in image.acls().by_id() {
                    if f.matches(b) && removed.insert(*id) {
                        records.push(MetadataRecord {
                            record: Some(Record::RemoveAccessControlEntry(
                                RemoveAccessControlEntryRecord {
                                    id: id.as_bytes().to_vec().into(),
                                },
                            )),
                        });
                        matching.push(binding_to_wire(b));
                    }
                }
                DeleteAclsFilterResult {
                    error: None,
                    matching_acls: matching,
                }
            }
        };
        results.push(result);
    }
    ControllerResult::new(
        records,
        DeleteAclsReply {
            results,
            ..Default::default()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_proto::metadata::{AclOperation, AclPatternType, AclPermissionType, AclResourceType};

    fn wire(name: &str, principal: &str, op: AclOperation) -> WireAcl {
        WireAcl {
            resource_type: AclResourceType::Topic as i32,
            resource_name: name.into(),
            pattern_type: AclPatternType::Literal as i32,
            principal: principal.into(),
            host: "*".into(),
            operation: op as i32,
            permission_type: AclPermissionType::Allow as i32,
        }
    }

    fn ids() -> impl FnMut() -> Uuid {
        let mut n = 0u128;
        move || {
            n += 1;
            Uuid::from_u128(n)
        }
    }

    fn apply(image: &MetadataImage, records: &[MetadataRecord]) -> MetadataImage {
        image.with_records(image.provenance(), records).unwrap()
    }

    #[test]
    fn create_validates_each_and_skips_duplicates() {
        let img = MetadataImage::empty();
        let req = CreateAclsRequest {
            creations: vec![
                wire("t", "User:alice", AclOperation::Read),
                wire("t", "alice", AclOperation::Read),
                wire("t", "User:alice", AclOperation::Read),
                wire("g", "User:alice", AclOperation::Any),
            ],
        };
        let r = create_acls(&img, &req, &mut ids());
        assert_eq!(r.records.len(), 1);
        let errs: Vec<Option<i32>> = r
            .response
            .results
            .iter()
            .map(|x| x.error.as_ref().map(|e| e.code))
            .collect();
        assert_eq!(errs, vec![None, Some(42), None, Some(42)]);
        assert!(
            r.response.results[1]
                .error
                .as_ref()
                .unwrap()
                .message
                .contains("User:<name>")
        );
        let img = apply(&img, &r.records);
        // Again: exists, nothing written.
        let again = create_acls(
            &img,
            &CreateAclsRequest {
                creations: vec![req.creations[0].clone()],
            },
            &mut ids(),
        );
        assert!(again.records.is_empty());
        assert!(again.response.results[0].error.is_none());
    }

    #[test]
    fn describe_and_delete_by_filter() {
        let img = MetadataImage::empty();
        let req = CreateAclsRequest {
            creations: vec![
                wire("a", "User:alice", AclOperation::Read),
                wire("b", "User:alice", AclOperation::Write),
                wire("b", "User:bob", AclOperation::Write),
            ],
        };
        let img = apply(&img, &create_acls(&img, &req, &mut ids()).records);
        let any = WireAcl {
            resource_type: AclResourceType::Any as i32,
            pattern_type: AclPatternType::Any as i32,
            operation: AclOperation::Any as i32,
            permission_type: AclPermissionType::Any as i32,
            ..Default::default()
        };
        assert_eq!(describe_acls(&img, None).unwrap().len(), 3);
        let alice = WireAcl {
            principal: "User:alice".into(),
            ..any.clone()
        };
        assert_eq!(describe_acls(&img, Some(&alice)).unwrap().len(), 2);
        let del = delete_acls(
            &img,
            &DeleteAclsRequest {
                filters: vec![alice.clone(), any.clone(), WireAcl::default()],
            },
        );
        assert_eq!(del.records.len(), 3);
        assert_eq!(del.response.results[0].matching_acls.len(), 2);
        assert_eq!(del.response.results[1].matching_acls.len(), 1);
        assert_eq!(del.response.results[2].error.as_ref().unwrap().code, 42);
        let img = apply(&img, &del.records);
        assert!(img.acls().is_empty());
    }
}
