//! Rate tiers decided in Redis: one Lua script per hash tag (one call for a single Redis),
//! atomically, on Redis's clock; across tags, a later denial rolls the earlier groups
//! back. The verdict is then computed by the same `evaluate` as in memory, from the TATs
//! the scripts saw, so answers are identical to the embedded store's.

use std::sync::LazyLock;

use arrayvec::ArrayVec;
use redis::Script;

use rollback::Written;

use super::remote::Remote;
use super::snapshot::{SnapshotTable, BASE};
use smallvec::SmallVec;

use crate::limit::{evaluate, Mode, Tier, Verdict, INLINE_DECISIONS, MAX_DECISIONS};
use crate::store::error::StoreError;
use crate::store::redis::RedisStore;
use crate::store::tiers::RateTier;

mod rollback;

const NANOS: u128 = crate::limit::gcra::NANOS_PER_SEC as u128;

static GCRA: LazyLock<Script> = LazyLock::new(|| super::script(include_str!("../gcra.lua")));
static PEEK: LazyLock<Script> = LazyLock::new(|| super::script(include_str!("../peek.lua")));

/// Tiers decided before the Redis call (leased slices): each one's debt as the verdict
/// should see it, whether any of them refused, and the first store failure among them
/// (a slice fetch from a node that is down: that tier is let through as a group that
/// failed is, while the others decide).
#[derive(Debug, Default)]
pub struct Decided {
    pub debts: ArrayVec<(usize, u64), MAX_DECISIONS>,
    pub refused: bool,
    pub failed: Option<StoreError>,
}

impl Decided {
    fn covers(&self, i: usize) -> bool {
        self.debts.iter().any(|&(d, _)| d == i)
    }

    /// A request-sized table holding the debts decided so far.
    fn snapshot(&self, tiers: &[RateTier]) -> SnapshotTable {
        let snapshot = SnapshotTable::default();
        for &(i, debt) in &self.debts {
            snapshot.insert(tiers[i].tier.key, debt);
        }
        snapshot
    }
}

/// What one script call answered: the server's now and each tier's debt (TAT − now).
struct Reply {
    now_s: u64,
    now_ns: u64,
    admitted: bool,
    debts: ArrayVec<u64, MAX_DECISIONS>,
}

impl Reply {
    fn parse(values: &[i64], n: usize, with_flag: bool) -> Result<Self, StoreError> {
        let head = if with_flag { 3 } else { 2 };
        if values.len() != head + n {
            return Err(StoreError::Reply);
        }
        let nonneg = |v: i64| u64::try_from(v).map_err(|_| StoreError::Reply);
        Ok(Self {
            now_s: nonneg(values[0])?,
            now_ns: nonneg(values[1])?,
            admitted: !with_flag || values[2] == 1,
            debts: values[head..]
                .iter()
                .map(|&v| nonneg(v))
                .collect::<Result<_, _>>()?,
        })
    }

    fn now_abs(&self) -> u128 {
        u128::from(self.now_s) * NANOS + u128::from(self.now_ns)
    }
}

/// A TAT's stored form as the tier writes it (`tat.lua`): a calendar quota's seconds
/// zero-padded to 12 digits, its mark.
fn tat_stamp(abs_ns: u128, quota: bool) -> String {
    if quota {
        format!("{:012}:{:09}", abs_ns / NANOS, abs_ns % NANOS)
    } else {
        crate::store::redis::stamp(abs_ns)
    }
}

/// `peek.lua`'s argument for a key: "1" reads it as a calendar quota's.
fn read_as(quota: bool) -> &'static str {
    if quota {
        "1"
    } else {
        "0"
    }
}

/// When Redis charged each admitted tier that settles later (Unix ns on its node's clock:
/// its group's reply), by tier index: a settle is placed in the window of, and compared
/// with the key's resets at, its own charge, not at an estimate of the node's clock that
/// another reply may have moved. Empty (no allocation) for a request that settles nothing.
pub type ChargeTimes = Vec<(usize, u64)>;

/// One script call's tiers, by index into the request's tiers.
type Group = ArrayVec<usize, MAX_DECISIONS>;

/// Each calendar quota tier's window end on the verdict's timeline (`BASE` playing the
/// server's now its script ran at), by tier index.
#[derive(Default)]
struct Windows(ArrayVec<(usize, u64), MAX_DECISIONS>);

impl Windows {
    /// The quota tiers of `group`, answered at the server's `now_abs` (Unix ns).
    fn place(&mut self, tiers: &[RateTier], group: &Group, now_abs: u128) {
        let now = u64::try_from(now_abs).unwrap_or(u64::MAX);
        for &i in group {
            if let Some(bounds) = &tiers[i].bounds {
                let _ = self
                    .0
                    .try_push((i, BASE.saturating_add(bounds.until_end(now))));
            }
        }
    }

