//! Incremental fetch sessions, leader side (KIP-227; Kafka `FetchSession`,
//! `FetchSessionCache`, `FullFetchContext` / `IncrementalFetchContext`). Pure: no I/O, no
//! clock (least recently used is a counter of requests).
//!
//! A follower fetching 30,000 partitions from a leader would otherwise send all of them in
//! every request and get all of them back, each round, whether or not anything changed. With
//! a session the leader keeps every partition's latest fetch fields ([`Session::topics`], in
//! the request's own form, so the read path is the sessionless one) and what it last answered
//! of each ([`Answered`]); a request lists only the partitions added or changed
//! (`FetchSessionRequest.forgotten` drops some) and the reply only the partitions with
//! something new: records, an error, a divergence, a HW or log start offset other than last
//! answered. The leader still reads every partition of the session each round, so each
//! follower's fetch state (LEO, caught-up time: the ISR rules) is refreshed as before.
//!
//! The wire rules are in `broker.proto` (`FetchSessionRequest`). Ownership: a session is in
//! the cache when idle and out of it while a request uses it ([`SessionCache::begin`] takes
//! it, [`SessionCache::finish`] puts it back with its next epoch); a second request for a busy
//! session gets FETCH_SESSION_ID_NOT_FOUND, so two requests never share one.
//!
//! Invariants: at most `slots` sessions (idle and busy; [`MAX_SESSIONS`] by default), at most
//! [`MAX_SESSIONS_PER_FOLLOWER`] per follower broker id, at most
//! [`MAX_PARTITIONS_PER_REQUEST`] partitions per session; `answered[t].len() ==
//! topics[t].partitions.len()`, no topic is listed twice or empty, and `index` names every
//! partition once.

use std::collections::HashMap;

use bytes::Bytes;
use keel_proto::ErrorCode;
use keel_proto::broker::{
    FetchPartition, FetchReply, FetchRequest, FetchSessionReply, FetchSessionRequest, FetchTopic,
    ForgottenTopic,
};
use keel_proto::limits::MAX_PARTITIONS_PER_REQUEST;

/// Most sessions a leader keeps by default (Kafka `max.incremental.fetch.session.cache.slots`,
/// 1000).
pub const MAX_SESSIONS: usize = 1_000;
/// Most sessions per follower broker id: a follower runs one fetcher per leader, so more
/// are sessions it abandoned (a reply that never arrived); opening one more closes its least
/// recently used.
pub const MAX_SESSIONS_PER_FOLLOWER: usize = 4;
/// `FetchSessionRequest.epoch` that opens a session (Kafka `FetchMetadata.INITIAL_EPOCH`).
pub const INITIAL_EPOCH: i32 = 0;
/// `FetchSessionRequest.epoch` that closes one (Kafka `FetchMetadata.FINAL_EPOCH`).
pub const FINAL_EPOCH: i32 = -1;

/// The epoch after `epoch` (1..=i32::MAX, wrapping to 1; Kafka `FetchMetadata.nextEpoch`).
pub fn next_epoch(epoch: i32) -> i32 {
    if (1..i32::MAX).contains(&epoch) {
        epoch + 1
    } else {
        1
    }
}

/// What the last reply of a session said of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Answered {
    /// HW answered (-1 with an error); `i64::MIN` until first answered.
    high_watermark: i64,
    /// Log start offset answered; `i64::MIN` until first answered.
    log_start_offset: i64,
}

impl Answered {
    const NEVER: Answered = Answered {
        high_watermark: i64::MIN,
        log_start_offset: i64::MIN,
    };
}

/// One follower's fetch session.
#[derive(Debug)]
pub struct Session {
    id: i32,
    replica_id: i32,
    broker_epoch: i64,
    /// Epoch of the request being served (0 when it opened the session).
    epoch: i32,
    /// The session's partitions with their latest fetch fields: what each round reads.
    topics: Vec<FetchTopic>,
    /// Parallel to `topics[t].partitions`.
    answered: Vec<Vec<Answered>>,
    /// Topic name -> (its position in `topics`, partition -> position in its `partitions`).
    index: HashMap<String, (usize, HashMap<i32, usize>)>,
    /// Partitions in the session (sum of `topics[t].partitions.len()`).
    partitions: usize,
    /// Request counter of its last use (least recently used goes first).
    last_used: u64,
}

