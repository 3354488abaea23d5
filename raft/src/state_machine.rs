//! [`StateMachine`]: openraft's `RaftStateMachine` over siltdb. The data lives under `d` +
//! user key and the last applied log id with the membership under `s/applied`, in the same
//! database as the log, so that one batch per `apply` call changes both atomically.
//!
//! Applies are not synced: a crash may lose the last ones, and openraft re-applies them from
//! the log, which holds them durably until it is purged; a purge is a synced write that makes
//! every apply before it durable too (siltdb keeps a prefix of history, `docs/durability.md`
//! D2). A snapshot is built from a siltdb [`Snapshot`](siltdb::Snapshot) of a moment when no
//! `apply` or install was between the pieces of a batch it had to cut (see [`PieceGate`]), so
//! the data and the applied log id it records are one point in time, and is kept in the
//! node's `snapshot` file (see `snapshot_file`). Installing one is a range delete of all data,
//! the snapshot's pairs, and the applied log id, in batches of at most 64 MiB with the applied
//! log id in the last; local reads ([`StateMachine::get`], the node's `get` and `read`) read
//! the state before a batch that is half written, as builds do.

use std::io::Cursor;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, BasicNode, EntryPayload, LogId, RaftSnapshotBuilder, StorageError, StorageIOError,
    StoredMembership,
};
use serde::{Deserialize, Serialize};
use siltdb::{Db, WriteBatch, WriteOptions};

use crate::snapshot_cover::SnapshotCover;
use crate::snapshot_file::{self, Meta};
use crate::types::{Request, Response, TypeConfig};
use crate::{keys, NodeId};

type Entry = openraft::Entry<TypeConfig>;
type Membership = StoredMembership<NodeId, BasicNode>;

/// What `s/applied` holds.
#[derive(Clone, Default, Serialize, Deserialize)]
struct Applied {
    last_applied: Option<LogId<NodeId>>,
    membership: Membership,
}

/// openraft's state machine in a siltdb database. Made by [`open_store`](crate::open_store).
pub struct StateMachine {
    db: Arc<Db>,
    dir: PathBuf,
    /// How far the snapshot file covers the log; shared with the builders and the log store.
    cover: Arc<SnapshotCover>,
    /// What `s/applied` holds, kept in memory so that `apply` and `applied_state` do not read
    /// and decode it from the database on every call (this struct is its only writer).
    applied: Applied,
    /// Shared with the builders: whether a cut batch is half written.
    gate: Arc<PieceGate>,
    /// Where `apply` and an install cut their batches: [`BATCH_PIECE`] (smaller in tests).
    piece_bytes: usize,
}

/// Builds snapshots of a [`StateMachine`]: openraft's `RaftSnapshotBuilder`.
pub struct SnapshotBuilder {
    db: Arc<Db>,
    dir: PathBuf,
    cover: Arc<SnapshotCover>,
    gate: Arc<PieceGate>,
}

/// Whether an `apply` or an install is between the pieces of a batch it cut: the pieces
/// written so far then run ahead of `s/applied`, which goes with the last one. openraft
/// builds snapshots in a task of its own, concurrently with applies, and a build that took a
/// fresh siltdb snapshot there would save data ahead of the log id it records. So the batch
/// takes a siltdb snapshot before its first piece and keeps it here until its last piece is
/// written, and a build meanwhile reads that one: the state just before the batch, whole.
/// Nobody waits: a build never stalls an apply, nor an apply a build.
#[derive(Default)]
pub(crate) struct PieceGate(Mutex<Option<Arc<siltdb::Snapshot>>>);

/// Held from a batch's first cut until its last piece is written (or a write failed).
struct PiecesOpen<'a>(&'a PieceGate);

impl Drop for PiecesOpen<'_> {
    fn drop(&mut self) {
        *lock(&self.0 .0) = None;
    }
}

/// The gate's lock: it guards an `Option` replaced whole, so a panic elsewhere while it was
/// held left nothing half done.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl PieceGate {
    /// Keeps a snapshot of `db` as it is before a cut batch's first piece, until the returned
    /// value drops.
    fn open(&self, db: &Db) -> PiecesOpen<'_> {
        *lock(&self.0) = Some(Arc::new(db.snapshot()));
        PiecesOpen(self)
    }

    /// A snapshot of `db` that holds every piece of a cut batch or none: a fresh one, or,
    /// while a batch is half written, the one taken before it. (Taken under the gate's lock,
    /// so no batch writes a first piece between the check and the snapshot.)
    fn snapshot(&self, db: &Db) -> Arc<siltdb::Snapshot> {
        let before = lock(&self.0);
        match &*before {
            Some(snap) => snap.clone(),
            None => Arc::new(db.snapshot()),
        }
    }
}

