//! The retry core of [`Admin`] against in-process fake controllers on loopback: stale hints
//! to a dead leader, elections, giving up at the budget, non-retriable answers, and
//! addresses that are not controllers.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use keel_proto::ErrorCode;
use keel_proto::controller::controller_service_server::{
    ControllerService, ControllerServiceServer,
};
use keel_proto::controller::*;
use tonic::{Request, Response, Status};

use super::{Admin, AdminConfig, AdminError, NewTopic};

/// What a fake controller answers to CreateTopics.
#[derive(Debug, Clone)]
enum Role {
    /// NOT_CONTROLLER naming `hint` (or none: election in progress).
    Follower(Option<(i32, String)>),
    /// The active controller; `exists`: the topic is already there.
    Leader { id: i32, addr: String, exists: bool },
    /// Not a controller at all (a broker): UNIMPLEMENTED.
    NotAController,
}

#[derive(Debug)]
struct FakeState {
    role: Role,
    calls: u32,
    /// The first call sleeps this long before answering (an answer that never arrives in
    /// time: the client cannot know whether it was applied).
    first_delay: Option<Duration>,
    /// FetchMetadata calls so far; the first `purged_fetches` fail with OUT_OF_RANGE (the
    /// log was purged under the stream), later ones stream one committed batch.
    fetches: u32,
    purged_fetches: u32,
}

#[derive(Debug, Clone)]
struct Fake(Arc<Mutex<FakeState>>);

impl Fake {
    fn set(&self, role: Role) {
        self.0.lock().unwrap().role = role;
    }
    fn calls(&self) -> u32 {
        self.0.lock().unwrap().calls
    }
}

type Stream = Pin<Box<dyn tokio_stream::Stream<Item = Result<FetchMetadataItem, Status>> + Send>>;

#[tonic::async_trait]
impl ControllerService for Fake {
    type FetchMetadataStream = Stream;

    async fn create_topics(
        &self,
        request: Request<CreateTopicsRequest>,
    ) -> Result<Response<CreateTopicsReply>, Status> {
        let (role, delay) = {
            let mut s = self.0.lock().unwrap();
            s.calls += 1;
            let delay = if s.calls == 1 { s.first_delay } else { None };
            (s.role.clone(), delay)
        };
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        let name = request.into_inner().topics[0].name.clone();
        let reply = match role {
            Role::NotAController => return Err(Status::unimplemented("")),
            Role::Follower(hint) => {
                let (error, leader) = not_controller(hint);
                CreateTopicsReply {
                    error: Some(error),
                    leader: Some(leader),
                    ..Default::default()
                }
            }
            Role::Leader { id, addr, exists } => CreateTopicsReply {
                topics: vec![CreatableTopicResult {
                    error: exists.then(|| {
                        ErrorCode::TopicAlreadyExists
                            .to_proto(format!("topic {name:?} already exists"))
                    }),
                    name,
                    num_partitions: 1,
                    replication_factor: 1,
                    ..Default::default()
                }],
                leader: Some(ControllerLeader {
                    leader_id: id,
                    leader_address: addr,
                    term: 2,
                }),
                ..Default::default()
            },
        };
        Ok(Response::new(reply))
    }

    // The RPCs the tests do not use: what a server without them answers.
    async fn register_broker(
        &self,
        _: Request<RegisterBrokerRequest>,
    ) -> Result<Response<RegisterBrokerReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn broker_heartbeat(
        &self,
        _: Request<BrokerHeartbeatRequest>,
    ) -> Result<Response<BrokerHeartbeatReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn unregister_broker(
        &self,
        _: Request<UnregisterBrokerRequest>,
    ) -> Result<Response<UnregisterBrokerReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn add_raft_voter(
        &self,
        _: Request<AddRaftVoterRequest>,
    ) -> Result<Response<AddRaftVoterReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn remove_raft_voter(
        &self,
        _: Request<RemoveRaftVoterRequest>,
    ) -> Result<Response<RemoveRaftVoterReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn delete_topics(
        &self,
        _: Request<DeleteTopicsRequest>,
    ) -> Result<Response<DeleteTopicsReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn create_partitions(
        &self,
        _: Request<CreatePartitionsRequest>,
    ) -> Result<Response<CreatePartitionsReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn alter_partition(
        &self,
        _: Request<AlterPartitionRequest>,
    ) -> Result<Response<AlterPartitionReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn elect_leaders(
        &self,
        _: Request<ElectLeadersRequest>,
    ) -> Result<Response<ElectLeadersReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn alter_partition_reassignments(
        &self,
        _: Request<AlterPartitionReassignmentsRequest>,
    ) -> Result<Response<AlterPartitionReassignmentsReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn list_partition_reassignments(
        &self,
        _: Request<ListPartitionReassignmentsRequest>,
    ) -> Result<Response<ListPartitionReassignmentsReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn alter_configs(
        &self,
        _: Request<AlterConfigsRequest>,
    ) -> Result<Response<AlterConfigsReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn describe_configs(
        &self,
        _: Request<DescribeConfigsRequest>,
    ) -> Result<Response<DescribeConfigsReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn allocate_producer_ids(
        &self,
        _: Request<AllocateProducerIdsRequest>,
    ) -> Result<Response<AllocateProducerIdsReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn describe_cluster(
        &self,
        _: Request<DescribeClusterRequest>,
    ) -> Result<Response<DescribeClusterReply>, Status> {
        Err(Status::unimplemented(""))
    }

