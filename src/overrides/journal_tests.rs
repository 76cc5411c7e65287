//! The journal against real files: appends, replays, compactions, and files changed
//! under it.

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
        keyed_by: Some(vec!["header:x-tenant-id".into()]),
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

/// An append cut inside a character (a key's `é`) leaves a last line that is not UTF-8:
/// a torn line like any other, not a file the gateway cannot start with. Bytes that are
/// not UTF-8 in a whole line are a corrupt file, said with where.
#[test]
fn a_last_line_torn_inside_a_character_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overrides.json");
    let line = serde_json::to_string(&Change::Put(one("a"))).unwrap();
    let torn = serde_json::to_string(&Change::Put(one("caf\u{e9}"))).unwrap();
    let cut = torn.find('\u{e9}').unwrap() + 1;
    let mut bytes = format!("{{\"tollgate_overrides\":2}}\n{line}\n").into_bytes();
    bytes.extend_from_slice(&torn.as_bytes()[..cut]);
    std::fs::write(&path, &bytes).unwrap();
    let r = read(&path).unwrap();
    assert_eq!(r.overrides, vec![one("a")]);
    assert!(r.rewrite, "rewritten whole at the next change");
    // Cut right after the line's end: nothing of the torn line is valid.
    let mut bytes = format!("{{\"tollgate_overrides\":2}}\n{line}\n").into_bytes();
    bytes.push(0xC3);
    std::fs::write(&path, &bytes).unwrap();
    let r = read(&path).unwrap();
    assert_eq!((r.overrides, r.rewrite), (vec![one("a")], true));
    // Inside a whole line: corrupt, with its offset.
    let mut bytes = b"{\"tollgate_overrides\":2}\n".to_vec();
    bytes.extend_from_slice(&torn.as_bytes()[..cut]);
    bytes.extend_from_slice(format!("\n{line}\n").as_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let Err(e) = read(&path) else {
        panic!("read bytes that are not UTF-8 in a whole line");
    };
    assert!(e.to_string().contains("not UTF-8"), "{e}");
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

/// A journal with `a` written whole at `path`, no append handle open yet.
fn compacted(path: &Path) -> Journal {
    let mut journal = Journal::new(path.to_owned(), &read(path).unwrap());
    journal
        .record(&[Change::Put(one("a"))], Some(&[one("a")]))
        .unwrap();
    journal
}

#[test]
fn a_file_removed_before_any_append_is_written_whole_with_its_header() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overrides.json");
    let mut journal = compacted(&path);
    assert!(!journal.compacts(1), "its own file, as it left it");
    std::fs::remove_file(&path).unwrap();
    assert!(journal.compacts(2), "the path names no file");
    journal
        .record(&[Change::Put(one("b"))], Some(&[one("a"), one("b")]))
        .unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.starts_with("{\"tollgate_overrides\":2}\n"), "{text}");
    assert_eq!(read(&path).unwrap().overrides, vec![one("a"), one("b")]);
}

#[test]
fn a_file_truncated_or_replaced_under_an_open_handle_is_written_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overrides.json");
    let mut journal = compacted(&path);
    journal.record(&[Change::Put(one("b"))], None).unwrap();
    assert!(!journal.compacts(2), "its own appends keep it its own");
    // `: > overrides.json`: an append would land at offset 0, before any header.
    std::fs::File::create(&path).unwrap();
    assert!(journal.compacts(2), "truncated");
    journal
        .record(
            &[Change::Put(one("c"))],
            Some(&[one("a"), one("b"), one("c")]),
        )
        .unwrap();
    journal.record(&[Change::Del(one("b").id)], None).unwrap();
    assert_eq!(read(&path).unwrap().overrides, vec![one("a"), one("c")]);
    // Another file of the same length put in its place.
    let copy = dir.path().join("copy");
    std::fs::copy(&path, &copy).unwrap();
    std::fs::rename(&copy, &path).unwrap();
    assert!(journal.compacts(2), "replaced");
}

#[test]
fn a_change_that_failed_to_append_is_written_whole_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overrides.json");
    let mut journal = compacted(&path);
    journal.record(&[Change::Put(one("b"))], None).unwrap();
    // The file goes, and a link takes its place just as a delete is written.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(dir.path().join("elsewhere"), "").unwrap();
    std::os::unix::fs::symlink(dir.path().join("elsewhere"), &path).unwrap();
    journal.append = None;
    let failed = journal.record(&[Change::Del(one("b").id)], None);
    assert!(failed.is_err(), "not written through a link");
    std::fs::remove_file(&path).unwrap();
    // The link removed, the file is still not this journal's; and even if it were, the
    // failed delete is only on disk once the whole set is.
    assert!(journal.compacts(1));
    journal.rewrite = false;
    journal.seen = None;
    assert!(journal.compacts(1), "an unknown file is never appended to");
}

#[test]
fn an_append_never_goes_to_a_file_put_in_place_after_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overrides.json");
    let mut journal = compacted(&path);
    assert!(!journal.compacts(1));
    // Between the check and the write, the file is removed: the append creates none
    // that would start without the header.
    std::fs::remove_file(&path).unwrap();
    assert!(journal.record(&[Change::Put(one("b"))], None).is_err());
    assert!(journal.rewrite, "the next change writes it whole");
    assert!(!path.exists(), "no file begun without its header");
    journal
        .record(
            &[Change::Put(one("c"))],
            Some(&[one("a"), one("b"), one("c")]),
        )
        .unwrap();
    assert_eq!(read(&path).unwrap().overrides.len(), 3);
}

#[test]
fn an_empty_file_holds_no_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("overrides.json");
    std::fs::write(&path, "").unwrap();
    let r = read(&path).unwrap();
    assert!(r.overrides.is_empty());
    assert!(r.rewrite, "the header is written at the first change");
}
