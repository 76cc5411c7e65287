//! Temporary files a killed writer left beside a target, removed at start.

use std::path::Path;

use super::names::{folder_of, is_temp_name};
use super::own::own_uid;

/// How old a temporary file beside a target must be for a start to take it for one a
/// killed writer left: a write takes under a second (a million keys' state, a few hundred
/// milliseconds), so one still being written is never this old.
const LEFT_OVER_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// Removes the temporary files a writer killed mid-write (`kill -9`, a power cut) left
/// beside `path` — each a full copy of a state or overrides file, readable by the gateway's
/// user only, that would otherwise pile up one per crash. Only this gateway's own names
/// (`.NAME.<16 hex digits>.tmp`), regular files its user owns, untouched for ten minutes.
/// Returns how many went. `now`: the wall clock's time (file times are on it).
pub fn sweep_leftovers(path: &Path, now: std::time::SystemTime) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Some(name) = path.file_name() else {
        return 0;
    };
    let Ok(entries) = std::fs::read_dir(folder_of(path)) else {
        return 0;
    };
    let me = own_uid();
    let ours = |entry: &std::fs::DirEntry| {
        if !is_temp_name(&entry.file_name(), name) {
            return false;
        }
        // Not followed: a link of that name is left alone.
        let Ok(meta) = entry.path().symlink_metadata() else {
            return false;
        };
        let old = meta
            .modified()
            .ok()
            .and_then(|m| now.duration_since(m).ok())
            .is_some_and(|age| age >= LEFT_OVER_AFTER);
        meta.file_type().is_file() && me.is_none_or(|me| me == meta.uid()) && old
    };
    entries
        .flatten()
        .filter(|entry| ours(entry) && std::fs::remove_file(entry.path()).is_ok())
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;

    #[test]
    fn a_start_sweeps_only_its_own_old_temporary_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.bin");
        // Now, as the file system tells it (the clock rule keeps the wall clock in clock.rs).
        std::fs::write(dir.path().join("now"), "").unwrap();
        let now = std::fs::metadata(dir.path().join("now"))
            .unwrap()
            .modified()
            .unwrap();
        let made = |name: &str, age_s: u64| {
            let file = dir.path().join(name);
            std::fs::write(&file, "left").unwrap();
            let then = now - std::time::Duration::from_secs(age_s);
            File::options()
                .write(true)
                .open(&file)
                .unwrap()
                .set_modified(then)
                .unwrap();
            file
        };
        let left = made(".state.bin.0123456789abcdef.tmp", 3600);
        let writing = made(".state.bin.fedcba9876543210.tmp", 1);
        let other = made(".other.bin.0123456789abcdef.tmp", 3600);
        let odd = made(".state.bin.not-hex-at-all!.tmp", 3600);
        let target = made("0123456789abcdef", 3600);
        // A link of a swept name, itself old (`touch -h` dates the link, not its target).
        let link = dir.path().join(".state.bin.aaaaaaaaaaaaaaaa.tmp");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let dated = std::process::Command::new("touch")
            .args(["-h", "-d", "2 hours ago"])
            .arg(&link)
            .status()
            .unwrap();
        assert!(dated.success());
        assert_eq!(sweep_leftovers(&path, now), 1);
        assert!(!left.exists(), "a killed writer's file goes");
        for kept in [&writing, &other, &odd, &target] {
            assert!(kept.exists(), "{} is kept", kept.display());
        }
        assert!(link.symlink_metadata().is_ok(), "a link is left alone");
        assert_eq!(sweep_leftovers(&path, now), 0);
    }
}
