//! One Envoy's RLQS buckets that one key limits — the addresses of one IPv6 network under
//! an `ip/64` policy, which Envoy buckets apart by `remote_address` — split the Envoy's
//! share of the key between them: N buckets are given the key once, not N times, and the
//! buckets already holding it are re-sized when another joins.

use crate::support::*;

/// `net`: 10 a second, burst 20, keyed by `ip/64`; RLQS buckets keyed by the `client` of
/// Envoy's bucket id, assigned for 10 s.
fn config() -> String {
    Fixture::new()
        .policy("net", "ip/64", 10, "1s", 20)
        .route("api", "/", "api", &["net"])
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n[[rlqs.buckets]]\ndomain = \"edge\"\n\
             bucket = [\"client\"]\npolicy = \"net\"\nassignment_ttl = \"10s\"\n",
        )
        .build()
}

fn client(action: &BucketAction) -> String {
    action.bucket_id.as_ref().expect("id").bucket["client"].clone()
}

/// The token buckets `actions` gave (most tokens, tokens a fill, seconds a fill), by
/// client.
fn buckets(actions: &[BucketAction]) -> Vec<(String, u32, u32, i64)> {
    let mut told: Vec<(String, u32, u32, i64)> = actions
        .iter()
        .map(|a| match a.told() {
            Told::Bucket(max, per_fill, fill_s, 10) => (client(a), max, per_fill, fill_s),
            other => panic!("{}: {other:?}", client(a)),
        })
        .collect();
    told.sort();
    told
}

#[tokio::test]
async fn buckets_of_one_network_split_one_share_of_its_key() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(), &up.url()).await;
    let mut envoy = RlqsStream::open(gw.rls.expect("[rls] listens")).await;
    let (a, b) = ("2001:db8:7:7::1", "2001:db8:7:7:ffff::2");
    let first = |ip| usage(&[("client", ip)], 1, 0, 0);
    // `a` was answered alone, then `b` joined the key: the report's answer holds both
    // re-sized to halves of what is free (18) and of the rate, `a` in place.
    let halves = [(a.to_owned(), 9, 5, 1), (b.to_owned(), 9, 5, 1)];
    let answered = envoy.ask("edge", vec![first(a), first(b)]).await;
    assert_eq!(answered.len(), 2, "one action a bucket");
    assert_eq!(buckets(&answered), halves);
    // Reported again idle: halves again, not a sliver for the one answered first. The
    // next network is another key.
    let again = |ip| usage(&[("client", ip)], 0, 0, 5);
    assert_eq!(
        buckets(&envoy.ask("edge", vec![again(a), again(b)]).await),
        halves
    );
    // A report naming one of them answers it alone: its sibling's share did not change.
    assert_eq!(
        buckets(&envoy.ask("edge", vec![again(a)]).await),
        [halves[0].clone()]
    );
    let other = "2001:db8:7:8::1";
    let alone = envoy.ask("edge", vec![first(other)]).await;
    assert_eq!(buckets(&alone), [(other.to_owned(), 19, 10, 1)]);
}

/// `n` addresses of one /64, idle for 5 s.
fn idle(n: usize) -> Vec<Usage> {
    (1..=n)
        .map(|i| usage(&[("client", &format!("2001:db8:9:9::{i:x}"))], 0, 0, 5))
        .collect()
}