impl Session {
    fn new(id: i32, req: &FetchRequest, session: &FetchSessionRequest) -> Session {
        let mut s = Session {
            id,
            replica_id: req.replica_id,
            broker_epoch: req.broker_epoch,
            epoch: session.epoch,
            topics: Vec::new(),
            answered: Vec::new(),
            index: HashMap::new(),
            partitions: 0,
            last_used: 0,
        };
        s.upsert(&req.topics);
        s
    }

    /// The id the follower names it by (> 0).
    pub fn id(&self) -> i32 {
        self.id
    }

    /// The partitions to read, in the request's form.
    pub fn topics(&self) -> &[FetchTopic] {
        &self.topics
    }

    /// Partitions in the session.
    pub fn len(&self) -> usize {
        self.partitions
    }

    /// Whether the session holds no partition.
    pub fn is_empty(&self) -> bool {
        self.partitions == 0
    }

    /// Adds or updates the partitions of `topics` (a re-created topic's new id replaces the
    /// old one). A changed partition is answered again in the next reply.
    fn upsert(&mut self, topics: &[FetchTopic]) {
        for t in topics.iter().filter(|t| !t.partitions.is_empty()) {
            let ti = match self.index.get(&t.topic) {
                Some((ti, _)) => *ti,
                None => {
                    self.topics.push(FetchTopic {
                        topic: t.topic.clone(),
                        topic_id: t.topic_id.clone(),
                        partitions: Vec::new(),
                    });
                    self.answered.push(Vec::new());
                    let ti = self.topics.len() - 1;
                    self.index.insert(t.topic.clone(), (ti, HashMap::new()));
                    ti
                }
            };
            if self.topics[ti].topic_id != t.topic_id {
                self.topics[ti].topic_id = t.topic_id.clone();
            }
            let (_, parts) = self.index.get_mut(&t.topic).expect("inserted above");
            for p in &t.partitions {
                match parts.get(&p.partition) {
                    Some(&pi) => {
                        self.topics[ti].partitions[pi] = *p;
                        self.answered[ti][pi] = Answered::NEVER;
                    }
                    None => {
                        parts.insert(p.partition, self.topics[ti].partitions.len());
                        self.topics[ti].partitions.push(*p);
                        self.answered[ti].push(Answered::NEVER);
                        self.partitions += 1;
                    }
                }
            }
        }
    }

    /// Drops the named partitions (unknown ones are ignored, as Kafka does).
    fn forget(&mut self, session: &FetchSessionRequest) {
        let mut removed = false;
        for f in &session.forgotten {
            let Some((ti, parts)) = self.index.get_mut(&f.topic) else {
                continue;
            };
            for p in &f.partitions {
                if let Some(pi) = parts.remove(p) {
                    // Mark, then compact once below (positions stay valid meanwhile).
                    self.topics[*ti].partitions[pi].partition = i32::MIN;
                    self.partitions -= 1;
                    removed = true;
                }
            }
        }
        if removed {
            self.compact();
        }
    }

    /// Removes the marked partitions and empty topics and rebuilds the index.
    fn compact(&mut self) {
        let topics = std::mem::take(&mut self.topics);
        let answered = std::mem::take(&mut self.answered);
        self.index.clear();
        for (mut t, a) in topics.into_iter().zip(answered) {
            let (parts, ans): (Vec<_>, Vec<_>) = t
                .partitions
                .into_iter()
                .zip(a)
                .filter(|(p, _)| p.partition != i32::MIN)
                .unzip();
            if parts.is_empty() {
                continue;
            }
            let ti = self.topics.len();
            let positions = parts
                .iter()
                .enumerate()
                .map(|(pi, p)| (p.partition, pi))
                .collect();
            self.index.insert(t.topic.clone(), (ti, positions));
            t.partitions = parts;
            self.topics.push(t);
            self.answered.push(ans);
        }
    }

