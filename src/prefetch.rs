//! Cache hints: [`for_read`] asks the CPU for a cache line the caller will read soon (the
//! memtable filter's line of a key the write path is about to add), [`for_write`] for lines
//! it is about to store to, in the exclusive state, so that the stores do not wait for them.
//! The crate's prefetches are all here, the `unsafe` they need with them.
//!
//! The writer streams each write into memory no cache holds yet: its WAL record into the
//! log's memory map (zeroed ahead by another thread) and its batch encoding into the
//! memtable's arena chunk. A store to such a line waits in the store buffer for the line to
//! come (read for ownership); the next locked instruction (the WAL's lock) waits for the
//! whole buffer to drain. A read prefetch does not help: it brings the line shared, and the
//! store still waits for the other copies to be invalidated. `prefetchw` fetches it to be
//! written. Measured on the sequential load (1M inserts, 2-vCPU Xeon): the writer's CPU time
//! an insert fell by 8-10% (see docs/benchmarks.md §8, session 28).

use std::sync::atomic::{AtomicU8, Ordering};

/// Asks the CPU to bring the cache line at `p` into its caches. A hint: it never faults and
/// changes nothing the program sees, whatever the address; nothing off x86-64 (or under Miri).
#[inline]
pub(crate) fn for_read(p: *const u8) {
    // SAFETY: a prefetch is a hint that never faults and reads nothing the program sees,
    // whatever the address; SSE, which it needs, is part of the x86-64 baseline.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    #[allow(unsafe_code)]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = p;
}

/// Whether the CPU has `prefetchw`: 0 not yet asked, 1 yes, 2 no.
static HAS_PREFETCHW: AtomicU8 = AtomicU8::new(0);

fn has_prefetchw() -> bool {
    match HAS_PREFETCHW.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            let yes = detect();
            HAS_PREFETCHW.store(if yes { 1 } else { 2 }, Ordering::Relaxed);
            yes
        }
    }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
fn detect() -> bool {
    use std::arch::x86_64::__cpuid;
    // CPUID leaf 0x8000_0001, ECX bit 8: PREFETCHW (Intel's "3DNowPrefetch" flag; every
    // x86-64 CPU has CPUID and the extended leaf 0x8000_0000).
    // SAFETY: CPUID exists on every x86-64 CPU and only reads identification registers.
    // (`__cpuid` is an `unsafe fn` before Rust 1.94, the crate's minimum is 1.89.)
    #[allow(unused_unsafe, unsafe_code)]
    unsafe {
        __cpuid(0x8000_0000).eax >= 0x8000_0001 && __cpuid(0x8000_0001).ecx & (1 << 8) != 0
    }
}

#[cfg(not(all(target_arch = "x86_64", not(miri))))]
fn detect() -> bool {
    false
}

/// Asks for `lines` cache lines from `p` on (`p`, `p + 64`, ...) to be written soon. A hint:
/// it never faults and changes nothing the program sees, whatever the addresses (past the
/// end of a buffer too); it does nothing on a CPU without `prefetchw`, off x86-64 or under Miri.
#[inline]
pub(crate) fn for_write(p: *const u8, lines: usize) {
    if !has_prefetchw() {
        return;
    }
    for i in 0..lines {
        let line = p.wrapping_add(i * 64);
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        // SAFETY: `prefetchw` only hints the cache: it never faults (an address that is not
        // mapped is ignored), reads and writes nothing the program sees, and the CPU has it
        // (checked above).
        #[allow(unsafe_code)]
        unsafe {
            std::arch::asm!(
                "prefetchw [{}]",
                in(reg) line,
                options(nostack, preserves_flags, readonly)
            );
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        let _ = line;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hint_anywhere_changes_nothing() {
        let buf = vec![7u8; 256];
        for_write(buf.as_ptr(), 4);
        // Past the end, and at addresses nothing maps: a hint never faults.
        for_write(buf.as_ptr().wrapping_add(1 << 20), 3);
        for_write(std::ptr::null(), 2);
        for_write(usize::MAX as *const u8, 1);
        for_read(buf.as_ptr());
        for_read(std::ptr::null());
        assert!(buf.iter().all(|&b| b == 7));
        // The answer is asked once and kept.
        let first = has_prefetchw();
        assert_eq!(has_prefetchw(), first);
        assert_ne!(HAS_PREFETCHW.load(Ordering::Relaxed), 0);
    }

    /// The CPUID bit read is the one Linux reports as `3dnowprefetch` (PREFETCHW).
    #[cfg(all(target_os = "linux", target_arch = "x86_64", not(miri)))]
    #[test]
    fn detection_agrees_with_the_kernels_cpu_flags() {
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            return;
        };
        let Some(flags) = info.lines().find(|l| l.starts_with("flags")) else {
            return;
        };
        let kernel = flags.split_whitespace().any(|f| f == "3dnowprefetch");
        // On Intel the kernel reports the CPUID bit as it is; on AMD it sets the flag on
        // every 64-bit CPU whatever the bit says (a hypervisor may hide the bit).
        if info
            .lines()
            .any(|l| l.starts_with("vendor_id") && l.contains("GenuineIntel"))
        {
            assert_eq!(detect(), kernel);
        } else {
            assert!(!detect() || kernel);
        }
    }
}
