//! `[server] overrides_file`: the runtime overrides as a journal, one JSON line per
//! change, so a change costs one appended line (and its sync) however many overrides
//! are set. Once the lines outnumber the overrides by far, the file is compacted: written
//! again, one line per override, through [`crate::files::replace`] (atomic, never through
//! a link, 0600). The first version's file (one JSON document) is still read, and
//! replaced by a journal at the first change.
//!
//! ```text
//! {"tollgate_overrides":2}
//! {"put":{"policy":"tenant","key":["acme"],"set":{"limit":1000,"period":"1m"}}}
//! {"del":{"policy":"tenant","key":["acme"]}}
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::stored::{OverrideId, Stored};
use crate::files::WriteError;

const VERSION: u32 = 2;

/// Lines beyond twice the overrides' number a journal may hold before it is compacted.
const COMPACT_SLACK: usize = 1024;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: not a runtime overrides file: {message}", path.display())]
    Corrupt {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: version {found} is not one this gateway reads (it reads 1 and {VERSION})", path.display())]
    Version { path: PathBuf, found: u32 },
    #[error(transparent)]
    Write(#[from] WriteError),
    #[error("the write task failed: {0}")]
    Task(String),
}

/// The first version's file: one JSON document.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DocumentV1 {
    version: u32,
    overrides: Vec<Stored>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    tollgate_overrides: u32,
}

/// One change, as a line.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    Put(Stored),
    Del(OverrideId),
}

/// What a file held.
pub struct Read {
    pub overrides: Vec<Stored>,
    /// Its lines (0 for a missing file or the first version's).
    lines: usize,
    /// Whether it must be written whole at the next change (missing, empty, first
    /// version, or its last line torn by a crash mid-append).
    rewrite: bool,
    /// The file read, as it was read.
    seen: Option<Seen>,
}

/// Which file the journal last wrote or read at its path, and how long it was then:
/// the gateway is the file's only writer, so a path naming another file, or the file
/// at another length, was removed, replaced or truncated under it, and appending to it
/// would leave a file whose first line is not the header (refused at the next start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    dev: u64,
    ino: u64,
    len: u64,
}

impl Seen {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
        }
    }

    /// The same file, whatever its length.
    fn same_file(&self, other: &Seen) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }
}

/// The overrides in `path`; none when the file does not exist yet (first start).
pub fn read(path: &Path) -> Result<Read, FileError> {
    let unreadable = |source| FileError::Read {
        path: path.to_owned(),
        source,
    };
    let (text, seen) = match read_text(path) {
        Ok(read) => read,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), None),
        Err(source) => return Err(unreadable(source)),
    };
    if text.trim().is_empty() {
        // Missing, or created empty (`touch`): no overrides yet, and the first change
        // writes the header.
        return Ok(Read {
            overrides: Vec::new(),
            lines: 0,
            rewrite: true,
            seen,
        });
    }
    let corrupt = |line: usize, e: serde_json::Error| FileError::Corrupt {
        path: path.to_owned(),
        line: line + e.line().saturating_sub(1),
        column: e.column(),
        message: e.to_string(),
    };
    let first = text.lines().next().unwrap_or("");
    let Ok(header) = serde_json::from_str::<Header>(first) else {
        let doc: DocumentV1 = serde_json::from_str(&text).map_err(|e| corrupt(1, e))?;
        if doc.version != 1 {
            return Err(FileError::Version {
                path: path.to_owned(),
                found: doc.version,
            });
        }
        return Ok(Read {
            overrides: doc.overrides,
            lines: 0,
            rewrite: true,
            seen,
        });
    };
    if header.tollgate_overrides != VERSION {
        return Err(FileError::Version {
            path: path.to_owned(),
            found: header.tollgate_overrides,
        });
    }
    let mut read = replay(path, &text, corrupt)?;
    read.seen = seen;
    Ok(read)
}

/// The file's text and what it was when read (from the handle the text came from). A
/// last line without its end that is not UTF-8 (an append cut inside a character) is a
/// torn line: left out here, and said by `replay` as any torn line is.
fn read_text(path: &Path) -> std::io::Result<(String, Option<Seen>)> {
    use std::io::Read as _;
    let mut file = crate::files::open_own(path)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let seen = file.metadata().ok().map(|meta| Seen {
        len: bytes.len() as u64,
        ..Seen::of(&meta)
    });
    let text = match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let bytes = e.into_bytes();
            let last_line = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |n| n + 1);
            if bytes.ends_with(b"\n") || valid < last_line {
                let at = format!("bytes that are not UTF-8 at offset {valid}");
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, at));
            }
            // The torn line read lossily: still a line without its end, which does not
            // parse, so `replay` drops it.
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    Ok((text, seen))
}

