//! Leader-epoch cache: `epoch -> start offset` (the first offset written in that epoch),
//! persisted in `leader-epoch-checkpoint` (Kafka `LeaderEpochFileCache`, KIP-101, KIP-279).
//! It answers OffsetsForLeaderEpoch, which followers use to find the point where their log
//! diverges from the leader's.
//!
//! Invariant: entries are sorted with strictly increasing epochs AND strictly increasing
//! start offsets; every epoch and start offset is >= 0. Every change but a staged one is
//! written to the file before the call returns. Durable changes go through a temp file,
//! fsync, a rename and a directory fsync (a crash leaves the old or the new file).
//! Retention's ([`LeaderEpochCache::truncate_from_start_without_fsync`]) is written in place
//! without fsync: its loss in a crash the log's load repairs (KAFKA-15046), and a torn file
//! is detected at load and rebuilt from the batches' partition leader epochs.
//! [`LeaderEpochCache::stage`] changes only memory: the caller makes the entry durable in the
//! data directory's leader epoch journal ([`super::epoch_journal`]) before the epoch is used,
//! and the file catches up at the cache's next write ([`LeaderEpochCache::write_staged`] or
//! any other change, which writes every entry).

use std::path::{Path, PathBuf};

use super::checkpoint::{
    entry_line_number, format_checkpoint, overwrite_in_place, read_checkpoint_lines,
    write_atomically,
};
use super::error::{LogError, LogResult};

/// File name of the cache inside a partition directory.
pub const LEADER_EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";
/// Epoch answered when no epoch is known (Kafka `UNDEFINED_EPOCH`).
pub const UNDEFINED_EPOCH: i32 = -1;
/// Offset answered when no epoch is known (Kafka `UNDEFINED_EPOCH_OFFSET`).
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

/// One cache entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    /// Leader epoch.
    pub epoch: i32,
    /// First offset of the epoch (inclusive).
    pub start_offset: i64,
}

/// The cache; see the module doc for its invariant.
#[derive(Debug)]
pub struct LeaderEpochCache {
    /// `None` = in memory only (tests).
    path: Option<PathBuf>,
    entries: Vec<EpochEntry>,
    /// The entries hold a staged change the file lacks (cleared by every write of the file).
    staged: bool,
}

impl LeaderEpochCache {
    /// An in-memory cache that never touches disk.
    pub fn in_memory() -> Self {
        Self {
            path: None,
            entries: Vec::new(),
            staged: false,
        }
    }

    /// A cache for `dir` holding the epochs of `headers` (the first batch of each higher
    /// epoch starts it; batches without an epoch, -1, are skipped), written to the checkpoint
    /// with fsync. The log uses it when the checkpoint cannot be read: the batches'
    /// partition leader epochs are the truth the file only caches (Kafka rebuilds the same way
    /// when the checkpoint is missing).
    pub fn rebuilt(dir: &Path, headers: impl IntoIterator<Item = (i32, i64)>) -> LogResult<Self> {
        let mut cache = Self {
            path: Some(dir.join(LEADER_EPOCH_CHECKPOINT)),
            entries: Vec::new(),
            staged: false,
        };
        for (epoch, base_offset) in headers {
            let newer = cache.entries.last().is_none_or(|l| l.epoch < epoch);
            if epoch >= 0 && base_offset >= 0 && newer {
                cache.entries.push(EpochEntry {
                    epoch,
                    start_offset: base_offset,
                });
            }
        }
        cache.flush()?;
        Ok(cache)
    }