    /// The probe of the admin's scout: NOT_CONTROLLER with the hint from a follower, the
    /// leader naming itself.
    async fn describe_quorum(
        &self,
        _: Request<DescribeQuorumRequest>,
    ) -> Result<Response<DescribeQuorumReply>, Status> {
        let role = self.0.lock().unwrap().role.clone();
        let (error, leader) = match role {
            Role::NotAController => return Err(Status::unimplemented("")),
            Role::Follower(hint) => {
                let (error, leader) = not_controller(hint);
                (Some(error), leader)
            }
            Role::Leader { id, addr, .. } => (
                None,
                ControllerLeader {
                    leader_id: id,
                    leader_address: addr,
                    term: 2,
                },
            ),
        };
        Ok(Response::new(DescribeQuorumReply {
            error,
            leader: Some(leader),
            ..Default::default()
        }))
    }

    async fn fetch_metadata(
        &self,
        _: Request<FetchMetadataRequest>,
    ) -> Result<Response<Self::FetchMetadataStream>, Status> {
        let (purged, role) = {
            let mut st = self.0.lock().unwrap();
            st.fetches += 1;
            (st.fetches <= st.purged_fetches, st.role.clone())
        };
        if purged {
            return Err(Status::out_of_range(
                "offset 7 is no longer in the log; fetch again from 0 to get the snapshot",
            ));
        }
        let noop = keel_proto::metadata::MetadataRecord {
            record: Some(keel_proto::metadata::metadata_record::Record::NoOp(
                keel_proto::metadata::NoOpRecord {},
            )),
        };
        let item = FetchMetadataItem {
            item: Some(fetch_metadata_item::Item::Batch(CommittedBatch {
                offset: 1,
                term: 1,
                append_timestamp_ms: -1,
                commit_timestamp_ms: -1,
                batch: Some(keel_proto::metadata::MetadataBatch {
                    records: vec![noop],
                    append_timestamp_ms: -1,
                }),
            })),
            commit_index: 1,
            // The leader hint a real controller sends: its own for the active one, the one it
            // follows for a follower (none during an election).
            leader: match role {
                Role::Leader { id, addr, .. } => Some(ControllerLeader {
                    leader_id: id,
                    leader_address: addr,
                    term: 2,
                }),
                Role::Follower(Some((id, addr))) => Some(ControllerLeader {
                    leader_id: id,
                    leader_address: addr,
                    term: 2,
                }),
                Role::Follower(None) | Role::NotAController => None,
            },
            source: None,
        };
        Ok(Response::new(Box::pin(tokio_stream::iter([Ok(item)]))))
    }

    async fn read_metadata_log(
        &self,
        _: Request<ReadMetadataLogRequest>,
    ) -> Result<Response<ReadMetadataLogReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn create_acls(
        &self,
        _: Request<CreateAclsRequest>,
    ) -> Result<Response<CreateAclsReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn describe_acls(
        &self,
        _: Request<DescribeAclsRequest>,
    ) -> Result<Response<DescribeAclsReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn delete_acls(
        &self,
        _: Request<DeleteAclsRequest>,
    ) -> Result<Response<DeleteAclsReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn alter_user_scram_credentials(
        &self,
        _: Request<AlterUserScramCredentialsRequest>,
    ) -> Result<Response<AlterUserScramCredentialsReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn describe_user_scram_credentials(
        &self,
        _: Request<DescribeUserScramCredentialsRequest>,
    ) -> Result<Response<DescribeUserScramCredentialsReply>, Status> {
        Err(Status::unimplemented(""))
    }

