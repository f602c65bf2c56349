//! Provisions LibTorch for the `tch` backend: `burn-tch` 0.22.1 builds against `tch` 0.22, which
//! needs PyTorch 2.9.0 exactly. libtorch cannot be downloaded on its own here, so it comes from the
//! `torch` wheel in a virtual environment, used through `LIBTORCH_USE_PYTORCH=1`.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use xshell::{Shell, cmd};

/// The PyTorch version `tch` 0.22 is built for.
const TORCH_VERSION: &str = "2.9.0";

/// What the reference scripts import beside torch (transformers and what its GGUF reader and
/// loader need), pinned: the references were made with these.
const REFERENCE_PACKAGES: [&str; 4] = [
    "transformers==5.23.0",
    "gguf==0.19.0",
    "accelerate==1.15.0",
    "numpy==2.4.6",
];

/// llama.cpp's Python binding for `bench real`'s llama.cpp rows, pinned. pip builds it from the
/// source distribution, compiling llama.cpp for this CPU (several minutes, once).
const LLAMA_CPP_PACKAGE: [&str; 1] = ["llama-cpp-python==0.3.36"];

/// llama.cpp's CMake options: each x86 instruction set on where this CPU (and its OS) runs it,
/// rather than `-march=native`. A native build also compiles ggml's AMX kernels where the CPU
/// lists AMX, and on this machine's VM, which lists it without enabling the tile registers, the
/// first product died on `tilezero` (SIGILL); AMX stays off.
fn llama_cpp_cmake_args() -> String {
    #[cfg(target_arch = "x86_64")]
    let sets = {
        use std::arch::is_x86_feature_detected as has;
        [
            ("GGML_AVX", has!("avx")),
            ("GGML_AVX2", has!("avx2")),
            ("GGML_FMA", has!("fma")),
            ("GGML_F16C", has!("f16c")),
            ("GGML_BMI2", has!("bmi2")),
            ("GGML_AVX512", has!("avx512f")),
            ("GGML_AVX512_VBMI", has!("avx512vbmi")),
            ("GGML_AVX512_VNNI", has!("avx512vnni")),
            ("GGML_AVX512_BF16", has!("avx512bf16")),
        ]
    };
    #[cfg(not(target_arch = "x86_64"))]
    let sets: [(&str, bool); 0] = [];
    let mut args = vec!["-DGGML_NATIVE=OFF".to_owned()];
    args.extend(
        sets.iter()
            .map(|(option, on)| format!("-D{option}={}", if *on { "ON" } else { "OFF" })),
    );
    args.join(" ")
}

/// A ready virtual environment with `torch` installed.
pub struct TorchVenv {
    bin: PathBuf,
    lib: PathBuf,
}

impl TorchVenv {
    /// The venv at `POSITIONAL_TORCH_VENV`, else `<target>/torch-venv`, created and filled on
    /// first use (about 3 GB of wheels; a few minutes).
    pub fn provision(sh: &Shell) -> anyhow::Result<Self> {
        let venv = crate::env_path("POSITIONAL_TORCH_VENV")?
            .unwrap_or_else(|| crate::target_dir().join("torch-venv"));
        let python = venv.join("bin/python3");
        if !has_torch(sh, &python) {
            eprintln!(
                "xtask: installing torch=={TORCH_VERSION} into {} (first run only)",
                venv.display()
            );
            let system_python = find_system_python()?;
            cmd!(sh, "{system_python} -m venv {venv}")
                .run()
                .context("creating the PyTorch venv (on Debian: apt-get install python3-venv)")?;
            cmd!(
                sh,
                "{python} -m pip install --quiet --disable-pip-version-check torch=={TORCH_VERSION}"
            )
            .run()
            .context("installing torch into the venv")?;
            if !has_torch(sh, &python) {
                bail!(
                    "torch {TORCH_VERSION} is still not importable from {}",
                    python.display()
                );
            }
        }
        let torch_dir = cmd!(
            sh,
            "{python} -c 'import os, torch; print(os.path.dirname(torch.__file__))'"
        )
        .quiet()
        .read()?;
        Ok(Self {
            bin: venv.join("bin"),
            lib: Path::new(torch_dir.trim()).join("lib"),
        })
    }

