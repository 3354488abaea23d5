//! [`EntryCell`]: the skiplist's slot for one node's entry, written once by the list's one
//! writer and then read by any thread, without the two locked instructions (and the call) that
//! a `OnceLock` takes to set a value: the writer's `&mut` hold on the list's writer state is
//! what makes it alone, so the cell needs no lock of its own.
//!
//! This module holds the memtable's `unsafe` code but for the one call of [`EntryCell::set`]
//! in `skiplist.rs` (see `src/lib.rs` for the crate's others). The contract is small: `set`
//! is `unsafe`, and its caller promises that every two calls of it on a cell are ordered (one
//! happens before the other: the skiplist's one writer makes them all); everything else is
//! safe. A cell that is read before it is set answers `None` (the `Acquire` load of its flag
//! pairs with the `Release` store after the value is written), so a reader never sees a
//! half-written entry even if the list's own publication order were wrong; a second `set` of
//! a set cell is refused (the value is handed back).

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};

/// A write-once slot (see the module documentation).
pub(super) struct EntryCell<T> {
    value: UnsafeCell<MaybeUninit<T>>,
    /// Set, with `Release`, once `value` is written; never cleared.
    set: AtomicBool,
}

// SAFETY: a cell hands out `&T` to any thread once set (so `T: Sync` is needed, and `T: Send`
// for the value written by one thread and dropped by another); `value` is written only by
// `set`, whose caller guarantees no concurrent `set`, and only while `set` is false, before
// any reader can see the flag true.
#[allow(unsafe_code)]
unsafe impl<T: Send + Sync> Sync for EntryCell<T> {}

impl<T> Default for EntryCell<T> {
    fn default() -> Self {
        EntryCell {
            value: UnsafeCell::new(MaybeUninit::uninit()),
            set: AtomicBool::new(false),
        }
    }
}

impl<T> EntryCell<T> {
    /// The value, once [`set`](Self::set) has returned `Ok` in some thread and this thread
    /// has seen it (through the list's links, or by chance); `None` before.
    #[inline]
    pub(super) fn get(&self) -> Option<&T> {
        if !self.set.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: `set` is true, so `value` was initialised before the `Release` store this
        // `Acquire` load saw, and it is never written again (a set cell refuses `set`).
        #[allow(unsafe_code)]
        Some(unsafe { (*self.value.get()).assume_init_ref() })
    }

    /// Writes the value; `Err(value)` back if the cell is set already.
    ///
    /// # Safety
    /// Every two calls of `set` on this cell must be ordered, one happening before the other
    /// (the skiplist calls it only through its one writer, which a `&mut` borrow makes alone).
    #[allow(unsafe_code)]
    pub(super) unsafe fn set(&self, value: T) -> Result<(), T> {
        if self.set.load(Ordering::Relaxed) {
            return Err(value);
        }
        // SAFETY: the caller guarantees no concurrent `set`, and `set` is false, so no reader
        // holds a reference into `value` (`get` hands one out only once it is true).
        unsafe { (*self.value.get()).write(value) };
        self.set.store(true, Ordering::Release);
        Ok(())
    }
}

impl<T> Drop for EntryCell<T> {
    fn drop(&mut self) {
        if *self.set.get_mut() {
            // SAFETY: set means initialised; `&mut self` means no reader is left.
            #[allow(unsafe_code)]
            unsafe {
                self.value.get_mut().assume_init_drop()
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EntryCell;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Counts its drops.
    struct Counted(Arc<AtomicUsize>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_cell_is_empty_until_set_and_refuses_a_second_value() {
        let cell = EntryCell::default();
        assert!(cell.get().is_none());
        // SAFETY: one thread.
        #[allow(unsafe_code)]
        let first = unsafe { cell.set(7) };
        assert_eq!(first, Ok(()));
        assert_eq!(cell.get(), Some(&7));
        #[allow(unsafe_code)]
        let second = unsafe { cell.set(8) };
        assert_eq!(second, Err(8));
        assert_eq!(cell.get(), Some(&7));
    }

    #[test]
    fn a_set_cell_drops_its_value_once_and_an_empty_one_drops_nothing() {
        let drops = Arc::new(AtomicUsize::new(0));
        {
            let cell = EntryCell::default();
            // SAFETY: one thread.
            #[allow(unsafe_code)]
            let set = unsafe { cell.set(Counted(drops.clone())) };
            assert!(set.is_ok());
            #[allow(unsafe_code)]
            let refused = unsafe { cell.set(Counted(drops.clone())) };
            // The refused value comes back, and is dropped here, not kept.
            drop(refused);
            assert_eq!(drops.load(Ordering::Relaxed), 1);
        }
        assert_eq!(drops.load(Ordering::Relaxed), 2);
        drop(EntryCell::<Counted>::default());
        assert_eq!(drops.load(Ordering::Relaxed), 2);
    }

    /// A value set in one thread is seen whole by readers in others, which see either nothing
    /// or all of it.
    #[test]
    fn readers_see_nothing_or_the_whole_value() {
        // Fewer rounds under Miri (`cargo +nightly miri test --lib memtable::entry_cell`),
        // which checks every access of these threads for a data race.
        let rounds = if cfg!(miri) { 8 } else { 200 };
        for _ in 0..rounds {
            let cell = Arc::new(EntryCell::<Vec<u64>>::default());
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let cell = cell.clone();
                    std::thread::spawn(move || loop {
                        if let Some(v) = cell.get() {
                            assert_eq!(v.len(), 64);
                            assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
                            return;
                        }
                        std::thread::yield_now();
                    })
                })
                .collect();
            // SAFETY: this thread is the only one that sets it.
            #[allow(unsafe_code)]
            let set = unsafe { cell.set((0..64).collect()) };
            assert!(set.is_ok());
            for r in readers {
                r.join().unwrap();
            }
        }
    }
}
