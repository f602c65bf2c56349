//! Training loops that run on any backend, built on the `positional` and `attention` crates.
//!
//! - [`extrapolation`]: the length-extrapolation study, the project's main job
//!   (`cargo run --release -p examples --bin extrapolation`): one small decoder per positional
//!   scheme, trained at one length and measured at 1, 2, 4 and 8 times it, over three seeds
//!   ([`study`] runs it, [`report`] writes its table and plot, [`figures`] the articles'
//!   pictures of the encodings).
//! - [`char_lm`]: a character-level language model on a text file
//!   (`cargo run --release -p examples --bin char-lm -- --text FILE`).
//! - [`context`]: how far past its training length a pretrained RoPE model reads, as trained and
//!   with each RoPE scaling (`cargo run --release -p examples --bin context -- --model PATH`), on
//!   a novel a package ships ([`texts`]); [`context_report`] writes its table and plots.
//!
//! The training loops pick the backend at run time by name ([`device`]), train through Burn's autodiff with
//! Adam ([`training`]) and use data generated in code ([`tasks`]).

pub mod char_lm;
pub mod context;
pub mod context_report;
pub mod decoder;
pub mod device;
pub mod extrapolation;
pub mod figures;
pub mod report;
pub mod study;
pub mod tasks;
pub mod texts;
pub mod training;

/// The process's peak resident memory in MiB (Linux's `VmHWM`), `None` where it cannot be read.
pub fn peak_rss_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
