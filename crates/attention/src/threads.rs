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
//!
//! The other workers, though, slept between kernels: rayon puts an idle worker to sleep after a
//! few rounds of yielding, and a step's serial stretches (norms, the attention of a short
//! context, the additions) last that long, so most kernels woke their helpers through the OS
//! first (157 context switches per token of SmolLM2 on two cores). While a step runs, the other
//! workers now wait for its kernels' tasks by polling rayon's queues ([`keep_stealing`]), as
//! OpenMP's threads (PyTorch's) and llama.cpp's spin between a graph's operations.

#[cfg(any(feature = "flex", feature = "ndarray"))]
use std::sync::atomic::{AtomicBool, Ordering};

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
///
/// Until `work` returns (or panics), rayon's other workers poll for its kernels' tasks and keep
/// their cores busy, as OpenMP's threads do between operations: keep `work` to the kernels.
pub fn on_kernel_threads<R: Send>(device: &Device, work: impl FnOnce() -> R + Send) -> R {
    if !crate::kernels::flex_or_ndarray(device.as_dispatch()) {
        return work();
    }
    #[cfg(any(feature = "flex", feature = "ndarray"))]
    {
        let done = AtomicBool::new(false);
        let (result, counts) = rayon::scope(|scope| {
            // Set however `work` ends, a panic included: the scope waits for the pollers.
            let _done = SetOnDrop(&done);
            let owner = rayon::current_thread_index();
            for _ in 1..rayon::current_num_threads() {
                let done = &done;
                scope.spawn(move |_| keep_stealing(done, owner));
            }
            counted(work)
        });
        crate::paths::add(counts);
        result
    }
    #[cfg(not(any(feature = "flex", feature = "ndarray")))]
    work()
}

/// Runs rayon's pending jobs on this worker as they come, until `done`: a worker that polls
/// takes a kernel's tasks as soon as they are pushed, where a sleeping one is woken by the OS
/// first. Every 64 polls that find nothing it yields to the OS, which runs any other thread that
/// waits for the core.
///
/// Rayon's other workers take these jobs from the front of the owner's queue, the oldest job
/// first. The worker that runs `work` (`owner`) may come to this job itself, while it waits on
/// its own tasks or once `work` is done; polling there would wait on the `work` beneath it on
/// the same stack, so it returns at once.
#[cfg(any(feature = "flex", feature = "ndarray"))]
fn keep_stealing(done: &AtomicBool, owner: Option<usize>) {
    if rayon::current_thread_index() == owner {
        return;
    }
    let mut idle = 0u32;
    while !done.load(Ordering::Acquire) {
        if rayon::yield_now() == Some(rayon::Yield::Executed) {
            continue;
        }
        idle = idle.wrapping_add(1);
        match idle % 64 {
            0 => std::thread::yield_now(),
            _ => std::hint::spin_loop(),
        }
    }
}

/// Sets its flag when dropped.
#[cfg(any(feature = "flex", feature = "ndarray"))]
struct SetOnDrop<'a>(&'a AtomicBool);

#[cfg(any(feature = "flex", feature = "ndarray"))]
impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
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

    /// Callers side by side, each with kernels whose tasks the workers share (and whose pollers
    /// may take the other callers' work): every one gets its own result, and a panic in `work`
    /// reaches its caller instead of leaving the pollers waiting.
    #[test]
    fn callers_side_by_side_and_a_panic_return() {
        use rayon::prelude::*;
        for (name, device) in positional::testing::devices() {
            let sums: Vec<u64> = std::thread::scope(|threads| {
                let callers: Vec<_> = (0..4u64)
                    .map(|caller| {
                        let device = &device;
                        threads.spawn(move || {
                            (0..50)
                                .map(|step| {
                                    on_kernel_threads(device, || {
                                        (0..10_000usize)
                                            .into_par_iter()
                                            .with_max_len(500)
                                            .map(|i| i as u64 * caller + step)
                                            .sum::<u64>()
                                    })
                                })
                                .sum()
                        })
                    })
                    .collect();
                callers.into_iter().map(|c| c.join().unwrap()).collect()
            });
            let expected: Vec<u64> = (0..4u64)
                .map(|caller| {
                    (0..50)
                        .map(|step| (0..10_000u64).map(|i| i * caller + step).sum::<u64>())
                        .sum()
                })
                .collect();
            assert_eq!(sums, expected, "{name}");

            let panicked = std::panic::catch_unwind(|| {
                on_kernel_threads(&device, || {
                    let halves = rayon::join(|| 1, || 2);
                    if halves == (1, 2) {
                        panic!("the work's own panic");
                    }
                })
            });
            let message = panicked.expect_err(name);
            assert_eq!(
                message.downcast_ref::<&str>(),
                Some(&"the work's own panic"),
                "{name}"
            );
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