    async fn scram_authenticate(
        &self,
        _: Request<ScramAuthenticateRequest>,
    ) -> Result<Response<ScramAuthenticateReply>, Status> {
        Err(Status::unimplemented(""))
    }
}

/// What a follower answers: NOT_CONTROLLER, and the leader hint (`hint`, or none during an
/// election).
fn not_controller(hint: Option<(i32, String)>) -> (keel_proto::common::Error, ControllerLeader) {
    let error = ErrorCode::NotController.to_proto(match &hint {
        Some((id, _)) => format!("the active controller is node {id}"),
        None => "no active controller is known (election in progress)".into(),
    });
    let leader = match hint {
        Some((id, addr)) => ControllerLeader {
            leader_id: id,
            leader_address: addr,
            term: 1,
        },
        None => ControllerLeader {
            leader_id: -1,
            leader_address: String::new(),
            term: 1,
        },
    };
    (error, leader)
}

/// A listener on a free loopback port; its address.
async fn listener() -> (tokio::net::TcpListener, String) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

/// Serves a fake controller with `role` at a free port; returns it and its address.
async fn fake(role: Role, first_delay: Option<Duration>) -> (Fake, String) {
    let (l, addr) = listener().await;
    let f = Fake(Arc::new(Mutex::new(FakeState {
        role,
        calls: 0,
        first_delay,
        fetches: 0,
        purged_fetches: 0,
    })));
    let svc = ControllerServiceServer::new(f.clone());
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(svc)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l))
            .await
    });
    (f, addr)
}

/// The active controller `id`, naming itself at its own address in its replies.
async fn active(id: i32) -> (Fake, String) {
    let (l, addr) = fake(
        Role::Leader {
            id,
            addr: String::new(),
            exists: false,
        },
        None,
    )
    .await;
    l.set(Role::Leader {
        id,
        addr: addr.clone(),
        exists: false,
    });
    (l, addr)
}

/// An address nothing listens on (connection refused), like a controller killed with -9.
async fn dead() -> String {
    let (l, addr) = listener().await;
    drop(l);
    addr
}

fn admin(addresses: &[&String], api_timeout: Duration) -> Admin {
    let mut cfg = AdminConfig::new(addresses.iter().map(|a| a.to_string()).collect());
    cfg.request_timeout = Duration::from_millis(500);
    cfg.api_timeout = api_timeout;
    Admin::new(cfg).unwrap()
}

fn topic(name: &str) -> NewTopic {
    NewTopic {
        name: name.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn stale_hints_to_a_dead_leader_are_retried_until_the_election_ends() {
    // Right after `kill -9` of the active controller D, the followers still name it.
    let d = dead().await;
    let (a, a_addr) = fake(Role::Follower(Some((3, d.clone()))), None).await;
    let (b, b_addr) = fake(Role::Follower(Some((3, d.clone()))), None).await;
    let admin = admin(&[&a_addr, &b_addr, &d], Duration::from_secs(10));
    let elect = {
        let (a, b, b_addr) = (a.clone(), b.clone(), b_addr.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            a.set(Role::Follower(None));
            tokio::time::sleep(Duration::from_millis(300)).await;
            b.set(Role::Leader {
                id: 2,
                addr: b_addr.clone(),
                exists: false,
            });
            a.set(Role::Follower(Some((2, b_addr))));
        })
    };
    let started = Instant::now();
    let created = admin.create_topic(topic("t")).await.unwrap();
    let took = started.elapsed();
    elect.await.unwrap();
    assert_eq!(created.name, "t");
    assert!(took >= Duration::from_millis(600), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    // Backed off between rounds instead of spinning: a handful of calls, not hundreds.
    assert!(
        a.calls() >= 3 && a.calls() < 20,
        "A asked {} times",
        a.calls()
    );
    assert_eq!(admin.active_controller(), Some(b_addr));
}

#[tokio::test]
async fn gives_up_at_the_budget_naming_each_controllers_last_error() {
    let d = dead().await;
    let (a, a_addr) = fake(Role::Follower(None), None).await;
    let admin = admin(&[&a_addr, &d], Duration::from_millis(700));
    let started = Instant::now();
    let err = admin.create_topic(topic("t")).await.unwrap_err();
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(650), "{took:?}");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert!(
        matches!(err, AdminError::NoActiveController { .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.starts_with("no active controller answered (gave up after "),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{a_addr}: NOT_CONTROLLER (41): no active controller is known (election in progress)"
        )),
        "{text}"
    );
    assert!(text.contains(&format!("{d}: connection refused")), "{text}");
    assert!(a.calls() >= 3, "{}", a.calls());
}

#[tokio::test]
async fn nothing_reachable_is_unreachable_after_the_budget() {
    let (d1, d2) = (dead().await, dead().await);
    let admin = admin(&[&d1, &d2], Duration::from_millis(400));
    let started = Instant::now();
    let err = admin.create_topic(topic("t")).await.unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(350));
    assert!(matches!(err, AdminError::Unreachable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.ends_with(&format!(
            "{d1}: connection refused; {d2}: connection refused"
        )),
        "{text}"
    );
}

#[tokio::test]
async fn refusals_are_not_retried() {
    let (a, a_addr) = fake(
        Role::Leader {
            id: 1,
            addr: String::new(),
            exists: true,
        },
        None,
    )
    .await;
    let admin = admin(&[&a_addr], Duration::from_secs(10));
    let err = admin.create_topic(topic("t")).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::TopicAlreadyExists));
    assert_eq!(
        err.to_string(),
        "create topic \"t\": TOPIC_ALREADY_EXISTS (36): topic \"t\" already exists"
    );
    assert_eq!(a.calls(), 1);
}

