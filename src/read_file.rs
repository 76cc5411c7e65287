//! Files the gateway reads at a start or a reload — the config, its secret files, TLS
//! keys and certificates, envoyproxy/ratelimit's YAML — read so that what sits at the
//! path cannot hang or swamp the reload: only a regular file (followed through links, as
//! a Kubernetes ConfigMap's are), opened without blocking (a FIFO put in its place would
//! otherwise hold the reload, and with it the shutdown, until someone writes to it), and
//! at most `MAX_READ` bytes (a link to `/dev/zero` or a runaway generator's output would
//! otherwise be read into memory whole).

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The most a config file (or any file it names) may hold: a config of 100,000 routes
/// is about 10 MB.
pub const MAX_READ: u64 = 64 * 1024 * 1024;

/// The bytes of the regular file at `path`, at most [`MAX_READ`] of them.
pub fn read_bounded(path: &Path) -> io::Result<Vec<u8>> {
    read_at_most(path, MAX_READ)
}

/// The text of the regular file at `path` (UTF-8), at most [`MAX_READ`] bytes.
pub fn read_text_bounded(path: &Path) -> io::Result<String> {
    String::from_utf8(read_bounded(path)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "the file is not UTF-8 text"))
}

fn read_at_most(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a folder, a FIFO, a device or a socket): name the file itself",
        ));
    }
    too_large(meta.len(), max)?;
    let mut out = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // A file that grows while it is read is still cut at the bound. (`O_NONBLOCK` does
    // not change how a regular file reads.)
    Read::take(file, max + 1).read_to_end(&mut out)?;
    too_large(out.len() as u64, max)?;
    Ok(out)
}

fn too_large(len: u64, max: u64) -> io::Result<()> {
    if len > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the file holds more than the {} MiB tollgate reads",
                max / (1024 * 1024)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder() -> tempfile::TempDir {
        tempfile::tempdir().expect("a temporary folder")
    }

    #[test]
    fn a_regular_file_reads_whole_and_through_a_link() {
        let dir = folder();
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, "[server]\n").expect("written");
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&path, &link).expect("linked");
        assert_eq!(read_text_bounded(&path).expect("read"), "[server]\n");
        assert_eq!(read_text_bounded(&link).expect("read"), "[server]\n");
    }

    #[test]
    fn a_fifo_a_device_and_a_folder_are_refused_at_once() {
        let dir = folder();
        let fifo = dir.path().join("fifo.toml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.expect("mkfifo runs").success(), "mkfifo");
        let zero = dir.path().join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &zero).expect("linked");
        for path in [fifo.as_path(), zero.as_path(), dir.path()] {
            let e = read_bounded(path).expect_err("refused");
            assert!(e.to_string().contains("not a regular file"), "{e}");
        }
    }

    #[test]
    fn a_file_past_the_bound_is_refused() {
        let dir = folder();
        let path = dir.path().join("big.toml");
        std::fs::write(&path, vec![b'#'; 2048]).expect("written");
        assert_eq!(read_at_most(&path, 2048).expect("at the bound").len(), 2048);
        let e = read_at_most(&path, 2047).expect_err("past the bound");
        assert!(e.to_string().contains("more than"), "{e}");
        let sparse = dir.path().join("sparse.toml");
        let file = std::fs::File::create(&sparse).expect("created");
        file.set_len(MAX_READ + 1).expect("sized");
        assert!(read_bounded(&sparse).is_err(), "read without reading it");
    }
}
