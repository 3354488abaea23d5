//! The write path: a queue of writers; one of them (the leader) takes a group of queued
//! batches from the front, appends them to the WAL as one record (one fsync for all of them
//! when any of them asked for one), inserts them into the memtable and publishes their
//! sequence numbers. Every writer waits on a [`Waiter`] of its own, never on the state lock:
//! the leader hands each writer of its group its outcome, and hands the lead to the writer
//! at the front of the queue. A writer whose own write is synced, and a leader that gathers
//! its synced group, yield the CPU for a while, polling, before they sleep (see
//! [`MAX_YIELD`]). A leader of a synced group may wait briefly for the writers of the last
//! one to queue again; the writer whose arrival makes that group whole leads it at once
//! instead of waking the one that waits. An unsynced write that finds no leader leads at once
//! without queueing (a single writer thread never touches the queue). The leader appends to
//! the WAL and inserts into the memtable beside it under the WAL's lock ([`LiveLog`], with the
//! memtable's one writer), having released the state lock; a lone write with no other writer
//! seen lately, whose record goes into the mapped WAL's window, keeps the state lock instead
//! (see [`WriteQueue::may_hold`]). A full memtable is sealed and a new WAL started (the old WAL is
//! sealed by the seal thread of [`super::seal`], or here for `flush`); `flush` waits for the
//! flush thread to write the sealed memtable to L0, `sync` fsyncs the WAL.

