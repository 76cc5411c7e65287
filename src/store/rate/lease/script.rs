//! The slice script (`slice.lua`) as the protocol calls it: asking for a slice (through
//! the breaker, a request waits on it) and giving one back (outside it).

use std::sync::LazyLock;

use redis::Script;

use crate::store::error::StoreError;
use crate::store::redis::RedisStore;

static SLICE: LazyLock<Script> = LazyLock::new(|| super::super::script(include_str!("slice.lua")));

/// What a gateway asks of a slice: `want` units, at least `need`, the first slot
/// beginning `lead` ns ahead where the key has room (see `limit::slice::grant`).
#[derive(Debug, Clone, Copy)]
pub struct SliceAsk {
    pub want: u64,
    pub need: u64,
    pub lead: u64,
}

/// What Redis answered a request for a slice (`slice.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceAnswer {
    /// `granted` units; the key is now `ahead` ns past Redis's now, with `left` units
    /// still free; `end` is the stored TAT, for a later give-back.
    Granted {
        granted: u64,
        ahead: u64,
        left: u64,
        end: String,
    },
    /// Not `need` units free: they will be after `wait` ns.
    Refused { wait: u64 },
}

/// Asks for the slice `ask` of `key`, giving back `back` (unused time and the stamp the
/// old slice left) first. Counts for the breaker like a decision.
pub async fn ask_slice(
    remote: &RedisStore,
    key: &str,
    quota: &crate::limit::Quota,
    ask: SliceAsk,
    back: Option<(u64, &str)>,
    now_ns: u64,
) -> Result<SliceAnswer, StoreError> {
    let SliceAsk { want, need, lead } = ask;
    let (give_ns, give_end) = back.unwrap_or((0, ""));
    let mut inv = SLICE.prepare_invoke();
    inv.key(key)
        .arg(quota.interval_ns())
        .arg(quota.tolerance_ns())
        .arg(want)
        .arg(need)
        .arg(give_ns)
        .arg(give_end)
        .arg(lead);
    let tag = crate::key::redis_key::tag_of(key);
    // As a decision's call carries one (`gcra.lua`): a fetch run after this gateway gave
    // up on it grants nothing.
    if let Some(deadline) = remote.server_deadline_arg(tag, now_ns) {
        inv.arg(deadline);
    }
    let call = async {
        let reply: redis::Value = remote.invoke(&inv).await?;
        if let Some(server_ns) = too_late(&reply) {
            // Learnt from a late reply too, as a decision's: a node whose clock stepped
            // ahead would otherwise find every fetch late, with nothing to correct it.
            remote.learn_server_clock(tag, now_ns, server_ns);
            return Err(StoreError::Timeout(remote.timeout()));
        }
        parse_slice(&reply)
    };
    remote.guarded(tag, now_ns, call).await
}

/// Gives back `ns` of a slice that left `end` on `key` (only while it still is the key's
/// last reservation). Outside the breaker: nothing waits on it.
pub async fn give_back_slice(
    remote: &RedisStore,
    key: &str,
    ns: u64,
    end: &str,
) -> Result<(), StoreError> {
    let mut inv = SLICE.prepare_invoke();
    inv.key(key).arg(1).arg(0).arg(0).arg(0).arg(ns).arg(end);
    let _: redis::Value = remote.invoke(&inv).await?;
    Ok(())
}

/// The server's time a too-late fetch answered with (`{2, now_s, now_ns}`).
fn too_late(value: &redis::Value) -> Option<u128> {
    let redis::Value::Array(items) = value else {
        return None;
    };
    match items.as_slice() {
        [redis::Value::Int(2), redis::Value::Int(s), redis::Value::Int(ns)] => {
            let (s, ns) = (u128::try_from(*s).ok()?, u128::try_from(*ns).ok()?);
            Some(s * 1_000_000_000 + ns)
        }
        _ => None,
    }
}

/// `{granted, ahead, left, end}` or `{0, wait}`.
fn parse_slice(value: &redis::Value) -> Result<SliceAnswer, StoreError> {
    let redis::Value::Array(items) = value else {
        return Err(StoreError::Reply);
    };
    let int = |v: &redis::Value| match v {
        redis::Value::Int(n) => u64::try_from(*n).map_err(|_| StoreError::Reply),
        _ => Err(StoreError::Reply),
    };
    match items.as_slice() {
        [granted, ahead, left, redis::Value::BulkString(end)] => Ok(SliceAnswer::Granted {
            granted: int(granted)?,
            ahead: int(ahead)?,
            left: int(left)?,
            end: String::from_utf8(end.clone()).map_err(|_| StoreError::Reply)?,
        }),
        [zero, wait] if int(zero)? == 0 => Ok(SliceAnswer::Refused { wait: int(wait)? }),
        _ => Err(StoreError::Reply),
    }
}
