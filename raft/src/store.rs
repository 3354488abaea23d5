//! [`open_store`]: one siltdb database per node, holding both the Raft log and the state
//! machine (see [`keys`](crate::keys) for the layout and `docs/raft.md` for why one database).

use std::path::Path;
use std::sync::Arc;

use siltdb::{Db, Options};

use crate::{Error, LogStore, StateMachine};

/// Opens (creating if missing) the node storage in directory `dir`: the siltdb database in
/// `dir/db` and the current snapshot in `dir/snapshot`. Returns the log store and the state
/// machine to hand to [`openraft::Raft::new`].
///
/// The database is opened with siltdb's default options except `sync_writes(false)`: the log
/// store chooses durability per write (appends and the vote are synced, applies are not; see
/// [`LogStore`]).
///
/// If the snapshot file covers more of the log than the state machine has applied (a crash
/// during an install), the snapshot's data is loaded first.
///
/// Errors: [`Error::Io`] if the directory cannot be created; what [`Db::open_with`] returns
/// ([`Error::Db`]), for example a database locked by another process;
/// [`Error::Corruption`] if the snapshot file or the applied state does not decode.
pub fn open_store(dir: impl AsRef<Path>) -> Result<(LogStore, StateMachine), Error> {
    let dir = dir.as_ref();
    std::fs::create_dir_all(dir)?;
    let db = Arc::new(Db::open_with(
        dir.join("db"),
        Options::default().sync_writes(false),
    )?);
    let sm = StateMachine::open(db.clone(), dir.to_path_buf())?;
    Ok((LogStore::new(db), sm))
}
