//! Each thread keeps the last table it used per shard, with the shard generation it was
//! current for: a decision then costs no reference-count or arc-swap traffic at all. A
//! stale table is harmless: its slots are frozen, so using it fails and refreshes.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::shard::Shard;
use super::table::Table;

struct CachedTable {
    store: u64,
    generation: u64,
    table: Option<Arc<Table>>,
}

thread_local! {
    static TABLES: RefCell<Vec<CachedTable>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on the current table of `shards[index]` of store `store`, through this
/// thread's cache.
pub(super) fn with_table<R>(
    store: u64,
    shards: &[Shard],
    index: usize,
    f: impl FnOnce(&Table) -> R,
) -> R {
    let shard = &shards[index];
    let generation = shard.generation.load(Ordering::Acquire);
    TABLES.with(|cell| {
        let Ok(mut cache) = cell.try_borrow_mut() else {
            return f(&shard.table.load());
        };
        if cache.len() < shards.len() {
            cache.resize_with(shards.len(), || CachedTable {
                store: 0,
                generation: 0,
                table: None,
            });
        }
        let entry = &mut cache[index];
        let table = match &entry.table {
            Some(t) if entry.store == store && entry.generation == generation => t,
            _ => {
                *entry = CachedTable {
                    store,
                    generation,
                    table: Some(shard.table.load_full()),
                };
                match &entry.table {
                    Some(t) => t,
                    None => return f(&shard.table.load()),
                }
            }
        };
        f(table)
    })
}
