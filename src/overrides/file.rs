//! `[server] overrides_file`: the runtime overrides as JSON, replaced atomically (a
//! temporary file beside it, synced, then renamed over it), so a crash mid-write leaves
//! the old file or the new one, never half of one.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Stored;

/// The file's shape; `version` leaves room to change it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OverridesFile {
    version: u32,
    overrides: Vec<Stored>,
}

const VERSION: u32 = 1;

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
    #[error("{}: version {found} is not one this gateway reads (it reads {VERSION})", path.display())]
    Version { path: PathBuf, found: u32 },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the write task failed: {0}")]
    Task(String),
}

/// The overrides in `path`; none when the file does not exist yet (first start).
pub fn read(path: &Path) -> Result<Vec<Stored>, FileError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(FileError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    let file: OverridesFile = serde_json::from_str(&text).map_err(|e| FileError::Corrupt {
        path: path.to_owned(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    if file.version != VERSION {
        return Err(FileError::Version {
            path: path.to_owned(),
            found: file.version,
        });
    }
    Ok(file.overrides)
}

/// Replaces `path` with `overrides`.
pub fn write(path: &Path, overrides: &[Stored]) -> Result<(), FileError> {
    let failed = |source| FileError::Write {
        path: path.to_owned(),
        source,
    };
    let text = serde_json::to_vec_pretty(&OverridesFile {
        version: VERSION,
        overrides: overrides.to_vec(),
    })
    .map_err(|e| failed(std::io::Error::other(e)))?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&text)?;
        f.write_all(b"\n")?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename itself is durable once the folder is synced (best effort: not every
        // platform lets a folder be opened for it).
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::overrides::OverrideId;

    fn one() -> Stored {
        Stored {
            id: OverrideId {
                policy: "tenant".into(),
                key: vec!["acme".into()],
            },
            set: crate::config::compile::OverrideSpec {
                limit: Some(1000),
                period: Some("1m".into()),
                ..Default::default()
            },
            expires_at_ms: Some(1_800_000_000_000),
        }
    }

    #[test]
    fn round_trips_and_a_missing_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("overrides.json");
        assert!(read(&path).unwrap().is_empty());
        write(&path, &[one()]).unwrap();
        assert_eq!(read(&path).unwrap(), vec![one()]);
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
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
        match read(&path) {
            Err(FileError::Corrupt { line: 2, .. }) => {}
            other => panic!("expected a located error, got {other:?}"),
        }
        std::fs::write(&path, "{\"version\": 9, \"overrides\": []}").unwrap();
        assert!(matches!(
            read(&path),
            Err(FileError::Version { found: 9, .. })
        ));
    }
}
