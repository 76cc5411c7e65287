//! The Redis scripts themselves, run alone by a real Redis: a settle refunds nothing into
//! a later window nor after its key's reset, a rollback takes back only its own charge
//! (not after a reset, not out of the next window) and each runs once given its one-time
//! key, and `gcra.lua` reads another calendar's TAT as no usage.

use crate::support::*;

/// The server's clock in Unix seconds, as the scripts read it.
fn redis_now(redis: &RedisServer) -> i64 {
    let time = redis.cli(&["TIME"]);
    time.lines()
        .next()
        .expect("seconds")
        .trim()
        .parse()
        .expect("seconds")
}

/// settle.lua on `key` charged at `charged_us` (server µs): `op` ("debt" or "refund") of
/// `ns`, `room` to refund, in `window`, the debt bound just below another calendar's. Its
/// reply, the debt after and whether the reset marker held a refund, as "debt held".
fn settle_at(
    redis: &RedisServer,
    key: &str,
    (op, ns, room): (&str, &str, &str),
    window: &str,
    charged_us: &str,
) -> String {
    // As the gateway loads it: the shared start (tat.lua) before it.
    let settle = [
        include_str!("../../src/store/rate/tat.lua"),
        include_str!("../../src/store/rate/settle.lua"),
    ]
    .concat();
    let marker = format!("{key}:reset");
    let args = [
        "EVAL",
        &settle,
        "2",
        key,
        &marker,
        op,
        ns,
        room,
        "899999999999",
        window,
        charged_us,
    ];
    let reply = redis.cli(&args);
    reply.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// [`settle_at`] with no charge time: the debt alone, no marker held.
fn settle_on(redis: &RedisServer, key: &str, op: (&str, &str, &str), window: &str) -> String {
    let reply = settle_at(redis, key, op, window, "0");
    reply.strip_suffix(" 0").expect("not held").to_owned()
}

#[tokio::test]
async fn settle_lua_refunds_nothing_into_a_later_window() {
    let redis = RedisServer::start();
    let now = redis_now(&redis);
    // A day that ended 100 s ago; the key has used 80 units of the day running now.
    let end = now - 100;
    let (start, next) = (end - 86_400, end + 86_400);
    let window = format!("{start}:{end}:{next}");
    redis.cli(&["SET", "quota-key", &format!("{next}:000000080")]);
    let after = settle_on(&redis, "quota-key", ("refund", "49", "50"), &window);
    assert_eq!(
        after, "80",
        "a reservation of the day that ended gives nothing back"
    );
    assert_eq!(
        redis.cli(&["GET", "quota-key"]).trim(),
        format!("{next}:000000080")
    );
    // Within its own window, the same refund is given.
    let own = format!("{}:{}:{}", now - 10, now + 86_390, now + 2 * 86_400 - 10);
    redis.cli(&["SET", "own-key", &format!("{}:000000080", now + 86_390)]);
    assert_eq!(
        settle_on(&redis, "own-key", ("refund", "49", "50"), &own),
        "31"
    );
    // A debt of a day that ended before yesterday ended: today's usage is left as it is.
    let (old_end, old_next) = (now - 86_500, now - 100);
    let long_gone = format!("{}:{old_end}:{old_next}", old_end - 86_400);
    let today = format!("{}:000000080", now + 86_300);
    redis.cli(&["SET", "today-key", &today]);
    assert_eq!(
        settle_on(&redis, "today-key", ("debt", "40", "0"), &long_gone),
        "0"
    );
    assert_eq!(redis.cli(&["GET", "today-key"]).trim(), today);
}

/// A key reset (reset.lua) at or after a charge holds its refund; one reset before it
/// does not. A debt is charged whatever the marker says.
#[tokio::test]
async fn settle_lua_refunds_nothing_after_a_reset_of_its_key() {
    let redis = RedisServer::start();
    let tat = include_str!("../../src/store/rate/tat.lua");
    let now = redis_now(&redis);
    let own = format!("{}:{}:{}", now - 10, now + 86_390, now + 2 * 86_400 - 10);
    // A key reset (reset.lua) at or after the charge refunds nothing; one reset before
    // the charge does. The marker holds the server's µs as digits.
    let reset = &[tat, include_str!("../../src/store/rate/reset.lua")].concat();
    let used = format!("{}:000000080", now + 86_390);
    redis.cli(&["SET", "reset-key", &used]);
    redis.cli(&["EVAL", reset, "2", "reset-key", "reset-key:reset", "60000"]);
    assert_eq!(redis.cli(&["EXISTS", "reset-key"]).trim(), "0", "forgotten");
    let marker: u64 = redis
        .cli(&["GET", "reset-key:reset"])
        .trim()
        .parse()
        .expect("µs digits");
    assert!(marker / 1_000_000 >= now as u64, "{marker}");
    let ttl: u64 = redis
        .cli(&["PTTL", "reset-key:reset"])
        .trim()
        .parse()
        .expect("ms");
    assert!(ttl > 0 && ttl <= 60_000, "{ttl}");
    for (charged, after) in [(marker - 1, "80 1"), (marker, "80 1"), (marker + 1, "31 0")] {
        redis.cli(&["SET", "reset-key", &used]);
        let refund = ("refund", "49", "50");
        let got = settle_at(&redis, "reset-key", refund, &own, &charged.to_string());
        assert_eq!(got, after, "charged at {charged}, reset at {marker}");
    }
    // Nothing to give back (a settle at what was charged) holds nothing.
    redis.cli(&["SET", "reset-key", &used]);
    assert_eq!(
        settle_at(&redis, "reset-key", ("refund", "0", "0"), &own, "0"),
        "80 0"
    );
    // A debt is charged whatever the marker says.
    let debt = ("debt", "9", "0");
    assert_eq!(settle_at(&redis, "reset-key", debt, &own, "0"), "89 0");
    // Given its one-time key, a refund sent twice (a Cluster client's retry after a
    // dropped connection) is given once.
    redis.cli(&["DEL", "reset-key:reset"]);
    redis.cli(&["SET", "reset-key", &used]);
    let settle = [tat, include_str!("../../src/store/rate/settle.lua")].concat();
    let refund_once = [
        "EVAL",
        &settle,
        "3",
        "reset-key",
        "reset-key:reset",
        "reset-key:once:1",
        "refund",
        "49",
        "50",
        "899999999999",
        &own,
        "0",
        "10000",
    ];
    let replies: Vec<String> = (0..2)
        .map(|_| {
            redis
                .cli(&refund_once)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    assert_eq!(replies, ["31 0", "31 0"], "refunded once");
    // A hold of 0 leaves no marker.
    redis.cli(&["EVAL", reset, "2", "plain-key", "plain-key:reset", "0"]);
    assert_eq!(redis.cli(&["EXISTS", "plain-key:reset"]).trim(), "0");
}

/// rollback.lua on `rolled-key` as a group's charge left it: the charge at `charged_us`
/// wrote 85 (5 ns past the day's end), the key holds 90 (someone moved it since);
/// `window_end` (Unix s, 0: a rate) and, given, a one-time key kept 10 s. What the key
/// holds after, its last digits.
fn roll_back(
    redis: &RedisServer,
    now: i64,
    charged_us: u64,
    window_end: i64,
    once: Option<&str>,
) -> String {
    let rollback = include_str!("../../src/store/rate/rollback.lua");
    let (charged, end) = (charged_us.to_string(), window_end.to_string());
    let written = format!("{}:000000085", now + 86_390);
    let mut args = vec!["EVAL", rollback, "2", "rolled-key", "rolled-key:reset"];
    if let Some(once) = once {
        args[2] = "3";
        args.push(once);
    }
    args.extend([written.as_str(), "", "1000", "5", &charged, &end]);
    if once.is_some() {
        args.push("10000");
    }
    assert_eq!(redis.cli(&args).trim(), "1");
    let stamp = redis.cli(&["GET", "rolled-key"]).trim().to_owned();
    stamp.rsplit(':').next().unwrap_or_default().to_owned()
}

/// rollback.lua takes a Cluster group's charge back, unless the key was reset since the
/// charge, or the key moved on after the calendar window the charge went into ended.
#[tokio::test]
async fn rollback_lua_takes_a_charge_back_unless_reset_since_or_its_window_ended() {
    let redis = RedisServer::start();
    let now = redis_now(&redis);
    let marker = now as u64 * 1_000_000;
    let later = format!("{}:000000090", now + 86_390);
    for (marker_at, after) in [(marker - 1, "000000085"), (marker + 1, "000000090")] {
        redis.cli(&["SET", "rolled-key", &later]);
        redis.cli(&["SET", "rolled-key:reset", &marker_at.to_string()]);
        let left = roll_back(&redis, now, marker, 0, None);
        assert_eq!(left, after, "reset at {marker_at}");
    }
    // A quota's charge in a window that has ended since: the key, moved by the next
    // window's requests, holds none of it and is left as it is; in the window still
    // running, the charge is taken back.
    redis.cli(&["DEL", "rolled-key:reset"]);
    for (window_end, after) in [(now - 10, "000000090"), (now + 3_600, "000000085")] {
        redis.cli(&["SET", "rolled-key", &later]);
        let left = roll_back(&redis, now, marker, window_end, None);
        assert_eq!(left, after, "window ending at {window_end}");
    }
    // Given its one-time key, a rollback sent twice (a Cluster client's retry after a
    // dropped connection) takes the charge back once.
    redis.cli(&["SET", "rolled-key", &later]);
    for _ in 0..2 {
        let left = roll_back(&redis, now, marker, 0, Some("rolled-key:once:1"));
        assert_eq!(left, "000000085");
    }
}

/// gcra.lua reads a TAT written under another calendar as no usage of this one.
#[tokio::test]
async fn gcra_lua_reads_another_calendars_tat_as_no_usage() {
    let redis = RedisServer::start();
    let tat = include_str!("../../src/store/rate/tat.lua");
    let gcra = &[tat, include_str!("../../src/store/rate/gcra.lua")].concat();
    let now = redis_now(&redis);
    // A TAT written under a monthly calendar, read by a daily one: 20 days past the
    // day's end is no usage of the day, so a quota of 3 admits.
    let day = format!("{}:{}:{}", now - 10, now + 86_390, now + 2 * 86_400 - 10);
    let month_tat = format!("{}:000000002", now + 86_390 + 20 * 86_400);
    redis.cli(&["SET", "switched-key", &month_tat]);
    let reply = redis.cli(&[
        "EVAL",
        gcra,
        "1",
        "switched-key",
        "1",
        "3",
        "0",
        "0",
        "1",
        &day,
    ]);
    let admitted = reply.lines().nth(2).map(str::trim);
    assert_eq!(admitted, Some("1"), "admitted: {reply}");
    let stored = redis.cli(&["GET", "switched-key"]);
    assert_eq!(
        stored.trim(),
        format!("{:012}:000000001", now + 86_390),
        "the day's first unit, from the day's end, with a quota's mark"
    );
}

/// slice.lua refuses a need whose wait passes what a Redis integer holds (2^40 units of
/// 10 ms: 1.1 × 10^19 ns) with a wait, capped, never a negative number a gateway reads as
/// a broken reply (which would count against the breaker).
#[tokio::test]
async fn slice_lua_refuses_an_absurd_need_with_a_wait_it_can_reply() {
    let redis = RedisServer::start();
    let tat = include_str!("../../src/store/rate/tat.lua");
    let slice = &[tat, include_str!("../../src/store/rate/lease/slice.lua")].concat();
    let need = (1u64 << 40).to_string();
    let reply = redis.cli(&[
        "EVAL",
        slice,
        "1",
        "absurd-key",
        "10000000",
        "10000000",
        &need,
        &need,
        "0",
        "",
        "0",
    ]);
    let lines: Vec<&str> = reply.lines().map(str::trim).collect();
    assert_eq!(lines.first(), Some(&"0"), "refused: {reply}");
    let wait: i64 = lines.get(1).and_then(|w| w.parse().ok()).expect("a wait");
    assert_eq!(wait, 1 << 53, "capped where doubles are exact: {reply}");
}

/// draw.lua the same, for a body's frame on a key an override throttled to one unit a
/// week (T = 6 × 10^14 ns): 16,384 units need 9.9 × 10^18 ns, past 2^63.
#[tokio::test]
async fn draw_lua_refuses_a_frame_on_a_throttled_key_with_a_wait_it_can_reply() {
    let redis = RedisServer::start();
    let tat = include_str!("../../src/store/rate/tat.lua");
    let draw = &[tat, include_str!("../../src/store/rate/draw.lua")].concat();
    let week = (7u64 * 86_400 * 1_000_000_000).to_string();
    let reply = redis.cli(&[
        "EVAL",
        draw,
        "1",
        "throttled",
        &week,
        &week,
        "16384",
        "16384",
    ]);
    let lines: Vec<&str> = reply.lines().map(str::trim).collect();
    assert_eq!(lines.first(), Some(&"0"), "refused: {reply}");
    let wait: i64 = lines.get(1).and_then(|w| w.parse().ok()).expect("a wait");
    assert_eq!(wait, 1 << 53, "capped where doubles are exact: {reply}");
}

/// A concurrency slot's take sent twice with one lease id (a resend after a broken
/// connection, whose first reply was never read) holds the slot it took, not "full".
#[tokio::test]
async fn slot_lease_lua_takes_a_resent_lease_once() {
    let redis = RedisServer::start();
    let lease = include_str!("../../src/store/concurrency/slot_lease.lua");
    let take = |id: &str| {
        let reply = redis.cli(&["EVAL", lease, "1", "cap", "take", id, "1", "60000"]);
        reply
            .lines()
            .map(|l| l.trim().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(take("lease-a"), ["1", "1"]);
    assert_eq!(take("lease-a"), ["1", "1"], "the resend holds the one slot");
    assert_eq!(take("lease-b"), ["0", "1"], "another lease finds it full");
}

/// gcra.lua decides nothing for a quota whose window is a window or more off the server's
/// clock (the gateway's wall clock set days wrong): measured from that window, the key's
/// usage would read as another calendar's — none — and every request be admitted.
#[tokio::test]
async fn gcra_lua_decides_nothing_for_a_window_days_off_the_servers_clock() {
    let redis = RedisServer::start();
    let tat = include_str!("../../src/store/rate/tat.lua");
    let gcra = &[tat, include_str!("../../src/store/rate/gcra.lua")].concat();
    let now = redis_now(&redis);
    let day = |start: i64| format!("{}:{}:{}", start, start + 86_400, start + 2 * 86_400);
    let today = now - now.rem_euclid(86_400);
    for (window, decided) in [
        (day(today), true),
        // A moment off at a boundary either way: still the server's day.
        (day(today - 86_400), true),
        (day(today + 86_400), true),
        // Days off: nothing decided, nothing written.
        (day(today - 3 * 86_400), false),
        (day(today + 3 * 86_400), false),
    ] {
        redis.cli(&["DEL", "skewed-key"]);
        let reply = redis.cli(&[
            "EVAL",
            gcra,
            "1",
            "skewed-key",
            "1",
            "3",
            "0",
            "0",
            "1",
            &window,
        ]);
        let flag = reply.lines().nth(2).map(str::trim);
        let written = !redis.cli(&["GET", "skewed-key"]).trim().is_empty();
        if decided {
            assert_eq!(flag, Some("1"), "{window}: admitted: {reply}");
            assert!(written, "{window}");
        } else {
            assert_eq!(flag, Some("3"), "{window}: off the server's clock: {reply}");
            assert!(!written, "{window}: nothing written");
        }
    }
}
