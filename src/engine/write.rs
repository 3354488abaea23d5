//! The write path: a queue of writers; the one at the front (the leader) takes a group of
//! queued batches, appends them to the WAL as one record (one fsync for all of them when any
//! of them asked for one), inserts them into the memtable and publishes their sequence
//! numbers. Every writer waits on its own condition variable: the leader wakes exactly the
//! writers whose batches it committed, and the one that leads next.
//! A full memtable is sealed and a new WAL started; `flush` waits for the flush thread to
//! write the sealed memtable to L0, `sync` fsyncs the WAL.

use super::{Core, State};
use crate::batch::WriteBatch;
use crate::error::{io_context, Error, Result};
use crate::filename;
use crate::key::{SeqNo, ValueKind, MAX_SEQ};
use crate::memtable::Memtable;
use crate::stats::Counters;
use crate::wal::{self, OpKind, WalWriter};
use crate::write_options::WriteOptions;
use bytes::Bytes;
use parking_lot::{Condvar, MutexGuard};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// Most bytes of queued batches one leader commits in one WAL record.
const MAX_GROUP_BYTES: usize = 1 << 20;

/// The longest a synced leader waits for writers to join its group (see
/// `Core::gather_synced_writers`), however slow the last fsync was.
const MAX_GATHER: Duration = Duration::from_millis(5);

pub(crate) enum PendingKind {
    /// A batch, and whether the WAL must be fsynced before it is acknowledged.
    Write(WriteBatch, bool),
    /// Seal the memtable even if it is not full (for `flush`).
    Seal,
}

struct Pending {
    id: u64,
    kind: PendingKind,
    /// The writer's own condition variable (one per thread, reused).
    cv: Arc<Condvar>,
}

/// One write of a group: its id, batch, sync request and the condition variable that wakes
/// its writer.
type GroupMember = (u64, WriteBatch, bool, Arc<Condvar>);

thread_local! {
    /// The condition variable this thread waits on while its write is queued (a thread has at
    /// most one write queued at a time).
    static WRITER_CV: Arc<Condvar> = Arc::new(Condvar::new());
}

/// Hashes write ids (distinct, given out in order) with one multiply: every write puts its
/// outcome in and takes it out of [`WriteQueue::results`], and SipHash there cost more than
/// the rest of the queue's bookkeeping. The multiply by an odd constant is a bijection, so
/// distinct ids never collide and their low bits (the bucket) stay distinct; the high bits
/// (the hash table's tags) are mixed.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The writers waiting to be committed, and the outcomes not yet collected.
pub(super) struct WriteQueue {
    queue: VecDeque<Pending>,
    next_id: u64,
    leader_active: bool,
    /// Outcomes of writes committed (or failed) by another writer's group.
    results: HashMap<u64, Result<()>, BuildHasherDefault<IdHasher>>,
    /// Sequence number of the last write given one (visible once its group is in the
    /// memtable).
    pub(super) last_seq: SeqNo,
    /// Writers seen around the last synced group (its own and those queued behind it): how
    /// many the next synced group waits for, briefly, so that they share its fsync.
    sync_writers: usize,
    /// The latest a synced leader waits for them: one fsync time (as long as the last one
    /// took, capped at [`MAX_GATHER`]) after the last synced group was done.
    gather_until: Option<std::time::Instant>,
    /// The last group's vector, emptied, for the next leader to fill: a write allocates no
    /// group list of its own.
    spare: Vec<GroupMember>,
}

impl WriteQueue {
    pub(super) fn new(last_seq: SeqNo) -> WriteQueue {
        WriteQueue {
            queue: VecDeque::new(),
            next_id: 0,
            leader_active: false,
            results: HashMap::default(),
            last_seq,
            sync_writers: 0,
            gather_until: None,
            spare: Vec::new(),
        }
    }

