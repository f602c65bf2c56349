//! Long public-domain texts that packages ship, so that nothing is downloaded at run time.
//!
//! Jane Austen's six novels come in the R data package `janeaustenr`, which Debian and Ubuntu
//! ship as `r-cran-janeaustenr`: one character vector per novel, one element per printed line,
//! in R's lazy-load database `data/Rdata.rdb`. That file is a run of records, each a 4-byte
//! big-endian length followed by a zlib stream of one object in R's XDR serialization format
//! (R Internals, "Serialization formats"); this module reads the character vectors and nothing
//! else. Any UTF-8 text file serves as well.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};
use flate2::read::ZlibDecoder;

/// Where `r-cran-janeaustenr` (or R's `install.packages("janeaustenr")`) puts the database.
pub const JANEAUSTENR_RDB: [&str; 2] = [
    "/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb",
    "/usr/local/lib/R/site-library/janeaustenr/data/Rdata.rdb",
];

/// How to get the novels without installing R, for the error that finds none.
pub const JANEAUSTENR_HELP: &str = "install Debian's or Ubuntu's r-cran-janeaustenr, or, \
    without R: `apt-get download r-cran-janeaustenr && dpkg -x r-cran-janeaustenr_*.deb jane` \
    and pass --text jane/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb; or pass any UTF-8 \
    text file with --text";

/// A text to read, with the name reports give it.
#[derive(Debug, Clone, PartialEq)]
pub struct Text {
    /// The novel's title, or the file's name.
    pub name: String,
    /// Paragraphs separated by a blank line, each on one line.
    pub body: String,
}

/// The text at `path` (janeaustenr's `Rdata.rdb`, from which `novel` is taken by its title, or a
/// UTF-8 file), or, with no path, `novel` from the first janeaustenr database installed.
pub fn load(path: Option<&Path>, novel: &str) -> anyhow::Result<Text> {
    let path = match path {
        Some(path) => path.to_owned(),
        None => JANEAUSTENR_RDB
            .iter()
            .map(PathBuf::from)
            .find(|path| path.is_file())
            .with_context(|| {
                format!("no text given and janeaustenr is not installed: {JANEAUSTENR_HELP}")
            })?,
    };
    if path.extension().is_some_and(|e| e == "rdb") {
        let novels = janeausten_novels(&path)?;
        let titles: Vec<&str> = novels.iter().map(|n| n.name.as_str()).collect();
        return novels
            .iter()
            .find(|n| n.name.eq_ignore_ascii_case(novel))
            .cloned()
            .with_context(|| format!("{} holds {titles:?}, not {novel:?}", path.display()));
    }
    let body = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {} as UTF-8 text", path.display()))?;
    let name = path
        .file_stem()
        .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
    Ok(Text { name, body })
}

/// Every novel in janeaustenr's `Rdata.rdb`, named by its first line (its title).
pub fn janeausten_novels(path: &Path) -> anyhow::Result<Vec<Text>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut novels = Vec::new();
    let mut rest = bytes.as_slice();
    while !rest.is_empty() {
        ensure!(rest.len() > 4, "{}: a record is cut short", path.display());
        let length = u32::from_be_bytes(rest[..4].try_into()?) as usize;
        let mut decoder = ZlibDecoder::new(&rest[4..]);
        let mut object = Vec::with_capacity(length);
        decoder
            .read_to_end(&mut object)
            .with_context(|| format!("{}: a record is not a zlib stream", path.display()))?;
        ensure!(
            object.len() == length,
            "{}: a record holds {} bytes, its header says {length}",
            path.display(),
            object.len()
        );
        rest = &rest[4 + decoder.total_in() as usize..];
        let lines = character_vector(&object)
            .with_context(|| format!("{}: reading an R object", path.display()))?;
        if let Some(text) = lines.map(paragraphs) {
            let name = text.lines().next().unwrap_or_default().trim().to_owned();
            novels.push(Text { name, body: text });
        }
    }
    ensure!(
        !novels.is_empty(),
        "{} holds no character vector",
        path.display()
    );
    Ok(novels)
}