#[tokio::test]
async fn already_exists_after_an_unanswered_attempt_says_it_may_have_been_applied() {
    // The first attempt gets no answer within the request timeout (500 ms): the leader may
    // have created the topic. The retry is answered TOPIC_ALREADY_EXISTS.
    let (a, a_addr) = fake(
        Role::Leader {
            id: 1,
            addr: String::new(),
            exists: true,
        },
        Some(Duration::from_secs(2)),
    )
    .await;
    let admin = admin(&[&a_addr], Duration::from_secs(10));
    let err = admin.create_topic(topic("t")).await.unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::TopicAlreadyExists));
    let text = err.to_string();
    assert!(
        text.ends_with(&format!(
            "topic \"t\" already exists [an earlier attempt of this request got no definite answer ({a_addr}: no answer within 500 ms); it may have been applied]"
        )),
        "{text}"
    );
    assert_eq!(a.calls(), 2);
}

#[tokio::test]
async fn addresses_that_are_not_controllers_are_skipped() {
    // What a broker answers to a controller RPC: UNIMPLEMENTED, empty message.
    let (b, not_controller) = fake(Role::NotAController, None).await;
    let only = admin(&[&not_controller], Duration::from_secs(10));
    let started = Instant::now();
    let err = only.create_topic(topic("t")).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(
        err.to_string(),
        format!(
            "no controller at the bootstrap addresses: {not_controller} does not serve the controller API (is it a broker?)"
        )
    );
    assert_eq!(b.calls(), 1);
    let (_, a_addr) = fake(
        Role::Leader {
            id: 1,
            addr: String::new(),
            exists: false,
        },
        None,
    )
    .await;
    let mixed = admin(&[&not_controller, &a_addr], Duration::from_secs(10));
    assert_eq!(mixed.create_topic(topic("t")).await.unwrap().name, "t");
    assert_eq!(b.calls(), 2);
}

/// A metadata stream cut by a purge (OUT_OF_RANGE: the controller took a snapshot while the
/// stream was between the old snapshot and the log) is read again from 0.
#[tokio::test]
async fn a_metadata_stream_cut_by_a_purge_is_read_again() {
    let (a, a_addr) = fake(Role::Follower(None), None).await;
    a.0.lock().unwrap().purged_fetches = 2;
    let admin = admin(&[&a_addr], Duration::from_secs(10));
    let image = admin.metadata_image().await.unwrap();
    assert_eq!(image.provenance().offset, 1, "{image:?}");
    assert_eq!(a.0.lock().unwrap().fetches, 3);
}

/// The metadata image is read from the active controller a follower names (a follower may
/// not hold a commit another process just had acknowledged: a `topic describe` right after a
/// `topic create` missed the topic in CI), and from the follower itself with `allow_stale`.
#[tokio::test]
async fn the_metadata_image_is_read_from_the_active_controller() {
    let (l, l_addr) = active(3).await;
    let (f, f_addr) = fake(Role::Follower(Some((3, l_addr.clone()))), None).await;
    let fetches = |f: &Fake| f.0.lock().unwrap().fetches;

    let admin = admin(&[&f_addr], Duration::from_secs(10));
    let image = admin.metadata_image().await.unwrap();
    assert_eq!(image.provenance().offset, 1, "{image:?}");
    assert_eq!((fetches(&f), fetches(&l)), (1, 1));
    assert_eq!(admin.active_controller(), Some(l_addr.clone()));
    // The active controller known, it is asked first.
    admin.metadata_image().await.unwrap();
    assert_eq!((fetches(&f), fetches(&l)), (1, 2));

    let mut cfg = AdminConfig::new(vec![f_addr.clone()]);
    cfg.allow_stale = true;
    let any = Admin::new(cfg).unwrap();
    any.metadata_image().await.unwrap();
    assert_eq!((fetches(&f), fetches(&l)), (2, 2));
}

