//! What Redis says the fleet changed, applied here: overrides set and deleted elsewhere,
//! or all of them after a first read. (A key reset elsewhere moves the version too: the
//! refusals remembered here are forgotten. Its settles read the key's reset marker in
//! Redis itself.)

use super::journal::Change;
use super::set::OverrideSet;
use super::shared::Changes;
use super::{apply, Overrides};
use crate::config::Config;
use crate::store::Limiter;

impl Overrides {
    /// Applies what Redis says changed; the changes for the file, and whether it is to be
    /// written whole.
    pub(super) fn follow(
        &self,
        config: &Config,
        limiter: &Limiter,
        read: Changes,
        now_ms: u64,
    ) -> (Vec<Change>, bool) {
        if !matches!(read, Changes::Unchanged) {
            // An override changed or a key was reset somewhere: remembered refusals may lie.
            limiter.forget_refusals();
        }
        let mut state = self.state.lock();
        let state = &mut *state;
        match read {
            Changes::Unchanged => (Vec::new(), false),
            Changes::Delta {
                version,
                puts,
                deleted,
            } => {
                state.seen = Some(version);
                let mut changes = Vec::with_capacity(puts.len() + deleted.len());
                for field in deleted {
                    if let Some(id) = state.fields.remove(&field) {
                        apply::remove(limiter, &id);
                        state.set.remove(&id);
                        changes.push(Change::Del(id));
                    }
                }
                for (field, stored) in puts {
                    state.fields.insert(field, stored.id.clone());
                    state.set.insert(stored.clone());
                    apply::one(config, limiter, &mut state.set, &stored);
                    changes.push(Change::Put(stored));
                }
                (changes, false)
            }
            Changes::Full { version, all } => {
                state.seen = Some(version);
                if all.is_empty() && !state.set.is_empty() {
                    tracing::warn!(
                        dropped = state.set.len(),
                        "Redis holds no runtime overrides: the ones this gateway had are dropped"
                    );
                }
                state.fields = all.iter().map(|(f, s)| (f.clone(), s.id.clone())).collect();
                state.set = OverrideSet::new(all.into_iter().map(|(_, s)| s));
                apply::all(config, limiter, &mut state.set, now_ms);
                // The file is written whole: no lines describe this change.
                (Vec::new(), true)
            }
        }
    }
}