    /// Takes queued writes from the front, up to [`MAX_GROUP_BYTES`] (at least one).
    fn take_group(&mut self) -> Vec<GroupMember> {
        let mut group = std::mem::take(&mut self.spare);
        group.clear();
        let mut bytes = 0usize;
        while let Some(front) = self.queue.front() {
            let PendingKind::Write(b, _) = &front.kind else {
                break;
            };
            if !group.is_empty() && bytes + b.ops.len() > MAX_GROUP_BYTES {
                break;
            }
            bytes += b.ops.len();
            let Some(Pending {
                id,
                kind: PendingKind::Write(b, sync),
                cv,
            }) = self.queue.pop_front()
            else {
                break;
            };
            group.push((id, b, sync, cv));
        }
        group
    }

    /// Records the outcome of the request at the front of the queue and removes it.
    fn finish_front(&mut self, outcome: Result<()>) {
        if let Some(p) = self.queue.pop_front() {
            self.results.insert(p.id, outcome);
        }
    }

    /// Wakes every queued writer (on close: each finds its answer or leads and fails).
    pub(super) fn wake_all(&self) {
        for p in &self.queue {
            p.cv.notify_one();
        }
    }
}

impl Core {
    /// Commits a non-empty, valid batch, fsynced first if `opts` (or, by default,
    /// `sync_writes`) asks.
    pub(crate) fn write(&self, batch: WriteBatch, opts: WriteOptions) -> Result<()> {
        let sync = opts.needs_sync(self.opts.sync_writes);
        self.submit(PendingKind::Write(batch, sync))
    }

    /// Queues a write (or a seal) and waits until a leader, perhaps this thread, has done it.
    pub(crate) fn submit(&self, kind: PendingKind) -> Result<()> {
        let mut st = self.state.lock();
        self.writable(&st)?;
        let id = st.writes.next_id;
        st.writes.next_id += 1;
        let cv = WRITER_CV.with(Arc::clone);
        st.writes.queue.push_back(Pending {
            id,
            kind,
            cv: cv.clone(),
        });
        // Wake a leader gathering a synced group only once the group is whole.
        if st.writes.queue.len() == st.writes.sync_writers {
            self.gather_cv.notify_one();
        }
        loop {
            if let Some(outcome) = st.writes.results.remove(&id) {
                return outcome;
            }
            let w = &st.writes;
            if !w.leader_active && w.queue.front().is_some_and(|p| p.id == id) {
                break;
            }
            cv.wait(&mut st);
        }
        st.writes.leader_active = true;
        let mut done = self.lead(&mut st);
        st.writes.leader_active = false;
        // Wake the writers whose requests this leader finished, and the next leader.
        for (_, _, _, cv) in &done {
            cv.notify_one();
        }
        done.clear();
        if done.capacity() <= 64 {
            st.writes.spare = done;
        }
        if let Some(next) = st.writes.queue.front() {
            next.cv.notify_one();
        }
        let outcome = st.writes.results.remove(&id);
        drop(st);
        outcome.unwrap_or(Ok(()))
    }

