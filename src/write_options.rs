//! [`WriteOptions`] and [`Durability`]: how durable one write is when it returns, chosen per
//! write (the database-wide default is [`Options::sync_writes`](crate::Options::sync_writes)).

/// How durable a write is when [`Db::write_with`](crate::Db::write_with) returns `Ok`.
///
/// Every acknowledged write survives a process crash (it is in the operating system's hands);
/// what differs is power loss. A power loss keeps a prefix of the history: whole batches, in
/// order, up to some point at or after the last write that was synced (durability rule D2 in
/// `docs/durability.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Durability {
    /// As the database's [`Options::sync_writes`](crate::Options::sync_writes) says. The
    /// default.
    #[default]
    Default,
    /// Not fsynced: survives a process crash; a power loss may drop it (and the writes after
    /// it), never tear it.
    Buffered,
    /// The WAL is fsynced before the write returns, so it survives a power loss. Writers that
    /// ask at the same time share one fsync (group commit).
    Sync,
}

/// Options of one write: [`Db::write_with`](crate::Db::write_with),
/// [`Db::insert_with`](crate::Db::insert_with), [`Db::remove_with`](crate::Db::remove_with).
/// `WriteOptions::default()` is what [`Db::write`](crate::Db::write) uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct WriteOptions {
    /// How durable the write is when it returns. Default [`Durability::Default`].
    pub durability: Durability,
}

impl WriteOptions {
    /// The defaults: durability as [`Options::sync_writes`](crate::Options::sync_writes).
    pub fn new() -> WriteOptions {
        WriteOptions::default()
    }

    /// `true`: fsync before returning ([`Durability::Sync`]); `false`: do not
    /// ([`Durability::Buffered`]), whatever `sync_writes` says. Not calling it keeps the
    /// default, [`Durability::Default`] (as `sync_writes` says). Never an error.
    pub fn sync(mut self, sync: bool) -> WriteOptions {
        self.durability = if sync {
            Durability::Sync
        } else {
            Durability::Buffered
        };
        self
    }

    /// Whether the write must be fsynced, given the database's `sync_writes`.
    pub(crate) fn needs_sync(&self, sync_writes: bool) -> bool {
        match self.durability {
            Durability::Default => sync_writes,
            Durability::Buffered => false,
            Durability::Sync => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_write_choice_overrides_the_database_default() {
        let d = WriteOptions::default();
        assert!(d.needs_sync(true) && !d.needs_sync(false));
        assert!(WriteOptions::new().sync(true).needs_sync(false));
        assert!(!WriteOptions::new().sync(false).needs_sync(true));
    }
}
