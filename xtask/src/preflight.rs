//! What a machine needs before the first build, checked before anything is compiled: a build that
//! fails after half an hour for want of a C++ compiler tells the user too late.
//!
//! On Debian (and Ubuntu) each missing piece is one package; the error names the exact
//! `apt-get install` line. `.ci/run` runs that line unattended.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::bail;

/// One thing the build or the tests need, and the Debian package that provides it.
struct Requirement {
    what: &'static str,
    packages: &'static [&'static str],
    present: fn() -> bool,
}

const REQUIREMENTS: &[Requirement] = &[
    Requirement {
        what: "a C++ compiler (torch-sys compiles its bindings to LibTorch)",
        packages: &["g++"],
        present: has_cxx_compiler,
    },
    Requirement {
        what: "Python 3 with venv and ensurepip (the PyTorch venv behind the LibTorch backend)",
        packages: &["python3-venv"],
        present: has_python_venv,
    },
    Requirement {
        what: "the Vulkan loader and a Vulkan driver (WGPU; without a GPU, Mesa's lavapipe)",
        packages: &["libvulkan1", "mesa-vulkan-drivers"],
        present: has_vulkan,
    },
];

/// Stops with the command that installs what is missing, before any build starts.
pub fn check() -> anyhow::Result<()> {
    let missing: Vec<&Requirement> = REQUIREMENTS.iter().filter(|r| !(r.present)()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut message = String::from("this machine lacks what the build and the tests need:\n");
    for requirement in &missing {
        message.push_str(&format!("  - {}\n", requirement.what));
    }
    let packages: Vec<&str> = missing
        .iter()
        .flat_map(|r| r.packages.iter().copied())
        .collect();
    let sudo = if is_root() { "" } else { "sudo " };
    message.push_str(&format!(
        "on Debian or Ubuntu, install them with:\n  {sudo}apt-get update && {sudo}apt-get install -y {}\n\
         (`bash .ci/run` does this unattended, then runs the tests)",
        packages.join(" ")
    ));
    bail!(message)
}

/// Runs `program args`, quietly; true when it exits 0.
fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

/// The `cc` crate compiles torch-sys' C++ with `$CXX`, else `c++`.
fn has_cxx_compiler() -> bool {
    let compiler = std::env::var("CXX").unwrap_or_else(|_| "c++".to_owned());
    succeeds(&compiler, &["--version"])
}

/// Debian's `python3` has `venv` but not `ensurepip` until `python3-venv` is installed, and then
/// `python3 -m venv` fails half-way. The venv is made with the first Python that has both.
fn has_python_venv() -> bool {
    crate::libtorch::find_system_python().is_ok()
}

/// The loader (`libvulkan.so.1`) and at least one installable client driver (ICD) manifest.
fn has_vulkan() -> bool {
    let has_icd = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"]
        .iter()
        .any(|dir| {
            std::fs::read_dir(dir)
                .is_ok_and(|entries| entries.filter_map(Result::ok).next().is_some())
        });
    let has_loader = [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ]
    .iter()
    .any(|dir| Path::new(dir).join("libvulkan.so.1").exists());
    has_icd && has_loader
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}
