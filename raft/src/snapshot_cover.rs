//! [`SnapshotCover`]: how far the node's snapshot file covers the log, shared by the state
//! machine, which saves the file, and the log store, whose purge must wait for it during an
//! install.
//!
//! Why the wait. When a follower installs a snapshot, openraft sends the install to the state
//! machine's task and, without waiting for it, asks the log store to purge the entries the
//! snapshot covers. The purge is one synced write; saving the snapshot file takes two fsyncs
//! and a rename. If the purge reached the disk first and the process died before the file
//! did, the node would restart with entries purged that neither its data nor its snapshot
//! holds, and could neither apply nor serve them again. So once this node has begun to
//! receive a snapshot, a purge beyond what the saved file covers waits until the file covers
//! it (or an install fails). The wait stays armed after an install ends: two streams can
//! overlap (a new leader's first chunk arrives while the old leader's last one is being
//! installed), and the second install's purge must wait too. Every other purge openraft
//! makes is of entries a saved snapshot already covers (it purges only up to its last
//! snapshot, which a build saves before it returns), so it never waits; neither does one on a
//! node that never received a snapshot (openraft's storage conformance suite purges logs with
//! no snapshot at all).

use std::path::Path;
use std::sync::Mutex;

use openraft::LogId;
use tokio::sync::watch;

use crate::snapshot_file::{self, Meta};
use crate::NodeId;

/// See the module documentation.
pub(crate) struct SnapshotCover {
    /// Held while the file is replaced: openraft builds snapshots in a task of its own,
    /// concurrently with installs, and an older build must not replace a newer file.
    file: Mutex<()>,
    /// What purges wait on: the log id the file covers (`None`: no file, or one that covers
    /// nothing; only the state machine and its builders write the file, so this is what it
    /// holds), and whether a snapshot was ever received.
    state: watch::Sender<Cover>,
}

#[derive(Clone, Copy, Default)]
struct Cover {
    saved: Option<LogId<NodeId>>,
    /// A snapshot has been received (or begun to be) since the node started.
    received: bool,
    /// The last install failed (openraft stops the node on it): waiting purges give up.
    failed: bool,
}

impl SnapshotCover {
    /// A cover for a node whose snapshot file covers the log up to `saved`.
    pub(crate) fn new(saved: Option<LogId<NodeId>>) -> SnapshotCover {
        SnapshotCover {
            file: Mutex::new(()),
            state: watch::Sender::new(Cover {
                saved,
                ..Cover::default()
            }),
        }
    }

    /// Saves the snapshot file unless the file there is at least as new.
    pub(crate) fn save_if_newer(
        &self,
        dir: &Path,
        meta: &Meta,
        data: &[u8],
    ) -> Result<(), crate::Error> {
        let _replacing = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let saved = self.state.borrow().saved;
        if saved.is_some() && saved >= meta.last_log_id {
            return Ok(());
        }
        snapshot_file::save(dir, meta, data)?;
        self.state.send_modify(|c| c.saved = meta.last_log_id);
        Ok(())
    }

    /// A snapshot is being received: purges beyond the file wait from now on.
    pub(crate) fn install_begins(&self) {
        self.state.send_modify(|c| {
            c.received = true;
            c.failed = false;
        });
    }

    /// An install has ended, well (`ok`) or not (then waiting purges give up).
    pub(crate) fn install_ends(&self, ok: bool) {
        self.state.send_modify(|c| c.failed = !ok);
    }

    /// The state machine failed (an apply's write did; openraft's state-machine task then
    /// ends, and runs no install queued behind it): waiting purges give up, as after a
    /// failed install, instead of waiting for a file no install will save (which held the
    /// log store's purge, and with it openraft's core, for good).
    pub(crate) fn state_machine_failed(&self) {
        self.state.send_modify(|c| c.failed = true);
    }