    /// The tiers as the verdict decides them: a quota tier with its window placed (one
    /// Redis did not answer for keeps its end as the local clock places it).
    fn on(&self, tiers: &[RateTier], local_now: u64) -> SmallVec<[Tier; INLINE_DECISIONS]> {
        tiers
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut tier = t.tier;
                if let Some(local_end) = tier.window {
                    let placed = self.0.iter().find(|(k, _)| *k == i).map(|&(_, end)| end);
                    let fallback = BASE.saturating_add(local_end.saturating_sub(local_now));
                    tier.window = Some(placed.unwrap_or(fallback));
                }
                tier
            })
            .collect()
    }
}

/// A tier's window as the script reads it: `start:end:next` Unix seconds, or empty.
fn window_arg(tier: &RateTier) -> String {
    tier.bounds
        .as_ref()
        .map(crate::limit::calendar::Bounds::script_arg)
        .unwrap_or_default()
}

/// Decides `tiers` in Redis, some of them possibly decided elsewhere already (leased
/// slices, in `decided`): their debts go into the verdict as given and they are not sent.
/// When one of those refused, the others are only read. `now_ns` is the local clock,
/// read only by the breaker. The settled tiers' charge times go into `times`.
pub async fn check(
    remote: &Remote<'_>,
    tiers: &[RateTier],
    (cost, now_ns): (u64, u64),
    mut decided: Decided,
    times: &mut ChargeTimes,
) -> Result<Verdict, StoreError> {
    if decided.debts.len() >= tiers.len() {
        // Every tier was decided from slices: Redis is not asked, so neither held nor
        // told anything by the breaker.
        let verdict = evaluate(&decided.snapshot(tiers), tiers, BASE, cost);
        return match decided.failed.take() {
            Some(e) if verdict.admitted => Err(e),
            _ => Ok(verdict),
        };
    }
    check_groups(remote, tiers, (cost, now_ns), decided, times).await
}

/// Each group's charge goes through the breaker of the node holding it. A group that
/// fails leaves the others to decide: one of them refusing refuses the request (a tier a
/// healthy master holds is not skipped because another key of the request lives on a
/// master that is down); all of them admitting, the failure is the answer, and what they
/// charged stays only when it lets the request through (`Remote::keeps_answered`).
async fn check_groups(
    remote: &Remote<'_>,
    tiers: &[RateTier],
    (cost, now_ns): (u64, u64),
    mut decided: Decided,
    times: &mut ChargeTimes,
) -> Result<Verdict, StoreError> {
    let (remote, keeps_answered) = (remote.store, remote.keeps_answered);
    let groups = groups(remote, tiers, &decided);
    let mut snapshot = decided.snapshot(tiers);
    let mut windows = Windows::default();
    // Given back if this check is dropped (its client gone) between two groups.
    let mut written = Written::new(remote, tiers, &groups, cost);
    // A tier decided elsewhere refused: nothing is charged, the others are only read.
    let mut first_read = None;
    let mut failed = decided.failed.take();
    if decided.refused {
        first_read = Some(0);
    } else {
        for (g, group) in groups.iter().enumerate() {
            let tag = group_tag(tiers, group);
            let charged = remote.guarded(tag, now_ns, charge(remote, tiers, group, cost, now_ns));
            let reply = match charged.await {
                Ok(r) => r,
                Err(e) => {
                    failed.get_or_insert(e);
                    continue;
                }
            };
            for (&i, &debt) in group.iter().zip(&reply.debts) {
                snapshot.insert(tiers[i].tier.key, debt);
            }
            windows.place(tiers, group, reply.now_abs());
            if !reply.admitted {
                // The denying group wrote nothing; later groups are only read, for the wait.
                first_read = Some(g + 1);
                break;
            }
            let charged_at = u64::try_from(reply.now_abs()).unwrap_or(u64::MAX);
            times.extend(
                group
                    .iter()
                    .filter(|&&i| tiers[i].settled)
                    .map(|&i| (i, charged_at)),
            );
            written.push(g, reply);
        }
    }
    if let (Some(e), None) = (failed, first_read) {
        match keeps_answered {
            true => written.keep(),
            false => written.roll_back().await,
        }
        return Err(e);
    }
    if let Some(first) = first_read {
        read_groups(remote, tiers, &groups[first..], &mut snapshot, &mut windows).await;
    }
    let verdict = if windows.0.is_empty() {
        evaluate(&snapshot, tiers, BASE, cost)
    } else {
        evaluate(&snapshot, &windows.on(tiers, now_ns), BASE, cost)
    };
    if verdict.admitted {
        written.keep();
    } else {
        written.roll_back().await;
    }
    Ok(verdict)
}