    /// Turns `reply`, read from [`Session::topics`] in order (one answer per partition),
    /// into the session's reply: every partition when the request opened the session, else
    /// only those with records, an error, a divergence, or a HW or log start offset other
    /// than last answered. Records what it answered and names the session in the reply.
    pub fn answer(&mut self, reply: &mut FetchReply) {
        let full = self.epoch == INITIAL_EPOCH;
        debug_assert_eq!(reply.responses.len(), self.topics.len());
        for (ti, t) in reply.responses.iter_mut().enumerate() {
            let Some(answered) = self.answered.get_mut(ti) else {
                break;
            };
            debug_assert_eq!(t.partitions.len(), answered.len());
            let mut pi = 0;
            t.partitions.retain(|d| {
                let now = Answered {
                    high_watermark: d.high_watermark,
                    log_start_offset: d.log_start_offset,
                };
                let last = answered.get_mut(pi).map(|a| std::mem::replace(a, now));
                pi += 1;
                full || !d.records.is_empty()
                    || d.error.is_some()
                    || d.diverging_epoch.is_some()
                    || d.current_leader.is_some()
                    || last != Some(now)
            });
        }
        reply.responses.retain(|t| !t.partitions.is_empty());
        reply.session = Some(FetchSessionReply {
            session_id: self.id,
        });
    }
}

/// How to serve one fetch ([`SessionCache::begin`]).
#[derive(Debug)]
pub enum Begin {
    /// No session: read `FetchRequest.topics` and answer every partition.
    Sessionless,
    /// The cache had no room for a new session: read `FetchRequest.topics`, answer every
    /// partition, and tell the follower so (`session_id` 0).
    Full,
    /// Read [`Session::topics`], then [`Session::answer`] and [`SessionCache::finish`].
    Session(Box<Session>),
    /// Answer this top-level error; nothing is read.
    Refuse(ErrorCode, String),
}

/// The leader's sessions (see the module doc).
#[derive(Debug)]
pub struct SessionCache {
    /// Most sessions kept (idle and busy); 0 = none (every fetch is answered in full).
    slots: usize,
    idle: HashMap<i32, Box<Session>>,
    /// Sessions taken by a request: id -> follower broker id.
    busy: HashMap<i32, i32>,
    /// Last id handed out (ids are 1..=i32::MAX, wrapping, skipping ids in use).
    last_id: i32,
    /// Requests served: the least-recently-used clock.
    clock: u64,
}

impl Default for SessionCache {
    fn default() -> Self {
        Self::new(MAX_SESSIONS)
    }
}

impl SessionCache {
    /// A cache of at most `slots` sessions (Kafka `max.incremental.fetch.session.cache.slots`;
    /// 0 = no sessions: every fetch is answered in full).
    pub fn new(slots: usize) -> Self {
        Self {
            slots,
            idle: HashMap::new(),
            busy: HashMap::new(),
            last_id: 0,
            clock: 0,
        }
    }

    /// Sessions kept, idle or busy.
    pub fn len(&self) -> usize {
        self.idle.len() + self.busy.len()
    }

    /// Whether no session is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Decides how to serve `req` (bounds already checked: `replica_id >= 0` when `session`
    /// is set). Takes the session out of the cache when one is used; it must come back
    /// through [`SessionCache::finish`] or [`SessionCache::release`].
    pub fn begin(&mut self, req: &FetchRequest) -> Begin {
        let Some(s) = req.session.as_ref() else {
            return Begin::Sessionless;
        };
        self.clock += 1;
        match s.epoch {
            FINAL_EPOCH => {
                self.close_own(s.session_id, req.replica_id);
                Begin::Sessionless
            }
            INITIAL_EPOCH => {
                self.close_own(s.session_id, req.replica_id);
                let partitions: usize = req.topics.iter().map(|t| t.partitions.len()).sum();
                if partitions > MAX_PARTITIONS_PER_REQUEST || !self.make_room(req.replica_id) {
                    return Begin::Full;
                }
                let id = self.new_id();
                let mut session = Box::new(Session::new(id, req, s));
                session.last_used = self.clock;
                self.busy.insert(id, req.replica_id);
                Begin::Session(session)
            }
            epoch => {
                let owned = self.idle.get(&s.session_id).is_some_and(|x| {
                    x.replica_id == req.replica_id && x.broker_epoch == req.broker_epoch
                });
                if !owned {
                    return Begin::Refuse(
                        ErrorCode::FetchSessionIdNotFound,
                        format!(
                            "fetch session {} is not open for replica {} (broker epoch {}), or \
                             is serving another request",
                            s.session_id, req.replica_id, req.broker_epoch
                        ),
                    );
                }
                let mut session = self.idle.remove(&s.session_id).expect("checked above");
                let expected = next_epoch(session.epoch);
                if epoch != expected {
                    return Begin::Refuse(
                        ErrorCode::InvalidFetchSessionEpoch,
                        format!(
                            "fetch session {} expected epoch {expected}, got {epoch}; the \
                             session is closed",
                            s.session_id
                        ),
                    );
                }
                session.forget(s);
                session.upsert(&req.topics);
                if session.len() > MAX_PARTITIONS_PER_REQUEST {
                    return Begin::Refuse(
                        ErrorCode::InvalidRequest,
                        format!(
                            "fetch session {} would hold {} partitions (at most {}); the \
                             session is closed",
                            s.session_id,
                            session.len(),
                            MAX_PARTITIONS_PER_REQUEST
                        ),
                    );
                }
                session.epoch = epoch;
                session.last_used = self.clock;
                self.busy.insert(session.id, session.replica_id);
                Begin::Session(session)
            }
        }
    }

