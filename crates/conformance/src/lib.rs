//! The conformance suite: reads reference cases (format: `../shared/conformance/SCHEMA.md`) and
//! runs each on one Burn device, comparing every expected field, gradients included.
//!
//! `cargo xtask test-backends` runs the `conformance` binary once per backend and prints the
//! matrix; this crate knows nothing of that and only answers "how did case X go on device Y".

pub mod backends;
pub mod case;
pub mod run;

pub use case::Case;
pub use run::{Outcome, run_case};
