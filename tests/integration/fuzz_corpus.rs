//! Replays the committed fuzz corpora (fuzz/corpus/<target>/) through the same entry points
//! the fuzzers use: every case that once mattered stays a regression test on stable Rust.

fn replay(target: &str, run: fn(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut cases = 0;
    for entry in std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
    {
        let data = std::fs::read(entry.path()).expect("read case");
        run(&data);
        cases += 1;
    }
    assert!(cases > 0, "corpus {target} is empty");
}

#[test]
fn config_corpus() {
    replay("config", tollgate::fuzz_targets::config);
}

#[test]
fn keys_corpus() {
    replay("keys", tollgate::fuzz_targets::keys);
}

#[test]
fn gcra_corpus() {
    replay("gcra", tollgate::fuzz_targets::gcra);
}

#[test]
fn paths_corpus() {
    replay("paths", tollgate::fuzz_targets::paths);
}