use super::{Core, LiveLog, State};
use crate::batch::WriteBatch;
use crate::error::{Error, Result};
use crate::filename::{self, FileKind};
use crate::key::{SeqNo, ValueKind, MAX_SEQ};
use crate::memtable::{MemWriter, Memtable};
use crate::range_del::{Fragments, RangeTombstone};
use crate::stats::Counters;
use crate::wal::{self, OpKind, WalSeal, WalWriter};
use crate::write_options::WriteOptions;
use bytes::{Buf, Bytes};
use parking_lot::{Condvar, Mutex, MutexGuard};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::panic::{self, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most bytes of queued batches one leader commits in one WAL record.
const MAX_GROUP_BYTES: usize = 1 << 20;

/// Lone writes after a sign of another writer (one that found the state lock taken, or
/// queued behind a leader) whose leaders release the state lock while they commit, as every
/// group's leader does (see [`WriteQueue::may_hold`]).
const HOLD_COOLDOWN: u32 = 256;

/// Keys of a group whose memtable filter lines the leader starts loading before it writes
/// the group's WAL record.
const PREFETCH_KEYS: usize = 16;

/// The longest a synced leader waits for writers to join its group (see
/// `Core::gather_synced_writers`), however slow the last fsync was.
const MAX_GATHER: Duration = Duration::from_millis(5);

/// How many fsync times (as long as the last one took) after the last synced group was done
/// the next synced leader may wait for its writers. Two, not one: the group is normally whole
/// (and taken over by the writer that completed it) well before that, and with one the
/// waiting leader's timer fired in the middle of the very fsync it was waiting for; on the
/// 2-vCPU VM of `docs/benchmarks.md` that wake-up cost 8 synced writers 9% of their
/// throughput (medians of 5 interleaved runs: 31,808 against 34,763 writes/s).
const GATHER_FSYNC_TIMES: u32 = 2;

pub(crate) enum PendingKind {
    /// A batch, and whether the WAL must be fsynced before it is acknowledged.
    Write(WriteBatch, bool),
    /// Seal the memtable even if it is not full (for `flush`).
    Seal,
}

struct Pending {
    kind: PendingKind,
    /// Where its writer waits (one per thread, reused).
    waiter: Arc<Waiter>,
}

/// One write of a group: its batch, sync request and the waiter of its writer (`None` for
/// the leader's own write when it led at once without queueing: see `Core::submit`).
type GroupMember = (WriteBatch, bool, Option<Arc<Waiter>>);

thread_local! {
    /// Where this thread waits while its write is queued (a thread has at most one write
    /// queued at a time, in any database).
    static WAITER: Arc<Waiter> = Arc::new(Waiter::default());
    /// The group list this thread filled when it last led, emptied, to fill again: a write
    /// allocates no group list of its own.
    static SPARE_GROUP: RefCell<Vec<GroupMember>> = const { RefCell::new(Vec::new()) };
}

/// What a queued writer waits for: the outcome of its request, or the lead.
#[derive(Default)]
pub(super) struct Waiter {
    signal: Mutex<Signal>,
    cv: Condvar,
    /// Bumped (under `signal`'s lock) each time `signal` is set: what a writer polls while it
    /// yields before it sleeps (see [`Yielder`]).
    news: AtomicU64,
}

#[derive(Default)]
struct Signal {
    /// Set by the leader that finished (or failed) the writer's request.
    outcome: Option<Result<()>>,
    /// Set when the writer's request reached the front with no other leader.
    lead: bool,
    /// Set to end a gather early (the database stopped accepting writes).
    poked: bool,
}

/// What a waiting writer is told to do.
enum Turn {
    Done(Result<()>),
    Lead,
}

impl Waiter {
    fn finish(&self, outcome: Result<()>) {
        let mut s = self.signal.lock();
        s.outcome = Some(outcome);
        self.announce();
    }

    fn hand_lead(&self) {
        let mut s = self.signal.lock();
        s.lead = true;
        self.announce();
    }

    fn poke(&self) {
        let mut s = self.signal.lock();
        s.poked = true;
        self.announce();
    }

    /// Tells the writer that its signal changed (the caller holds `signal`'s lock, which
    /// orders every bump): a polling writer sees `news` move, a sleeping one is woken. (A
    /// notification with no thread asleep on `cv` is a load, no system call.)
    fn announce(&self) {
        self.news.store(
            self.news.load(Ordering::Relaxed).wrapping_add(1),
            Ordering::Release,
        );
        self.cv.notify_one();
    }

    /// `news` as it is now (the caller holds `signal`'s lock, so no bump is missed after it).
    fn news_now(&self) -> u64 {
        self.news.load(Ordering::Relaxed)
    }

    /// Drops whatever the waiter holds (after a panic, so that nothing reaches the thread's
    /// next write).
    fn forget(&self) {
        *self.signal.lock() = Signal::default();
    }

    fn clear_poke(&self) {
        self.signal.lock().poked = false;
    }

    /// Waits until the writer's request is finished or it must lead.
    /// A writer whose own write is synced (`yielding`) yields first, polling, for as long as
    /// a [`Yielder`] allows, before it sleeps: its group waits for an fsync, during which the
    /// CPUs are idle. News that is not for it (a poke) does not end its yielding.
    fn wait(&self, yielding: bool) -> Turn {
        let mut s = self.signal.lock();
        let mut yielder = yielding.then(Yielder::new);
        loop {
            if let Some(outcome) = s.outcome.take() {
                return Turn::Done(outcome);
            }
            if std::mem::take(&mut s.lead) {
                return Turn::Lead;
            }
            if let Some(y) = yielder.as_mut() {
                let seen = self.news_now();
                drop(s);
                if !y.poll(|| self.news.load(Ordering::Acquire) != seen) {
                    yielder = None;
                }
                s = self.signal.lock();
                continue;
            }
            self.cv.wait(&mut s);
        }
    }

    /// A gathering leader's wait: until `deadline`, a poke, or an outcome (which only comes
    /// once another writer took the group over). Returns true if the outcome came; consumes
    /// neither it nor the lead.
    fn wait_gather(&self, deadline: Instant) -> bool {
        let mut s = self.signal.lock();
        let mut yielder = Some(Yielder::new());
        while s.outcome.is_none() && !s.poked {
            if let Some(y) = yielder.as_mut() {
                let seen = self.news_now();
                drop(s);
                let news = y.poll(|| {
                    self.news.load(Ordering::Acquire) != seen || Instant::now() >= deadline
                });
                if !news || Instant::now() >= deadline {
                    yielder = None;
                }
                s = self.signal.lock();
                continue;
            }
            if self.cv.wait_until(&mut s, deadline).timed_out() {
                break;
            }
        }
        s.outcome.is_some()
    }
}

/// The longest a queued writer yields the CPU in one wait, polling for its turn, before it
/// sleeps on its waiter's condition variable (as RocksDB's writers do,
/// `write_thread_max_yield_usec`, 100 us as well). Waking a sleeping thread is a system call
/// by the leader and a trip through the scheduler for the woken one, paid once per follower
/// per group: with eight synced writers on two vCPUs, most of the 23-28 us each group spent
/// outside its fsync (15-18 us with yielding). A group's fsync (tens of microseconds here)
/// usually ends within this; a slower one leaves its followers asleep, where the wake-up is
/// small beside the fsync.
const MAX_YIELD: Duration = Duration::from_micros(100);

/// A yield that took at least this long gave the CPU to a thread with work to do (a
/// compaction, the leader, another process), not to a writer that polls as well (RocksDB's
/// `write_thread_slow_yield_usec` is this threshold, 3 us there).
const SLOW_YIELD: Duration = Duration::from_micros(20);

/// After this many slow yields ([`SLOW_YIELD`]) in one wait a writer stops yielding and
/// sleeps: the CPU is wanted (RocksDB's `kMaxSlowYieldsWhileSpinning` is 3 as well). Eight
/// synced writers on two vCPUs measured the same with the threshold at 3 us, at 20 us and
/// without the guard (`docs/benchmarks.md` section 8, session 26).
const SLOW_YIELDS: u32 = 3;

/// One wait's yielding: the time and the slow yields it has used ([`MAX_YIELD`],
/// [`SLOW_YIELDS`]), across polls.
struct Yielder {
    start: Instant,
    budget: Duration,
    slow: u32,
}

impl Yielder {
    fn new() -> Yielder {
        Yielder::with_budget(MAX_YIELD)
    }

    fn with_budget(budget: Duration) -> Yielder {
        Yielder {
            start: Instant::now(),
            budget,
            slow: 0,
        }
    }

    /// Calls `done` between yields of the CPU until it is true (returns true), or until the
    /// budget is spent or [`SLOW_YIELDS`] yields were slow (false; every later poll returns
    /// false as soon as `done` is not true).
    fn poll(&mut self, done: impl Fn() -> bool) -> bool {
        self.poll_with(done, std::thread::yield_now)
    }

    /// [`poll`](Self::poll), yielding with `yield_cpu` (tests make it slow).
    fn poll_with(&mut self, done: impl Fn() -> bool, yield_cpu: impl Fn()) -> bool {
        loop {
            if done() {
                return true;
            }
            let before = Instant::now();
            if before - self.start >= self.budget || self.slow >= SLOW_YIELDS {
                return false;
            }
            yield_cpu();
            if before.elapsed() >= SLOW_YIELD {
                self.slow += 1;
            }
        }
    }
}

/// This thread's spare group list (see `SPARE_GROUP`), or a new one.
fn take_spare_group() -> Vec<GroupMember> {
    SPARE_GROUP
        .try_with(|s| std::mem::take(&mut *s.borrow_mut()))
        .unwrap_or_default()
}

/// The writers waiting to be committed.
pub(super) struct WriteQueue {
    queue: VecDeque<Pending>,
    /// Some writer leads, or has been handed the lead: it alone takes from the queue. False
    /// only while the queue is empty.
    leader_active: bool,
    /// The waiter of the leader that waits for its synced group to fill up (its write is the
    /// front one).
    gathering: Option<Arc<Waiter>>,
    /// Bytes of the batches in `queue`.
    queued_bytes: usize,
    /// Sequence number of the last write given one (visible once its group is in the
    /// memtable).
    pub(super) last_seq: SeqNo,
    /// Writers seen around the last synced group (its own and those queued behind it): how
    /// many the next synced group waits for, briefly, so that they share its fsync.
    sync_writers: usize,
    /// The latest a synced leader waits for them: [`GATHER_FSYNC_TIMES`] fsync times (as long
    /// as the last one took), capped at [`MAX_GATHER`], after the last synced group was done.
    gather_until: Option<Instant>,
    /// Lone writes left before a leader may keep the state lock while it commits (see
    /// [`may_hold`](Self::may_hold)).
    hold_cooldown: u32,
    /// Lone writes committed under the state lock (tests).
    #[cfg(test)]
    held: u64,
}

impl WriteQueue {
    pub(super) fn new(last_seq: SeqNo) -> WriteQueue {
        WriteQueue {
            queue: VecDeque::new(),
            leader_active: false,
            gathering: None,
            queued_bytes: 0,
            last_seq,
            sync_writers: 0,
            gather_until: None,
            hold_cooldown: 0,
            #[cfg(test)]
            held: 0,
        }
    }

    /// Whether the leader of a lone unsynced write (led at once, with an empty queue) may
    /// commit it without giving up the state lock: saving the unlock and the re-lock around
    /// the commit (two of a lone write's six locked instructions; fillseq 1M 1.014x keys/s,
    /// fillrandom 1.029x, docs/benchmarks.md section 8, session 29). Another writer would
    /// then wait on the lock instead of queueing for the next group, which costs concurrent
    /// unsynced writers their groups (8 threads on 2 vCPUs: ~0.8M against ~0.9M writes/s when
    /// every lone write held it). So a sign of another writer (one that found the state lock
    /// taken, see `Core::lock_for_write`, or a write queued behind a leader) stops it for the
    /// next [`HOLD_COOLDOWN`] lone writes.
    fn may_hold(&mut self) -> bool {
        if self.hold_cooldown > 0 {
            self.hold_cooldown -= 1;
            return false;
        }
        true
    }

    /// Moves queued writes from the front into `group` (which may hold the leader's own
    /// write already), up to [`MAX_GROUP_BYTES`] in all (at least one write).
    fn take_group(&mut self, group: &mut Vec<GroupMember>) {
        let mut bytes: usize = group.iter().map(|g| g.0.ops.len()).sum();
        while let Some(front) = self.queue.front() {
            let PendingKind::Write(b, _) = &front.kind else {
                break;
            };
            if !group.is_empty() && bytes + b.ops.len() > MAX_GROUP_BYTES {
                break;
            }
            bytes += b.ops.len();
            let Some(Pending {
                kind: PendingKind::Write(b, sync),
                waiter,
                ..
            }) = self.queue.pop_front()
            else {
                break;
            };
            self.queued_bytes -= b.ops.len();
            group.push((b, sync, Some(waiter)));
        }
    }

    /// True once a gathering leader has what it waits for: as many queued writers as were
    /// seen around the last synced group, or a whole group's bytes (more would not fit in
    /// its group anyway).
    fn gather_is_whole(&self) -> bool {
        self.queue.len() >= self.sync_writers || self.queued_bytes >= MAX_GROUP_BYTES
    }

    /// Gives the request at the front of the queue its outcome and removes it.
    fn finish_front(&mut self, outcome: Result<()>) {
        if let Some(p) = self.queue.pop_front() {
            if let PendingKind::Write(b, _) = &p.kind {
                self.queued_bytes -= b.ops.len();
            }
            p.waiter.finish(outcome);
        }
    }

    /// Makes a leader that waits for its synced group look again: it stops waiting if writes
    /// stopped (`close`, a failed write), and goes on otherwise. (Only the front's writer can
    /// be gathering; every other queued writer waits for a leader, which answers it.)
    pub(super) fn poke_gatherer(&self) {
        if let Some(front) = self.queue.front() {
            front.waiter.poke();
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
    ///
    /// An unsynced write that finds no leader (so an empty queue) leads at once without
    /// queueing: no waiter, no queue entry, the common case of a single writer thread. The
    /// writers that queue behind it meanwhile join its group as they would any leader's. A
    /// synced write always queues, so that a leader may gather the writers of the last
    /// synced group (see `gather_synced_writers`).
    pub(crate) fn submit(&self, kind: PendingKind) -> Result<()> {
        let mut st = self.lock_for_write();
        self.writable(&st)?;
        let kind = match kind {
            PendingKind::Write(batch, false) if !st.writes.leader_active => {
                // No leader means no queue (only `round` clears the flag, and only then).
                debug_assert!(st.writes.queue.is_empty());
                st.writes.leader_active = true;
                let mut group = take_spare_group();
                group.push((batch, false, None));
                // Its own write is in the group, so the round answers it.
                return self.round(st, group, None).unwrap_or_else(|| {
                    Err(Error::other("a write led alone was not in its group"))
                });
            }
            kind => kind,
        };
        // A write made while this thread exits (from another thread-local's destructor) may
        // find the thread's waiter already gone: it waits on one of its own.
        let me = WAITER
            .try_with(Arc::clone)
            .unwrap_or_else(|_| Arc::new(Waiter::default()));
        // Only a synced write's writer yields while it waits: its group waits for an fsync,
        // during which the CPUs are idle. The followers of an unsynced group would take CPU
        // time from its leader, which inserts their writes meanwhile (8 unsynced writer
        // threads on 2 vCPUs: 0.65-0.75M writes/s yielding against 0.96-1.07M sleeping).
        let yielding = matches!(kind, PendingKind::Write(_, true));
        let w = &mut st.writes;
        if let PendingKind::Write(b, _) = &kind {
            w.queued_bytes += b.ops.len();
        }
        w.queue.push_back(Pending {
            kind,
            waiter: me.clone(),
        });
        let mut may_gather = true;
        if w.leader_active {
            // Another writer leads: lone leaders give the lock up while they commit for a
            // while (see `WriteQueue::may_hold`).
            w.hold_cooldown = HOLD_COOLDOWN;
        }
        if !w.leader_active {
            // The queue was empty: this write is the front, and this thread leads.
            w.leader_active = true;
        } else if w.gathering.is_some() && w.gather_is_whole() {
            // The synced group a leader waits for is whole with this write: lead it now
            // rather than wake that leader (it learns its outcome from this thread).
            w.gathering = None;
            may_gather = false;
        } else {
            drop(st);
            match me.wait(yielding) {
                Turn::Done(outcome) => return outcome,
                Turn::Lead => st = self.state.lock(),
            }
        }
        loop {
            // This thread holds the lead (`leader_active` is set for it).
            if may_gather {
                match self.gather_synced_writers(st, &me) {
                    Some(guard) => st = guard,
                    // Another writer took the group over, and the lead with it; it answers
                    // this thread's write.
                    None => match me.wait(yielding) {
                        Turn::Done(outcome) => return outcome,
                        Turn::Lead => {
                            st = self.state.lock();
                            continue;
                        }
                    },
                }
            }
            may_gather = true;
            if let Some(outcome) = self.round(st, take_spare_group(), Some(&me)) {
                return outcome;
            }
            match me.wait(yielding) {
                Turn::Done(outcome) => return outcome,
                Turn::Lead => st = self.state.lock(),
            }
        }
    }

    /// Leads one round (the caller holds the lead) with `group`, empty or holding the
    /// leader's own unqueued write, hands the lead on and answers the group's writers.
    /// Returns the outcome of this thread's write if the round committed (or failed) it:
    /// its unqueued write, or its queued one (`me`).
    fn round(
        &self,
        mut st: MutexGuard<'_, State>,
        mut group: Vec<GroupMember>,
        me: Option<&Arc<Waiter>>,
    ) -> Option<Result<()>> {
        // A panic while leading (a bug) must not leave the other writers waiting for a
        // leader forever: it stops writes, and every writer of the group and of the queue
        // gets that error; then the panic goes on in this thread. (The state lock is held
        // again here: `MutexGuard::unlocked` re-locks when its closure unwinds.)
        let round = panic::catch_unwind(AssertUnwindSafe(|| self.lead(&mut st, &mut group)));
        let (outcome, panicked) = match round {
            Ok(outcome) => (outcome, None),
            Err(payload) => {
                // A panic in a rotation left it unfinished: `close` must not wait for it.
                st.life.rotating = false;
                self.done_cv.notify_all();
                let cause = Error::other(format!(
                    "a write group's leader panicked: {}",
                    super::panic_message(&*payload)
                ));
                log::error!("{}: {cause}", self.dir.display());
                self.poison(&mut st, &cause);
                // Writes are refused now, with this cause or an earlier one.
                let stop = self.writable(&st).err().unwrap_or(cause);
                while !st.writes.queue.is_empty() {
                    st.writes.finish_front(Err(stop.clone()));
                }
                (Err(stop), Some(payload))
            }
        };
        let next = match st.writes.queue.front() {
            Some(front) => Some(front.waiter.clone()),
            None => {
                st.writes.leader_active = false;
                None
            }
        };
        drop(st);
        // The lead passes to the front (which no one else takes from meanwhile), then
        // the group's writers learn their outcome; neither needs the state lock.
        if let Some(next) = next {
            next.hand_lead();
        }
        let mut mine = None;
        for (_, _, waiter) in &group {
            match waiter {
                Some(w) if !me.is_some_and(|me| Arc::ptr_eq(w, me)) => w.finish(outcome.clone()),
                _ => mine = Some(outcome.clone()),
            }
        }
        group.clear();
        if group.capacity() <= 64 {
            let _ = SPARE_GROUP.try_with(|s| *s.borrow_mut() = group);
        }
        if let Some(payload) = panicked {
            // This thread's request was in the group or in the queue: forget its answer.
            if let Some(me) = me {
                me.forget();
            }
            panic::resume_unwind(payload);
        }
        mine
    }

    /// Runs one round as leader: a seal, or a group of writes from the front of the queue
    /// (after the leader's own unqueued write, if `group` holds it). Holds the state lock
    /// except while making room (a stall, a memtable rotation) and while writing the WAL and
    /// the memtable. Fills `group` with the writes it took, whose writers the caller tells
    /// the outcome it returns (`group` stays empty when the round finished one request on its
    /// own: a seal, or a queued request that failed before anything was written).
    fn lead(&self, st: &mut MutexGuard<'_, State>, group: &mut Vec<GroupMember>) -> Result<()> {
        let seal = group.is_empty()
            && matches!(
                st.writes.queue.front().map(|p| &p.kind),
                Some(PendingKind::Seal)
            );
        if let Err(e) = self.make_room(st, seal) {
            // Fail the leader's own unqueued write, or the front request; the others are led
            // in later rounds.
            if !group.is_empty() {
                return Err(e);
            }
            st.writes.finish_front(Err(e));
            return Ok(());
        }
        if seal {
            st.writes.finish_front(Ok(()));
            return Ok(());
        }
        st.writes.take_group(group);
        let count: u64 = group.iter().map(|g| u64::from(g.0.count)).sum();
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
            return Err(e);
        };
        // first_seq >= 1, first_seq + count <= MAX_SEQ
        let last_seq = first_seq + count - 1;
        // Both written only here, under the state lock (and by recovery, before writes).
        Counters::add_ordered(&self.counters.write_groups, 1);
        let result = match self.hold_for(st, group) {
            Some(mut live) => {
                #[cfg(test)]
                {
                    st.writes.held += 1;
                }
                self.commit_group_in(&mut live, group, first_seq)
            }
            None => MutexGuard::unlocked(st, || self.commit_group(group, first_seq)),
        };
        if let Ok(Some(took)) = result {
            let wait = took.saturating_mul(GATHER_FSYNC_TIMES).min(MAX_GATHER);
            st.writes.gather_until = Some(Instant::now() + wait);
            st.writes.sync_writers = group.len() + st.writes.queue.len();
        }
        let result = result.map(|_| ());
        // Its writer ran low on chunks made ahead: the flush thread makes more (told under
        // the state lock, so that it cannot miss it between its check and its wait).
        if st.tree.mem.take_growth_request() {
            self.bg_cv.notify_all();
        }
        // On failure the WAL may hold part of the record: never acknowledge, never reuse its
        // sequence numbers.
        st.writes.last_seq = last_seq;
        if let Err(e) = &result {
            self.poison(st, e);
        } else {
            self.read.publish_seq(last_seq);
            let user_bytes: u64 = group.iter().map(|g| g.0.user_bytes).sum();
            Counters::add_ordered(&self.counters.user_bytes_written, user_bytes);
        }
        result
    }

    /// Group commit for synced writes: one fsync costs as much for eight writes as for one, and
    /// the writers the last synced group released need a moment to queue again. A leader whose
    /// front write asks for a sync waits until as many writers are queued as were seen around
    /// the last synced group (or a whole group's bytes), but never past
    /// [`GATHER_FSYNC_TIMES`] fsync times (as long as the last one took; at most
    /// [`MAX_GATHER`]) after that group was done, so they share this fsync instead of
    /// splitting into two groups that take turns. The writer whose arrival makes the group
    /// whole leads it (see `submit`), and answers this one. A writer that comes later than
    /// that, a lone writer (it saw no other) and an unsynced write never wait.
    ///
    /// Returns the state lock to lead with, or `None` if the group was taken over (then the
    /// state lock is not taken again: the taker has the lead and will answer this write).
    fn gather_synced_writers<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        me: &Arc<Waiter>,
    ) -> Option<MutexGuard<'a, State>> {
        let w = &st.writes;
        let Some(front) = w.queue.front() else {
            return Some(st);
        };
        let (PendingKind::Write(_, true), Some(deadline)) = (&front.kind, w.gather_until) else {
            return Some(st);
        };
        loop {
            if st.writes.gather_is_whole()
                || Instant::now() >= deadline
                || self.writable(&st).is_err()
            {
                return Some(st);
            }
            st.writes.gathering = Some(Arc::clone(me));
            // A poke comes under the state lock, so none is missed from here on.
            me.clear_poke();
            drop(st);
            if me.wait_gather(deadline) {
                // Answered: another writer took the group over and committed it.
                return None;
            }
            st = self.state.lock();
            // Another writer took the group over (and perhaps another leader gathers now).
            if !st
                .writes
                .gathering
                .as_ref()
                .is_some_and(|g| Arc::ptr_eq(g, me))
            {
                return None;
            }
            st.writes.gathering = None;
            // The deadline passed, or a poke: writes stopped (the check above ends the
            // gather), or the background threads installed a new version (keep waiting).
        }
    }

    /// The state lock for a write. A writer that found it taken starts the cooldown once it
    /// has it: lone leaders then stop keeping it while they commit, for a while (see
    /// [`WriteQueue::may_hold`]).
    fn lock_for_write(&self) -> MutexGuard<'_, State> {
        if let Some(st) = self.state.try_lock() {
            return st;
        }
        let mut st = self.state.lock();
        st.writes.hold_cooldown = HOLD_COOLDOWN;
        st
    }

    /// The WAL's lock, if the leader may commit `group` without giving up the state lock
    /// (`st`): a lone unsynced write led at once with nothing queued, no sign of another
    /// writer lately ([`WriteQueue::may_hold`]), the WAL's lock free (a `Db::sync_wal` holds
    /// it through its fsync, which must not keep the state lock taken), a record that goes
    /// into memory already in place ([`WalWriter::appends_in_memory`]: a mapped WAL with
    /// room in its window), and no index array of the memtable being made by the flush
    /// thread ([`Memtable::is_growing`]: an insert that reached it would wait). Then the
    /// commit takes no lock that another thread holds and makes no system call; what it may
    /// still wait for is the kernel on a page fault (a store to a WAL page or an arena chunk
    /// not faulted in yet, which may throttle on dirty pages), as any thread's store may.
    /// The state lock is held for about a microsecond. `None`: commit with the state lock
    /// released, as every group does.
    fn hold_for<'a>(
        &'a self,
        st: &mut MutexGuard<'_, State>,
        group: &[GroupMember],
    ) -> Option<MutexGuard<'a, Option<LiveLog>>> {
        let [(batch, false, None)] = group else {
            return None;
        };
        if !st.writes.queue.is_empty() || !st.writes.may_hold() {
            return None;
        }
        let live = self.wal.try_lock()?;
        live.as_ref()
            .is_some_and(|l| l.wal.appends_in_memory(batch.ops.len()) && !l.mem.is_growing())
            .then_some(live)
    }

    /// Appends a group to the WAL (syncing it if asked) and inserts it into the memtable
    /// beside that WAL ([`LiveLog`]), all under the WAL's lock: the leader's one lock for the
    /// round's file and memtable work. Returns how long the fsync took, if there was one.
    fn commit_group(
        &self,
        group: &mut [GroupMember],
        first_seq: SeqNo,
    ) -> Result<Option<Duration>> {
        let mut live = self.wal.lock();
        self.commit_group_in(&mut live, group, first_seq)
    }

    /// [`commit_group`](Self::commit_group) with the WAL's lock taken (`live`).
    fn commit_group_in(
        &self,
        live: &mut Option<LiveLog>,
        group: &mut [GroupMember],
        first_seq: SeqNo,
    ) -> Result<Option<Duration>> {
        let count: u64 = group.iter().map(|g| u64::from(g.0.count)).sum();
        let count = u32::try_from(count).map_err(|_| {
            Error::InvalidArgument(format!("a write group of {count} operations is too large"))
        })?;
        let LiveLog {
            wal: w,
            mem,
            writer,
        } = live.as_mut().ok_or(Error::Closed)?;
        let mem: &Memtable = mem;
        // Every batch is checked whole before anything is logged or applied, so a group goes
        // in entirely or not at all. (A `WriteBatch` is only ever built by `encode_op`, so
        // this never fails in practice.)
        // The same walk starts loading the memtable filter lines of the group's first keys,
        // which arrive while the WAL record is written (more would only evict each other).
        // A single insert or removal made by `Db` (`WriteBatch::one`) was encoded by the
        // write path itself, with checked sizes: it is not walked.
        let mut prefetch = PREFETCH_KEYS;
        if group.iter().any(|g| match g.0.one {
            Some(one) => {
                if prefetch > 0 {
                    prefetch -= 1;
                    mem.prefetch(&g.0.ops[one.key_at..one.key_at + one.key_len]);
                }
                false
            }
            None => !wal::walk_ops(&g.0.ops, g.0.count, |op| {
                if prefetch > 0 && matches!(op.kind, OpKind::Put | OpKind::Delete) {
                    prefetch -= 1;
                    mem.prefetch(op.key);
                }
            }),
        }) {
            return Err(Error::InvalidArgument(
                "write batch encoding is damaged".into(),
            ));
        }
        w.append(first_seq, count, group.iter().map(|g| g.0.ops.as_slice()))?;
        if crate::sabotage::planted(crate::sabotage::Bug::LeaderPanics) {
            panic!("planted: the leader panics after appending its group to the WAL");
        }
        // One fsync covers every write of the group, and every write before it.
        let mut took = None;
        if group.iter().any(|g| g.1) {
            // The wait for the previous WAL's seal after a rotation is not the fsync's time
            // (which sizes the next synced group's gather).
            w.wait_for_previous_seal()?;
            let started = Instant::now();
            w.sync()?;
            let elapsed = started.elapsed();
            took = Some(elapsed);
            self.count_wal_sync(elapsed);
        }
        // The memtable entries are slices of each batch's encoding, moved into (or, when
        // small, copied once into a chunk of) the memtable's arena: keys and values are not
        // decoded into allocations of their own.
        let mut seq = first_seq;
        let mut failed = None;
        let mut ranges = Vec::new();
        for (b, _, _) in group.iter_mut() {
            let encoded = writer.hold_from(mem, &mut b.ops)?;
            // The batch's buffer, if copied, serves this thread's next single write.
            crate::batch::recycle(std::mem::take(&mut b.ops));
            // The last operation's value ends the encoding (a put's does): it takes the
            // encoding's own reference instead of a new one (one reference count taken, and
            // one dropped, fewer a single put).
            let mut apply = |kind, key, value| {
                if let Err(e) = apply_op(mem, writer, kind, key, value, seq, &mut ranges) {
                    failed.get_or_insert(e);
                }
                seq += 1;
            };
            if let Some(one) = b.one {
                // Where the write path's own encoding put them; the value, which ends the
                // encoding, takes the encoding's own reference (as the last put below).
                let key = encoded.slice(one.key_at..one.key_at + one.key_len);
                let mut value = encoded;
                value.advance(one.value_at);
                apply(one.kind, key, value);
                continue;
            }
            let mut last = None;
            let mut left = b.count;
            wal::walk_ops(&encoded, b.count, |op| {
                left = left.saturating_sub(1);
                let key = encoded.slice_ref(op.key);
                // (An empty value may be a static slice outside the encoding.)
                if left == 0
                    && !op.value.is_empty()
                    && op.value.as_ptr_range().end == encoded.as_ptr_range().end
                {
                    last = Some((op.kind, key, op.value.len()));
                    return;
                }
                apply(op.kind, key, encoded.slice_ref(op.value));
            });
            if let Some((kind, key, value_len)) = last {
                let mut value = encoded;
                value.advance(value.len() - value_len);
                apply(kind, key, value);
            }
        }
        apply_range_deletes(mem, ranges);
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
            self.count_stall(since);
        }
        res
    }

    fn make_room_inner(
        &self,
        st: &mut MutexGuard<'_, State>,
        mut force: bool,
        stalled_since: &mut Option<std::time::Instant>,
    ) -> Result<()> {
        let (mut slowed, mut stopped) = (false, false);
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
            if !force && !st.tree.mem.is_due(self.opts.memtable_size) {
                return Ok(());
            }
            if force && st.tree.mem.is_empty() {
                return Ok(());
            }
            if st.tree.imms.len() >= self.opts.max_immutable_memtables
                || (self.opts.auto_compaction && l0 >= self.opts.l0_stop_trigger)
            {
                stalled_since.get_or_insert_with(std::time::Instant::now);
                // Once per stop, however many rounds of waiting it takes.
                if !stopped {
                    stopped = true;
                    Counters::add(&self.counters.write_stops, 1);
                }
                self.bg_cv.notify_all();
                self.room_cv.wait_for(st, Duration::from_millis(100));
                continue;
            }
            // The stall ends here: the seal's own time (the next WAL's creation, and for an
            // inline seal the old WAL's fsyncs) is not time spent waiting for room.
            if let Some(since) = stalled_since.take() {
                self.count_stall(since);
            }
            self.seal_memtable(st, force)?;
            force = false;
        }
    }

    /// Adds the time since a writer stalled to `Stats::write_stall_micros`.
    fn count_stall(&self, since: std::time::Instant) {
        let micros = u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX);
        Counters::add(&self.counters.write_stall_micros, micros);
    }

    /// Starts a new WAL and memtable, and hands the full one to the flush thread.
    ///
    /// The new WAL is the one the seal thread made ahead (the spare, see
    /// [`Core::make_spare_wal`]) when there is one numbered above the live WAL; otherwise it is
    /// created here. That runs without the state lock: readers, the background threads and
    /// `close` go on meanwhile, and other writers wait behind this leader as they do for any
    /// group (the new memtable is not there yet). The directory fsync and the old WAL's seal
    /// (fsync, sync mark, cut) go to the seal thread ([`super::seal`]), so writers append to
    /// the new WAL while they run, unless `inline` (an explicit `Db::flush`, which waits for
    /// its memtable anyway and reports a failed seal as it happened) has this thread run them.
    fn seal_memtable(&self, st: &mut MutexGuard<'_, State>, inline: bool) -> Result<()> {
        let old_number = st.tree.mem.wal_number();
        // The WAL made ahead, if the seal thread made one (see `Core::make_spare_wal`).
        let spare = st.seals.take_spare();
        // `close` waits until this rotation is over (see `Lifecycle::rotating`).
        st.life.rotating = true;
        type Rotated = (Arc<Memtable>, Option<(WalWriter, Arc<WalSeal>)>);
        let res = MutexGuard::unlocked(st, || -> Result<Rotated> {
            // Only if it is numbered above the live WAL (WALs are replayed in the order of
            // their numbers), which `make_spare_wal` sees to under the state lock.
            let new_wal = match spare.filter(|w| w.number() > old_number) {
                Some(wal) => wal,
                None => {
                    let number = self.file_numbers.fetch_add(1, Ordering::SeqCst);
                    // A WAL numbered past the limit would be ignored by the next open as a
                    // foreign file, losing its writes: refuse to start one.
                    filename::check_new_number(&self.dir, number)?;
                    let path = filename::wal_path(&self.dir, number);
                    let mut wal =
                        WalWriter::create(self.fs.as_ref(), &path, number, self.opts.log_writes)?;
                    // Its first space is allocated in the background meanwhile.
                    wal.expect_appends();
                    wal
                }
            };
            let number = new_wal.number();
            let mem = Arc::new(Memtable::sized_for(number, self.opts.memtable_size));
            let writer = mem
                .take_writer()
                .ok_or_else(|| Error::other("a new memtable's writer was taken"))?;
            let next = LiveLog {
                wal: new_wal,
                mem: Arc::clone(&mem),
                writer,
            };
            let mut live = self.wal.lock();
            // `close` took the WAL while the lock was released: nothing more is written.
            let old = live.as_mut().ok_or(Error::Closed)?;
            // A WAL whose last append failed (a sync mark after a successful fsync, perhaps
            // a `Db::sync`'s while the new WAL was being created: see `WalWriter::mark`)
            // stops writes now, as its next append would, rather than once the seal thread
            // meets the failure while the new WAL takes writes (D7). Checked under the lock
            // of the swap, so that no sync can fail in between.
            old.wal.check_not_failed()?;
            if inline {
                // Seal the old WAL so that a power loss keeps a prefix of the history: the
                // new WAL may be synced later while the old one is not.
                self.seal_wal(&mut old.wal)?;
                *old = next;
                return Ok((mem, None));
            }
            // No fsync of the new WAL returns before the old one is sealed.
            let seal = Arc::new(WalSeal::default());
            let mut next = next;
            next.wal.follow(seal.clone());
            let old = std::mem::replace(old, next);
            Ok((mem, Some((old.wal, seal))))
        });
        st.life.rotating = false;
        self.done_cv.notify_all();
        let (mem, to_seal) = match res {
            Ok(rotated) => rotated,
            Err(e) => {
                if !matches!(e, Error::Closed) {
                    self.poison(st, &e);
                }
                return Err(e);
            }
        };
        if let Some((old_wal, seal)) = to_seal {
            if let Some(abandoned) = st.seals.push(old_wal, old_number, seal) {
                // No thread will seal it (the seal thread panicked): answered with an error.
                MutexGuard::unlocked(st, || drop(abandoned));
            }
        }
        // The memtable the new WAL's writes go to (`LiveLog`), in place for readers.
        let old = std::mem::replace(&mut st.tree.mem, mem);
        old.drop_spare_chunks();
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
        // Every memtable sealed so far logged to a WAL numbered below the live one.
        let live_wal = st.tree.mem.wal_number();
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
        drop(st);
        // The flushed memtables' WALs are deleted by the purge thread: wait for those (not for
        // tables that iterators or compactions queue meanwhile). A close meanwhile deletes
        // them itself, and does not make the flush, durable already, fail.
        let flushed_wal = |p: &Path| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            matches!(filename::parse(name), Some(FileKind::Wal(n)) if n < live_wal)
        };
        while !self
            .env
            .obsolete
            .wait_gone(flushed_wal, Duration::from_millis(100))
        {
            if self.read.check_open().is_err() {
                break;
            }
        }
        Ok(())
    }

    /// Counts one WAL fsync that took `took`.
    fn count_wal_sync(&self, took: Duration) {
        Counters::add(&self.counters.wal_syncs, 1);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        Counters::add(&self.counters.wal_sync_micros, micros);
    }

    /// Fsyncs the WAL; a failure stops writes.
    pub(crate) fn sync_wal(&self) -> Result<()> {
        self.check_writable()?;
        // Wait for a seal under way without the WAL lock, which unsynced writers need; its
        // outcome is taken under the lock. A rotation meanwhile may put a WAL whose own
        // previous seal is under way in its place: wait for that one the same way.
        let res = loop {
            let mut wal = self.wal.lock();
            let Some(w) = wal.as_mut().map(|l| &mut l.wal) else {
                break Err(Error::Closed);
            };
            match w.previous_seal() {
                Some(seal) if !seal.is_complete() => {
                    drop(wal);
                    let _ = seal.wait();
                }
                _ => {
                    break w.wait_for_previous_seal().and_then(|()| {
                        let started = Instant::now();
                        w.sync().map(|()| self.count_wal_sync(started.elapsed()))
                    })
                }
            }
        };
        if let Err(e) = &res {
            let mut st = self.state.lock();
            self.poison(&mut st, e);
        }
        res
    }

    /// An empty batch: nothing to write, but `Ok` only if writes are accepted now, and, if
    /// `opts` (or `sync_writes`) asks for a sync, only once the WAL is fsynced, so that every
    /// write before it is as durable as a synced write's would make it.
    pub(crate) fn write_empty(&self, opts: WriteOptions) -> Result<()> {
        if opts.needs_sync(self.opts.sync_writes) {
            self.sync_wal()
        } else {
            self.check_writable()
        }
    }
}

