//! Files the gateway reads back at start — its state file, its runtime overrides file —
//! are trusted only as it wrote them: a file other users may write, a FIFO, a link, or a
//! state file whose folder it cannot write in refuses `tollgate run` (and `tollgate
//! check`) at once, naming the file and why. A forged state file would set debts and the
//! key hasher's seeds; a forged overrides file, limits; a FIFO would hold the start
//! forever; an unwritable folder would go unnoticed until a restart found nothing saved.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

const CONFIG: &str = "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n[upstreams.api]\ntargets = [\"http://127.0.0.1:9\"]\n[policies.p]\nkey = \"header:x-api-key\"\nmissing = \"reject\"\nquota = 100\nwindow = \"day\"\n[[routes]]\nname = \"r\"\npath = \"/\"\nupstream = \"api\"\npolicies = [\"p\"]\n";

/// `tollgate <verb> --config path` run to its end (within 20 s): its exit code and
/// stderr.
fn run(verb: &str, path: &Path) -> (Option<i32>, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args([verb, "--config"])
        .arg(path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("tollgate runs");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("`tollgate {verb}` did not stop on {}", path.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = String::new();
    use std::io::Read as _;
    let _ = child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err);
    (status.code(), err)
}

/// A file's name, what puts it in place, and what the refusal says of it.
type Case<'a> = (&'a str, &'a dyn Fn(&Path), &'a str);

/// Each `setup` of the file at `file`, with the config naming it by `setting`, refuses
/// run and check, saying `why`.
fn refused(setting: &str, cases: &[Case]) {
    for (name, setup, why) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join(name);
        setup(&file);
        let config = dir.path().join("tollgate.toml");
        std::fs::write(&config, with(setting, &file)).expect("write");
        // `run` fails at start (1), `check` finds the file unusable (2).
        for (verb, exit) in [("run", 1), ("check", 2)] {
            let (code, err) = run(verb, &config);
            assert_eq!(code, Some(exit), "{verb} {name}: {err}");
            assert!(err.contains(name), "{verb} {name} names the file: {err}");
            assert!(err.contains(why), "{verb} {name} says {why:?}: {err}");
        }
    }
}

/// The config with `setting` (`state_file` or `overrides_file`) naming `file`.
fn with(setting: &str, file: &Path) -> String {
    let line = format!("{setting} = \"{}\"\n", file.display());
    match setting {
        "state_file" => format!("{CONFIG}[store]\n{line}"),
        _ => CONFIG.replace("admin_listen", &format!("{line}admin_listen")),
    }
}

fn mode(file: &Path, mode: u32) {
    std::fs::set_permissions(file, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn fifo(file: &Path) {
    let made = std::process::Command::new("mkfifo").arg(file).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
}

#[test]
fn a_state_file_others_may_write_a_fifo_or_an_unwritable_folder_refuses_the_start() {
    let writable = |f: &Path| {
        std::fs::write(f, b"tollgate state\n\x02 forged").expect("write");
        mode(f, 0o666);
    };
    refused(
        "state_file",
        &[
            ("forged.state", &writable, "other users may write it"),
            ("fifo.state", &fifo, "not a regular file"),
        ],
    );
    // A folder that is not there: nothing could ever be saved.
    let dir = tempfile::tempdir().expect("tempdir");
    let gone = dir.path().join("no-such-folder").join("lost.state");
    let config = dir.path().join("tollgate.toml");
    std::fs::write(&config, with("state_file", &gone)).expect("write");
    for (verb, exit) in [("run", 1), ("check", 2)] {
        let (code, err) = run(verb, &config);
        assert_eq!(code, Some(exit), "{verb}: {err}");
        assert!(err.contains("lost.state"), "{verb}: {err}");
    }
}

#[test]
fn an_overrides_file_others_may_write_or_a_fifo_refuses_the_start() {
    let writable = |f: &Path| {
        std::fs::write(f, "{\"tollgate_overrides\":2}\n").expect("write");
        mode(f, 0o646);
    };
    refused(
        "overrides_file",
        &[
            ("forged.json", &writable, "other users may write it"),
            ("fifo.json", &fifo, "not a regular file"),
        ],
    );
}