    /// Puts `session` back after its reply was made ([`Session::answer`]): it is idle again
    /// and expects the next epoch.
    pub fn finish(&mut self, session: Box<Session>) {
        self.busy.remove(&session.id);
        self.idle.insert(session.id, session);
    }

    /// Drops a session whose request ended without a reply (the follower opens a new one).
    pub fn release(&mut self, id: i32) {
        self.busy.remove(&id);
    }

    /// Closes `id` if it is an idle session of `replica_id` (a busy one closes itself when
    /// its follower opens a new session after the missing reply).
    fn close_own(&mut self, id: i32, replica_id: i32) {
        if self
            .idle
            .get(&id)
            .is_some_and(|s| s.replica_id == replica_id)
        {
            self.idle.remove(&id);
        }
    }

    /// Frees a slot for a new session of `replica_id` if needed; false when every slot is
    /// busy.
    fn make_room(&mut self, replica_id: i32) -> bool {
        let own = self
            .idle
            .values()
            .filter(|s| s.replica_id == replica_id)
            .count()
            + self.busy.values().filter(|r| **r == replica_id).count();
        if own >= MAX_SESSIONS_PER_FOLLOWER {
            let lru = self
                .idle
                .values()
                .filter(|s| s.replica_id == replica_id)
                .min_by_key(|s| s.last_used)
                .map(|s| s.id);
            match lru {
                Some(id) => {
                    self.idle.remove(&id);
                }
                None => return false,
            }
        }
        if self.len() >= self.slots {
            let lru = self.idle.values().min_by_key(|s| s.last_used).map(|s| s.id);
            match lru {
                Some(id) => {
                    self.idle.remove(&id);
                }
                None => return false,
            }
        }
        true
    }

    fn new_id(&mut self) -> i32 {
        loop {
            self.last_id = next_epoch(self.last_id);
            if !self.idle.contains_key(&self.last_id) && !self.busy.contains_key(&self.last_id) {
                return self.last_id;
            }
        }
    }
}

/// One topic of a [`FollowerSession`]: its id and, per partition, the fields last sent and
/// the last round that listed it.
type SentTopic = (Bytes, HashMap<i32, (FetchPartition, u64)>);

/// The follower's side of one session with one leader (Kafka `FetchSessionHandler`): what
/// the leader's session holds, so each request lists only the partitions added or changed
/// and forgets those no longer fetched. The fetcher calls [`FollowerSession::build`] for
/// each request, then [`FollowerSession::on_reply`] with the reply's session, or
/// [`FollowerSession::reset`] when the request failed, timed out or was refused: the next
/// request then opens a new session (naming the old one, which the leader closes).
#[derive(Debug, Default)]
pub struct FollowerSession {
    /// The leader's id of the session (0: none yet).
    id: i32,
    /// Epoch of the next request: [`INITIAL_EPOCH`] opens a new session.
    next_epoch: i32,
    /// What the session holds if the request in flight succeeds, by topic.
    sent: HashMap<String, SentTopic>,
    /// Requests built.
    round: u64,
}

