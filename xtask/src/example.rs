//! `cargo xtask example NAME [ARGS]...`: runs an example binary (`extrapolation`, `char-lm`) from
//! the build `test-backends` makes, which holds every backend, with LibTorch's environment set, so
//! that `--device tch` and `--device wgpu` work as well as the CPU ones.

use anyhow::Context;
use xshell::{Shell, cmd};

use crate::libtorch::TorchVenv;
use crate::target_dir;
use crate::test_backends;

pub fn run(sh: &Shell, args: &[String]) -> anyhow::Result<()> {
    let (name, rest) = args
        .split_first()
        .context("usage: cargo xtask example extrapolation|char-lm [ARGS]...")?;
    let torch = TorchVenv::provision(sh)?;
    let _env = torch.activate(sh);
    // The test build, so that nothing is compiled twice.
    test_backends::build(sh)?;
    let binary = target_dir().join("release").join(name);
    // Relative paths in ARGS mean what they meant where the user typed the command.
    let _dir = sh.push_dir(std::env::current_dir()?);
    cmd!(sh, "{binary} {rest...}").run()?;
    Ok(())
}