    /// Loads `<dir>/leader-epoch-checkpoint` (empty if absent). A malformed (including
    /// non-UTF-8) or non-monotonic file is a `MalformedFile` error naming the file and line.
    pub fn open(dir: &Path) -> LogResult<Self> {
        let path = dir.join(LEADER_EPOCH_CHECKPOINT);
        let mut entries = Vec::new();
        if let Some(lines) = read_checkpoint_lines(&path)? {
            for (i, line) in lines.into_iter().enumerate() {
                let bad = |reason: String| LogError::MalformedFile {
                    path: path.clone(),
                    reason: format!("line {}: {reason}", entry_line_number(i)),
                };
                let mut it = line.split_whitespace();
                let (Some(e), Some(o), None) = (it.next(), it.next(), it.next()) else {
                    return Err(bad(format!("bad line {line:?}")));
                };
                let epoch: i32 = e.parse().map_err(|_| bad(format!("bad epoch {e:?}")))?;
                let start_offset: i64 = o.parse().map_err(|_| bad(format!("bad offset {o:?}")))?;
                let entry = EpochEntry {
                    epoch,
                    start_offset,
                };
                let monotonic = entries
                    .last()
                    .is_none_or(|l: &EpochEntry| l.epoch < epoch && l.start_offset < start_offset);
                if epoch < 0 || start_offset < 0 || !monotonic {
                    return Err(bad(format!("entry {line:?} breaks monotonicity")));
                }
                entries.push(entry);
            }
        }
        let cache = Self {
            path: Some(path),
            entries,
            staged: false,
        };
        cache.check_invariant();
        Ok(cache)
    }

