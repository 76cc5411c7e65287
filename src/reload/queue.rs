//! Reloads one at a time, and at most one waiting: a reload asked for while another waits
//! to begin shares its outcome (it would read the same file, which it reads only once it
//! begins). Each one that begins runs to its end on a task of its own. Without this, a
//! caller that asks and hangs up, again and again, queued reloads without bound — each a
//! compile, a snapshot, the refusal memory cleared and every leased slice given back —
//! and a SIGHUP waited behind them all.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use super::{ReloadError, ReloadReport};
use crate::proxy::snapshot::Shared;

/// One reload's outcome, for every caller that asked for it.
type Outcome = Arc<Result<ReloadReport, ReloadError>>;

#[derive(Default)]
pub struct ReloadQueue {
    /// Held by the reload under way.
    running: tokio::sync::Mutex<()>,
    /// The reload waiting to begin, which a new caller joins.
    waiting: Mutex<Option<watch::Receiver<Option<Outcome>>>>,
}

/// Reloads the file the gateway was started with, or joins the reload waiting to begin.
pub async fn reload(shared: &Arc<Shared>) -> Result<ReloadReport, ReloadError> {
    let mut outcome = {
        let mut waiting = shared.reloads.waiting.lock();
        match &*waiting {
            Some(joined) => joined.clone(),
            None => {
                let (tell, told) = watch::channel(None);
                *waiting = Some(told.clone());
                let shared = shared.clone();
                tokio::spawn(async move {
                    let _one_at_a_time = shared.reloads.running.lock().await;
                    // Begun: a later caller may have changed the file since; it waits
                    // for a reload of its own.
                    shared.reloads.waiting.lock().take();
                    let result = super::reload_here(&shared).await;
                    let _ = tell.send(Some(Arc::new(result)));
                });
                told
            }
        }
    };
    let done = outcome.wait_for(Option::is_some).await;
    let Ok(done) = done else {
        return Err(ReloadError::Joined(
            "the reload task ended without an outcome".into(),
        ));
    };
    match done.as_deref() {
        Some(Ok(report)) => Ok(report.clone()),
        Some(Err(e)) => Err(ReloadError::Joined(e.to_string())),
        None => Err(ReloadError::Joined("no outcome".into())),
    }
}
