//! `[server] watch_config = true`: the config file's folder is watched (inotify, through
//! `notify`), and when the file's content changes the gateway reloads exactly as on SIGHUP
//! — validated first, a refused file logged with its errors and the running config kept,
//! both counted in `tollgate_config_reloads_total`. The folder, not the file, is watched so that
//! every way of replacing it is seen: an edit in place, an editor's rename over it, and a
//! Kubernetes ConfigMap's swap of its `..data` link (the file itself is a link through
//! `..data` to a dated folder that is replaced whole). A file that is a link into another
//! folder has that folder watched too, where its edits happen. `[rls] ratelimit_config` (the YAML
//! file's folder, or the folder of YAML files) is watched the same way: a change of either
//! reloads.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::Watcher;
use tokio::sync::{mpsc, watch};

use crate::proxy::snapshot::Shared;

/// Events closer together than this are one change (an editor writes, renames and
/// touches; a ConfigMap swap is several renames).
const SETTLE: Duration = Duration::from_millis(300);
/// A change is read once the file has held still this long (no event, the same bytes): a
/// writer slower than one settle (`cp` or `scp` on a loaded machine, a generator writing
/// in steps) is not read half-written — a cut at a line's end is often a valid config,
/// with a route's tiers or the admin token left out.
const QUIET: Duration = Duration::from_secs(1);
/// At most this many quiet waits: a file rewritten without a pause for longer is read as
/// it then is.
const MAX_WAITS: usize = 30;

/// The folder a file is in (`.` for a bare name).
fn folder_of(path: &Path) -> PathBuf {
    path.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_owned)
}

/// What a change is judged by: the config file's bytes, then each YAML file's (name and
/// bytes). `None` while the config file is missing (mid-swap).
fn contents(path: &Path, yaml: Option<&Path>) -> Option<Vec<u8>> {
    let mut all = crate::read_file::read_bounded(path).ok()?;
    let files = yaml.map_or_else(Vec::new, |y| {
        crate::config::compile::ratelimit_yaml::yaml_files(y).unwrap_or_default()
    });
    for file in files {
        all.extend_from_slice(file.as_os_str().as_encoded_bytes());
        all.extend(crate::read_file::read_bounded(&file).unwrap_or_default());
    }
    Some(all)
}

/// Starts watching `path`'s folder (and `[rls] ratelimit_config`'s, as the config in
/// effect names it now); the task ends at shutdown. An error when a folder cannot be
/// watched (the start then fails: the operator asked for it).
pub fn spawn(
    shared: Arc<Shared>,
    path: PathBuf,
    mut shutdown: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, notify::Error> {
    let folder = folder_of(&path);
    let yaml = shared
        .config()
        .rls
        .as_ref()
        .and_then(|r| r.ratelimit_config.clone());
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        // A read is no change (the watcher's own reads of the file among them).
        let changed = event.is_ok_and(|e| !matches!(e.kind, notify::EventKind::Access(_)));
        if changed {
            // Full means a change is already pending: nothing is lost by dropping this.
            let _ = tx.try_send(());
        }
    })?;
    watcher.watch(&folder, notify::RecursiveMode::NonRecursive)?;
    tracing::info!(folder = %folder.display(), "watching the config file for changes");
    watch_link_target(&mut watcher, &path, &folder);
    if let Some(y) = &yaml {
        let yaml_folder = if y.is_dir() { y.clone() } else { folder_of(y) };
        if yaml_folder != folder {
            watcher.watch(&yaml_folder, notify::RecursiveMode::NonRecursive)?;
            tracing::info!(folder = %yaml_folder.display(), "watching ratelimit_config for changes");
        }
    }
    Ok(tokio::spawn(async move {
        let _watching = watcher;
        let mut last = contents(&path, yaml.as_deref());
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                got = rx.recv() => if got.is_none() { return },
            }
            // Let the burst of events settle, then judge the file once it holds still.
            tokio::time::sleep(SETTLE).await;
            let now = held_still(&mut rx, || contents(&path, yaml.as_deref())).await;
            if now.is_none() || now == last {
                // Gone for a moment (mid-swap) or unchanged (another file, a touch):
                // the next event looks again.
                continue;
            }
            last = now;
            tracing::info!(path = %path.display(), "config file changed: reloading");
            // Logged and counted inside, like SIGHUP's.
            let _ = crate::reload::reload(&shared).await;
        }
    }))
}

/// Watches the folder the config file's link leads to, when that is another folder than
/// the link's own: an edit of the target (in place, or an editor's rename there) changes
/// nothing in the link's folder. A Kubernetes ConfigMap's dated folder is one too (its
/// swap is seen in the link's folder). Not watched is only logged: the link's folder is.
fn watch_link_target(watcher: &mut impl Watcher, path: &Path, folder: &Path) {
    let Ok(target) = std::fs::canonicalize(path) else {
        return;
    };
    let target_folder = folder_of(&target);
    let same = std::fs::canonicalize(folder).is_ok_and(|f| f == target_folder);
    if same {
        return;
    }
    match watcher.watch(&target_folder, notify::RecursiveMode::NonRecursive) {
        Ok(()) => {
            tracing::info!(folder = %target_folder.display(), "watching the folder the config file links to")
        }
        Err(e) => {
            tracing::warn!(folder = %target_folder.display(), error = %e, "cannot watch the folder the config file links to: an edit there is applied on SIGHUP or a change in the link's folder")
        }
    }
}

/// What `read` gives once it gave the same twice [`QUIET`] apart with no event between
/// (or after [`MAX_WAITS`] waits).
async fn held_still(
    events: &mut mpsc::Receiver<()>,
    read: impl Fn() -> Option<Vec<u8>>,
) -> Option<Vec<u8>> {
    while events.try_recv().is_ok() {}
    let mut now = read();
    for _ in 0..MAX_WAITS {
        tokio::time::sleep(QUIET).await;
        let mut quiet = true;
        while events.try_recv().is_ok() {
            quiet = false;
        }
        let again = read();
        if quiet && again == now {
            break;
        }
        now = again;
    }
    now
}