/// The overrides a journal's lines leave set.
fn replay(
    path: &Path,
    text: &str,
    corrupt: impl Fn(usize, serde_json::Error) -> FileError,
) -> Result<Read, FileError> {
    let mut set = BTreeMap::new();
    let mut rewrite = false;
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Change>(line) {
            Ok(Change::Put(s)) => {
                set.insert(s.id.clone(), s);
            }
            Ok(Change::Del(id)) => {
                set.remove(&id);
            }
            // A crash in the middle of an append leaves a last line without its end:
            // the change it held was never answered as made.
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {
                tracing::warn!(
                    file = %path.display(),
                    line = i + 1,
                    "the overrides file ends in a torn line (a write cut short); it is dropped"
                );
                rewrite = true;
            }
            Err(e) => return Err(corrupt(i + 1, e)),
        }
    }
    Ok(Read {
        overrides: set.into_values().collect(),
        lines: lines.len(),
        rewrite,
        seen: None,
    })
}

/// The open journal of one gateway.
pub struct Journal {
    path: PathBuf,
    append: Option<File>,
    lines: usize,
    rewrite: bool,
    /// The file as this journal left it; `None`: not known (the next change writes it
    /// whole).
    seen: Option<Seen>,
}

impl Journal {
    pub fn new(path: PathBuf, read: &Read) -> Self {
        Self {
            path,
            append: None,
            lines: read.lines,
            rewrite: read.rewrite,
            seen: read.seen,
        }
    }

    /// Whether the next change writes the whole file (`live`: the overrides set after it):
    /// it is due for compaction, or the file was removed, replaced or truncated since
    /// this journal last read or wrote it (appending would write to what nobody reads,
    /// or leave a file without its header).
    pub fn compacts(&self, live: usize) -> bool {
        self.rewrite || self.lines > 2 * live + COMPACT_SLACK || !self.still_ours()
    }

    /// Whether a change answered as not written is still not in the file: the next
    /// write writes it whole.
    pub fn behind(&self) -> bool {
        self.rewrite
    }

    /// Whether the path still names the file this journal left, as it left it.
    fn still_ours(&self) -> bool {
        let Some(seen) = self.seen else {
            return false;
        };
        match std::fs::symlink_metadata(&self.path) {
            Ok(named) => named.file_type().is_file() && Seen::of(&named) == seen,
            Err(_) => false,
        }
    }

    /// Records `changes`: appended, or with `all` (the overrides set after them, given
    /// when [`Journal::compacts`]) the file written whole. When it fails, whatever part
    /// of the lines reached the file, the next change writes it whole: a change answered
    /// as not written (a delete above all) must not come back at the next start.
    pub fn record(&mut self, changes: &[Change], all: Option<&[Stored]>) -> Result<(), FileError> {
        if let Some(all) = all {
            let compacted = self.compact(all);
            if compacted.is_err() {
                self.rewrite = true;
            }
            return compacted;
        }
        let appended = self.append(changes);
        if appended.is_err() {
            self.append = None;
            self.rewrite = true;
        }
        appended
    }

    /// Appends `changes` to the file this journal left (never to one put in its place).
    fn append(&mut self, changes: &[Change]) -> Result<(), FileError> {
        let mut text = Vec::with_capacity(256 * changes.len());
        for change in changes {
            serde_json::to_writer(&mut text, change)
                .map_err(std::io::Error::other)
                .map_err(|e| self.failed(e))?;
            text.push(b'\n');
        }
        let file = match self.append.take() {
            Some(file) => file,
            None => {
                let file = crate::files::append_to(&self.path)?;
                let opened = file.metadata().map_err(|e| self.failed(e))?;
                if !self
                    .seen
                    .is_some_and(|seen| seen.same_file(&Seen::of(&opened)))
                {
                    let replaced =
                        std::io::Error::other("the file was replaced while being written");
                    return Err(self.failed(replaced));
                }
                file
            }
        };
        let file = self.append.insert(file);
        let written = file.write_all(&text).and_then(|()| file.sync_data());
        written.map_err(|e| self.failed(e))?;
        self.lines += changes.len();
        if let Some(seen) = &mut self.seen {
            seen.len += text.len() as u64;
        }
        Ok(())
    }

    fn compact(&mut self, all: &[Stored]) -> Result<(), FileError> {
        crate::files::replace(&self.path, |out| {
            serde_json::to_writer(
                &mut *out,
                &Header {
                    tollgate_overrides: VERSION,
                },
            )?;
            out.write_all(b"\n")?;
            for stored in all {
                out.write_all(b"{\"put\":")?;
                serde_json::to_writer(&mut *out, stored)?;
                out.write_all(b"}\n")?;
            }
            Ok(())
        })?;
        // The old file's handle points at what was renamed away.
        self.append = None;
        self.lines = all.len() + 1;
        self.rewrite = false;
        // Not known (the next change writes it whole again) if it cannot be looked at.
        self.seen = std::fs::symlink_metadata(&self.path)
            .ok()
            .map(|meta| Seen::of(&meta));
        Ok(())
    }

    fn failed(&self, source: std::io::Error) -> FileError {
        FileError::Write(WriteError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