#[tokio::test]
async fn many_siblings_hold_no_more_than_the_key_starve_no_other_envoy_and_split_by_demand() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(), &up.url()).await;
    let mut one = RlqsStream::open(gw.rls.expect("[rls] listens")).await;
    // Five: a fifth each of the burst (20) and of the rate (10).
    let fifths = buckets(&one.ask("edge", idle(5)).await);
    assert_eq!(fifths.len(), 5);
    assert!(
        fifths
            .iter()
            .all(|&(_, max, per_fill, fill)| (max, per_fill, fill) == (4, 2, 1)),
        "{fifths:?}"
    );
    // Forty: under one token and one a second each. Not a token each (40 beyond a
    // burst of 20), not none for good: one of them has the Envoy's whole share, the
    // rest are refused for the TTL.
    let many = one.ask("edge", idle(40)).await;
    assert_eq!(many.len(), 40, "one action a bucket");
    let told: Vec<Told> = many.iter().map(BucketAction::told).collect();
    let refused = told.iter().filter(|t| **t == Told::DenyAll(10)).count();
    let given: Vec<&Told> = told.iter().filter(|t| **t != Told::DenyAll(10)).collect();
    assert_eq!(
        (refused, given),
        (39, vec![&Told::Bucket(20, 10, 1, 10)]),
        "{told:?}"
    );
    // Idle siblings are the least demand once, not forty times: another Envoy asking for
    // ten a second gets nearly all of the key.
    let mut two = RlqsStream::open(gw.rls.expect("[rls] listens")).await;
    let busy = usage(&[("client", "2001:db8:9:9::ffff")], 0, 50, 5);
    let told = buckets(&two.ask("edge", vec![busy]).await);
    assert_eq!(told, [("2001:db8:9:9::ffff".to_owned(), 19, 9, 1)]);
    // The first Envoy is pushed its sliver at once, still one bucket's worth: only the
    // bucket whose share changed (the refused ones are refused still).
    let pushed: Vec<Told> = (one.next().await.expect("a re-size").actions.iter())
        .map(BucketAction::told)
        .collect();
    assert_eq!(pushed, [Told::Bucket(1, 1, 11, 10)]);
    // Demand splits an Envoy's share between its buckets: the busy one of forty has
    // all of the first Envoy's part, the idle rest none. Its part is half of the rate
    // (10 of 20 asked for) at once, but of the burst only the room the second Envoy
    // leaves: it was told 19 of the 20 and may still spend them (its usage is not
    // reported yet), so the first starts full at one fill, not at half the key.
    let mut reports = idle(40);
    reports[0] = usage(&[("client", "2001:db8:9:9::1")], 0, 50, 5);
    let busy_one = |split: &[BucketAction]| {
        assert_eq!(split.len(), 40);
        let mut busy = None;
        for action in split {
            match client(action).as_str() {
                "2001:db8:9:9::1" => busy = Some(action.told()),
                other => assert_eq!(action.told(), Told::DenyAll(10), "{other}"),
            }
        }
        busy.expect("the busy bucket is answered")
    };
    assert_eq!(
        busy_one(&one.ask("edge", reports.clone()).await),
        Told::Bucket(4, 4, 1, 10)
    );
    // The first's part of the key's demand grew (a sliver to half): the second is pushed
    // its smaller share at once, not left at 9 a second until its next report.
    let pushed = two.next().await.expect("a re-size").actions;
    assert_eq!(
        buckets(&pushed),
        [("2001:db8:9:9::ffff".to_owned(), 10, 5, 1)]
    );
    // The second reports itself idle: shrunk to its sliver, it leaves the room, and the
    // first's next report has its half of the burst.
    let idle_two = usage(&[("client", "2001:db8:9:9::ffff")], 0, 0, 5);
    let told = buckets(&two.ask("edge", vec![idle_two]).await);
    assert_eq!(told, [("2001:db8:9:9::ffff".to_owned(), 1, 1, 11)]);
    let Told::Bucket(max, per_fill, ..) = busy_one(&one.ask("edge", reports).await) else {
        panic!("a bucket")
    };
    assert!(max >= 9 && per_fill >= 4, "{max}/{per_fill}");
}

