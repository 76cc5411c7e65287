//! The areas of the embedded store across reloads: each quota policy's own, kept while
//! it leaves and comes back, started over when another takes it.

use super::areas::*;

#[test]
fn quota_policies_share_half_the_bound_and_keep_their_areas() {
    let areas = Areas::new(1024, 16);
    assert_eq!(
        areas.shard_cap(0),
        64,
        "no quota: every key may be a rate key"
    );
    areas.arrange(&[("monthly", "month".into()), ("daily", "day".into())]);
    let (m, d) = (areas.tag("monthly"), areas.tag("daily"));
    assert!(m != 0 && d != 0 && m != d);
    assert_eq!(areas.tag("rate"), 0);
    assert_eq!(areas.shard_cap(area_of(m)), 1024 / 2 / 2 / QUOTA_SHARDS);
    assert_eq!(areas.shard_cap(0), 512 / 16);
    areas.raise_floor(area_of(m), 77);
    areas.arrange(&[("monthly", "month".into())]);
    assert_eq!(areas.tag("monthly"), m, "kept across a reload");
    assert_eq!(areas.tag("daily"), 0, "freed");
    assert_eq!(areas.floor(area_of(m)), 77);
    areas.arrange(&[("monthly", "day".into())]);
    assert_eq!(
        areas.floor(area_of(m)),
        0,
        "a new calendar starts without a floor"
    );
}

/// A quota policy taken out by one reload and put back by a later one, another
/// policy added between: it gets its own area back, floor and keys as they were, not
/// the next free one (where every key would start over). In another order too.
#[test]
fn a_policy_that_comes_back_finds_its_area() {
    let areas = Areas::new(1024, 16);
    let month = || "month".to_owned();
    areas.arrange(&[("trial", month()), ("pro", month())]);
    let trial = area_of(areas.tag("trial"));
    areas.raise_floor(trial, 42);
    areas.arrange(&[("pro", month())]);
    areas.arrange(&[("pro", month()), ("enterprise", month())]);
    assert_ne!(
        area_of(areas.tag("enterprise")),
        trial,
        "a remembered area waits"
    );
    areas.arrange(&[
        ("trial", month()),
        ("enterprise", month()),
        ("pro", month()),
    ]);
    assert_eq!(area_of(areas.tag("trial")), trial);
    assert_eq!(areas.floor(trial), 42);
    assert_eq!(areas.take_stale(trial), None, "its keys are its own");
    // Back under another calendar: its area, started over.
    areas.arrange(&[("pro", month())]);
    areas.arrange(&[("pro", month()), ("trial", "day".into())]);
    assert_eq!(area_of(areas.tag("trial")), trial);
    assert_eq!(areas.floor(trial), 0);
    assert_eq!(areas.take_stale(trial), Some(Stale::OtherCalendar));
}

/// Every free area remembered by a policy that left: a new policy takes one, and the
/// policy that held it, coming back, gets another that is started over.
#[test]
fn a_remembered_area_given_away_is_forgotten() {
    let areas = Areas::new(1024, 16);
    let all: Vec<(String, String)> = (1..AREAS)
        .map(|i| (format!("q{i}"), "month".to_owned()))
        .collect();
    let named = |skip: &str, extra: Option<&'static str>| {
        let mut list: Vec<(&str, String)> = (all.iter())
            .filter(|(n, _)| n != skip)
            .map(|(n, c)| (n.as_str(), c.clone()))
            .collect();
        list.extend(extra.map(|n| (n, "month".to_owned())));
        list
    };
    areas.arrange(&named("", None));
    let first = area_of(areas.tag("q1"));
    areas.raise_floor(first, 9);
    areas.arrange(&named("q1", None));
    areas.arrange(&named("q1", Some("new")));
    assert_eq!(area_of(areas.tag("new")), first, "the only free area");
    assert_eq!(areas.floor(first), 0);
    assert_eq!(areas.take_stale(first), Some(Stale::OtherPolicy));
    areas.arrange(&named("new", Some("q1")));
    assert_eq!(
        area_of(areas.tag("q1")),
        first,
        "free again, but started over"
    );
    assert_eq!(areas.take_stale(first), Some(Stale::OtherPolicy));
    assert_eq!(areas.floor(first), 0);
}

/// Every area held; two policies leave; one comes back in the reload that adds a new
/// one listed before it: the one coming back gets its own area, the new one the
/// other free area (the lowest free area is the one coming back's).
#[test]
fn a_policy_coming_back_is_served_before_a_new_one() {
    let areas = Areas::new(1024, 16);
    let all: Vec<String> = (1..AREAS).map(|i| format!("q{i}")).collect();
    let month = || "month".to_owned();
    let arrange = |names: &[&str]| {
        let list: Vec<(&str, String)> = names.iter().map(|n| (*n, month())).collect();
        areas.arrange(&list);
    };
    let every: Vec<&str> = all.iter().map(String::as_str).collect();
    arrange(&every);
    let (q1, q2) = (area_of(areas.tag("q1")), area_of(areas.tag("q2")));
    assert!(q1 < q2);
    areas.raise_floor(q1, 7);
    arrange(&every[2..]);
    let mut back = vec!["new", "q1"];
    back.extend_from_slice(&every[2..]);
    arrange(&back);
    assert_eq!(
        area_of(areas.tag("q1")),
        q1,
        "its own, though `new` came first"
    );
    assert_eq!(areas.floor(q1), 7);
    assert_eq!(areas.take_stale(q1), None);
    assert_eq!(
        area_of(areas.tag("new")),
        q2,
        "the area nobody came back for"
    );
}

#[test]
fn a_hash_keeps_its_low_bits_in_an_area() {
    let h = 0xdead_beef_cafe_f00d;
    let tagged = in_area(h, 5 << AREA_SHIFT);
    assert_eq!(area_of(tagged), 5);
    assert_eq!(tagged & !AREA_MASK, h & !AREA_MASK);
    assert_eq!(area_of(in_area(h, 0)), 0);
}

/// A quota policy turned into a rate and back starts its keys afresh: its old area is not
/// given back as it was (a removed and restored policy's is), but emptied when given.
#[test]
fn a_policy_turned_into_another_kind_and_back_starts_afresh() {
    let areas = Areas::new(1024, 16);
    areas.arrange(&[("plan", "month".into())]);
    let area = area_of(areas.tag("plan"));
    areas.raise_floor(area, 77);
    areas.arrange(&[]);
    areas.forget_turned(["plan"]);
    areas.arrange(&[("plan", "month".into())]);
    let again = area_of(areas.tag("plan"));
    assert_ne!(again, 0, "a quota again, with an area of its own");
    assert_eq!(areas.floor(again), 0, "no floor of the usage it left");
    if again == area {
        assert!(areas.take_stale(area).is_some(), "its old keys are emptied");
    }
}