    /// Runs one group as leader. Holds the state lock except while writing the WAL and the
    /// memtable. Every request it takes gets an outcome in `results`; returns the group, whose
    /// members' condition variables wake their writers.
    fn lead(&self, st: &mut MutexGuard<'_, State>) -> Vec<GroupMember> {
        let seal = matches!(
            st.writes.queue.front().map(|p| &p.kind),
            Some(PendingKind::Seal)
        );
        if let Err(e) = self.make_room(st, seal) {
            // Fail the leader's own request only; others retry as leaders.
            st.writes.finish_front(Err(e));
            return Vec::new();
        }
        if seal {
            st.writes.finish_front(Ok(()));
            return Vec::new();
        }
        self.gather_synced_writers(st);
        // The state lock was released while gathering: a failed `sync` or `close` may have
        // come in between, and nothing may be appended after them.
        if let Err(e) = self.writable(st) {
            st.writes.finish_front(Err(e));
            return Vec::new();
        }
        let mut group = st.writes.take_group();
        let count: u64 = group.iter().map(|g| u64::from(g.1.count)).sum();
        let last = st.writes.last_seq;
        // The group takes `first_seq ..= first_seq + count - 1`, all below `MAX_SEQ` (which
        // lookups use to see every write).
        let Some(first_seq) = last
            .checked_add(1)
            .filter(|f| f.checked_add(count).is_some_and(|end| end <= MAX_SEQ))
        else {
            let e = Error::InvalidArgument(format!(
                "sequence numbers exhausted: the last is {last}, the largest is {MAX_SEQ}"
            ));
            return finish_group(st, group, Err(e));
        };
        let last_seq = first_seq + count - 1; // first_seq >= 1, first_seq + count <= MAX_SEQ
        let mem = st.tree.mem.clone();
        Counters::add(&self.counters.write_groups, 1);
        let result = MutexGuard::unlocked(st, || self.commit_group(&mut group, first_seq, &mem));
        if let Ok(Some(took)) = result {
            st.writes.gather_until = Some(std::time::Instant::now() + took.min(MAX_GATHER));
            st.writes.sync_writers = group.len() + st.writes.queue.len();
        }
        let result = result.map(|_| ());
        // On failure the WAL may hold part of the record: never acknowledge, never reuse its
        // sequence numbers.
        st.writes.last_seq = last_seq;
        if let Err(e) = &result {
            self.poison(st, e);
        } else {
            self.read.publish_seq(last_seq);
            let user_bytes: u64 = group.iter().map(|g| g.1.user_bytes).sum();
            Counters::add(&self.counters.user_bytes_written, user_bytes);
        }
        finish_group(st, group, result)
    }

    /// Group commit for synced writes: one fsync costs as much for eight writes as for one, and
    /// the writers the last synced group released need a moment to queue again. A leader whose
    /// front write asks for a sync waits until as many writers are queued as were seen around
    /// the last synced group, but never past one fsync time (as long as the last one took,
    /// capped at [`MAX_GATHER`]) after that group was done, so they share this fsync instead of
    /// splitting into two groups that take turns. A writer that comes later than that, a lone
    /// writer (it saw no other) and an unsynced write never wait.
    fn gather_synced_writers(&self, st: &mut MutexGuard<'_, State>) {
        let w = &st.writes;
        let synced_front = matches!(
            w.queue.front().map(|p| &p.kind),
            Some(PendingKind::Write(_, true))
        );
        let Some(deadline) = w.gather_until else {
            return;
        };
        if !synced_front {
            return;
        }
        while st.writes.queue.len() < st.writes.sync_writers && self.writable(st).is_ok() {
            if self.gather_cv.wait_until(st, deadline).timed_out() {
                break;
            }
        }
    }

    /// Appends a group to the WAL (syncing it if asked) and inserts it into `mem`. Returns how
    /// long the fsync took, if there was one.
    fn commit_group(
        &self,
        group: &mut [GroupMember],
        first_seq: SeqNo,
        mem: &Memtable,
    ) -> Result<Option<Duration>> {
        let count: u64 = group.iter().map(|g| u64::from(g.1.count)).sum();
        let count = u32::try_from(count).map_err(|_| {
            Error::InvalidArgument(format!("a write group of {count} operations is too large"))
        })?;
        // Every batch is checked whole before anything is logged or applied, so a group goes
        // in entirely or not at all. (A `WriteBatch` is only ever built by `encode_op`, so
        // this never fails in practice.)
        if group
            .iter()
            .any(|g| !wal::walk_ops(&g.1.ops, g.1.count, |_| ()))
        {
            return Err(Error::InvalidArgument(
                "write batch encoding is damaged".into(),
            ));
        }
        let mut wal = self.wal.lock();
        let w = wal.as_mut().ok_or(Error::Closed)?;
        w.append(first_seq, count, group.iter().map(|g| g.1.ops.as_slice()))?;
        // One fsync covers every write of the group, and every write before it.
        let mut took = None;
        if group.iter().any(|g| g.2) {
            let started = std::time::Instant::now();
            w.sync()?;
            took = Some(started.elapsed());
            Counters::add(&self.counters.wal_syncs, 1);
        }
        drop(wal);
        // The memtable entries are slices of each batch's encoding, moved into (or, when
        // small, copied once into a chunk of) the memtable's arena: keys and values are not
        // decoded into allocations of their own.
        let mut seq = first_seq;
        let mut failed = None;
        for (_, b, _, _) in group.iter_mut() {
            let encoded = mem.hold(std::mem::take(&mut b.ops));
            wal::walk_ops(&encoded, b.count, |op| {
                let (key, value) = (encoded.slice_ref(op.key), encoded.slice_ref(op.value));
                if let Err(e) = apply_op(mem, op.kind, key, value, seq) {
                    failed.get_or_insert(e);
                }
                seq += 1;
            });
        }
        // The group is in the WAL but not wholly in the memtable: fail it (which stops
        // writes until a reopen replays it).
        if let Some(e) = failed {
            return Err(e);
        }
        Ok(took)
    }