    /// Returns once a purge of the log up to `upto` may be written: at once on a node that
    /// never received a snapshot, else when the saved file covers `upto`.
    ///
    /// Errors: [`Error::Io`](crate::Error::Io) if the install failed before its file covered
    /// `upto` (the purge must then not happen).
    pub(crate) async fn purge_may_go(&self, upto: LogId<NodeId>) -> Result<(), crate::Error> {
        let mut rx = self.state.subscribe();
        let cover = *rx
            .wait_for(|c| !c.received || c.saved >= Some(upto) || c.failed)
            .await
            .expect("the sender lives in self");
        if cover.saved < Some(upto) && cover.failed {
            return Err(crate::Error::Io(std::io::Error::other(format!(
                "not purging the log up to {upto}: the snapshot install that covers it failed"
            ))));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn id(i: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(1, 1), i)
    }

    fn meta(i: u64) -> Meta {
        Meta {
            last_log_id: Some(id(i)),
            last_membership: Default::default(),
            snapshot_id: format!("s{i}"),
        }
    }

    fn file_index(dir: &Path) -> Option<u64> {
        snapshot_file::load(dir)
            .unwrap()
            .unwrap()
            .0
            .last_log_id
            .map(|l| l.index)
    }

    /// openraft builds snapshots concurrently with installs: a build that read an older
    /// state and finishes last must not replace the newer file.
    #[test]
    fn an_older_snapshot_never_replaces_a_newer_file() {
        let dir = tempfile::tempdir().unwrap();
        let cover = SnapshotCover::new(None);
        cover.save_if_newer(dir.path(), &meta(300), b"").unwrap();
        cover.save_if_newer(dir.path(), &meta(200), b"").unwrap();
        assert_eq!(file_index(dir.path()), Some(300));
        cover.save_if_newer(dir.path(), &meta(400), b"").unwrap();
        assert_eq!(file_index(dir.path()), Some(400));
    }

    /// Polls `fut` once: true if it has finished.
    fn ready<F: std::future::Future>(fut: std::pin::Pin<&mut F>) -> bool {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        std::future::Future::poll(fut, &mut cx).is_ready()
    }

    #[test]
    fn a_purge_during_an_install_waits_for_the_file_that_covers_it() {
        let dir = tempfile::tempdir().unwrap();
        let cover = SnapshotCover::new(Some(id(10)));
        // No install: any purge goes at once (openraft's conformance suite purges with no
        // snapshot at all).
        assert!(ready(std::pin::pin!(cover.purge_may_go(id(50)))));
        cover.install_begins();
        // Covered by the file already: goes.
        assert!(ready(std::pin::pin!(cover.purge_may_go(id(10)))));
        let mut purge = std::pin::pin!(cover.purge_may_go(id(50)));
        assert!(
            !ready(purge.as_mut()),
            "a purge beyond the file went during an install"
        );
        cover.save_if_newer(dir.path(), &meta(40), b"").unwrap();
        assert!(
            !ready(purge.as_mut()),
            "a file short of the purge let it go"
        );
        cover.save_if_newer(dir.path(), &meta(50), b"").unwrap();
        assert!(ready(purge.as_mut()));
        assert_eq!(file_index(dir.path()), Some(50));
        cover.install_ends(true);
        // Still armed after the install: a second stream's install may come next.
        let mut next = std::pin::pin!(cover.purge_may_go(id(90)));
        assert!(
            !ready(next.as_mut()),
            "a purge beyond the file went after an install"
        );
        cover.save_if_newer(dir.path(), &meta(90), b"").unwrap();
        assert!(ready(next.as_mut()));
        assert!(ready(std::pin::pin!(cover.purge_may_go(id(90)))));
    }

    #[test]
    fn a_failed_install_or_state_machine_releases_the_waiting_purge_with_an_error() {
        for fail in [
            (|c: &SnapshotCover| c.install_ends(false)) as fn(&SnapshotCover),
            SnapshotCover::state_machine_failed,
        ] {
            let cover = SnapshotCover::new(None);
            cover.install_begins();
            let mut purge = std::pin::pin!(cover.purge_may_go(id(7)));
            assert!(!ready(purge.as_mut()));
            fail(&cover);
            let waker = std::task::Waker::noop();
            let mut cx = std::task::Context::from_waker(waker);
            match std::future::Future::poll(purge.as_mut(), &mut cx) {
                std::task::Poll::Ready(Err(crate::Error::Io(_))) => {}
                other => panic!("expected an Io error, got {:?}", other.map(|r| r.is_ok())),
            }
        }
    }
}
