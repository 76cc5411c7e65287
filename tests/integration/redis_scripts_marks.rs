//! The Redis scripts run alone by a real Redis, on what they leave in a key: a settle or
//! a body's draw made for a rate leaves a quota's usage under the same name as it is (the
//! policy became a quota on a gateway that reloaded first), a draw writes no TAT
//! further ahead than any reader counts, and a slice fetch run past its deadline grants
//! nothing.

use crate::support::*;

/// The server's clock in Unix seconds, as the scripts read it.
fn redis_now(redis: &RedisServer) -> u64 {
    let time = redis.cli(&["TIME"]);
    let seconds = time.lines().next().expect("seconds").trim();
    seconds.parse().expect("seconds")
}

/// `script` (a file under src/store/rate/) as the gateway loads it, tat.lua first.
fn loaded(script: &str) -> String {
    [include_str!("../../src/store/rate/tat.lua"), script].concat()
}

/// A reply's lines, trimmed, joined by spaces.
fn words(reply: &str) -> String {
    reply.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test]
async fn a_settle_or_draw_for_a_rate_leaves_a_quotas_usage_as_it_is() {
    let redis = RedisServer::start();
    // A month's quota with three units used: its TAT is its window's end plus 3 ns,
    // written marked (seconds zero-padded to 12 digits).
    let usage = format!("{:012}:000000003", redis_now(&redis) + 20 * 86_400);
    redis.cli(&["SET", "plan:acme", &usage]);
    let settle = loaded(include_str!("../../src/store/rate/settle.lua"));
    for (op, ns) in [("debt", "5000000000"), ("refund", "5000000000")] {
        let reply = redis.cli(&[
            "EVAL",
            &settle,
            "2",
            "plan:acme",
            "plan:acme:reset",
            op,
            ns,
            ns,
            "60000000000",
            "",
            "0",
        ]);
        assert_eq!(words(&reply), "0 0", "{op}: no debt of the rate's");
        let kept = redis.cli(&["GET", "plan:acme"]);
        assert_eq!(kept.trim(), usage, "a rate's {op} leaves the quota's usage");
    }
    let draw = loaded(include_str!("../../src/store/rate/draw.lua"));
    let reply = redis.cli(&[
        "EVAL",
        &draw,
        "1",
        "plan:acme",
        "1000000",
        "60000000000",
        "64",
        "8",
    ]);
    assert_eq!(words(&reply), "64 0", "the frame passes uncounted");
    let kept = redis.cli(&["GET", "plan:acme"]);
    assert_eq!(kept.trim(), usage, "a rate's draw leaves the quota's usage");
}

/// An override's long T makes a body's bound (burst and `max_debt`) years long: the
/// draw's TAT, and so its key's expiry, stays within the 2^52 ns (about 52 days) every
/// reader caps a debt at.
#[tokio::test]
async fn a_draw_writes_no_lead_past_what_readers_count() {
    let redis = RedisServer::start();
    let draw = loaded(include_str!("../../src/store/rate/draw.lua"));
    // T = 1,000 s a unit, a bound of about three years, 10,000 units wanted.
    let reply = redis.cli(&[
        "EVAL",
        &draw,
        "1",
        "long",
        "1000000000000",
        "100000000000000000",
        "10000",
        "1",
    ]);
    let lead: u64 = 1 << 52;
    let fits = lead / 1_000_000_000_000;
    let after = fits * 1_000_000_000_000;
    assert_eq!(
        words(&reply),
        format!("{fits} {after}"),
        "as many as fit the cap"
    );
    let ttl: u64 = redis.cli(&["PTTL", "long"]).trim().parse().expect("a TTL");
    assert!(
        ttl <= lead / 1_000_000 + 1,
        "expires within the cap: {ttl} ms"
    );
}

/// `slice.lua` asked for 25 units of `hot:acme` (T = 1 s, tau = 100 s, need 1, no lead),
/// giving back `give_ns` of the slice that left `give_end`, with `deadline` (`s:ns`).
fn slice_fetch(redis: &RedisServer, (give_ns, give_end): (&str, &str), deadline: &str) -> String {
    let slice = loaded(include_str!("../../src/store/rate/lease/slice.lua"));
    let reply = redis.cli(&[
        "EVAL",
        &slice,
        "1",
        "hot:acme",
        "1000000000",
        "100000000000",
        "25",
        "1",
        give_ns,
        give_end,
        "0",
        deadline,
    ]);
    words(&reply)
}

/// `slice.lua` run after the deadline its gateway sent (the server was frozen, the call
/// resent after a broken connection) grants nothing and writes nothing; before it, the
/// slice is granted.
#[tokio::test]
async fn a_slice_fetch_run_past_its_deadline_grants_nothing() {
    let redis = RedisServer::start();
    let now = redis_now(&redis);
    let late = slice_fetch(&redis, ("0", ""), &format!("{}:000000000", now - 5));
    assert_eq!(late.split(' ').next(), Some("2"), "too late: {late}");
    assert_eq!(late.split(' ').count(), 3, "with the server's time: {late}");
    assert_eq!(
        redis.cli(&["EXISTS", "hot:acme"]).trim(),
        "0",
        "nothing written"
    );
    let in_time = slice_fetch(&redis, ("0", ""), &format!("{}:000000000", now + 60));
    assert_eq!(in_time.split(' ').next(), Some("25"), "{in_time}");
    assert_eq!(redis.cli(&["EXISTS", "hot:acme"]).trim(), "1");
}

/// A late fetch still gives back the old slice it names (its gateway gave it up either
/// way): only the new grant is refused.
#[tokio::test]
async fn a_late_slice_fetch_still_gives_back_the_old_slice() {
    let redis = RedisServer::start();
    let now = redis_now(&redis);
    let granted = slice_fetch(&redis, ("0", ""), &format!("{}:000000000", now + 60));
    let end = granted.split(' ').nth(3).expect("end").to_owned();
    // 25 units of 1 s held; all 25 given back by a fetch that comes too late.
    let late = slice_fetch(
        &redis,
        ("25000000000", &end),
        &format!("{}:000000000", now - 5),
    );
    assert_eq!(late.split(' ').next(), Some("2"), "{late}");
    assert_eq!(
        redis.cli(&["EXISTS", "hot:acme"]).trim(),
        "0",
        "given back whole"
    );
}
