//! The integration tests of `models`, as one binary: each file of `tests/` would be a test binary
//! of its own, linked against every backend, which costs more to build than the tests take to run.

mod common;
mod edge_inputs;
mod families;
mod gguf_checkpoints;
mod gguf_files;
mod gguf_tokenizer;
mod pretrained;
mod untrusted_files;
