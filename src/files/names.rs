//! Where a file's temporary copy is written, and how a start knows one for its own.

use std::path::Path;

/// The folder `path` is in (a bare file name is in the working folder).
pub(super) fn folder_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// The temporary name beside a file `name`: `.NAME.<suffix>.tmp` ([`crate::random::suffix`]:
/// 16 hex digits).
pub(super) fn temp_name(name: &std::ffi::OsStr, suffix: &str) -> std::ffi::OsString {
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".{suffix}.tmp"));
    tmp
}

/// Whether `file_name` is a [`temp_name`] beside a file `name`.
pub(super) fn is_temp_name(file_name: &std::ffi::OsStr, name: &std::ffi::OsStr) -> bool {
    let (Some(file_name), Some(name)) = (file_name.to_str(), name.to_str()) else {
        return false;
    };
    let suffix = (file_name.strip_prefix('.'))
        .and_then(|n| n.strip_prefix(name)?.strip_prefix('.'))
        .and_then(|rest| rest.strip_suffix(".tmp"));
    suffix.is_some_and(|s| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit()))
}
