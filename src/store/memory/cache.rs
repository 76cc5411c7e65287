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
/// thread's cache. Inlined: on a hit this is a generation load and two compares.
#[inline(always)]
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
        if let Some(CachedTable {
            store: s,
            generation: g,
            table: Some(table),
        }) = cache.get(index)
        {
            if *s == store && *g == generation {
                return f(table);
            }
        }
        f(refresh(&mut cache, store, shards, index, generation))
    })
}

/// Caches the current table of `shards[index]` (the first use of a shard by this thread,
/// or a table swapped since).
#[cold]
#[inline(never)]
fn refresh<'c>(
    cache: &'c mut Vec<CachedTable>,
    store: u64,
    shards: &[Shard],
    index: usize,
    generation: u64,
) -> &'c Table {
    if cache.len() < shards.len() {
        cache.resize_with(shards.len(), || CachedTable {
            store: 0,
            generation: 0,
            table: None,
        });
    }
    let entry = &mut cache[index];
    entry.store = store;
    entry.generation = generation;
    entry.table.insert(shards[index].table.load_full())
}