/// The strings of one serialized R object, `None` when it is not a character vector.
///
/// The stream: `X\n`, the format version (3), the writer's and the minimal reader's R versions,
/// the native encoding (version 3 only); then the object: a 32-bit header whose low byte is its
/// type (16: `STRSXP`), a length, and per element a `CHARSXP` header (type 9) and a byte
/// length, -1 for `NA`. All integers big-endian.
fn character_vector(object: &[u8]) -> anyhow::Result<Option<Vec<String>>> {
    let mut reader = Xdr { bytes: object };
    ensure!(reader.take(2)? == b"X\n", "not R's XDR serialization");
    let version = reader.int()?;
    reader.take(8)?; // the R versions that wrote it and that can read it
    if version == 3 {
        let encoding_length = reader.length()?;
        reader.take(encoding_length)?;
    }
    const STRSXP: i32 = 16;
    const CHARSXP: i32 = 9;
    if reader.int()? & 0xff != STRSXP {
        return Ok(None);
    }
    let count = reader.length()?;
    let mut strings = Vec::with_capacity(count);
    for _ in 0..count {
        let kind = reader.int()? & 0xff;
        if kind != CHARSXP {
            bail!("element of type {kind} in a character vector");
        }
        let length = reader.int()?;
        strings.push(match length {
            -1 => String::new(),
            length => String::from_utf8_lossy(reader.take(usize::try_from(length)?)?).into_owned(),
        });
    }
    Ok(Some(strings))
}

/// Big-endian reads off a byte slice.
struct Xdr<'a> {
    bytes: &'a [u8],
}

impl<'a> Xdr<'a> {
    fn take(&mut self, n: usize) -> anyhow::Result<&'a [u8]> {
        ensure!(self.bytes.len() >= n, "the object is cut short");
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    fn int(&mut self) -> anyhow::Result<i32> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into()?))
    }

    fn length(&mut self) -> anyhow::Result<usize> {
        Ok(usize::try_from(self.int()?)?)
    }
}

/// A book's printed lines as paragraphs: the lines of a paragraph joined by spaces, paragraphs
/// separated by one blank line (the printed line breaks are the typesetter's, not the author's).
pub fn paragraphs(lines: Vec<String>) -> String {
    let mut text = String::new();
    let mut paragraph = Vec::new();
    for line in lines.iter().map(|line| line.trim()) {
        if !line.is_empty() {
            paragraph.push(line);
            continue;
        }
        if !paragraph.is_empty() {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&paragraph.join(" "));
            paragraph.clear();
        }
    }
    if !paragraph.is_empty() {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&paragraph.join(" "));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::ZlibEncoder;
    use std::io::Write;

    /// One record as R writes it: a character vector with an `NA`, serialized (version 3) and
    /// compressed.
    fn record(lines: &[Option<&str>]) -> Vec<u8> {
        let mut object = b"X\n".to_vec();
        for int in [3i32, 0x0004_0201, 0x0003_0500, 5] {
            object.extend(int.to_be_bytes());
        }
        object.extend(b"UTF-8");
        object.extend(16i32.to_be_bytes());
        object.extend((lines.len() as i32).to_be_bytes());
        for line in lines {
            object.extend(0x0004_0009i32.to_be_bytes());
            match line {
                Some(line) => {
                    object.extend((line.len() as i32).to_be_bytes());
                    object.extend(line.as_bytes());
                }
                None => object.extend((-1i32).to_be_bytes()),
            }
        }
        let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(&object).unwrap();
        let mut bytes = (object.len() as u32).to_be_bytes().to_vec();
        bytes.extend(encoder.finish().unwrap());
        bytes
    }

    #[test]
    fn reads_each_novel_of_a_database_as_paragraphs() {
        let mut database = record(&[
            Some("EMMA"),
            Some(""),
            Some("Emma Woodhouse, handsome,"),
            Some("clever, and rich"),
        ]);
        database.extend(record(&[
            Some("PERSUASION"),
            None,
            Some("Sir Walter Elliot"),
            Some(""),
            Some(""),
        ]));
        let path = std::env::temp_dir().join(format!("texts-test-{}.rdb", std::process::id()));
        std::fs::write(&path, &database).unwrap();
        let novels = janeausten_novels(&path).unwrap();
        assert_eq!(
            novels,
            [
                Text {
                    name: "EMMA".into(),
                    body: "EMMA\n\nEmma Woodhouse, handsome, clever, and rich".into()
                },
                Text {
                    name: "PERSUASION".into(),
                    body: "PERSUASION\n\nSir Walter Elliot".into()
                },
            ]
        );
        assert_eq!(load(Some(&path), "persuasion").unwrap(), novels[1]);
        let error = load(Some(&path), "Mansfield Park").unwrap_err().to_string();
        assert!(
            error.contains("EMMA") && error.contains("Mansfield Park"),
            "{error}"
        );
        std::fs::write(&path, &database[..database.len() - 3]).unwrap();
        assert!(janeausten_novels(&path).is_err());
        std::fs::remove_file(path).unwrap();
    }
}