/// Applies one decoded operation of a batch to the memtable at `seq`: the one place that
/// turns the WAL's op kinds into memtable entries (the write path and recovery share it).
/// A range delete is added to `ranges`, which the caller applies with
/// [`apply_range_deletes`] once the write group's other operations are in.
pub(crate) fn apply_op(
    mem: &Memtable,
    writer: &mut MemWriter,
    kind: OpKind,
    key: Bytes,
    value: Bytes,
    seq: SeqNo,
    ranges: &mut Vec<RangeTombstone>,
) -> Result<()> {
    let end = match kind {
        OpKind::Put => return writer.insert(mem, key, seq, ValueKind::Put, value),
        OpKind::Delete => return writer.insert(mem, key, seq, ValueKind::Delete, Bytes::new()),
        OpKind::RangeDelete => Some(value),
        OpKind::RangeDeleteToEnd => None,
    };
    ranges.push(RangeTombstone {
        start: key,
        end,
        seq,
    });
    Ok(())
}

/// Records the range deletes of one write group (or of the part of a replayed one that goes
/// into this memtable) in the memtable. Several are cut into their newest pieces first
/// ([`Fragments::newest_pieces`]): no reader reads inside a group, and one batch of nested
/// ranges would otherwise keep a quadratic number of sequence numbers.
pub(crate) fn apply_range_deletes(mem: &Memtable, mut ranges: Vec<RangeTombstone>) {
    if ranges.len() > 1 {
        ranges = Fragments::newest_pieces(ranges);
    }
    for t in ranges {
        mem.insert_range_delete(t.start, t.end, t.seq);
    }
}

