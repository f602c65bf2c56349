//! The long text the context study reads where no one installed it: Jane Austen's novels from
//! Debian's `r-cran-janeaustenr` (R's lazy-load database `Rdata.rdb`), fetched with
//! `apt-get download` and unpacked with `dpkg -x` into `<target>/texts`, so that neither R nor
//! root is needed. Only the package archive is reached, as with every other download here.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use xshell::{Shell, cmd};

/// The database inside the package (and inside `/` once the package is installed).
const JANEAUSTENR_RDB: &str = "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb";

/// The installed database, else the one unpacked under `<target>/texts` (fetched on first use).
pub fn janeaustenr(sh: &Shell) -> anyhow::Result<PathBuf> {
    let installed = Path::new("/").join(JANEAUSTENR_RDB);
    if installed.is_file() {
        return Ok(installed);
    }
    let texts = crate::target_dir().join("texts");
    let root = texts.join("r-cran-janeaustenr");
    let rdb = root.join(JANEAUSTENR_RDB);
    if rdb.is_file() {
        return Ok(rdb);
    }
    eprintln!(
        "xtask: fetching Debian's r-cran-janeaustenr (Jane Austen's novels) into {} (first run \
         only)",
        root.display()
    );
    let download = texts.join("janeaustenr.download");
    let partial = texts.join("janeaustenr.partial");
    for dir in [&download, &partial] {
        if dir.exists() {
            sh.remove_path(dir)?;
        }
    }
    sh.create_dir(&download)?;
    {
        let _dir = sh.push_dir(&download);
        cmd!(sh, "apt-get download r-cran-janeaustenr").run().context(
            "apt-get download r-cran-janeaustenr: the context study's default text is a Debian or \
             Ubuntu package (run `apt-get update` first if apt knows no packages); elsewhere, \
             give the study any UTF-8 text with --text FILE",
        )?;
    }
    let deb = std::fs::read_dir(&download)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|e| e == "deb"))
        .context("apt-get download left no .deb file")?;
    cmd!(sh, "dpkg -x {deb} {partial}")
        .run()
        .with_context(|| format!("unpacking {}", deb.display()))?;
    if !partial.join(JANEAUSTENR_RDB).is_file() {
        bail!("{} holds no {JANEAUSTENR_RDB}", deb.display());
    }
    std::fs::rename(&partial, &root)
        .with_context(|| format!("moving {} to {}", partial.display(), root.display()))?;
    sh.remove_path(&download)?;
    Ok(rdb)
}
