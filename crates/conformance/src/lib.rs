//! The conformance suite: reads reference cases (format: `README.md` beside this crate) and
//! runs each on one Burn device, comparing every expected field, gradients included; and runs
//! reference checkpoints of real model families (`models/`) through the Hugging Face loaders, and
//! real pretrained models (`embeddings/`, `pretrained/`) as users hold them.
//!
//! `cargo xtask test-backends` runs the `conformance` binary once per backend and prints the
//! matrix; this crate knows nothing of that and only answers "how did case X go on device Y".

pub mod backends;
pub mod case;
pub mod checkpoint;
pub mod embeddings;
pub mod pretrained;
pub mod run;

pub use case::Case;
pub use checkpoint::run_checkpoint;
pub use embeddings::run_embeddings;
pub use pretrained::run_pretrained;
pub use run::{Outcome, run_case};
