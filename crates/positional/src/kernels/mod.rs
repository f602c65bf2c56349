//! The backend kernels of this crate, behind Burn's backend-extension traits: each has a slow,
//! obviously-correct tensor-op reference beside its caller, and tests holding one to the other.
//!
//! - [`rope`]: the RoPE rotation, fused, on flex and ndarray (one pass over rows, AVX2 where the
//!   CPU has it), CubeCL (WGPU, CUDA) and LibTorch, with its gradient.
//! - [`position_rows`]: adding a table's rows to token embeddings in one pass on the CPU backends.
//! - `row_tasks`: splitting rows across the CPU backends' threads.

pub(crate) mod position_rows;
pub(crate) mod rope;
#[cfg(any(feature = "flex", feature = "ndarray", feature = "tch"))]
pub(crate) mod row_tasks;