/// One script call per group. A single Redis takes all tiers at once (one round trip,
/// one `now`); a Cluster needs one group per hash tag, in order of first appearance.
fn groups(
    remote: &RedisStore,
    tiers: &[RateTier],
    decided: &Decided,
) -> ArrayVec<Group, MAX_DECISIONS> {
    let single = !remote.is_cluster();
    let tag = |i: usize| tiers[i].redis.as_ref().map(|k| k.tag.as_str());
    let mut groups: ArrayVec<Group, MAX_DECISIONS> = ArrayVec::new();
    for i in (0..tiers.len()).filter(|&i| !decided.covers(i) && tiers[i].redis.is_some()) {
        match groups.iter_mut().find(|g| single || tag(g[0]) == tag(i)) {
            Some(g) => g.push(i),
            None => groups.push(std::iter::once(i).collect()),
        }
    }
    groups
}

/// The hash tag a group's keys share (its first tier's): the node it goes to.
fn group_tag<'t>(tiers: &'t [RateTier], group: &Group) -> &'t str {
    tiers[group[0]]
        .redis
        .as_ref()
        .map_or("", |k| k.tag.as_str())
}

/// The tier's Redis key (every tier sent to Redis has one).
fn key_of(tier: &RateTier) -> &str {
    tier.redis.as_ref().map_or("", |k| k.key.as_str())
}

/// The hold a forced tier (a usage report, `max_delay_ns` unbounded) is sent with: one
/// the script's doubles hold exactly, and more than any charge it is given can need (a
/// key's stored lead and a report's charge are each at most `MAX_SETTLED_DEBT_NS`). Every
/// other tier's hold is far below it (52 days at most, `tollgate check`).
const FORCED_ALLOWANCE_NS: u64 = 2 * crate::config::MAX_SETTLED_DEBT_NS;

/// Decides one group in one script call: all admit and are charged, or nothing is.
async fn charge(
    remote: &RedisStore,
    tiers: &[RateTier],
    group: &Group,
    cost: u64,
    sent_ns: u64,
) -> Result<Reply, StoreError> {
    let mut inv = GCRA.prepare_invoke();
    for &i in group {
        let tier = &tiers[i].tier;
        let q = tier.quota;
        inv.key(key_of(&tiers[i]))
            .arg(q.interval_ns())
            .arg(q.tolerance_ns())
            .arg(tier.max_delay_ns.min(FORCED_ALLOWANCE_NS))
            .arg(if tier.mode == Mode::Shadow { "1" } else { "0" })
            .arg(tier.cost(cost))
            .arg(window_arg(&tiers[i]));
    }
    let tag = group_tag(tiers, group);
    if let Some(deadline) = remote.server_deadline_arg(tag, sent_ns) {
        inv.arg(deadline);
    }
    let values: Vec<i64> = remote.invoke(&inv).await?;
    let reply = Reply::parse(&values, group.len(), true)?;
    // Learnt from a late reply too: it came within the timeout, so the deadline was
    // wrong — the server's clock moved ahead of what this gateway learned (a step, a
    // failover to a node whose clock runs ahead) — and every call after it would be late.
    remote.learn_server_clock(tag, sent_ns, reply.now_abs());
    match values.get(2) {
        // The script ran after the deadline sent with it: it decided nothing.
        Some(2) => return Err(StoreError::Timeout(remote.timeout())),
        // A calendar quota's window this gateway named is a window or more off the
        // server's clock (this gateway's wall clock is wrong): nothing decided.
        Some(3) => return Err(StoreError::CalendarSkew),
        _ => {}
    }
    Ok(reply)
}

/// Reads the TATs of `groups` into `snapshot`, for the wait a refusal names. A group
/// that cannot be read counts as idle: the wait is then a lower bound.
async fn read_groups(
    remote: &RedisStore,
    tiers: &[RateTier],
    groups: &[Group],
    snapshot: &mut SnapshotTable,
    windows: &mut Windows,
) {
    for group in groups {
        let mut inv = PEEK.prepare_invoke();
        for &i in group {
            inv.key(key_of(&tiers[i]))
                .arg(read_as(tiers[i].bounds.is_some()));
        }
        let read: Result<Vec<i64>, _> = remote.invoke(&inv).await;
        if let Ok(reply) = read.and_then(|v| Reply::parse(&v, group.len(), false)) {
            for (&i, &debt) in group.iter().zip(&reply.debts) {
                snapshot.insert(tiers[i].tier.key, debt);
            }
            windows.place(tiers, group, reply.now_abs());
        }
    }
}

/// Current debts (TAT − now, ns; 0 = idle) of `keys`, each read as a calendar quota's
/// when its flag says so (a rate reads a quota's usage as idle), for the admin API, and
/// the server's now they are relative to (Unix ns).
pub async fn debts(
    remote: &RedisStore,
    keys: &[(&str, bool)],
) -> Result<(Vec<u64>, u64), StoreError> {
    let mut inv = PEEK.prepare_invoke();
    for &(k, quota) in keys {
        inv.key(k).arg(read_as(quota));
    }
    let values: Vec<i64> = remote.invoke(&inv).await?;
    let reply = Reply::parse(&values, keys.len(), false)?;
    let now = u64::try_from(reply.now_abs()).unwrap_or(u64::MAX);
    Ok((reply.debts.to_vec(), now))
}