#[cfg(test)]
mod tests {
    use super::{Turn, Waiter, Yielder, HOLD_COOLDOWN, MAX_YIELD, SLOW_YIELD, SLOW_YIELDS};
    use crate::error::Error;
    use crate::fs::{FileSystem, MemFs};
    use crate::{Db, Options};
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    /// Waits on a new waiter in another thread (yielding first if `yielding`) while this one
    /// `answer`s it `delay` after starting that thread; returns what the wait returned.
    fn wait_answered_after(yielding: bool, delay: Duration, answer: fn(&Waiter)) -> Turn {
        let w = Arc::new(Waiter::default());
        let waiting = {
            let w = Arc::clone(&w);
            thread::spawn(move || w.wait(yielding))
        };
        thread::sleep(delay);
        answer(&w);
        waiting.join().unwrap()
    }

    /// A writer learns its outcome, or that it leads, whether the answer comes while it still
    /// yields or once it sleeps (well past [`MAX_YIELD`]), yielding or not.
    #[test]
    fn a_waiter_is_answered_while_yielding_or_asleep() {
        for yielding in [true, false] {
            for delay in [Duration::ZERO, MAX_YIELD / 2, MAX_YIELD * 20] {
                let done = wait_answered_after(yielding, delay, |w| w.finish(Err(Error::Closed)));
                assert!(matches!(done, Turn::Done(Err(Error::Closed))));
                let lead = wait_answered_after(yielding, delay, Waiter::hand_lead);
                assert!(matches!(lead, Turn::Lead));
            }
        }
    }