/// A batch written by `apply` or an install is cut when it reaches this many bytes (siltdb
/// refuses batches over 1 GiB). Puts and deletes are idempotent and the applied log id is
/// written with the last piece, so a crash between pieces only makes openraft apply the same
/// entries again (and an install is redone from the snapshot file at open).
const BATCH_PIECE: usize = 64 << 20;

/// A batch that may be written in pieces: `add` it `bytes`, then `cut` it before the next
/// operation.
struct PiecedBatch<'a> {
    db: &'a Db,
    gate: &'a PieceGate,
    /// Where to cut.
    limit: usize,
    batch: WriteBatch,
    bytes: usize,
    /// Set from the first cut until the last piece is written.
    open: Option<PiecesOpen<'a>>,
}

impl<'a> PiecedBatch<'a> {
    fn new(db: &'a Db, gate: &'a PieceGate, limit: usize) -> PiecedBatch<'a> {
        PiecedBatch {
            db,
            gate,
            limit,
            batch: WriteBatch::new(),
            bytes: 0,
            open: None,
        }
    }

    /// Writes the batch (unsynced) as a piece and starts a new one once it holds `limit`
    /// bytes.
    fn cut(&mut self) -> siltdb::Result<()> {
        if self.bytes >= self.limit {
            if self.open.is_none() {
                self.open = Some(self.gate.open(self.db));
            }
            let piece = std::mem::take(&mut self.batch);
            self.db.write_with(piece, WriteOptions::new().sync(false))?;
            self.bytes = 0;
        }
        Ok(())
    }

    /// Writes the last piece; then no piece is half written.
    fn finish(self, sync: bool) -> siltdb::Result<()> {
        self.db
            .write_with(self.batch, WriteOptions::new().sync(sync))
        // `open` drops here, after the write.
    }
}

/// Replaces the state machine's data with a snapshot's pairs and sets the applied log id:
/// a range delete of all data, the pairs, the applied id last, in pieces of about
/// `piece_bytes` ([`BATCH_PIECE`]; smaller in tests), the last one synced.
fn load_snapshot(
    db: &Db,
    gate: &PieceGate,
    piece_bytes: usize,
    meta: &Meta,
    data: &[u8],
) -> Result<Applied, crate::Error> {
    let pairs = snapshot_file::pairs(data)?;
    let mut batch = PiecedBatch::new(db, gate, piece_bytes);
    batch
        .batch
        .remove_range(vec![keys::DATA_PREFIX]..keys::data_end().to_vec());
    for (k, v) in pairs {
        batch.cut()?;
        batch.batch.insert(keys::data_key(k), v);
        batch.bytes += k.len() + v.len() + 16;
    }
    let applied = Applied {
        last_applied: meta.last_log_id,
        membership: meta.last_membership.clone(),
    };
    batch.batch.insert(
        keys::APPLIED,
        serde_json::to_vec(&applied).expect("serialises"),
    );
    batch.finish(true)?;
    Ok(applied)
}

fn sm_read_err(e: impl Into<crate::Error>) -> StorageError<NodeId> {
    StorageIOError::read_state_machine(AnyError::new(&e.into())).into()
}

fn sm_write_err(e: impl Into<crate::Error>) -> StorageError<NodeId> {
    StorageIOError::write_state_machine(AnyError::new(&e.into())).into()
}

fn snapshot_err(meta: Option<&Meta>, e: impl Into<crate::Error>) -> StorageError<NodeId> {
    StorageIOError::write_snapshot(meta.map(|m| m.signature()), AnyError::new(&e.into())).into()
}

fn read_applied(
    get: impl FnOnce() -> siltdb::Result<Option<siltdb::Value>>,
) -> Result<Applied, crate::Error> {
    match get()? {
        None => Ok(Applied::default()),
        Some(v) => serde_json::from_slice(&v)
            .map_err(|e| crate::Error::corruption("s/applied", e.to_string())),
    }
}

