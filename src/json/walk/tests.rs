use super::*;
use proptest::prelude::*;

fn ptr(text: &str) -> JsonPointer {
    text.parse().expect("pointer")
}

fn found<'a>(body: &'a [u8], pointers: &'a [JsonPointer]) -> Result<BodyFacts<'a>, NotJson> {
    let refs: Vec<&JsonPointer> = pointers.iter().collect();
    let mut facts = BodyFacts::default();
    walk(body, &refs, &mut facts).map(|()| facts)
}

fn texts(facts: &BodyFacts<'_>, p: &JsonPointer) -> Vec<String> {
    facts
        .values(p)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

#[test]
fn every_pointer_is_found_in_one_pass() {
    let pointers = [
        ptr("/model"),
        ptr("/params/name"),
        ptr("/messages/1/role"),
        ptr("/n"),
        ptr("/stream"),
        ptr("/absent"),
    ];
    let body = br#"{"model":"gpt-4o-mini","n":2,"stream":true,"messages":[{"role":"system"},{"role":"user"}],"params":{"name":"search","arguments":{"name":"no"}}}"#;
    let facts = found(body, &pointers).expect("json");
    assert_eq!(texts(&facts, &pointers[0]), ["gpt-4o-mini"]);
    assert_eq!(texts(&facts, &pointers[1]), ["search"]);
    assert_eq!(texts(&facts, &pointers[2]), ["user"]);
    assert_eq!(texts(&facts, &pointers[3]), ["2"]);
    assert_eq!(texts(&facts, &pointers[4]), ["true"]);
    assert!(texts(&facts, &pointers[5]).is_empty());
    let borrowed = facts.values(&pointers[0]).next().unwrap();
    assert!(
        std::ptr::eq(borrowed.as_ptr(), body[10..].as_ptr()),
        "a plain string is borrowed from the body"
    );
}

#[test]
fn a_member_given_twice_yields_both_values_and_escapes_are_decoded() {
    let pointers = [ptr("/model")];
    let facts = found(
        br#"{"model":"cheap","mod\u0065l":"dear","model":"cheap"}"#,
        &pointers,
    )
    .expect("json");
    assert_eq!(texts(&facts, &pointers[0]), ["cheap", "dear"]);
}

#[test]
fn what_is_not_one_json_value_finds_nothing() {
    let pointers = [ptr("/model")];
    for body in [
        &b""[..],
        b"{\"model\":\"a\"",
        b"model=a",
        b"{\"model\":\"a\",}",
    ] {
        assert_eq!(found(body, &pointers).err(), Some(NotJson), "{body:?}");
    }
    // Skipped values are skipped without recursion: deep nesting elsewhere is fine.
    let deep = format!(
        "{{\"x\":{}{},\"model\":\"m\"}}",
        "[".repeat(500),
        "]".repeat(500)
    );
    let facts = found(deep.as_bytes(), &pointers).expect("json");
    assert_eq!(texts(&facts, &pointers[0]), ["m"]);
}

#[test]
fn a_number_is_its_value_however_it_is_spelled() {
    // A key is the number, not its spelling: `100`, `100.0`, `1e2` and `1.00E+2` are one
    // tenant, so re-spelling a number gets no fresh bucket.
    let pointers = [ptr("/t")];
    for body in [
        r#"{"t":100}"#,
        r#"{"t":100.0}"#,
        r#"{"t":1e2}"#,
        r#"{"t":1.00E+2}"#,
    ] {
        let facts = found(body.as_bytes(), &pointers).expect("json");
        assert_eq!(texts(&facts, &pointers[0]), ["100"], "{body}");
    }
    for zero in [r#"{"t":0}"#, r#"{"t":-0}"#, r#"{"t":-0.0}"#, r#"{"t":0e5}"#] {
        let facts = found(zero.as_bytes(), &pointers).expect("json");
        assert_eq!(texts(&facts, &pointers[0]), ["0"], "{zero}");
    }
    let facts = found(br#"{"t":-2.5}"#, &pointers).expect("json");
    assert_eq!(texts(&facts, &pointers[0]), ["-2.5"]);
}

#[test]
fn objects_and_null_at_a_pointer_are_no_value() {
    let pointers = [ptr("/a"), ptr("/a/b")];
    let facts = found(br#"{"a":{"b":null}}"#, &pointers).expect("json");
    assert!(texts(&facts, &pointers[0]).is_empty());
    assert!(texts(&facts, &pointers[1]).is_empty());
}

#[test]
fn too_many_distinct_values_overflow() {
    let pointers = [ptr("/k")];
    let members: Vec<String> = (0..40).map(|i| format!("\"k\":\"v{i}\"")).collect();
    let body = format!("{{{}}}", members.join(","));
    let facts = found(body.as_bytes(), &pointers).expect("json");
    assert!(facts.overflowed());
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        (0u64..1000).prop_map(serde_json::Value::from),
        "[a-c~/\\\\\"é]{0,4}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 40, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            prop::collection::btree_map("[a-c~/]{0,2}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn pointer_text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            "[a-c]{0,2}",
            "[0-3]",
            Just("~0".to_owned()),
            Just("~1".to_owned())
        ],
        1..4,
    )
    .prop_map(|tokens| format!("/{}", tokens.join("/")))
}

proptest! {
    /// Against serde_json's own RFC 6901 look-up on the whole document (no member given
    /// twice, as a map cannot hold two).
    #[test]
    fn the_walk_finds_what_a_dom_lookup_finds(value in json_value(), texts_ in prop::collection::vec(pointer_text(), 1..5)) {
        let body = serde_json::to_vec(&value).unwrap();
        let pointers: Vec<JsonPointer> = texts_.iter().map(|t| ptr(t)).collect();
        let facts = found(&body, &pointers).expect("serde_json wrote it");
        for p in &pointers {
            let expected: Vec<String> = match value.pointer(p.text()) {
                Some(serde_json::Value::String(s)) => vec![s.clone()],
                Some(serde_json::Value::Bool(b)) => vec![b.to_string()],
                Some(serde_json::Value::Number(n)) => vec![n.to_string()],
                _ => vec![],
            };
            prop_assert_eq!(texts(&facts, p), expected, "{} in {}", p, String::from_utf8_lossy(&body));
        }
    }
}

#[test]
fn a_member_named_in_another_case_is_the_pointers_too() {
    // Go's encoding/json fills a struct's `model` from any of these (bytes.EqualFold).
    let pointers = [ptr("/model"), ptr("/key")];
    let facts = found(
        br#"{"Model":"a","MODEL":"b","model":"c","\u212Aey":"k1","mODEL":"a"}"#,
        &pointers,
    )
    .expect("json");
    assert_eq!(texts(&facts, &pointers[0]), ["a", "b", "c"]);
    assert_eq!(
        texts(&facts, &pointers[1]),
        ["k1"],
        "the Kelvin sign folds to k"
    );
    let other = found(
        r#"{"models":"x","mode":"y","modeł":"z"}"#.as_bytes(),
        &pointers,
    )
    .expect("json");
    assert!(texts(&other, &pointers[0]).is_empty());
    assert!(super::names("straße", "STRAßE"));
    assert!(
        !super::names("strasse", "straße"),
        "one letter never folds to two"
    );
    assert!(super::names("σς", "ΣΣ"));
    assert!(super::names("s", "\u{17F}"), "the long s is s");
}

/// What trails the first value is not read, as Go's `json.Decoder` and Jackson do not
/// read it: the keys are the first value's (not missing), and the body kept as JSON is
/// that value alone.
#[test]
fn the_first_value_is_read_and_what_trails_it_is_not() {
    let pointers = [ptr("/model")];
    for (body, first) in [
        (
            &b"{\"model\":\"a\"} trailing"[..],
            &b"{\"model\":\"a\"}"[..],
        ),
        (b"{\"model\":\"a\"}{\"model\":\"b\"}", b"{\"model\":\"a\"}"),
        // Only whitespace after it: one JSON value, kept whole.
        (b" {\"model\":\"a\"}\n", b" {\"model\":\"a\"}\n"),
    ] {
        let facts = found(body, &pointers).expect("json");
        assert_eq!(texts(&facts, &pointers[0]), ["a"], "{body:?}");
        assert_eq!(facts.json(), Some(first), "{body:?}");
    }
}