    /// A poke (news, but no outcome or lead) does not end a writer's wait: it goes on waiting
    /// (asleep once its yields are used up) until its outcome comes.
    #[test]
    fn a_poke_does_not_end_a_writers_wait() {
        let w = Arc::new(Waiter::default());
        let waiting = {
            let w = Arc::clone(&w);
            thread::spawn(move || w.wait(true))
        };
        w.poke();
        thread::sleep(MAX_YIELD * 20);
        assert!(!waiting.is_finished());
        w.finish(Ok(()));
        assert!(matches!(waiting.join().unwrap(), Turn::Done(Ok(()))));
    }

    /// A gathering leader's wait ends at its deadline when nothing comes (having yielded, then
    /// slept), and reports an outcome that came meanwhile.
    #[test]
    fn a_gathering_wait_ends_at_its_deadline_or_with_an_outcome() {
        let w = Waiter::default();
        let deadline = Instant::now() + MAX_YIELD * 5;
        assert!(!w.wait_gather(deadline));
        assert!(Instant::now() >= deadline);
        w.finish(Ok(()));
        assert!(w.wait_gather(Instant::now() + Duration::from_secs(60)));
        // It consumed neither the outcome nor the lead: the writer's wait takes them.
        w.hand_lead();
        assert!(matches!(w.wait(false), Turn::Done(Ok(()))));
        assert!(matches!(w.wait(false), Turn::Lead));
    }

