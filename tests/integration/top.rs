//! Who is limited: `GET /admin/top` finds the key a flood comes from among thousands of
//! others, with counts it can vouch for, and holds a fixed number of counters however many
//! keys there are; `tollgate top --once` prints the same table.

use std::time::Duration;

use tollgate::clock::Clock as _;

use crate::support::*;

fn gateway_toml() -> String {
    Fixture::new()
        .server("workers = 1")
        .policy("tenant", "header:x-k", 1, "1h", 1)
        .route("api", "/", "api", &["tenant"])
        .build()
}

#[tokio::test]
async fn the_flooding_key_tops_the_list_among_thousands() {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&gateway_toml(), &up.url()).await;
    flood_among_thousands(&gw.url("/")).await;
    let answer = get(&gw.admin_url("/admin/top?policy=tenant&n=100"), &[]).await;
    let covered: u64 = (answer.header("x-tollgate-top-window").unwrap_or_default())
        .parse()
        .expect("seconds");
    assert!(
        (1..=300).contains(&covered),
        "the seconds since the start, within the window: {covered}"
    );
    check_flooder_first(&answer.json());

    // Unknown policies and bad counts are refused.
    assert_eq!(
        get(&gw.admin_url("/admin/top?policy=nope"), &[])
            .await
            .status,
        404
    );
    assert_eq!(get(&gw.admin_url("/admin/top?n=0"), &[]).await.status, 400);
    check_the_terminal_view(&gw).await;
    let _ = Duration::ZERO;
}

/// 2,000 other keys, twice each (the second refused), the flooder 300 times among them.
async fn flood_among_thousands(url: &str) {
    let client = http1();
    let mut flooder = 0;
    for i in 0..2_000 {
        let other = format!("user-{i}");
        for _ in 0..2 {
            send(&client, "GET", url, &[("x-k", &other)], b"").await;
        }
        if i % 7 == 0 && flooder < 300 {
            for _ in 0..2 {
                send(&client, "GET", url, &[("x-k", "flooder")], b"").await;
                flooder += 1;
            }
        }
    }
    while flooder < 300 {
        send(&client, "GET", url, &[("x-k", "flooder")], b"").await;
        flooder += 1;
    }
}

/// The flooder heads a list of at most 64 counters, with counts it can vouch for and its
/// current state.
fn check_flooder_first(top: &serde_json::Value) {
    let keys = top.as_array().expect("an array of keys");
    assert!(
        keys.len() <= 64,
        "a fixed number of counters: {}",
        keys.len()
    );
    let first = &keys[0];
    assert_eq!(first["key"], serde_json::json!(["flooder"]), "{top}");
    let refused = first["refused"].as_u64().expect("refused");
    let uncounted = first["uncounted_at_most"].as_u64().expect("bound");
    assert!(
        refused <= 299 && 299 <= refused + uncounted,
        "299 refusals within [{refused}, {refused} + {uncounted}]"
    );
    assert_eq!(first["remaining"], 0, "its current state: {first}");
    assert!(first["next_admit_ms"].as_u64().expect("wait") > 0);
    let last = first["last_refused"].as_str().expect("last_refused");
    let last: jiff::Timestamp = last.parse().expect("RFC 3339");
    let age = jiff::Timestamp::now().duration_since(last);
    assert!(
        age.as_secs() >= 0 && age.as_secs() < 600,
        "refused moments ago: {last}"
    );
}

/// The terminal view, once (`tollgate top --once`): the same first key.
async fn check_the_terminal_view(gw: &TestGateway) {
    let admin = gw
        .admin_url("")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
            .args(["top", "--admin", &admin, "--once"])
            .env_remove("TOLLGATE_ADMIN_TOKEN")
            .output()
            .expect("run tollgate top")
    })
    .await
    .expect("join");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = text
        .lines()
        .find(|l| l.contains("flooder"))
        .unwrap_or_default();
    assert!(row.contains("tenant"), "{text}");
}

/// A key of 44 to 48 bytes (a base64 of 32 random bytes is 44: a common API key) is shown
/// whole, with its state; only a longer one is cut, and says so.
#[tokio::test]
async fn a_key_that_fits_is_shown_whole_with_its_state_and_a_longer_one_cut() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&gateway_toml(), &up.url()).await;
    let fits = "A".repeat(48);
    let long = "B".repeat(60);
    for key in [&fits[..44], &fits[..], &long[..]] {
        assert_eq!(get(&gw.url("/"), &[("x-k", key)]).await.status, 200);
    }
    let rows = get(&gw.admin_url("/admin/top?policy=tenant"), &[])
        .await
        .json();
    let row = |text: &str| {
        rows.as_array()
            .and_then(|r| r.iter().find(|k| k["key"][0] == text))
            .cloned()
            .unwrap_or_else(|| panic!("{text} in {rows:#}"))
    };
    for key in [&fits[..44], &fits[..]] {
        let shown = row(key);
        assert_eq!(shown["truncated"], false, "{shown}");
        assert_eq!(shown["remaining"], 0, "its state: {shown}");
    }
    let cut = row(&long[..48]);
    assert_eq!(cut["truncated"], true, "{cut}");
    assert!(cut["remaining"].is_null(), "no state for a cut key: {cut}");
}

/// `x-tollgate-top-window` says what the counts cover: the seconds since the sketches
/// began (the start, a reload) until a whole window has passed, then the window — not the
/// window's length right after a reload emptied them.
#[tokio::test]
async fn the_window_header_says_what_the_counts_cover() {
    const S: u64 = 1_000_000_000;
    let up = Upstream::start().await;
    let gw = TestGateway::start(&gateway_toml(), &up.url()).await;
    let covered = || async {
        let answer = get(&gw.admin_url("/admin/top"), &[]).await;
        answer.header("x-tollgate-top-window").map(str::to_owned)
    };
    assert_eq!(covered().await.as_deref(), Some("0"));
    gw.advance(100 * S);
    assert_eq!(covered().await.as_deref(), Some("100"));
    // Past a window: the half filling and the one before, 150 to 300 s by where now is
    // in its half.
    gw.advance(400 * S);
    let halves = (150 * S + gw.clock.now_ns() % (150 * S)).div_ceil(S);
    assert!((150..=300).contains(&halves));
    assert_eq!(covered().await, Some(halves.to_string()));
    let toml = gateway_toml().replace("burst = 1", "burst = 2");
    assert_ne!(toml, gateway_toml(), "a change to reload");
    gw.rewrite(&toml, &up.url());
    let reload = send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await;
    assert_eq!(reload.status, 200, "{}", reload.text());
    assert_eq!(
        covered().await.as_deref(),
        Some("0"),
        "the sketches start afresh"
    );
    gw.advance(S / 2);
    assert_eq!(covered().await.as_deref(), Some("1"), "rounded up");
}
