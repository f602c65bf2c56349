//! A hint to the CPU that memory is read soon: the CPU kernels that stream weights or the KV
//! cache request their lines ahead of the loops. The hardware prefetchers alone left both below
//! the bandwidth that the machine reads (too few loads in flight per instruction).

/// A hint that the cache line at `p` is read soon. Any address will do: a prefetch reads nothing
/// into the program and faults on none, so `p` may lie past the end of the data.
#[inline(always)]
pub(crate) fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing into the program and faults on no address.
    #[allow(unsafe_code)]
    unsafe {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    // Elsewhere no hint: the loops run as they are.
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