impl StateMachine {
    /// Opens the state machine, first finishing an install or a build that a crash cut
    /// short: if the snapshot file covers more of the log than `s/applied` says was applied
    /// (a crash between saving the file and writing the data, or a power loss that took
    /// unsynced applies a snapshot had seen), the file's data is loaded, so that the state
    /// machine is never behind its own snapshot.
    pub(crate) fn open(db: Arc<Db>, dir: PathBuf) -> Result<StateMachine, crate::Error> {
        let mut applied = read_applied(|| db.get(keys::APPLIED))?;
        let gate = Arc::new(PieceGate::default());
        let mut saved = None;
        if let Some((meta, data)) = snapshot_file::load(&dir)? {
            if meta.last_log_id > applied.last_applied {
                applied = load_snapshot(&db, &gate, BATCH_PIECE, &meta, &data)?;
            }
            saved = meta.last_log_id;
        }
        Ok(StateMachine {
            db,
            dir,
            cover: Arc::new(SnapshotCover::new(saved)),
            applied,
            gate,
            piece_bytes: BATCH_PIECE,
        })
    }

    /// How far the snapshot file covers the log, for the log store's purges.
    pub(crate) fn cover(&self) -> Arc<SnapshotCover> {
        self.cover.clone()
    }

    /// The database the state machine (and the log) live in, for its statistics. Read
    /// replicated data with [`get`](Self::get), not from this database: during an install
    /// or a large apply, written in pieces, the database holds states that never existed
    /// (the install's first piece deletes all data).
    pub fn db(&self) -> Arc<Db> {
        self.db.clone()
    }

    /// The value of user key `key` in this node's state machine (a local read: as fresh as
    /// what this node has applied).
    ///
    /// Errors: what [`Db::get`] returns; a value that is not UTF-8 is
    /// [`Error::Corruption`](crate::Error::Corruption).
    pub fn get(&self, key: &str) -> Result<Option<String>, crate::Error> {
        self.reader().get(key)
    }

    /// A handle for local reads that outlives `self` (openraft takes the state machine).
    pub(crate) fn reader(&self) -> DataReader {
        DataReader {
            db: self.db.clone(),
            gate: self.gate.clone(),
        }
    }
}

/// Local reads of the replicated data, each of a state the state machine was in: while an
/// install or an apply is between the pieces of a batch it cut, the state before that batch.
/// (An install's first piece deletes all data: a read of the live database then could miss a
/// key that both the old and the new state hold.)
#[derive(Clone)]
pub(crate) struct DataReader {
    db: Arc<Db>,
    gate: Arc<PieceGate>,
}