    /// A poll ends as soon as its condition holds, counting the yields made before.
    #[test]
    fn a_yielder_stops_when_its_condition_holds() {
        let calls = std::cell::Cell::new(0);
        let yields = std::cell::Cell::new(0);
        let mut y = Yielder::with_budget(Duration::from_secs(60));
        let done = || {
            calls.set(calls.get() + 1);
            calls.get() == 5
        };
        assert!(y.poll_with(done, || yields.set(yields.get() + 1)));
        assert_eq!(yields.get(), 4);
    }

    /// Slow yields end a wait's yielding after [`SLOW_YIELDS`] of them, whatever budget is
    /// left, and so does a spent budget; later polls of the same wait do not yield again.
    #[test]
    fn a_yielder_gives_up_after_slow_yields_or_its_budget() {
        let yields = std::cell::Cell::new(0);
        let slow_yield = || {
            yields.set(yields.get() + 1);
            thread::sleep(SLOW_YIELD);
        };
        let mut y = Yielder::with_budget(Duration::from_secs(60));
        assert!(!y.poll_with(|| false, slow_yield));
        assert_eq!(yields.get(), SLOW_YIELDS);
        assert!(!y.poll_with(|| false, slow_yield));
        assert_eq!(yields.get(), SLOW_YIELDS);
        // Its condition still ends a poll at once.
        assert!(y.poll_with(|| true, slow_yield));

        let mut y = Yielder::with_budget(Duration::from_millis(2));
        let started = Instant::now();
        assert!(!y.poll_with(|| false, || {}));
        assert!(started.elapsed() >= Duration::from_millis(2));
        yields.set(0);
        assert!(!y.poll_with(|| false, slow_yield));
        assert_eq!(yields.get(), 0);
    }

