//! Reading back a file the gateway wrote: only a regular file, reached without a link,
//! that its own user wrote and no other account may write.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Opens `path` to read back what the gateway wrote there (its state file, its overrides
/// file), refusing what it cannot trust: a symbolic link, anything but a regular file (a
/// FIFO would hold the start forever, a device would be read without end), and a file
/// with content that another user owns or that others may write (a local account could
/// forge limits, debts or the key hasher's seeds). An empty file carries nothing and is
/// read whoever made it (`touch` makes one). `NotFound` passes through.
pub fn open_own(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::MetadataExt;
    let refused = |kind, why: String| Err(io::Error::new(kind, why));
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => io::Error::new(
                io::ErrorKind::InvalidInput,
                "it is a symbolic link: tollgate reads back no file through a link (name the file itself)",
            ),
            _ => e,
        })?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return refused(
            io::ErrorKind::InvalidInput,
            "it is not a regular file".to_owned(),
        );
    }
    if meta.len() == 0 {
        return Ok(file);
    }
    if let Some(me) = own_uid().filter(|&me| me != meta.uid()) {
        return refused(
            io::ErrorKind::PermissionDenied,
            format!("it is owned by uid {}, not by the gateway's user (uid {me}): another account could have written it; remove it, or chown it to the gateway's user", meta.uid()),
        );
    }
    if meta.mode() & 0o022 != 0 {
        return refused(
            io::ErrorKind::PermissionDenied,
            format!(
                "other users may write it (mode {:o}): chmod go-w it",
                meta.mode() & 0o777
            ),
        );
    }
    Ok(file)
}

/// The user this process runs as (its effective uid), where `/proc` tells. Read from
/// `/proc/self/status`, not from the owner of `/proc/self`: a process that gained
/// capabilities at exec (`setcap cap_net_bind_service` to bind port 80) is not dumpable,
/// and its `/proc/<pid>` is then owned by root — the gateway would refuse its own files.
pub(super) fn own_uid() -> Option<u32> {
    effective_uid(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// The effective uid in a `/proc/<pid>/status` text: the second of its `Uid:` line's
/// four (real, effective, saved, filesystem).
fn effective_uid(status: &str) -> Option<u32> {
    let ids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
    ids.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::super::replace;
    use super::*;
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn reads_back_only_its_own_regular_files() {
        use std::io::Read as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state");
        replace(&path, |out| out.write_all(b"ours")).unwrap();
        let mut text = String::new();
        open_own(&path).unwrap().read_to_string(&mut text).unwrap();
        assert_eq!(text, "ours");
        let refused = |p: &Path| open_own(p).expect_err("refused").to_string();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(refused(&path).contains("other users may write it (mode 666)"));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(refused(&link).contains("symbolic link"));
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        assert!(refused(&fifo).contains("not a regular file"));
        // Empty (`touch`): nothing to trust, whatever its mode.
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "").unwrap();
        std::fs::set_permissions(&empty, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(open_own(&empty).is_ok());
        let missing = open_own(&dir.path().join("missing")).expect_err("missing");
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn the_effective_uid_is_the_status_files_second() {
        let status = "Name:\ttollgate\nUid:\t1000\t997\t997\t997\nGid:\t1000\t1000\t1000\t1000\n";
        assert_eq!(effective_uid(status), Some(997));
        assert_eq!(effective_uid("Name:\tx\n"), None);
        let me = own_uid().expect("Linux has /proc/self/status");
        let made = tempfile::tempfile().unwrap().metadata().unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(me, made.uid(), "a file this process makes is its user's");
    }
}