impl DataReader {
    /// The value of user key `key`; errors as [`StateMachine::get`].
    pub(crate) fn get(&self, key: &str) -> Result<Option<String>, crate::Error> {
        match self
            .gate
            .snapshot(&self.db)
            .get(keys::data_key(key.as_bytes()))?
        {
            None => Ok(None),
            Some(v) => String::from_utf8(v.to_vec())
                .map(Some)
                .map_err(|_| crate::Error::corruption(format!("value of {key:?}"), "not UTF-8")),
        }
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        let snap = self.gate.snapshot(&self.db);
        let applied = read_applied(|| snap.get(keys::APPLIED)).map_err(sm_read_err)?;
        let mut data = Vec::new();
        let lo = vec![keys::DATA_PREFIX];
        let hi = keys::data_end().to_vec();
        for item in snap.range(lo..hi) {
            let (k, v) = item.map_err(sm_read_err)?;
            snapshot_file::push_pair(&mut data, &k[1..], &v);
        }
        let stamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        let meta = Meta {
            last_log_id: applied.last_applied,
            last_membership: applied.membership,
            snapshot_id: match applied.last_applied {
                Some(l) => format!("{}-{}-{stamp}", l.leader_id, l.index),
                None => format!("none-{stamp}"),
            },
        };
        self.cover
            .save_if_newer(&self.dir, &meta, &data)
            .map_err(|e| snapshot_err(Some(&meta), e))?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, Membership), StorageError<NodeId>> {
        Ok((self.applied.last_applied, self.applied.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut applied = self.applied.clone();
        let mut batch = PiecedBatch::new(&self.db, &self.gate, self.piece_bytes);
        let mut replies = Vec::new();
        // A failed write ends openraft's state-machine task: purges waiting for an install
        // queued behind this apply must not wait for it.
        let cover = &self.cover;
        let failed = |e: siltdb::Error| {
            cover.state_machine_failed();
            sm_write_err(e)
        };
        for e in entries {
            applied.last_applied = Some(e.log_id);
            batch.cut().map_err(failed)?;
            let mut refused = false;
            match e.payload {
                EntryPayload::Blank => {}
                // A committed entry siltdb cannot store must not stop the state machine (every
                // node would fail on it at every restart): it is refused, the same way on
                // every node.
                EntryPayload::Normal(Request::Put { key, value }) => {
                    if !crate::storable(&key, &value) {
                        refused = true;
                    } else {
                        batch.bytes += key.len() + value.len() + 16;
                        let key = keys::data_key(key.as_bytes());
                        batch.batch.insert(key, value.as_bytes());
                    }
                }
                EntryPayload::Normal(Request::Delete { key }) => {
                    if !crate::storable(&key, "") {
                        refused = true;
                    } else {
                        batch.bytes += key.len() + 16;
                        batch.batch.remove(keys::data_key(key.as_bytes()));
                    }
                }
                EntryPayload::Membership(m) => {
                    applied.membership = StoredMembership::new(Some(e.log_id), m);
                }
            }
            replies.push(Response {
                index: e.log_id.index,
                refused,
            });
        }
        if replies.is_empty() {
            return Ok(replies);
        }
        batch.batch.insert(
            keys::APPLIED,
            serde_json::to_vec(&applied).expect("serialises"),
        );
        batch.finish(false).map_err(failed)?;
        self.applied = applied;
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> SnapshotBuilder {
        SnapshotBuilder {
            db: self.db.clone(),
            dir: self.dir.clone(),
            cover: self.cover.clone(),
            gate: self.gate.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        self.cover.install_begins();
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        // Check the data, then keep it first, so that a node restarted after the install
        // (whose log openraft then purges) can still hand it to a follower, and so that a
        // crash during the install is finished at open (`StateMachine::open`). The log
        // store's purge of what the snapshot covers waits for the saved file (see
        // `snapshot_cover`).
        let installed = snapshot_file::pairs(&data)
            .and_then(|_| self.cover.save_if_newer(&self.dir, meta, &data))
            .and_then(|()| load_snapshot(&self.db, &self.gate, self.piece_bytes, meta, &data));
        self.cover.install_ends(installed.is_ok());
        self.applied = installed.map_err(|e| snapshot_err(Some(meta), e))?;
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        match snapshot_file::load(&self.dir) {
            Ok(None) => Ok(None),
            Ok(Some((meta, data))) => Ok(Some(Snapshot {
                meta,
                snapshot: Box::new(Cursor::new(data)),
            })),
            Err(e) => Err(StorageIOError::read_snapshot(None, AnyError::new(&e)).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn put(i: u64) -> Entry {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), i),
            payload: EntryPayload::Normal(Request::Put {
                key: format!("k{}", i % 10),
                value: i.to_string(),
            }),
        }
    }

    /// openraft builds snapshots in a task of its own while it applies: a build that lands
    /// between two pieces of a cut `apply` batch must not save data ahead of its log id.
    /// Here every entry or two cuts a piece, and a builder runs all the time: each snapshot
    /// must hold exactly the state its log id applied (key `k{j}` at the largest index up to
    /// it that is `j` mod 10).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_snapshot_built_while_an_apply_writes_pieces_is_its_log_ids_state() {
        let dir = tempfile::tempdir().unwrap();
        let (_log, mut sm) = crate::open_store(dir.path()).unwrap();
        sm.piece_bytes = 40;
        let mut builder = sm.get_snapshot_builder().await;
        let stop = Arc::new(AtomicBool::new(false));
        let built = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let builds = {
            let (stop, built) = (stop.clone(), built.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let snap = builder.build_snapshot().await.unwrap();
                    let upto = snap.meta.last_log_id.map_or(0, |l| l.index);
                    let data = snap.snapshot.into_inner();
                    let pairs = snapshot_file::pairs(&data).unwrap();
                    let mut seen = 0;
                    for (k, v) in pairs {
                        let j: u64 = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
                        let v: u64 = std::str::from_utf8(v).unwrap().parse().unwrap();
                        let expect = (1..=upto).rev().find(|i| i % 10 == j);
                        assert_eq!(Some(v), expect, "k{j} in the snapshot at {upto}");
                        seen += 1;
                    }
                    assert_eq!(seen, upto.min(10), "keys in the snapshot at {upto}");
                    built.fetch_add(1, Ordering::Relaxed);
                    tokio::task::yield_now().await;
                }
            })
        };
        // At least 300 rounds, and on until 20 snapshots were built and checked (each saves
        // its file with two fsyncs: on a busy disk the rounds may end first).
        let mut round = 0u64;
        while round < 300 || built.load(Ordering::Relaxed) < 20 {
            sm.apply((round * 50 + 1..=round * 50 + 50).map(put))
                .await
                .unwrap();
            round += 1;
            // A builder that failed an assertion ends: its panic comes out of the await below.
            if builds.is_finished() {
                break;
            }
            assert!(round < 1_000_000, "the builder never finished 20 builds");
            tokio::task::yield_now().await;
        }
        stop.store(true, Ordering::Relaxed);
        builds.await.unwrap();
        let checked = built.load(Ordering::Relaxed);
        assert!(checked >= 20, "only {checked} snapshots were built");
    }

    /// A snapshot holding a key longer than any state machine stores (forged, or damaged in
    /// a way its framing does not show) is refused before its file is kept: the node's data
    /// and snapshot stay as they were, and it opens again. The file used to be kept, siltdb
    /// then refused the key, and every later open failed loading it.
    #[tokio::test]
    async fn an_install_of_a_pair_no_state_machine_stores_is_refused_and_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (_log, mut sm) = crate::open_store(dir.path()).unwrap();
            sm.apply((1..=3).map(put)).await.unwrap();
            let mut data = Vec::new();
            snapshot_file::push_pair(&mut data, b"ok", b"v");
            snapshot_file::push_pair(&mut data, &vec![b'k'; crate::MAX_USER_KEY + 1], b"v");
            let meta = Meta {
                last_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), 50)),
                last_membership: Default::default(),
                snapshot_id: "forged".into(),
            };
            sm.begin_receiving_snapshot().await.unwrap();
            let snapshot = Box::new(std::io::Cursor::new(data));
            assert!(sm.install_snapshot(&meta, snapshot).await.is_err());
            assert!(snapshot_file::load(&sm.dir).unwrap().is_none());
        }
        let (_log, mut sm) = crate::open_store(dir.path()).expect("opens again");
        let (applied, _) = sm.applied_state().await.unwrap();
        assert_eq!(applied.map(|l| l.index), Some(3));
        assert_eq!(sm.reader().get("ok").unwrap(), None);
    }

    /// An install's first piece deletes all data: a local read between its pieces must see
    /// the state before the install (or after it), never one without keys both hold. Each
    /// install here reloads the same 200 keys in pieces of two pairs while a reader reads a
    /// key from the first piece and one from a late piece.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn local_reads_during_an_install_in_pieces_see_whole_states() {
        let dir = tempfile::tempdir().unwrap();
        let (_log, mut sm) = crate::open_store(dir.path()).unwrap();
        sm.piece_bytes = 40;
        let mut data = Vec::new();
        for i in 0..200 {
            snapshot_file::push_pair(&mut data, format!("k{i:03}").as_bytes(), b"v");
        }
        let meta = |i: u64| Meta {
            last_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), i)),
            last_membership: Default::default(),
            snapshot_id: format!("s{i}"),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let mut reads = None;
        // At least 40 installs, and on until the reader has read during 20 rounds (it may be
        // scheduled late on a busy machine).
        let mut i = 0;
        while i < 40 || done.load(Ordering::Relaxed) < 20 {
            i += 1;
            assert!(i < 100_000, "the reader never ran");
            sm.begin_receiving_snapshot().await.unwrap();
            let snapshot = Box::new(std::io::Cursor::new(data.clone()));
            sm.install_snapshot(&meta(i), snapshot).await.unwrap();
            // After the first install every key is there, in every state from now on.
            let reader = sm.reader();
            let (stop, done) = (stop.clone(), done.clone());
            let r = reads.get_or_insert_with(|| {
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        for key in ["k000", "k150"] {
                            let v = reader.get(key).unwrap();
                            assert_eq!(v.as_deref(), Some("v"), "{key}");
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            });
            if r.is_finished() {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        reads.unwrap().join().unwrap();
    }
}