    /// The venv's Python interpreter (`bin/python3`), with pip.
    pub fn python(&self) -> PathBuf {
        self.bin.join("python3")
    }

    /// Installs [`REFERENCE_PACKAGES`] into the venv unless they are there, saying so.
    pub fn ensure_reference_packages(&self, sh: &Shell) -> anyhow::Result<()> {
        self.ensure_packages(sh, &REFERENCE_PACKAGES, &[], "the reference packages")
    }

    /// Installs [`LLAMA_CPP_PACKAGE`] into the venv unless it is there, saying so, with
    /// llama.cpp's instruction sets chosen from what this CPU runs ([`llama_cpp_cmake_args`]).
    pub fn ensure_llama_cpp(&self, sh: &Shell) -> anyhow::Result<()> {
        let _cmake = sh.push_env("CMAKE_ARGS", llama_cpp_cmake_args());
        // Not a wheel pip cached from another build's options.
        self.ensure_packages(
            sh,
            &LLAMA_CPP_PACKAGE,
            &["--no-cache-dir"],
            "llama-cpp-python (pip compiles llama.cpp: about 20 minutes on 2 cores)",
        )
    }

    /// Installs the pinned `packages` (`name==version`, with pip's `options`) unless the venv
    /// has those versions.
    fn ensure_packages(
        &self,
        sh: &Shell,
        packages: &[&str],
        options: &[&str],
        what: &str,
    ) -> anyhow::Result<()> {
        let python = self.python();
        let check = packages
            .iter()
            .map(|requirement| {
                let (name, version) = requirement.split_once("==").expect("pinned");
                format!("importlib.metadata.version('{name}') == '{version}'")
            })
            .collect::<Vec<_>>()
            .join(" and ");
        let check = format!("import importlib.metadata, sys; sys.exit(not ({check}))");
        if cmd!(sh, "{python} -c {check}")
            .quiet()
            .ignore_stderr()
            .run()
            .is_ok()
        {
            return Ok(());
        }
        eprintln!(
            "xtask: installing {} into the venv (first run only)",
            packages.join(" ")
        );
        cmd!(
            sh,
            "{python} -m pip install --quiet --disable-pip-version-check {options...} {packages...}"
        )
        .run()
        .with_context(|| format!("installing {what} into the venv"))
    }

    /// Sets what building and running against libtorch needs, for as long as the guards live.
    pub fn activate<'a>(&self, sh: &'a Shell) -> Vec<xshell::PushEnv<'a>> {
        let join = |first: &Path, rest: Option<std::ffi::OsString>| {
            let mut paths = vec![first.to_owned()];
            paths.extend(rest.iter().flat_map(std::env::split_paths));
            std::env::join_paths(paths).expect("paths without separators")
        };
        vec![
            sh.push_env("LIBTORCH_USE_PYTORCH", "1"),
            sh.push_env("PATH", join(&self.bin, sh.var_os("PATH"))),
            sh.push_env(
                "LD_LIBRARY_PATH",
                join(&self.lib, sh.var_os("LD_LIBRARY_PATH")),
            ),
        ]
    }
}

fn has_torch(sh: &Shell, python: &Path) -> bool {
    let check = format!(
        "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '{TORCH_VERSION}')"
    );
    python.exists()
        && cmd!(sh, "{python} -c {check}")
            .quiet()
            .ignore_stderr()
            .run()
            .is_ok()
}

/// The first Python 3 that can make a venv with pip in it (`venv` and `ensurepip`: Debian ships
/// the second in `python3-venv`).
pub fn find_system_python() -> anyhow::Result<String> {
    for candidate in ["python3.11", "python3.12", "python3.10", "python3"] {
        let usable = std::process::Command::new(candidate)
            .args(["-c", "import venv, ensurepip"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        if usable {
            return Ok(candidate.to_owned());
        }
    }
    bail!(
        "no Python 3 with the venv and ensurepip modules found (on Debian: apt-get install python3 python3-venv)"
    )
}
