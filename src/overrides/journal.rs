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

use super::{OverrideId, Stored};
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
    /// Whether it must be written whole at the next change (missing, first version, or
    /// its last line torn by a crash mid-append).
    rewrite: bool,
}

/// The overrides in `path`; none when the file does not exist yet (first start).
pub fn read(path: &Path) -> Result<Read, FileError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Read {
                overrides: Vec::new(),
                lines: 0,
                rewrite: true,
            })
        }
        Err(source) => {
            return Err(FileError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
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
        });
    };
    if header.tollgate_overrides != VERSION {
        return Err(FileError::Version {
            path: path.to_owned(),
            found: header.tollgate_overrides,
        });
    }
    replay(path, &text, corrupt)
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
    })
}

/// The open journal of one gateway.
pub struct Journal {
    path: PathBuf,
    append: Option<File>,
    lines: usize,
    rewrite: bool,
}

impl Journal {
    pub fn new(path: PathBuf, read: &Read) -> Self {
        Self {
            path,
            append: None,
            lines: read.lines,
            rewrite: read.rewrite,
        }
    }

    /// Whether the next change writes the whole file (`live`: the overrides set after it):
    /// it is due for compaction, or the file was replaced or removed under the open
    /// handle (appending would write to what nobody reads).
    pub fn compacts(&self, live: usize) -> bool {
        self.rewrite || self.lines > 2 * live + COMPACT_SLACK || !self.still_ours()
    }

    /// Whether the path still names the file the handle appends to.
    fn still_ours(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let Some(file) = &self.append else {
            return true;
        };
        match (file.metadata(), std::fs::symlink_metadata(&self.path)) {
            (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
            _ => false,
        }
    }

    /// Records `changes`: appended, or with `all` (the overrides set after them, given
    /// when [`Journal::compacts`]) the file written whole.
    pub fn record(&mut self, changes: &[Change], all: Option<&[Stored]>) -> Result<(), FileError> {
        if let Some(all) = all {
            return self.compact(all);
        }
        let mut text = Vec::with_capacity(256 * changes.len());
        for change in changes {
            serde_json::to_writer(&mut text, change)
                .map_err(std::io::Error::other)
                .map_err(|e| self.failed(e))?;
            text.push(b'\n');
        }
        if self.append.is_none() {
            self.append = Some(crate::files::append_to(&self.path)?);
        }
        let written = self.append.as_mut().map(|f| {
            f.write_all(&text)?;
            f.sync_data()
        });
        if let Some(Err(e)) = written {
            // Whatever part of the lines reached the file, the next change writes it whole.
            self.append = None;
            self.rewrite = true;
            return Err(self.failed(e));
        }
        self.lines += changes.len();
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
mod tests {
    use super::*;

    fn one(key: &str) -> Stored {
        Stored {
            id: OverrideId {
                policy: "tenant".into(),
                key: vec![key.into()],
            },
            set: crate::config::override_spec::OverrideSpec {
                limit: Some(1000),
                period: Some("1m".into()),
                ..Default::default()
            },
            expires_at_ms: Some(1_800_000_000_000),
        }
    }

    #[test]
    fn appends_replays_and_compacts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("overrides.json");
        let first = read(&path).unwrap();
        assert!(first.overrides.is_empty());
        let mut journal = Journal::new(path.clone(), &first);
        assert!(journal.compacts(1), "a missing file is written whole");
        journal
            .record(&[Change::Put(one("a"))], Some(&[one("a")]))
            .unwrap();
        for k in ["b", "c"] {
            assert!(!journal.compacts(2));
            journal.record(&[Change::Put(one(k))], None).unwrap();
        }
        journal.record(&[Change::Del(one("b").id)], None).unwrap();
        assert_eq!(read(&path).unwrap().overrides, vec![one("a"), one("c")]);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 5);
        journal.lines = 2 * 2 + COMPACT_SLACK + 1;
        assert!(journal.compacts(2));
        journal.record(&[], Some(&[one("a"), one("c")])).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 3);
        journal.record(&[Change::Put(one("d"))], None).unwrap();
        assert_eq!(
            read(&path).unwrap().overrides.len(),
            3,
            "appends go to the new file"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn reads_the_first_versions_file_and_drops_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("overrides.json");
        let v1 = serde_json::json!({"version": 1, "overrides": [one("a")]});
        std::fs::write(&path, v1.to_string()).unwrap();
        let r = read(&path).unwrap();
        assert_eq!(r.overrides, vec![one("a")]);
        assert!(r.rewrite);
        let line = serde_json::to_string(&Change::Put(one("a"))).unwrap();
        std::fs::write(
            &path,
            format!("{{\"tollgate_overrides\":2}}\n{line}\n{{\"put\":{{\"pol"),
        )
        .unwrap();
        let r = read(&path).unwrap();
        assert_eq!(r.overrides, vec![one("a")]);
        assert!(r.rewrite, "rewritten whole at the next change");
    }

    #[test]
    fn a_corrupt_file_is_located() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("overrides.json");
        std::fs::write(
            &path,
            "{\"version\": 1,\n \"overrides\": [ {\"policy\": 3} ]}",
        )
        .unwrap();
        assert!(matches!(
            read(&path),
            Err(FileError::Corrupt { line: 2, .. })
        ));
        std::fs::write(&path, "{\"version\": 9, \"overrides\": []}").unwrap();
        assert!(matches!(
            read(&path),
            Err(FileError::Version { found: 9, .. })
        ));
        std::fs::write(
            &path,
            "{\"tollgate_overrides\":2}\n{\"put\":3}\n{\"del\":{\"policy\":\"p\",\"key\":[]}}\n",
        )
        .unwrap();
        assert!(matches!(
            read(&path),
            Err(FileError::Corrupt { line: 2, .. })
        ));
        std::fs::write(&path, "{\"tollgate_overrides\":7}\n").unwrap();
        assert!(matches!(
            read(&path),
            Err(FileError::Version { found: 7, .. })
        ));
    }
}
