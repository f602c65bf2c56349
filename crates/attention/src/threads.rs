//! A decoding step on the CPU kernels' threads.
//!
//! The kernels of this crate (and flex's own ops) split their work across rayon's global pool.
//! Called from a thread outside the pool, each kernel hands its work in through rayon's global
//! queue, wakes a worker and puts the caller to sleep until the work is done, for every kernel
//! of every layer. Called from a worker, a kernel pushes its tasks onto that worker's
//! own queue and works on them itself while the other workers steal the rest, and the caller
//! never sleeps. Running each step on a worker made greedy decoding of SmolLM2-135M on flex
//! 10-15% faster (29.4-32.0 tokens/s against 26.7-27.7 after a 32-token prompt, `generate` on
//! two cores, runs side by side).

use burn::tensor::Device;

/// Runs `work` on one of rayon's worker threads where this crate's CPU kernels run (flex and
/// ndarray), and directly on the calling thread elsewhere or when it is a worker already.
///
/// Meant around a forward pass of a few rows, a decoding step (generation calls it around each
/// one), where the hand-overs are a large part of the time: the result is the same either way.
/// A prefill of 4,096 tokens of SmolLM2 on flex measured 10.7-11.2 s with it against 9.6-11.5 s
/// without (three runs each, alternated), so generation leaves prompts on the calling thread. The
/// attention path counts (`take_path_counts`) that `work` makes are added to the calling
/// thread's, and to nobody else's.
pub fn on_kernel_threads<R: Send>(device: &Device, work: impl FnOnce() -> R + Send) -> R {
    if !crate::kernels::flex_or_ndarray(device.as_dispatch()) {
        return work();
    }
    #[cfg(any(feature = "flex", feature = "ndarray"))]
    {
        let (result, counts) = rayon::scope(|_| counted(work));
        crate::paths::add(counts);
        result
    }
    #[cfg(not(any(feature = "flex", feature = "ndarray")))]
    work()
}

/// Runs `work` and returns the path counts it made alone, leaving this thread's count as it was.
///
/// A worker waiting for its kernel's tasks steals other jobs, among them another caller's whole
/// `work` (tests run side by side, and so can a user's threads): the stolen job's counts must not
/// take the ones the interrupted job has made so far on the same thread, nor leave its own there.
#[cfg_attr(not(any(feature = "flex", feature = "ndarray")), allow(dead_code))]
fn counted<R>(work: impl FnOnce() -> R) -> (R, crate::paths::PathCounts) {
    let interrupted = crate::paths::take_path_counts();
    let result = work();
    let counts = crate::paths::take_path_counts();
    crate::paths::add(interrupted);
    (result, counts)
}

// rayon is a dependency of the CPU backends' kernels only.
#[cfg(all(test, any(feature = "flex", feature = "ndarray", feature = "tch")))]
mod tests {
    use super::*;

    /// On flex and ndarray the work runs on a worker of rayon's global pool, elsewhere on the
    /// calling thread; the paths it counts reach the caller's count either way.
    #[test]
    fn runs_on_a_worker_where_the_kernels_run() {
        for (name, device) in positional::testing::devices() {
            let on_worker = on_kernel_threads(&device, || {
                crate::paths::record(|counts| &mut counts.decode);
                rayon::current_thread_index().is_some()
            });
            let on_cpu_kernels = matches!(name, "flex" | "ndarray");
            assert_eq!(on_worker, on_cpu_kernels, "{name}");
            assert_eq!(crate::paths::take_path_counts().decode, 1, "{name}");
        }
    }

    /// A job run in the middle of another on the same thread (a worker that stole it) returns
    /// its own counts, and the interrupted job's count goes on where it was.
    #[test]
    fn a_stolen_job_counts_apart_from_the_one_it_interrupts() {
        crate::paths::take_path_counts();
        crate::paths::record(|counts| &mut counts.decode);
        let ((), stolen) = counted(|| crate::paths::record(|counts| &mut counts.fused));
        crate::paths::record(|counts| &mut counts.decode);
        let interrupted = crate::paths::take_path_counts();
        assert_eq!((stolen.decode, stolen.fused), (0, 1));
        assert_eq!((interrupted.decode, interrupted.fused), (2, 0));
    }
}