#[tokio::test]
async fn a_quiet_sibling_asking_beside_a_busy_one_is_not_refused_for_as_long_as_it_asks() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(), &up.url()).await;
    let mut envoy = RlqsStream::open(gw.rls.expect("[rls] listens")).await;
    let (busy, quiet) = ("2001:db8:5:5::1", "2001:db8:5:5::2");
    // Eight a second and one in five seconds: the quiet part of the Envoy's share is
    // under a token now and one a second. It was refused for as long as its busy
    // sibling asked; it has a token a second out of the busy one's part now (the busy
    // one less after the second report, the key in debt), and the two hold no more than
    // the key refills.
    // The gateway's clock stands still: what the second report leaves the key (in debt
    // for the first's 41 as well) is the same every run.
    let rounds = [
        [(busy.to_owned(), 8, 8, 1), (quiet.to_owned(), 1, 1, 1)],
        [(busy.to_owned(), 7, 7, 1), (quiet.to_owned(), 1, 1, 1)],
    ];
    for expected in rounds {
        let reports = vec![
            usage(&[("client", busy)], 40, 0, 5),
            usage(&[("client", quiet)], 1, 0, 5),
        ];
        // (`buckets` fails on a refusal.)
        assert_eq!(buckets(&envoy.ask("edge", reports).await), expected);
    }
}

/// Two quiet siblings beside a busy one take turns at the pool: the one that has it keeps
/// it for the period, asking or not. A client flipping made-up siblings between asking
/// and idle at every report would otherwise move it, and a bucket starting full, at each
/// report. (The gateway's clock stands still: one period throughout, and a busy sibling
/// at two a second keeps the key out of debt over the five reports.)
#[tokio::test]
async fn the_pool_of_quiet_siblings_stays_with_one_for_its_period() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(), &up.url()).await;
    let mut envoy = RlqsStream::open(gw.rls.expect("[rls] listens")).await;
    let (busy, a, b) = ("2001:db8:6:6::1", "2001:db8:6:6::a", "2001:db8:6:6::b");
    let report = |quiet: [(&'static str, u64); 2]| {
        let mut reports = vec![usage(&[("client", busy)], 10, 0, 5)];
        reports.extend(quiet.map(|(ip, allowed)| usage(&[("client", ip)], allowed, 0, 5)));
        reports
    };
    let given = |actions: &[BucketAction]| -> Vec<String> {
        let quiet = actions.iter().filter(|a| client(a) != busy);
        let given = quiet.filter(|a| !matches!(a.told(), Told::DenyAll(_)));
        given.map(client).collect()
    };
    let first = given(&envoy.ask("edge", report([(a, 1), (b, 1)])).await);
    assert_eq!(first.len(), 1, "{first:?}");
    let (holder, other) = if first[0] == a { (a, b) } else { (b, a) };
    // Swapped between asking and idle, report after report: the holder keeps it.
    for flip in [[(holder, 0), (other, 1)], [(holder, 1), (other, 0)]].repeat(2) {
        let told = envoy.ask("edge", report(flip)).await;
        assert_eq!(given(&told), [holder], "{flip:?}");
    }
}

/// Spellings of one value that the charge reads as one key (spaces and tabs around it,
/// as the HTTP door reads a header) are siblings among the holders too: a bucket id of
/// ` acme`, `acme` and `acme\t` is given the key's share once, split three ways, not
/// the whole of it three times.
#[tokio::test]
async fn spellings_of_one_value_split_one_share() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy("tenant", "header:x-tenant", 10, "1s", 20)
        .route("api", "/", "api", &["tenant"])
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n[[rlqs.buckets]]\ndomain = \"edge\"\n\
             bucket = [\"tenant\"]\npolicy = \"tenant\"\nassignment_ttl = \"10s\"\n",
        )
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut envoy = RlqsStream::open(gw.rls.expect("[rls] listens")).await;
    let spellings = ["acme", " acme", "acme\t"];
    let first: Vec<Usage> = spellings
        .iter()
        .map(|t| usage(&[("tenant", t)], 1, 0, 0))
        .collect();
    let answered = envoy.ask("edge", first).await;
    assert_eq!(answered.len(), 3, "one action a bucket");
    let most: u32 = answered
        .iter()
        .map(|a| match a.told() {
            Told::Bucket(max, ..) => max,
            other => panic!("{other:?}"),
        })
        .sum();
    assert!(
        most <= 17,
        "20 less the 3 charged, shared: {most} told in all"
    );
}