    /// Makes sure the memtable has room (sealing it if full, or if `force`), waiting while
    /// too many memtables wait for flush or L0 is at the stop trigger.
    fn make_room(&self, st: &mut MutexGuard<'_, State>, force: bool) -> Result<()> {
        // The clock is read only once a writer stalls, not on every write.
        let mut stalled_since = None;
        let res = self.make_room_inner(st, force, &mut stalled_since);
        if let Some(since) = stalled_since {
            let micros = u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX);
            Counters::add(&self.counters.write_stall_micros, micros);
        }
        res
    }

    fn make_room_inner(
        &self,
        st: &mut MutexGuard<'_, State>,
        mut force: bool,
        stalled_since: &mut Option<std::time::Instant>,
    ) -> Result<()> {
        let mut slowed = false;
        loop {
            self.writable(st)?;
            let l0 = st.tree.version.levels[0].len();
            if self.opts.auto_compaction && !slowed && l0 >= self.opts.l0_slowdown_trigger {
                slowed = true;
                stalled_since.get_or_insert_with(std::time::Instant::now);
                Counters::add(&self.counters.write_slowdowns, 1);
                MutexGuard::unlocked(st, || std::thread::sleep(Duration::from_millis(1)));
                continue;
            }
            if !force
                && st.tree.mem.approx_bytes() < self.opts.memtable_size
                && !st.tree.mem.is_full()
            {
                return Ok(());
            }
            if force && st.tree.mem.is_empty() {
                return Ok(());
            }
            if st.tree.imms.len() >= self.opts.max_immutable_memtables
                || (self.opts.auto_compaction && l0 >= self.opts.l0_stop_trigger)
            {
                stalled_since.get_or_insert_with(std::time::Instant::now);
                Counters::add(&self.counters.write_stops, 1);
                self.bg_cv.notify_all();
                self.room_cv.wait_for(st, Duration::from_millis(100));
                continue;
            }
            self.seal_memtable(st)?;
            force = false;
        }
    }

    /// Starts a new WAL and memtable, and hands the full one to the flush thread.
    ///
    /// The file creation, the directory fsync and the old WAL's fsync run without the state
    /// lock: readers, the background threads and `close` go on meanwhile. Other writers wait
    /// behind this leader as they do for any group (the new memtable is not there yet).
    fn seal_memtable(&self, st: &mut MutexGuard<'_, State>) -> Result<()> {
        let number = self.file_numbers.fetch_add(1, Ordering::SeqCst);
        let path = filename::wal_path(&self.dir, number);
        let res = MutexGuard::unlocked(st, || -> Result<()> {
            // A WAL numbered past the limit would be ignored by the next open as a foreign
            // file, losing its writes: refuse to start one.
            filename::check_new_number(&self.dir, number)?;
            let new_wal = WalWriter::create(self.fs.as_ref(), &path, number)?;
            self.fs
                .sync_dir(&self.dir)
                .map_err(|e| io_context("sync directory", &self.dir, e))?;
            let mut wal = self.wal.lock();
            // `close` took the WAL while the lock was released: nothing more is written.
            let old = wal.as_mut().ok_or(Error::Closed)?;
            // Sync the old WAL so that a power loss keeps a prefix of the history: the new
            // WAL may be synced later while the old one is not.
            old.sync()?;
            *wal = Some(new_wal);
            Ok(())
        });
        if let Err(e) = res {
            if !matches!(e, Error::Closed) {
                self.poison(st, &e);
            }
            return Err(e);
        }
        let old = std::mem::replace(
            &mut st.tree.mem,
            Arc::new(Memtable::sized_for(number, self.opts.memtable_size)),
        );
        st.tree.imms.push_back(old);
        st.tree.sealed += 1;
        self.publish(st);
        self.bg_cv.notify_all();
        Ok(())
    }

    /// Seals the memtable and waits until it and every memtable sealed before it are flushed.
    /// A flush failure is returned as it happened (the flush is retried in the background).
    pub(crate) fn flush(&self) -> Result<()> {
        self.submit(PendingKind::Seal)?;
        let mut st = self.state.lock();
        let target = st.tree.sealed;
        let failures_before = st.bg.flush_failures;
        while st.tree.flushed < target {
            if st.life.shutting_down || st.life.closed {
                return Err(Error::Closed);
            }
            if let Some(e) = &st.life.poisoned {
                return Err(e.clone());
            }
            if st.bg.flush_failures > failures_before {
                if let Some(e) = &st.bg.flush_error {
                    return Err(e.clone());
                }
            }
            self.done_cv.wait_for(&mut st, Duration::from_millis(100));
        }
        Ok(())
    }

    /// Fsyncs the WAL; a failure stops writes.
    pub(crate) fn sync_wal(&self) -> Result<()> {
        self.check_writable()?;
        let res = match self.wal.lock().as_mut() {
            Some(w) => w.sync(),
            None => Err(Error::Closed),
        };
        if res.is_ok() {
            Counters::add(&self.counters.wal_syncs, 1);
        }
        if let Err(e) = &res {
            let mut st = self.state.lock();
            self.poison(&mut st, e);
        }
        res
    }

    /// `Ok` if writes are accepted now (for an empty batch).
    pub(crate) fn writes_accepted(&self) -> Result<()> {
        self.check_writable()
    }
}