    fn check_invariant(&self) {
        debug_assert!(
            self.entries
                .iter()
                .all(|e| e.epoch >= 0 && e.start_offset >= 0)
        );
        debug_assert!(
            self.entries
                .windows(2)
                .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset < w[1].start_offset)
        );
    }

    /// Writes the checkpoint durably (fsynced).
    fn flush(&mut self) -> LogResult<()> {
        self.write_checkpoint(true)
    }

    /// Writes the checkpoint: through `<file>.tmp`, fsyncs and a rename if `durable`, else
    /// in place without fsync (see the module doc). The file then holds every entry.
    fn write_checkpoint(&mut self, durable: bool) -> LogResult<()> {
        self.check_invariant();
        let Some(path) = &self.path else {
            self.staged = false;
            return Ok(());
        };
        let lines: Vec<String> = self
            .entries
            .iter()
            .map(|e| format!("{} {}", e.epoch, e.start_offset))
            .collect();
        let contents = format_checkpoint(&lines);
        if durable {
            write_atomically(path, contents.as_bytes())?;
        } else {
            overwrite_in_place(path, contents.as_bytes())?;
        }
        self.staged = false;
        Ok(())
    }

    /// All entries, oldest first.
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    /// The newest epoch, if any.
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// The oldest entry, if any.
    pub fn earliest_entry(&self) -> Option<EpochEntry> {
        self.entries.first().copied()
    }

    /// Records that `epoch` starts at `start_offset` (Kafka `LeaderEpochFileCache.assign`).
    /// No-op when the latest entry has the same epoch and a start offset <= `start_offset`.
    /// Otherwise every entry at the end with an epoch >= `epoch` or a start offset >=
    /// `start_offset` is removed (they conflict with the new entry) and the entry appended,
    /// which keeps both columns strictly increasing. Negative arguments are ignored.
    /// Returns whether the cache changed (and was persisted).
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> LogResult<bool> {
        self.assign_with(epoch, start_offset, Some(true))
    }

    /// [`Self::assign`] in memory only, the file left as it is: for many new leaderships at
    /// once, whose entries the caller makes durable together in the leader epoch journal
    /// ([`super::epoch_journal::EpochJournal::append`]) before any is used, or one by one
    /// with [`Self::sync`] when that fails. Returns whether the cache changed.
    pub fn stage(&mut self, epoch: i32, start_offset: i64) -> LogResult<bool> {
        self.assign_with(epoch, start_offset, None)
    }

    /// Rewrites the checkpoint durably (after a [`Self::stage`] whose journal append failed).
    pub fn sync(&mut self) -> LogResult<()> {
        self.flush()
    }

    /// Whether a [`Self::stage`]d entry is not in the file yet.
    pub fn has_staged(&self) -> bool {
        self.staged
    }

    /// Writes the checkpoint in place, without fsync, if a staged entry is not in it yet;
    /// returns whether it wrote. The caller syncs the file system before it drops the journal
    /// entries this replaces.
    pub fn write_staged(&mut self) -> LogResult<bool> {
        if !self.staged {
            return Ok(false);
        }
        self.write_checkpoint(false)?;
        Ok(true)
    }

    /// `durable`: `Some(true)` fsynced write, `Some(false)` in place without fsync, `None`
    /// staged (memory only).
    fn assign_with(
        &mut self,
        epoch: i32,
        start_offset: i64,
        durable: Option<bool>,
    ) -> LogResult<bool> {
        if epoch < 0 || start_offset < 0 {
            return Ok(false);
        }
        if let Some(last) = self.entries.last()
            && last.epoch == epoch
            && last.start_offset <= start_offset
        {
            return Ok(false);
        }
        let keep = self
            .entries
            .iter()
            .position(|e| e.epoch >= epoch || e.start_offset >= start_offset)
            .unwrap_or(self.entries.len());
        let removed = self.entries.len() - keep;
        if removed > 0 {
            tracing::debug!(
                epoch,
                start_offset,
                removed,
                "leader epoch cache: removed entries"
            );
        }
        self.entries.truncate(keep);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        match durable {
            Some(durable) => self.write_checkpoint(durable)?,
            None => {
                self.check_invariant();
                self.staged = true;
            }
        }
        Ok(true)
    }

    /// OffsetsForLeaderEpoch answer for `requested_epoch` given the log end offset
    /// `log_end_offset` (Kafka `LeaderEpochFileCache.endOffsetFor`, KIP-101/KIP-279):
    /// - requested == latest epoch: `(requested, log_end_offset)`;
    /// - requested undefined (-1), above the latest epoch, or cache empty: `(-1, -1)`;
    /// - otherwise the largest epoch <= requested and the start offset of the next higher
    ///   epoch; when requested is below the earliest epoch, Kafka answers
    ///   `(requested, earliest start offset)` (the data before it was deleted, so the follower
    ///   truncates to the leader's first known epoch start).
    pub fn end_offset_for(&self, requested_epoch: i32, log_end_offset: i64) -> (i32, i64) {
        if requested_epoch == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        if self.latest_epoch() == Some(requested_epoch) {
            return (requested_epoch, log_end_offset);
        }
        // First entry with an epoch > requested.
        let higher = self.entries.partition_point(|e| e.epoch <= requested_epoch);
        let Some(higher_entry) = self.entries.get(higher) else {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        };
        if higher == 0 {
            return (requested_epoch, higher_entry.start_offset);
        }
        (self.entries[higher - 1].epoch, higher_entry.start_offset)
    }

    /// The log was truncated to `end_offset` (exclusive): removes entries starting at or
    /// after it (Kafka `truncateFromEnd`). Persists if anything changed.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> LogResult<()> {
        let keep = self
            .entries
            .partition_point(|e| e.start_offset < end_offset);
        if keep == self.entries.len() {
            return Ok(());
        }
        self.entries.truncate(keep);
        self.flush()
    }

    /// The log start moved to `start_offset`: removes entries starting at or before it and
    /// re-adds the newest removed epoch starting exactly at `start_offset` (Kafka
    /// `truncateFromStart`). Persists durably (fsynced) if anything changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> LogResult<()> {
        self.truncate_from_start_with(start_offset, true)
    }

    /// [`LeaderEpochCache::truncate_from_start`] for retention, which runs under the
    /// partition lock: the checkpoint is rewritten through a temp file and a rename but not
    /// fsynced, because an fsync can wait for a whole journal commit of a busy file system
    /// (Kafka KAFKA-15046 stopped fsyncing the checkpoint written by `truncateFromStart`
    /// on the request path).
    ///
    /// Crash behaviour: the file may still hold the entries from before this call. Every
    /// write replaces the whole file, and the next fsynced one ([`LeaderEpochCache::assign`],
    /// which every new leader epoch goes through, so a new epoch is never lost, KIP-101)
    /// makes this truncation durable as well. Stale entries below the log start are harmless
    /// because [`crate::log::Log::open`] truncates the loaded cache to the log's segments,
    /// which are the truth: from the start at the first segment's base offset and from the
    /// end at the LEO. A file system that persists the rename before the data (not ext4
    /// with its default `auto_da_alloc`) could leave an empty or torn file, which the next
    /// open reports as `MalformedFile`, like any corrupt checkpoint.
    pub fn truncate_from_start_without_fsync(&mut self, start_offset: i64) -> LogResult<()> {
        self.truncate_from_start_with(start_offset, false)
    }

    fn truncate_from_start_with(&mut self, start_offset: i64, durable: bool) -> LogResult<()> {
        let removed = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        if removed == 0 {
            return Ok(());
        }
        let last_removed = self.entries[removed - 1];
        if removed == 1 && last_removed.start_offset == start_offset {
            return Ok(());
        }
        self.entries.drain(..removed);
        self.entries.insert(
            0,
            EpochEntry {
                epoch: last_removed.epoch,
                start_offset,
            },
        );
        self.write_checkpoint(durable)
    }

    /// Removes every entry (the log was fully truncated) and persists.
    pub fn clear(&mut self) -> LogResult<()> {
        if self.entries.is_empty() {
            return Ok(());
        }
        self.entries.clear();
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// The reference model: a map epoch -> start offset with brute-force rules written
    /// straight from the KIP text, no binary searches or positions.
    #[derive(Default, Debug)]
    struct Model(BTreeMap<i32, i64>);

    impl Model {
        fn assign(&mut self, epoch: i32, start: i64) {
            if let Some((&le, &ls)) = self.0.iter().next_back()
                && le == epoch
                && ls <= start
            {
                return;
            }
            self.0.retain(|&e, &mut s| e < epoch && s < start);
            self.0.insert(epoch, start);
        }
        fn end_offset_for(&self, req: i32, leo: i64) -> (i32, i64) {
            if req == -1 {
                return (-1, -1);
            }
            if self.0.keys().next_back() == Some(&req) {
                return (req, leo);
            }
            let floor = self
                .0
                .iter()
                .filter(|(e, _)| **e <= req)
                .map(|(e, _)| *e)
                .max();
            let next_start = self
                .0
                .iter()
                .filter(|(e, _)| **e > req)
                .map(|(_, s)| *s)
                .min();
            match (floor, next_start) {
                (_, None) => (-1, -1),
                (None, Some(s)) => (req, s),
                (Some(e), Some(s)) => (e, s),
            }
        }
        fn truncate_end(&mut self, off: i64) {
            self.0.retain(|_, s| *s < off);
        }
        fn truncate_start(&mut self, off: i64) {
            let last_removed = self
                .0
                .iter()
                .filter(|(_, s)| **s <= off)
                .max_by_key(|(e, _)| **e);
            if let Some((&e, _)) = last_removed {
                self.0.retain(|_, s| *s > off);
                self.0.insert(e, off);
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Assign(i32, i64),
        TruncEnd(i64),
        TruncStart(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0i32..12, 0i64..60).prop_map(|(e, s)| Op::Assign(e, s)),
            1 => (0i64..60).prop_map(Op::TruncEnd),
            1 => (0i64..60).prop_map(Op::TruncStart),
        ]
    }

    proptest! {
        // Every change is persisted with fsyncs: fewer cases keep the test quick.
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn matches_reference_model(ops in proptest::collection::vec(op(), 0..40)) {
            let dir = tempfile::tempdir().unwrap();
            let mut cache = LeaderEpochCache::open(dir.path()).unwrap();
            let mut model = Model::default();
            for op in &ops {
                match *op {
                    Op::Assign(e, s) => { cache.assign(e, s).unwrap(); model.assign(e, s); }
                    Op::TruncEnd(o) => { cache.truncate_from_end(o).unwrap(); model.truncate_end(o); }
                    Op::TruncStart(o) => { cache.truncate_from_start(o).unwrap(); model.truncate_start(o); }
                }
                let got: Vec<(i32, i64)> = cache.entries().iter().map(|e| (e.epoch, e.start_offset)).collect();
                let want: Vec<(i32, i64)> = model.0.iter().map(|(e, s)| (*e, *s)).collect();
                prop_assert_eq!(&got, &want, "after {:?}", op);
                for req in -1..14 {
                    prop_assert_eq!(cache.end_offset_for(req, 100), model.end_offset_for(req, 100), "req {}", req);
                }
            }
            // The persisted file reloads to the same entries.
            let reloaded = LeaderEpochCache::open(dir.path()).unwrap();
            prop_assert_eq!(reloaded.entries(), cache.entries());
        }
    }

    /// Retention's variant changes the cache like `truncate_from_start` and still writes
    /// the file (only without fsync); the fsynced `assign` after it persists the whole list.
    #[test]
    fn staged_entries_reach_the_file_at_its_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochCache::open(dir.path()).unwrap();
        let on_disk = || {
            LeaderEpochCache::open(dir.path())
                .unwrap()
                .entries()
                .iter()
                .map(|e| (e.epoch, e.start_offset))
                .collect::<Vec<_>>()
        };
        c.assign(1, 0).unwrap();
        assert!(!c.has_staged());
        // Staged: in memory only.
        assert!(c.stage(2, 5).unwrap());
        assert!(c.has_staged());
        assert_eq!(c.latest_epoch(), Some(2));
        assert_eq!(on_disk(), [(1, 0)]);
        // Same epoch at a later offset: nothing changes.
        assert!(!c.stage(2, 9).unwrap());
        // write_staged writes every entry once.
        assert!(c.write_staged().unwrap());
        assert!(!c.has_staged());
        assert_eq!(on_disk(), [(1, 0), (2, 5)]);
        assert!(!c.write_staged().unwrap());
        // Any other write carries a staged entry with it.
        assert!(c.stage(4, 12).unwrap());
        c.truncate_from_start_without_fsync(3).unwrap();
        assert!(!c.has_staged());
        assert_eq!(on_disk(), [(1, 3), (2, 5), (4, 12)]);
        assert!(c.stage(6, 20).unwrap());
        c.sync().unwrap();
        assert_eq!(on_disk(), [(1, 3), (2, 5), (4, 12), (6, 20)]);
    }

    #[test]
    fn truncate_from_start_without_fsync_writes_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = LeaderEpochCache::open(dir.path()).unwrap();
        let mut want = LeaderEpochCache::in_memory();
        for (e, s) in [(1, 0), (3, 10), (6, 15)] {
            c.assign(e, s).unwrap();
            want.assign(e, s).unwrap();
        }
        c.truncate_from_start_without_fsync(12).unwrap();
        want.truncate_from_start(12).unwrap();
        assert_eq!(c.entries(), want.entries());
        assert_eq!(
            c.earliest_entry().map(|e| (e.epoch, e.start_offset)),
            Some((3, 12))
        );
        let reloaded = LeaderEpochCache::open(dir.path()).unwrap();
        assert_eq!(reloaded.entries(), c.entries());
        assert!(!dir.path().join("leader-epoch-checkpoint.tmp").exists());
        c.assign(7, 20).unwrap();
        let reloaded = LeaderEpochCache::open(dir.path()).unwrap();
        assert_eq!(reloaded.entries(), c.entries());
    }

    #[test]
    fn kip_101_examples() {
        let mut c = LeaderEpochCache::in_memory();
        c.assign(1, 0).unwrap();
        c.assign(3, 10).unwrap();
        c.assign(5, 20).unwrap();
        assert_eq!(c.end_offset_for(5, 25), (5, 25));
        assert_eq!(c.end_offset_for(4, 25), (3, 20));
        assert_eq!(c.end_offset_for(3, 25), (3, 20));
        assert_eq!(c.end_offset_for(2, 25), (1, 10));
        assert_eq!(c.end_offset_for(0, 25), (0, 0));
        assert_eq!(
            c.end_offset_for(6, 25),
            (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        );
        assert_eq!(
            c.end_offset_for(-1, 25),
            (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
        );
        // Same epoch, later offset: no-op. Lower start offset: replaces conflicting entries.
        assert!(!c.assign(5, 30).unwrap());
        assert!(c.assign(6, 15).unwrap());
        let e: Vec<_> = c
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect();
        assert_eq!(e, vec![(1, 0), (3, 10), (6, 15)]);
        c.truncate_from_start(12).unwrap();
        let e: Vec<_> = c
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect();
        assert_eq!(e, vec![(3, 12), (6, 15)]);
        c.truncate_from_end(15).unwrap();
        assert_eq!(c.latest_epoch(), Some(3));
        assert_eq!(LeaderEpochCache::in_memory().end_offset_for(0, 5), (-1, -1));
    }
}