    /// Review finding (session 24): a write whose leader found the WAL already taken by
    /// `close` stopped writes with `Closed` as their cause and logged it as an error: a
    /// false alarm on every close that races a write. Nothing failed: it now leaves no cause.
    #[test]
    fn a_write_that_meets_close_taking_the_wal_stops_nothing() {
        let fs = MemFs::new();
        let opts = Options::default().file_system(Arc::new(fs) as Arc<dyn FileSystem>);
        let db = Db::open_with("/db", opts).unwrap();
        db.insert("a", "1").unwrap();
        let core = db.core();
        // What `close` does once the writes before it are done.
        let wal = core.wal.lock().take();
        assert!(matches!(db.insert("b", "2"), Err(Error::Closed)));
        assert!(core.state.lock().life.poisoned.is_none());
        assert!(matches!(db.sync(), Err(Error::Closed)));
        assert!(core.state.lock().life.poisoned.is_none());
        // Back for `close` to finish it (nothing more is written to it).
        *core.wal.lock() = wal;
        db.close().unwrap();
    }

    /// Lone writes committed under the state lock so far.
    fn held(db: &Db) -> u64 {
        db.core().state.lock().writes.held
    }

    /// A database in a new temporary directory, if its WAL is written through a map there
    /// (the held commit needs one; not on every file system).
    fn mapped_db() -> Option<(tempfile::TempDir, Db)> {
        let dir = tempfile::tempdir().unwrap();
        let probe = std::fs::File::create(dir.path().join("probe")).unwrap();
        if !crate::fs::maps_safely(&probe) {
            return None;
        }
        drop(probe);
        std::fs::remove_file(dir.path().join("probe")).unwrap();
        let db = Db::open(dir.path()).unwrap();
        Some((dir, db))
    }

    /// [`mapped_db`] holding `a` -> `1`, where a lone write was just seen to keep the state
    /// lock: the case the tests that use it are about.
    fn held_db() -> Option<(tempfile::TempDir, Db)> {
        let (dir, db) = mapped_db()?;
        db.insert("a", "1").unwrap();
        assert!(a_lone_write_is_held(&db, "control"));
        Some((dir, db))
    }

    /// Ends any cooldown: the next lone write may keep the state lock.
    fn end_cooldown(db: &Db) {
        let core = db.core();
        core.state.lock().writes.hold_cooldown = 0;
    }

    /// Every lone write that `writes` makes (it returns how many) kept the state lock, in one
    /// of a few tries (a background thread that takes the lock meanwhile counts as another
    /// writer); each try ends any cooldown first.
    fn lone_writes_are_held(db: &Db, writes: impl Fn(&Db) -> u64) -> bool {
        (0..5).any(|_| {
            thread::sleep(Duration::from_millis(20));
            end_cooldown(db);
            let before = held(db);
            let n = writes(db);
            held(db) == before + n
        })
    }

    /// A lone write of `key` kept the state lock (see [`lone_writes_are_held`]).
    fn a_lone_write_is_held(db: &Db, key: &str) -> bool {
        lone_writes_are_held(db, |db| {
            db.insert(key, "v").unwrap();
            1
        })
    }

