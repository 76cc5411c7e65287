//! `[server] watch_config = true`: the config file's folder is watched (inotify, through
//! `notify`), and when the file's content changes the gateway reloads exactly as on SIGHUP
//! — validated first, a refused file logged with its errors and the running config kept,
//! both counted in `tollgate_config_reloads_total`. The folder, not the file, is watched so that
//! every way of replacing it is seen: an edit in place, an editor's rename over it, and a
//! Kubernetes ConfigMap's swap of its `..data` link (the file itself is a link through
//! `..data` to a dated folder that is replaced whole).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::Watcher;
use tokio::sync::{mpsc, watch};

use crate::proxy::snapshot::Shared;

/// Events closer together than this are one change (an editor writes, renames and
/// touches; a ConfigMap swap is several renames).
const SETTLE: Duration = Duration::from_millis(300);

/// Starts watching `path`'s folder; the task ends at shutdown. An error when the folder
/// cannot be watched (the start then fails: the operator asked for it).
pub fn spawn(
    shared: Arc<Shared>,
    path: PathBuf,
    mut shutdown: watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, notify::Error> {
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(|| PathBuf::from("."), Path::to_owned);
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            // Full means a change is already pending: nothing is lost by dropping this.
            let _ = tx.try_send(());
        }
    })?;
    watcher.watch(&folder, notify::RecursiveMode::NonRecursive)?;
    tracing::info!(folder = %folder.display(), "watching the config file for changes");
    Ok(tokio::spawn(async move {
        let _watching = watcher;
        let mut last = std::fs::read(&path).ok();
        loop {
            tokio::select! {
                _ = shutdown.changed() => return,
                got = rx.recv() => if got.is_none() { return },
            }
            // Let the burst of events settle, then judge the file as it is now.
            tokio::time::sleep(SETTLE).await;
            while rx.try_recv().is_ok() {}
            let now = std::fs::read(&path).ok();
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
