//! Files the gateway writes — runtime overrides, the ready file, state files — written so
//! that no local account can turn them against it or read them: never through a symbolic
//! link, readable by the gateway's user alone (0600), and never half-written (an exclusive,
//! unpredictable temporary name beside the target, synced, then renamed over it); and
//! read back only when they are regular files no other account wrote.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

mod leftovers;
mod names;
mod own;

pub use leftovers::sweep_leftovers;
use names::{folder_of, temp_name};
pub use own::open_own;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{} is a symbolic link: tollgate writes no file through a link (name the file itself)", .0.display())]
    Link(PathBuf),
    #[error("cannot write {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// Only the gateway's user reads what it writes.
const MODE: u32 = 0o600;

/// Replaces `path` with what `contents` writes: atomically, never through a link.
pub fn replace(
    path: &Path,
    contents: impl FnOnce(&mut BufWriter<&mut File>) -> io::Result<()>,
) -> Result<(), WriteError> {
    refuse_link(path)?;
    let failed = |source| WriteError::Io {
        path: path.to_owned(),
        source,
    };
    let (tmp, mut file) = create_beside(path).map_err(failed)?;
    let written = (|| {
        let mut out = BufWriter::new(&mut file);
        contents(&mut out)?;
        out.flush()?;
        drop(out);
        file.sync_all()?;
        std::fs::rename(&tmp, path)?;
        sync_folder(path);
        Ok(())
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(failed)
}

/// The existing file `path` opened to append to, never through a link. Never created:
/// a file appended to from nothing would lack whatever [`replace`] starts it with.
pub fn append_to(path: &Path) -> Result<File, WriteError> {
    refuse_link(path)?;
    OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            // A link planted between the check and the open.
            Some(libc::ELOOP) => WriteError::Link(path.to_owned()),
            _ => WriteError::Io {
                path: path.to_owned(),
                source,
            },
        })
}

/// Whether the gateway can write beside `path` (a state file it writes every few
/// seconds): a temporary file is made there and removed. Refused at start rather than
/// found months later, when the next start has nothing to restore.
pub fn check_writable(path: &Path) -> Result<(), WriteError> {
    refuse_link(path)?;
    let (tmp, file) = create_beside(path).map_err(|source| WriteError::Io {
        path: path.to_owned(),
        source,
    })?;
    drop(file);
    let _ = std::fs::remove_file(tmp);
    Ok(())
}

/// A target that is a symbolic link is refused: whoever could plant it would choose
/// which file the gateway overwrites. (Checked at start too, so a gateway never starts
/// with a file setting it will refuse to write.)
pub fn refuse_link(path: &Path) -> Result<(), WriteError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(WriteError::Link(path.to_owned())),
        _ => Ok(()),
    }
}

/// A new file beside `path` under a name nobody can guess, created exclusively (an
/// existing file or link of that name is never opened).
fn create_beside(path: &Path) -> io::Result<(PathBuf, File)> {
    let folder = folder_of(path);
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
    let mut last = None;
    for _ in 0..4 {
        let tmp = folder.join(temp_name(name, &crate::random::suffix()));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(MODE)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)
        {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no temporary name was free")))
}

/// The rename is durable once the folder is synced (best effort: not every platform lets
/// a folder be opened for it).
fn sync_folder(path: &Path) {
    if let Ok(d) = File::open(folder_of(path)) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn replaces_atomically_with_mode_0600_and_leaves_nothing_beside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        replace(&path, |out| out.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        let failed = replace(&path, |_| Err(io::Error::other("disk full")));
        assert!(matches!(failed, Err(WriteError::Io { .. })));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new", "kept");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn never_writes_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let path = dir.path().join("overrides.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        let e = replace(&path, |out| out.write_all(b"x")).unwrap_err();
        assert!(matches!(e, WriteError::Link(_)), "{e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let e = append_to(&path).unwrap_err();
        assert!(matches!(e, WriteError::Link(_)), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn a_folder_it_cannot_write_in_is_found_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        check_writable(&path).unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "nothing left"
        );
        let gone = dir.path().join("no-such-folder").join("state");
        assert!(matches!(check_writable(&gone), Err(WriteError::Io { .. })));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(matches!(check_writable(&link), Err(WriteError::Link(_))));
    }

    #[test]
    fn appends_to_a_file_it_wrote_and_never_creates_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal");
        assert!(matches!(append_to(&path), Err(WriteError::Io { .. })));
        assert!(!path.exists(), "not created");
        replace(&path, |out| out.write_all(b"head\n")).unwrap();
        append_to(&path).unwrap().write_all(b"a\n").unwrap();
        append_to(&path).unwrap().write_all(b"b\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "head\na\nb\n");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