    /// A lone writer on a mapped WAL commits without giving up the state lock, but for the
    /// write that maps a window; a sign of another writer (one that found the state lock
    /// taken) stops that for the next `HOLD_COOLDOWN` lone writes. Every write reads back.
    #[test]
    fn lone_writes_keep_the_state_lock_until_another_writer_shows() {
        let Some((_dir, db)) = mapped_db() else {
            return;
        };
        let core = Arc::clone(db.core());
        // The first write maps the WAL's first window (not in memory yet) and asks the flush
        // thread to make chunks, which takes the state lock: once it is done, nothing else
        // takes it.
        db.insert("first", "v").unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while core.state.lock().tree.mem.wants_growth() || core.state.lock().tree.mem.is_growing() {
            assert!(
                Instant::now() < deadline,
                "the flush thread did not grow the memtable"
            );
            thread::sleep(Duration::from_millis(1));
        }
        let all_held = lone_writes_are_held(&db, |db| {
            for i in 0..100u32 {
                db.insert(i.to_be_bytes(), "v").unwrap();
            }
            100
        });
        assert!(all_held);
        // Another writer finds the state lock taken while this thread holds it (a few tries:
        // the thread may come to the lock only once it is free).
        let contended = (0..5).any(|_| {
            end_cooldown(&db);
            let before = held(&db);
            let st = core.state.lock();
            let other = {
                let db = db.clone();
                thread::spawn(move || db.insert("other", "w").unwrap())
            };
            thread::sleep(Duration::from_millis(50));
            drop(st);
            other.join().unwrap();
            held(&db) == before
        });
        assert!(contended);
        let first = held(&db);
        // That write and the lone writes after it, up to the cooldown, give the lock up.
        for i in 0..HOLD_COOLDOWN - 1 {
            db.insert(format!("k{i}"), "v").unwrap();
        }
        assert_eq!(held(&db), first);
        // Then they keep it again (a few more writes: a background thread may take the lock).
        let again = (0..5).any(|i| {
            db.insert(format!("again{i}"), "v").unwrap();
            held(&db) > first
        });
        assert!(again);
        for i in 0..100u32 {
            assert_eq!(db.get(i.to_be_bytes()).unwrap().as_deref(), Some(&b"v"[..]));
        }
        assert_eq!(db.get("other").unwrap().as_deref(), Some(&b"w"[..]));
        db.close().unwrap();
    }

    /// A write queued behind another writer's group also stops lone leaders from keeping the
    /// state lock for a while.
    #[test]
    fn a_write_queued_behind_a_leader_makes_lone_leaders_give_the_lock_up() {
        let Some((_dir, db)) = held_db() else {
            return;
        };
        let core = Arc::clone(db.core());
        // As if another writer led: this thread's write queues.
        core.state.lock().writes.leader_active = true;
        let queued = {
            let db = db.clone();
            thread::spawn(move || db.insert("b", "2").unwrap())
        };
        while core.state.lock().writes.queue.is_empty() {
            thread::yield_now();
        }
        assert_eq!(core.state.lock().writes.hold_cooldown, HOLD_COOLDOWN);
        // Hand it the lead, as a leader finishing its round would.
        let front = core
            .state
            .lock()
            .writes
            .queue
            .front()
            .unwrap()
            .waiter
            .clone();
        front.hand_lead();
        queued.join().unwrap();
        let before = held(&db);
        db.insert("c", "3").unwrap();
        assert_eq!(held(&db), before);
        assert_eq!(db.get("b").unwrap().as_deref(), Some(&b"2"[..]));
        db.close().unwrap();
    }

    /// A lone writer that finds the WAL's lock taken (a `Db::sync_wal` holds it through its
    /// fsync) waits for it with the state lock released, as a group's leader does.
    #[test]
    fn a_lone_writer_waits_for_the_wal_lock_without_the_state_lock() {
        let Some((_dir, db)) = held_db() else {
            return;
        };
        end_cooldown(&db);
        let core = Arc::clone(db.core());
        let wal = core.wal.lock();
        let writer = {
            let db = db.clone();
            thread::spawn(move || db.insert("b", "2").unwrap())
        };
        thread::sleep(Duration::from_millis(100));
        // The writer waits for the WAL's lock; the state lock is free meanwhile.
        assert!(core.state.try_lock_for(Duration::from_secs(5)).is_some());
        assert!(!writer.is_finished());
        drop(wal);
        writer.join().unwrap();
        assert_eq!(db.get("b").unwrap().as_deref(), Some(&b"2"[..]));
        db.close().unwrap();
    }

    /// A WAL written with `write(2)` (or in memory) is never appended to under the state
    /// lock: its append is a system call.
    #[test]
    fn a_wal_not_in_memory_is_never_appended_to_under_the_state_lock() {
        let opts = Options::default().file_system(Arc::new(MemFs::new()) as Arc<dyn FileSystem>);
        let db = Db::open_with("/db", opts).unwrap();
        for i in 0..50u32 {
            db.insert(i.to_be_bytes(), "v").unwrap();
        }
        assert_eq!(held(&db), 0);
        let dir = tempfile::tempdir().unwrap();
        let opts = Options::default().log_writes(crate::LogWrites::Syscall);
        let db = Db::open_with(dir.path(), opts).unwrap();
        for i in 0..50u32 {
            db.insert(i.to_be_bytes(), "v").unwrap();
        }
        assert_eq!(held(&db), 0);
        db.close().unwrap();
    }

    /// The first memtable after an open has no chunks made ahead: once its writer takes a new
    /// chunk, the flush thread, told by the write path, makes more.
    #[test]
    fn the_flush_thread_grows_a_memtable_whose_writer_ran_out_of_chunks() {
        let opts = Options::default().file_system(Arc::new(MemFs::new()) as Arc<dyn FileSystem>);
        let db = Db::open_with("/db", opts).unwrap();
        let core = Arc::clone(db.core());
        // The flush thread waits for work by now.
        thread::sleep(Duration::from_millis(100));
        let value = [5u8; 100];
        let mut i = 0u32;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            db.insert(i.to_be_bytes(), value).unwrap();
            i += 1;
            let st = core.state.lock();
            if st.tree.mem.spare_bytes() > 0 {
                // Made for this first memtable, not by a flush's `grow_ahead` for the next.
                assert_eq!(st.tree.sealed, 0);
                break;
            }
            drop(st);
            assert!(
                Instant::now() < deadline,
                "no chunks made ahead after {i} writes"
            );
            if i.is_multiple_of(1000) {
                thread::sleep(Duration::from_millis(1));
            }
        }
        for k in 0..i {
            assert_eq!(
                db.get(k.to_be_bytes()).unwrap().as_deref(),
                Some(&value[..])
            );
        }
        db.close().unwrap();
    }

    /// While the flush thread makes arrays for the memtable (an insert that reached one would
    /// wait for it), a lone write gives the state lock up.
    #[test]
    fn a_lone_write_gives_the_lock_up_while_the_memtable_grows() {
        let Some((_dir, db)) = held_db() else {
            return;
        };
        let core = Arc::clone(db.core());
        let mem = core.state.lock().tree.mem.clone();
        mem.set_growing(true);
        end_cooldown(&db);
        let before = held(&db);
        db.insert("b", "2").unwrap();
        assert_eq!(held(&db), before);
        mem.set_growing(false);
        assert!(a_lone_write_is_held(&db, "c"));
        db.close().unwrap();
    }
}