impl FollowerSession {
    /// The request's `topics` and `session` for `round`, every partition to fetch now with
    /// its fields (at most one entry per topic): all of them when opening a session, else
    /// only those added or changed, the others named in `forgotten`.
    pub fn build(&mut self, round: Vec<FetchTopic>) -> (Vec<FetchTopic>, FetchSessionRequest) {
        self.round += 1;
        let now = self.round;
        if self.next_epoch == INITIAL_EPOCH {
            self.sent.clear();
            for t in &round {
                let parts = t.partitions.iter().map(|p| (p.partition, (*p, now)));
                self.sent
                    .insert(t.topic.clone(), (t.topic_id.clone(), parts.collect()));
            }
            let session = FetchSessionRequest {
                session_id: self.id,
                epoch: INITIAL_EPOCH,
                forgotten: Vec::new(),
            };
            return (round, session);
        }
        let mut changed = Vec::new();
        for mut t in round {
            let (topic_id, parts) = self
                .sent
                .entry(t.topic.clone())
                .or_insert_with(|| (t.topic_id.clone(), HashMap::new()));
            // A re-created topic: every partition is sent again with the new id.
            let new_id = *topic_id != t.topic_id;
            if new_id {
                *topic_id = t.topic_id.clone();
            }
            t.partitions.retain(|p| match parts.get_mut(&p.partition) {
                Some((last, seen)) => {
                    *seen = now;
                    let send = new_id || last != p;
                    *last = *p;
                    send
                }
                None => {
                    parts.insert(p.partition, (*p, now));
                    true
                }
            });
            if !t.partitions.is_empty() {
                changed.push(t);
            }
        }
        let mut forgotten = Vec::new();
        self.sent.retain(|topic, (_, parts)| {
            let mut gone: Vec<i32> = Vec::new();
            parts.retain(|p, (_, seen)| {
                let keep = *seen == now;
                if !keep {
                    gone.push(*p);
                }
                keep
            });
            if !gone.is_empty() {
                gone.sort_unstable();
                forgotten.push(ForgottenTopic {
                    topic: topic.clone(),
                    partitions: gone,
                });
            }
            !parts.is_empty()
        });
        forgotten.sort_by(|a, b| a.topic.cmp(&b.topic));
        let session = FetchSessionRequest {
            session_id: self.id,
            epoch: self.next_epoch,
            forgotten,
        };
        (changed, session)
    }

    /// The reply to the last built request arrived without a top-level error: adopt the
    /// session it names. No session (a leader without sessions, or its cache full): the next
    /// request is full again.
    pub fn on_reply(&mut self, session: Option<&FetchSessionReply>) {
        match session.map(|s| s.session_id).filter(|id| *id > 0) {
            Some(id) if self.next_epoch == INITIAL_EPOCH || id == self.id => {
                self.id = id;
                self.next_epoch = next_epoch(self.next_epoch);
            }
            _ => {
                self.id = 0;
                self.next_epoch = INITIAL_EPOCH;
            }
        }
    }

    /// The last request failed, timed out or was refused: the next one opens a new session.
    pub fn reset(&mut self) {
        self.next_epoch = INITIAL_EPOCH;
    }