/// Records `outcome` for every write of `group`; returns the group (whose condition
/// variables wake their writers).
fn finish_group(
    st: &mut MutexGuard<'_, State>,
    group: Vec<GroupMember>,
    outcome: Result<()>,
) -> Vec<GroupMember> {
    for (id, _, _, _) in &group {
        st.writes.results.insert(*id, outcome.clone());
    }
    group
}

/// Applies one decoded operation of a batch to the memtable at `seq`: the one place that
/// turns the WAL's op kinds into memtable entries (the write path and recovery share it).
pub(crate) fn apply_op(
    mem: &Memtable,
    kind: OpKind,
    key: Bytes,
    value: Bytes,
    seq: SeqNo,
) -> Result<()> {
    match kind {
        OpKind::Put => mem.insert(key, seq, ValueKind::Put, value),
        OpKind::Delete => mem.insert(key, seq, ValueKind::Delete, Bytes::new()),
        OpKind::RangeDelete => {
            mem.insert_range_delete(key, Some(value), seq);
            Ok(())
        }
        OpKind::RangeDeleteToEnd => {
            mem.insert_range_delete(key, None, seq);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_hashes_are_distinct_for_distinct_ids_and_the_map_finds_each() {
        let hash = |id: u64| {
            let mut h = IdHasher::default();
            h.write_u64(id);
            h.finish()
        };
        let ids = (0..10_000u64).chain([u64::MAX, u64::MAX - 1, 1 << 63]);
        let hashes: std::collections::HashSet<u64> = ids.clone().map(hash).collect();
        assert_eq!(hashes.len(), 10_003);
        let mut map: HashMap<u64, u64, BuildHasherDefault<IdHasher>> = HashMap::default();
        for id in ids.clone() {
            map.insert(id, id ^ 5);
        }
        for id in ids {
            assert_eq!(map.remove(&id), Some(id ^ 5));
        }
        assert!(map.is_empty());
    }
}
