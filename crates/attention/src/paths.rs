//! Which path each attention call takes, counted per thread: what tests read to check that a
//! caller reaches the path it should (a decoding step without padding takes the fused decoding
//! pass, not the masked one).

use std::cell::Cell;

/// How many attention calls took each path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathCounts {
    /// One query over the cache in one pass (`decode_attention`).
    pub decode: usize,
    /// A fused kernel (Burn's attention or the ALiBi kernel): no bias but ALiBi at token indices.
    pub fused: usize,
    /// The tiled pass on the CPU backends (`tiled_attention`): no bias but ALiBi at token
    /// indices, every mask, soft-cap and sink inside.
    pub tiled: usize,
    /// Every score, bias and mask spelled out.
    pub explicit: usize,
    /// Latent attention with every key and value rebuilt from the latents.
    pub latent_expanded: usize,
    /// Latent attention with the expansion folded into the queries and the context.
    pub latent_absorbed: usize,
}

thread_local! {
    static COUNTS: Cell<PathCounts> = Cell::new(PathCounts::default());
}

/// Counts one call.
pub(crate) fn record(path: fn(&mut PathCounts) -> &mut usize) {
    COUNTS.with(|counts| {
        let mut now = counts.get();
        *path(&mut now) += 1;
        counts.set(now);
    });
}

/// The calls this thread made since the last call of this function, which starts the count
/// again.
#[doc(hidden)]
pub fn take_path_counts() -> PathCounts {
    COUNTS.with(Cell::take)
}

/// Adds `counts` to this thread's (the calls another thread made on its behalf).
#[cfg_attr(not(any(feature = "flex", feature = "ndarray")), allow(dead_code))]
pub(crate) fn add(counts: PathCounts) {
    COUNTS.with(|now| {
        let mut sum = now.get();
        sum.decode += counts.decode;
        sum.fused += counts.fused;
        sum.tiled += counts.tiled;
        sum.explicit += counts.explicit;
        sum.latent_expanded += counts.latent_expanded;
        sum.latent_absorbed += counts.latent_absorbed;
        now.set(sum);
    });
}