    /// Whether the next request continues a session (else it opens one).
    pub fn is_open(&self) -> bool {
        self.next_epoch != INITIAL_EPOCH
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_proto::broker::{FetchPartitionData, FetchableTopicResponse};

    fn part(partition: i32, fetch_offset: i64) -> FetchPartition {
        FetchPartition {
            partition,
            fetch_offset,
            current_leader_epoch: Some(1),
            last_fetched_epoch: 1,
            log_start_offset: 0,
            partition_max_bytes: 1 << 20,
        }
    }

    fn req(
        replica: i32,
        session: Option<(i32, i32)>,
        parts: &[(&str, FetchPartition)],
        forgotten: &[(&str, i32)],
    ) -> FetchRequest {
        let mut topics: Vec<FetchTopic> = Vec::new();
        for (t, p) in parts {
            match topics.iter_mut().find(|x| x.topic == *t) {
                Some(x) => x.partitions.push(*p),
                None => topics.push(FetchTopic {
                    topic: t.to_string(),
                    topic_id: Bytes::from_static(&[7; 16]),
                    partitions: vec![*p],
                }),
            }
        }
        FetchRequest {
            replica_id: replica,
            broker_epoch: 5,
            topics,
            session: session.map(|(session_id, epoch)| FetchSessionRequest {
                session_id,
                epoch,
                forgotten: forgotten
                    .iter()
                    .map(|(t, p)| ForgottenTopic {
                        topic: t.to_string(),
                        partitions: vec![*p],
                    })
                    .collect(),
            }),
            ..Default::default()
        }
    }

    /// The reply the read path makes of `s`: one answer per partition, HW `hw(p)`, records
    /// for the partitions in `with_records`.
    fn read(s: &Session, hw: impl Fn(i32) -> i64, with_records: &[i32]) -> FetchReply {
        FetchReply {
            responses: s
                .topics()
                .iter()
                .map(|t| FetchableTopicResponse {
                    topic: t.topic.clone(),
                    topic_id: t.topic_id.clone(),
                    partitions: t
                        .partitions
                        .iter()
                        .map(|p| FetchPartitionData {
                            partition_index: p.partition,
                            high_watermark: hw(p.partition),
                            last_stable_offset: hw(p.partition),
                            log_start_offset: 0,
                            records: if with_records.contains(&p.partition) {
                                Bytes::from_static(b"batch")
                            } else {
                                Bytes::new()
                            },
                            ..Default::default()
                        })
                        .collect(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn answered(reply: &FetchReply) -> Vec<(String, i32)> {
        reply
            .responses
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic.clone(), p.partition_index))
            })
            .collect()
    }

    fn take(b: Begin) -> Box<Session> {
        match b {
            Begin::Session(s) => s,
            other => panic!("expected a session, got {other:?}"),
        }
    }

    #[test]
    fn an_incremental_reply_names_only_what_changed_and_the_leader_keeps_the_fields() {
        let mut cache = SessionCache::default();
        let open = req(
            2,
            Some((0, 0)),
            &[("a", part(0, 10)), ("a", part(1, 20)), ("b", part(0, 5))],
            &[],
        );
        let mut s = take(cache.begin(&open));
        let mut reply = read(&s, |_| 10, &[]);
        s.answer(&mut reply);
        assert_eq!(answered(&reply).len(), 3, "the opening reply is full");
        let id = reply.session.unwrap().session_id;
        assert!(id > 0);
        cache.finish(s);

        // Nothing sent, nothing changed: an empty reply; the session still reads all three.
        let mut s = take(cache.begin(&req(2, Some((id, 1)), &[], &[])));
        assert_eq!(s.len(), 3);
        assert_eq!(s.topics()[0].partitions[1].fetch_offset, 20);
        let mut reply = read(&s, |_| 10, &[]);
        s.answer(&mut reply);
        assert!(answered(&reply).is_empty());
        cache.finish(s);

        // a-1 advanced its fetch offset; a-0 got records; b-0's HW moved.
        let mut s = take(cache.begin(&req(2, Some((id, 2)), &[("a", part(1, 25))], &[])));
        assert_eq!(s.topics()[0].partitions[1].fetch_offset, 25);
        let mut reply = read(&s, |p| if p == 0 { 11 } else { 10 }, &[0]);
        s.answer(&mut reply);
        // a-0: records (and the HW); a-1: changed fields are answered again; b-0: HW 11.
        assert_eq!(
            answered(&reply),
            vec![("a".into(), 0), ("a".into(), 1), ("b".into(), 0)]
        );
        cache.finish(s);

        // Forgetting drops a partition from what is read.
        let mut s = take(cache.begin(&req(2, Some((id, 3)), &[], &[("a", 0), ("b", 0)])));
        assert_eq!(s.len(), 1);
        assert_eq!(s.topics().len(), 1);
        assert_eq!(s.topics()[0].partitions[0].partition, 1);
        let mut reply = read(&s, |_| 11, &[]);
        s.answer(&mut reply);
        assert_eq!(
            answered(&reply),
            vec![("a".into(), 1)],
            "a-1's HW moved to 11"
        );
        cache.finish(s);
    }

    #[test]
    fn a_wrong_epoch_or_owner_is_refused_and_a_busy_session_is_not_shared() {
        let mut cache = SessionCache::default();
        let mut s = take(cache.begin(&req(2, Some((0, 0)), &[("a", part(0, 0))], &[])));
        let id = s.id();
        // Busy: a second request cannot use it.
        assert!(matches!(
            cache.begin(&req(2, Some((id, 1)), &[], &[])),
            Begin::Refuse(ErrorCode::FetchSessionIdNotFound, _)
        ));
        let mut reply = read(&s, |_| 0, &[]);
        s.answer(&mut reply);
        cache.finish(s);
        // Another follower, or another broker epoch, cannot use it.
        assert!(matches!(
            cache.begin(&req(3, Some((id, 1)), &[], &[])),
            Begin::Refuse(ErrorCode::FetchSessionIdNotFound, _)
        ));
        let mut other_epoch = req(2, Some((id, 1)), &[], &[]);
        other_epoch.broker_epoch = 6;
        assert!(matches!(
            cache.begin(&other_epoch),
            Begin::Refuse(ErrorCode::FetchSessionIdNotFound, _)
        ));
        // A repeated epoch (a resent request) closes it.
        assert!(matches!(
            cache.begin(&req(2, Some((id, 2)), &[], &[])),
            Begin::Refuse(ErrorCode::InvalidFetchSessionEpoch, _)
        ));
        assert!(cache.is_empty());
        assert!(matches!(
            cache.begin(&req(2, Some((id, 1)), &[], &[])),
            Begin::Refuse(ErrorCode::FetchSessionIdNotFound, _)
        ));
    }

    #[test]
    fn opening_closes_the_followers_old_session_and_the_cache_is_bounded() {
        let mut cache = SessionCache::default();
        let mut s = take(cache.begin(&req(2, Some((0, 0)), &[("a", part(0, 0))], &[])));
        let first = s.id();
        let mut reply = read(&s, |_| 0, &[]);
        s.answer(&mut reply);
        cache.finish(s);
        let s = take(cache.begin(&req(2, Some((first, 0)), &[("a", part(0, 0))], &[])));
        assert_ne!(s.id(), first);
        assert_eq!(cache.len(), 1, "the old session was closed");
        cache.release(s.id());
        assert!(cache.is_empty());

        // Abandoned sessions of one follower: at most MAX_SESSIONS_PER_FOLLOWER.
        for _ in 0..10 {
            let s = take(cache.begin(&req(2, Some((0, 0)), &[("a", part(0, 0))], &[])));
            cache.finish(s);
        }
        assert_eq!(cache.len(), MAX_SESSIONS_PER_FOLLOWER);
        // Every follower: at most MAX_SESSIONS; the least recently used goes.
        for r in 0..(MAX_SESSIONS as i32 + 10) {
            let s = take(cache.begin(&req(100 + r, Some((0, 0)), &[("a", part(0, 0))], &[])));
            cache.finish(s);
        }
        assert_eq!(cache.len(), MAX_SESSIONS);
        assert!(cache.idle.values().all(|s| s.replica_id != 2));
        // Closing with the final epoch serves sessionless.
        let id = *cache.idle.keys().next().unwrap();
        let owner = cache.idle[&id].replica_id;
        assert!(matches!(
            cache.begin(&req(owner, Some((id, FINAL_EPOCH)), &[], &[])),
            Begin::Sessionless
        ));
        assert_eq!(cache.len(), MAX_SESSIONS - 1);
        // Every slot busy: a new follower's fetch is served in full without a session.
        let mut held = Vec::new();
        for r in 0..MAX_SESSIONS as i32 {
            match cache.begin(&req(5_000 + r, Some((0, 0)), &[("a", part(0, 0))], &[])) {
                Begin::Session(s) => held.push(s),
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            cache.begin(&req(9_999, Some((0, 0)), &[("a", part(0, 0))], &[])),
            Begin::Full
        ));
        assert_eq!(cache.len(), MAX_SESSIONS);
    }

    #[test]
    fn no_slots_means_every_fetch_is_full() {
        let mut cache = SessionCache::new(0);
        assert!(matches!(
            cache.begin(&req(2, Some((0, 0)), &[("a", part(0, 0))], &[])),
            Begin::Full
        ));
        assert!(cache.is_empty());
    }

    #[test]
    fn epochs_wrap_to_one() {
        assert_eq!(next_epoch(0), 1);
        assert_eq!(next_epoch(41), 42);
        assert_eq!(next_epoch(i32::MAX), 1);
    }

    #[test]
    fn an_error_or_a_changed_topic_id_is_answered_again() {
        let mut cache = SessionCache::default();
        let mut s = take(cache.begin(&req(2, Some((0, 0)), &[("a", part(0, 0))], &[])));
        let id = s.id();
        let mut reply = read(&s, |_| 0, &[]);
        s.answer(&mut reply);
        cache.finish(s);
        let mut s = take(cache.begin(&req(2, Some((id, 1)), &[], &[])));
        let mut reply = read(&s, |_| 0, &[]);
        reply.responses[0].partitions[0].error =
            Some(ErrorCode::NotLeaderOrFollower.to_proto("moved"));
        s.answer(&mut reply);
        assert_eq!(answered(&reply).len(), 1);
        cache.finish(s);
        let mut recreated = req(2, Some((id, 2)), &[("a", part(0, 0))], &[]);
        recreated.topics[0].topic_id = Bytes::from_static(&[9; 16]);
        let s = take(cache.begin(&recreated));
        assert_eq!(s.topics()[0].topic_id, Bytes::from_static(&[9; 16]));
        assert_eq!(s.len(), 1);
    }

    fn round(parts: &[(&str, FetchPartition)]) -> Vec<FetchTopic> {
        req(2, None, parts, &[]).topics
    }

    /// The leader's session content as (topic, partition, fetch_offset), sorted.
    fn content(s: &Session) -> Vec<(String, i32, i64)> {
        let mut v: Vec<_> = s
            .topics()
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.topic.clone(), p.partition, p.fetch_offset))
            })
            .collect();
        v.sort();
        v
    }

    /// One request from `f` for `parts` through `cache`; returns what the leader read.
    fn exchange(
        f: &mut FollowerSession,
        cache: &mut SessionCache,
        parts: &[(&str, FetchPartition)],
    ) -> (Vec<(String, i32, i64)>, usize) {
        let (topics, session) = f.build(round(parts));
        let sent: usize = topics.iter().map(|t| t.partitions.len()).sum();
        let request = FetchRequest {
            replica_id: 2,
            broker_epoch: 5,
            topics,
            session: Some(session),
            ..Default::default()
        };
        match cache.begin(&request) {
            Begin::Session(mut s) => {
                let mut reply = read(&s, |_| 0, &[]);
                s.answer(&mut reply);
                f.on_reply(reply.session.as_ref());
                let c = content(&s);
                cache.finish(s);
                (c, sent)
            }
            Begin::Refuse(..) => {
                f.reset();
                (Vec::new(), sent)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_follower_sends_only_changes_and_the_leader_reads_what_it_fetches() {
        let mut f = FollowerSession::default();
        let mut cache = SessionCache::default();
        let all = [("a", part(0, 0)), ("a", part(1, 0)), ("b", part(0, 0))];
        let (read, sent) = exchange(&mut f, &mut cache, &all);
        assert_eq!(sent, 3);
        assert_eq!(read.len(), 3);
        assert!(f.is_open());
        // Unchanged: nothing listed, all read.
        let (read, sent) = exchange(&mut f, &mut cache, &all);
        assert_eq!((read.len(), sent), (3, 0));
        // a-1 advanced, b-0 is no longer fetched (backing off): one listed, one forgotten.
        let now = [("a", part(0, 0)), ("a", part(1, 9))];
        let (topics, session) = f.build(round(&now));
        assert_eq!(topics.len(), 1);
        assert_eq!(topics[0].partitions, vec![part(1, 9)]);
        assert_eq!(
            session.forgotten,
            vec![ForgottenTopic {
                topic: "b".into(),
                partitions: vec![0]
            }]
        );
        // That request failed: the next one opens a new session with everything.
        f.reset();
        let (read, sent) = exchange(&mut f, &mut cache, &now);
        assert_eq!(sent, 2);
        assert_eq!(
            read,
            vec![("a".into(), 0, 0), ("a".into(), 1, 9)],
            "the leader reads exactly what the follower fetches"
        );
        // b-0 back: listed again.
        let (read, sent) = exchange(&mut f, &mut cache, &all);
        assert_eq!(sent, 2, "a-1 went back to 0 and b-0 is new");
        assert_eq!(read.len(), 3);
        // The abandoned session was closed by the opening request that named it.
        assert_eq!(cache.len(), 1);
        // A leader without sessions (no session in its replies): every request is full.
        let mut old = FollowerSession::default();
        let _ = old.build(round(&all));
        old.on_reply(None);
        let (topics, session) = old.build(round(&all));
        assert_eq!((topics.len(), session.epoch), (2, INITIAL_EPOCH));
    }
}
