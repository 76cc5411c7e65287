use super::*;

fn norm(path: &str) -> Result<String, PathError> {
    normalize(path, &PathRules::default()).map(Cow::into_owned)
}

#[test]
fn canonical_paths_are_borrowed() {
    for p in [
        "/",
        "/v1/search",
        "/a/b/",
        "/a;p=1/b",
        "/a:b@c",
        "/.well-known/x",
        "*",
        "",
    ] {
        assert!(
            matches!(normalize(p, &PathRules::default()), Ok(Cow::Borrowed(_))),
            "{p}"
        );
    }
}

#[test]
fn each_rule_and_their_order() {
    let cases = [
        ("/v1//search", "/v1/search"),
        ("//v1///search//", "/v1/search/"),
        ("/v1/./search", "/v1/search"),
        ("/v1/x/../search", "/v1/search"),
        ("/v1/search/.", "/v1/search/"),
        ("/v1/search/x/..", "/v1/search/"),
        ("/v1/%73earch", "/v1/search"),
        ("/v1/%2e%2E/v1/search", "/v1/search"),
        ("/v1/%7e%2d%5F", "/v1/~-_"),
        ("/a//../b", "/b"),
        ("/a/%2e%2e//b", "/b"),
        ("/v1/a%3ab", "/v1/a%3Ab"),
        ("/v1/%25", "/v1/%25"),
        ("/v1/%252F", "/v1/%252F"),
        ("/v1/\"x\"", "/v1/%22x%22"),
        ("/v1/{x}", "/v1/%7Bx%7D"),
        ("/..a/b..", "/..a/b.."),
        ("/a/..", "/"),
    ];
    for (raw, want) in cases {
        assert_eq!(norm(raw).as_deref(), Ok(want), "{raw}");
    }
}

#[test]
fn refusals() {
    let cases = [
        ("/v1/a%2Fb", PathError::EscapedSlash),
        ("/v1/a%2fb", PathError::EscapedSlash),
        ("/v1\\search", PathError::Backslash),
        ("/v1%5Csearch", PathError::Backslash),
        ("/v1/%zz", PathError::BadEscape),
        ("/v1/%4", PathError::BadEscape),
        ("/v1/%", PathError::BadEscape),
        ("/..", PathError::AboveRoot),
        ("/a/../../b", PathError::AboveRoot),
        ("/%2e%2e/etc", PathError::AboveRoot),
        ("/x/..;/v1/search", PathError::DotWithParams),
        ("/x/..;jsessionid=1/v1", PathError::DotWithParams),
        ("/.;/v1/search", PathError::DotWithParams),
        ("/v1/search/..;", PathError::DotWithParams),
        ("/x/%2e%2e;/v1/search", PathError::DotWithParams),
        ("/x/.%2e;/v1/search", PathError::DotWithParams),
    ];
    for (raw, want) in cases {
        assert_eq!(norm(raw), Err(want), "{raw}");
    }
}

#[test]
fn options_turn_parts_off() {
    let raw = PathRules {
        normalize: false,
        merge_slashes: false,
        escaped_slash: EscapedSlash::Keep,
        allow_backslash: true,
        ignore_case: false,
    };
    let p = "/v1//./x/../%2F%73\\";
    assert_eq!(normalize(p, &raw).as_deref(), Ok(p));
    let decode = PathRules {
        escaped_slash: EscapedSlash::Decode,
        ..PathRules::default()
    };
    assert_eq!(normalize("/a%2F..%2Fb", &decode).as_deref(), Ok("/b"));
    let keep = PathRules {
        escaped_slash: EscapedSlash::Keep,
        ..PathRules::default()
    };
    assert_eq!(normalize("/a%2fb", &keep).as_deref(), Ok("/a%2Fb"));
    let no_merge = PathRules {
        merge_slashes: false,
        ..PathRules::default()
    };
    assert_eq!(normalize("/a//b/../c", &no_merge).as_deref(), Ok("/a//c"));
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]
    /// The fuzz target's properties on random bytes: respellings route as the original.
    #[test]
    fn respellings_normalise_to_the_original(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
        crate::fuzz_targets::paths(&data);
    }

    #[test]
    fn idempotent(path in "/[a-z/.%0-9A-F;~\\\\]{0,24}") {
        let rules = PathRules::default();
        if let Ok(once) = normalize(&path, &rules) {
            let twice = normalize(&once, &rules).map(Cow::into_owned);
            proptest::prop_assert_eq!(twice.as_deref(), Ok(&*once));
        }
    }
}

#[test]
fn folding_case_lowers_letters_but_not_escapes() {
    assert_eq!(fold_case("/v1/search"), Cow::Borrowed("/v1/search"));
    assert_eq!(fold_case("/V1/Search"), "/v1/search");
    assert_eq!(fold_case("/Docs/caf%C3%A9/X"), "/docs/caf%C3%A9/x");
    assert_eq!(fold_case("/a%2FB%"), "/a%2Fb%");
}
