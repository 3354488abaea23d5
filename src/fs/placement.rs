//! Keeping the mapped WAL's helper thread off the CPU its writer runs on.
//!
//! The helper ([`super::mapped`]) is woken once a window (1 MiB of WAL) by the writer, and
//! Linux places a thread it wakes near the waker: on a machine with no idle CPU (two vCPUs,
//! the writer on one and a flush on the other) the helper lands on the writer's CPU and runs
//! its job there (zeroing and faulting in a window: ~300 us), while the writer waits. Timed
//! in `MappedLog::window_for` on the 2-vCPU VM of `docs/benchmarks.md`: 5-20 ms of a 1M-key
//! sequential load's writer time went to the wake-up, 0.7-0.8 ms with the helper kept off
//! the writer's CPU. So before each wake-up the writer narrows the helper's CPUs to those it
//! may run on (as it was started with) but the writer's own, when that leaves one; only when
//! the writer's CPU changed since the last time (one system call then, none otherwise). A
//! hint: the scheduler may still move the writer next to the helper, until the next window.

/// The CPUs a helper thread may run on and the one it was last kept off.
#[derive(Debug)]
pub(super) struct Placement {
    /// The CPUs the creating thread could run on when the helper started (the helper's own,
    /// inherited): two or more.
    allowed: libc::cpu_set_t,
    /// The CPU the helper was last kept off, if any.
    kept_off: Option<usize>,
}

impl Placement {
    /// The calling thread's CPUs, which a thread it starts inherits; `None` if they cannot
    /// be read or there is only one (nowhere else to go).
    pub(super) fn of_this_thread() -> Option<Placement> {
        // SAFETY: `cpu_set_t` is plain old data; the call fills it for this thread (pid 0).
        #[allow(unsafe_code)]
        let (rc, allowed) = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let rc = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
            (rc, set)
        };
        // SAFETY: reads the set filled above.
        #[allow(unsafe_code)]
        let count = unsafe { libc::CPU_COUNT(&allowed) };
        (rc == 0 && count >= 2).then_some(Placement {
            allowed,
            kept_off: None,
        })
    }

    /// Keeps thread `tid` off the CPU the calling thread runs on now, if that is one of
    /// `allowed` and not the one it was kept off last time. Best effort: a failed call (the
    /// thread is gone, a cpuset changed) leaves it where it is. Returns the CPU it was kept
    /// off, if a call was made and succeeded.
    pub(super) fn keep_off_this_cpu(&mut self, tid: libc::pid_t) -> Option<usize> {
        // SAFETY: a plain query of the calling thread's CPU.
        #[allow(unsafe_code)]
        let cpu = usize::try_from(unsafe { libc::sched_getcpu() }).ok()?;
        if self.kept_off == Some(cpu) || cpu >= libc::CPU_SETSIZE as usize {
            return None;
        }
        let mut set = self.allowed;
        // SAFETY: `cpu` is below `CPU_SETSIZE` (checked above); the set is plain old data.
        #[allow(unsafe_code)]
        let rc = unsafe {
            if !libc::CPU_ISSET(cpu, &set) {
                return None;
            }
            libc::CPU_CLR(cpu, &mut set);
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        (rc == 0).then(|| {
            self.kept_off = Some(cpu);
            cpu
        })
    }
}

impl Placement {
    /// The CPU the helper was last kept off (tests).
    #[cfg(test)]
    pub(super) fn kept_off(&self) -> Option<usize> {
        self.kept_off
    }
}

/// The calling thread's id (for [`Placement::keep_off_this_cpu`] from another thread); the
/// system call, which glibc wraps only from 2.30 on.
pub(super) fn this_thread_id() -> libc::pid_t {
    // SAFETY: a plain query with no arguments.
    #[allow(unsafe_code)]
    let id = unsafe { libc::syscall(libc::SYS_gettid) };
    libc::pid_t::try_from(id).unwrap_or(0)
}

/// The CPUs thread `tid` may run on, if they can be read (tests).
#[cfg(test)]
pub(super) fn cpus_of(tid: libc::pid_t) -> Option<Vec<usize>> {
    // SAFETY: `cpu_set_t` is plain old data; the call fills it.
    #[allow(unsafe_code)]
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another thread is kept off the CPU the caller runs on, and only that one, among the
    /// CPUs it had.
    #[test]
    fn a_thread_is_kept_off_the_callers_cpu_and_keeps_the_others() {
        let Some(mut p) = Placement::of_this_thread() else {
            return; // one CPU: nothing to test
        };
        let before = cpus_of(0).unwrap();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tid_tx.send(this_thread_id()).unwrap();
            let _ = stop_rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        // The caller may move between reading its CPU and the check: retry a few times.
        let kept = (0..20).find_map(|_| {
            let off = p.keep_off_this_cpu(tid)?;
            let now = cpus_of(tid)?;
            let want: Vec<usize> = before.iter().copied().filter(|&c| c != off).collect();
            (now == want).then_some(off)
        });
        let off = kept.expect("the thread was kept off the caller's CPU");
        assert!(before.contains(&off));
        assert_eq!(p.kept_off, Some(off));
        stop_tx.send(()).unwrap();
        t.join().unwrap();
    }
}