/// A controller process that is paused (SIGSTOP): its socket listens and the kernel accepts
/// connections into the backlog, but nothing ever answers. The listener is returned to keep
/// it open.
async fn paused() -> (tokio::net::TcpListener, String) {
    listener().await
}

/// With the request timeout at 10 s, an attempt at a paused bootstrap controller is given up
/// once the others name the active controller (about one probe interval, 1 s), instead of
/// after the 10 s.
#[tokio::test]
async fn a_paused_controller_is_left_for_the_active_one_the_others_name() {
    let (_held, p) = paused().await;
    let (l, l_addr) = active(3).await;
    let (_, f_addr) = fake(Role::Follower(Some((3, l_addr.clone()))), None).await;
    let mut cfg = AdminConfig::new(vec![p.clone(), f_addr, l_addr.clone()]);
    cfg.api_timeout = Duration::from_secs(30);
    assert_eq!(cfg.request_timeout, Duration::from_secs(10));
    let admin = Admin::new(cfg).unwrap();
    let started = Instant::now();
    let created = admin.create_topic(topic("t")).await.unwrap();
    let took = started.elapsed();
    assert_eq!(created.name, "t");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(l.calls(), 1);
    assert_eq!(admin.active_controller(), Some(l_addr));
}

/// A controller that is slow to answer but answers its probes is waited for up to the
/// request timeout, even while another controller names a different active one (a stale
/// hint must not cut a long commit short).
#[tokio::test]
async fn a_slow_controller_that_answers_probes_is_waited_for() {
    let (l, l_addr) = fake(
        Role::Leader {
            id: 1,
            addr: String::new(),
            exists: false,
        },
        Some(Duration::from_millis(2500)),
    )
    .await;
    let elsewhere = dead().await;
    let (_, f_addr) = fake(Role::Follower(Some((2, elsewhere))), None).await;
    let mut cfg = AdminConfig::new(vec![l_addr, f_addr]);
    cfg.api_timeout = Duration::from_secs(30);
    let admin = Admin::new(cfg).unwrap();
    let started = Instant::now();
    let created = admin.create_topic(topic("t")).await.unwrap();
    assert_eq!(created.name, "t");
    assert!(started.elapsed() >= Duration::from_millis(2500));
    assert_eq!(l.calls(), 1);
}

/// The paused controller is the active one: the others still name it until they elect a
/// successor (here 1.2 s after the pause, as measured on a real quorum). The attempt is given
/// up once a probe names the successor, without waiting out another probe timeout of the
/// paused one (the scout remembers it was silent), and the successor is asked at once.
#[tokio::test]
async fn a_paused_active_controller_is_left_once_its_successor_is_named() {
    let (_held, p) = paused().await;
    let (f, f_addr) = fake(Role::Follower(Some((1, p.clone()))), None).await;
    let (n, n_addr) = fake(Role::Follower(Some((1, p.clone()))), None).await;
    let elect = {
        let (f, n, n_addr) = (f.clone(), n.clone(), n_addr.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1200)).await;
            n.set(Role::Leader {
                id: 3,
                addr: n_addr.clone(),
                exists: false,
            });
            f.set(Role::Follower(Some((3, n_addr))));
        })
    };
    let mut cfg = AdminConfig::new(vec![f_addr, p.clone(), n_addr.clone()]);
    cfg.api_timeout = Duration::from_secs(30);
    let admin = Admin::new(cfg).unwrap();
    let started = Instant::now();
    let created = admin.create_topic(topic("t")).await.unwrap();
    let took = started.elapsed();
    elect.await.unwrap();
    assert_eq!(created.name, "t");
    // Named at about 1.5 s (the second probe round); waiting for the paused controller's
    // probe to time out again would make it 2.5 s at least.
    assert!(took >= Duration::from_millis(1200), "{took:?}");
    assert!(took < Duration::from_millis(2400), "{took:?}");
    assert_eq!(n.calls(), 1);
    assert_eq!(admin.active_controller(), Some(n_addr));
}
