use super::*;
use base64::Engine;
use http::header::COOKIE;

fn view<'a>(uri: &'a Uri, headers: &'a HeaderMap) -> RequestView<'a> {
    RequestView {
        method: &Method::GET,
        uri,
        headers,
        client_ip: "192.0.2.1".parse().expect("ip"),
        route: "search",
        body: None,
    }
}

/// The first value, as text.
fn text(values: Result<KeyValues<'_>, TooManyValues>) -> Option<String> {
    values
        .expect("within bounds")
        .first()
        .map(|p| p.as_text().into_owned())
}

#[test]
fn parses_every_source_and_rejects_nonsense() {
    for s in [
        "ip",
        "ip/64",
        "ip/1",
        "ip/128",
        "route",
        "method",
        "path",
        "header:x-tenant-id",
        "query:u",
        "cookie:sid",
        "jwt:sub",
    ] {
        let src: KeySource = s.parse().expect(s);
        assert_eq!(src.to_string(), s);
    }
    assert_eq!(
        "ipv4".parse::<KeySource>(),
        Err(KeySourceError::Unknown("ipv4".into()))
    );
    assert_eq!(
        "header:".parse::<KeySource>(),
        Err(KeySourceError::MissingName("header"))
    );
    assert!(matches!(
        "header:bad name".parse::<KeySource>(),
        Err(KeySourceError::BadHeader(_))
    ));
    for bad in [
        "ip/0", "ip/129", "ip/", "ip/64x", "ip/-1", "ip/ 64", "ip/+64",
    ] {
        assert_eq!(
            bad.parse::<KeySource>(),
            Err(KeySourceError::BadPrefix(bad[3..].into())),
            "{bad}"
        );
    }
}

#[test]
fn an_ip_prefix_key_gives_one_network_one_key_and_ipv4_clients_their_address() {
    let uri: Uri = "/".parse().expect("uri");
    let headers = HeaderMap::new();
    let source: KeySource = "ip/64".parse().expect("source");
    let key_of = |client: &str| {
        let req = RequestView {
            client_ip: client.parse().expect("ip"),
            ..view(&uri, &headers)
        };
        text(source.extract(&req))
    };
    let net = Some("2001:db8:7:9::/64".to_owned());
    assert_eq!(key_of("2001:db8:7:9::1"), net);
    assert_eq!(key_of("2001:db8:7:9:ffff:ffff:ffff:fffe"), net);
    assert_ne!(key_of("2001:db8:7:a::1"), net);
    assert_eq!(key_of("192.0.2.1").as_deref(), Some("192.0.2.1"));
    assert!(!source.client_chosen());
}

#[test]
fn extracts_query_cookie_header_jwt() {
    let uri: Uri = "/v1/search?q=x&user=a%20b&user=second"
        .parse()
        .expect("uri");
    let mut headers = HeaderMap::new();
    headers.insert("x-tenant-id", "acme".parse().expect("value"));
    headers.append(COOKIE, "theme=dark; sid=\"s-123\"".parse().expect("value"));
    // {"sub":"alice","org":42}
    let payload =
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"alice","org":42}"#);
    headers.insert(
        AUTHORIZATION,
        format!("Bearer h.{payload}.sig").parse().expect("value"),
    );
    let req = view(&uri, &headers);
    let get = |s: &str| text(s.parse::<KeySource>().expect("source").extract(&req));
    assert_eq!(get("query:user").as_deref(), Some("a b"));
    assert_eq!(get("query:absent"), None);
    assert_eq!(get("cookie:sid").as_deref(), Some("s-123"));
    assert_eq!(get("cookie:the"), None);
    assert_eq!(get("header:x-tenant-id").as_deref(), Some("acme"));
    assert_eq!(get("jwt:sub").as_deref(), Some("alice"));
    assert_eq!(get("jwt:org").as_deref(), Some("42"));
    assert_eq!(get("jwt:missing"), None);
    assert_eq!(get("path").as_deref(), Some("/v1/search"));
    assert_eq!(get("route").as_deref(), Some("search"));
    assert_eq!(get("ip").as_deref(), Some("192.0.2.1"));
}

#[test]
fn malformed_jwt_is_missing_not_an_error() {
    let uri: Uri = "/".parse().expect("uri");
    for bad in [
        "Bearer",
        "Bearer a.b",
        "Bearer a.!!!.c",
        "Basic abc",
        "Bearer a.e30.c",
    ] {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, bad.parse().expect("value"));
        let req = view(&uri, &headers);
        assert_eq!(
            KeySource::Jwt("sub".into()).extract(&req),
            Ok(KeyValues::new()),
            "{bad}"
        );
    }
}

fn all(source: &str, uri: &str, lines: &[(&str, &str)]) -> Result<Vec<String>, TooManyValues> {
    let uri: Uri = uri.parse().expect("uri");
    let mut headers = HeaderMap::new();
    for (k, v) in lines {
        headers.append(
            HeaderName::from_bytes(k.as_bytes()).expect("name"),
            http::HeaderValue::from_str(v).expect("value"),
        );
    }
    let req = view(&uri, &headers);
    let values = source.parse::<KeySource>().expect("source").extract(&req)?;
    Ok(values.iter().map(|p| p.as_text().into_owned()).collect())
}

#[test]
fn respellings_are_one_key() {
    let one = Ok(vec!["k".to_owned()]);
    for v in ["k", " k", "k\t", "\t k  "] {
        assert_eq!(
            all("header:x-api-key", "/", &[("x-api-key", v)]),
            one,
            "{v:?}"
        );
    }
    for c in ["sid=k", "sid= k", "sid = \"k\"", "sid= \"k\" ", "a=1;sid=k"] {
        assert_eq!(all("cookie:sid", "/", &[("cookie", c)]), one, "{c:?}");
    }
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"k"}"#);
    for a in [
        "Bearer h.P.s",
        "Bearer\th.P.s",
        "bearer      h.P.s",
        " Bearer h.P.s\t",
    ] {
        let a = a.replace('P', &payload);
        assert_eq!(all("jwt:sub", "/", &[("authorization", &a)]), one, "{a:?}");
    }
}

#[test]
fn a_source_given_twice_yields_every_distinct_value() {
    let two = Ok(vec!["a".to_owned(), "b".to_owned()]);
    assert_eq!(all("query:key", "/?key=a&key=b&key=a", &[]), two);
    assert_eq!(
        all(
            "header:x-k",
            "/",
            &[("x-k", "a"), ("x-k", "b"), ("x-k", "a ")]
        ),
        two
    );
    assert_eq!(
        all(
            "cookie:sid",
            "/",
            &[("cookie", "sid=a; sid=b"), ("cookie", "sid=a")]
        ),
        two
    );
    // An empty first value is not the key: the non-empty one is charged.
    assert_eq!(
        all("header:x-k", "/", &[("x-k", ""), ("x-k", "b")]),
        Ok(vec!["b".to_owned()])
    );
    assert_eq!(
        all("query:key", "/?key=&key=b", &[]),
        Ok(vec!["b".to_owned()])
    );
    assert_eq!(
        all("query:key", "/?a=1&key=1&key=2&key=3&key=4&key=4", &[]).map(|v| v.len()),
        Ok(4)
    );
    assert_eq!(
        all("query:key", "/?key=1&key=2&key=3&key=4&key=5", &[]),
        Err(TooManyValues)
    );
    let lines: Vec<(&str, &str)> = ["1", "2", "3", "4", "5"]
        .iter()
        .map(|v| ("x-k", *v))
        .collect();
    assert_eq!(all("header:x-k", "/", &lines), Err(TooManyValues));
}

#[test]
fn query_names_as_rack_qs_and_php_read_them_are_the_key() {
    let one = Ok(vec!["k".to_owned()]);
    for uri in [
        "/?api_key[]=k",
        "/?api_key[0]=k",
        "/?api_key%5B%5D=k",
        "/?[api_key]=k",
        "/?api_key]=k",
        "/?api.key=k",
        "/?api%20key=k",
        "/?%20api_key=k",
        "/?api[key=k",
        "/?x=1;api_key=k",
    ] {
        assert_eq!(all("query:api_key", uri, &[]), one, "{uri}");
    }
    // Not the key to any of them.
    for uri in [
        "/?api_keys=k",
        "/?xapi_key=k",
        "/?api-key=k",
        "/?a[api_key]=k",
        "/?api_key[x]=k",
        "/?api_key[=k",
    ] {
        assert_eq!(all("query:api_key", uri, &[]), Ok(vec![]), "{uri}");
    }
    // Both readings of a `;` are charged.
    assert_eq!(
        all("query:x", "/?x=1;api_key=k", &[]),
        Ok(vec!["1;api_key=k".to_owned(), "1".to_owned()])
    );
}

#[test]
fn a_cookie_value_is_charged_as_decoders_read_it() {
    assert_eq!(
        all("cookie:sid", "/", &[("cookie", "sid=%61b+c")]),
        Ok(vec!["ab+c".to_owned(), "ab c".to_owned()])
    );
    assert_eq!(
        all("cookie:sid", "/", &[("cookie", "sid=a%2Bb")]),
        Ok(vec!["a+b".to_owned()])
    );
    // Two cookies of one name, each encoded: two readings each, within the four.
    let two = [("cookie", "sid=a+b%3D; sid=c+d%3D")];
    assert_eq!(all("cookie:sid", "/", &two).map(|v| v.len()), Ok(4));
    assert_eq!(
        all("cookie:sid", "/", &[("cookie", "sid=abc")]),
        Ok(vec!["abc".to_owned()])
    );
}

#[test]
fn a_token_in_the_query_is_read_as_a_bearer_token() {
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"q"}"#);
    let uri = format!("/?x=1&access_token=h.{payload}.s");
    assert_eq!(all("jwt:sub", &uri, &[]), Ok(vec!["q".to_owned()]));
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(br#"{"sub":"h"}"#);
    let auth = format!("Bearer h.{header}.s");
    assert_eq!(
        all("jwt:sub", &uri, &[("authorization", &auth)]),
        Ok(vec!["h".to_owned(), "q".to_owned()]),
        "both are charged: which one an upstream takes is its own"
    );
    assert_eq!(all("jwt:sub", "/?access_token=nope", &[]), Ok(vec![]));
    // Spelled as the query's readers name it.
    for spelled in ["access%5Ftoken", "x=1;access_token", "access_token[]"] {
        let uri = format!("/?{spelled}=h.{payload}.s");
        assert_eq!(
            all("jwt:sub", &uri, &[]),
            Ok(vec!["q".to_owned()]),
            "{spelled}"
        );
    }
}

#[test]
fn a_header_spelled_with_underscores_is_read_when_its_own_name_is_absent() {
    let k = |h: &[(&str, &str)]| all("header:x-api-key", "/", h);
    assert_eq!(k(&[("x_api_key", "k")]), Ok(vec!["k".to_owned()]));
    assert_eq!(k(&[("x-api_key", " k ")]), Ok(vec!["k".to_owned()]));
    assert_eq!(
        k(&[("x_api_key", "a"), ("x_api-key", "b")]),
        Ok(vec!["a".to_owned(), "b".to_owned()])
    );
    // Its own name present: that is the key (Puma drops the other, Django joins them).
    assert_eq!(
        k(&[("x-api-key", "a"), ("x_api_key", "b")]),
        Ok(vec!["a".to_owned()])
    );
    assert_eq!(k(&[("x_api_keys", "k"), ("x-api_key_", "k")]), Ok(vec![]));
    assert_eq!(all("header:xkey", "/", &[("x_key", "k")]), Ok(vec![]));
}

#[test]
fn a_quoted_cookie_with_escapes_is_read_as_python_unescapes_it() {
    let one = |c: &str| all("cookie:sid", "/", &[("cookie", c)]);
    assert_eq!(one(r#"sid="\141bc""#), Ok(vec!["abc".to_owned()]));
    assert_eq!(one(r#"sid="a\bc""#), Ok(vec!["abc".to_owned()]));
    assert_eq!(one(r#"sid="\\x""#), Ok(vec!["\\x".to_owned()]));
    assert_eq!(
        one(r#"sid=a\bc"#),
        Ok(vec!["a\\bc".to_owned()]),
        "unquoted: as sent"
    );
}

#[test]
fn a_form_field_names_a_pointer_in_bracket_notation() {
    let tokens = |p: &str| p.parse::<crate::json::JsonPointer>().expect("pointer");
    let (user, name, role) = (
        tokens("/user"),
        tokens("/params/name"),
        tokens("/messages/0/role"),
    );
    for (field, pointer, named) in [
        ("user", &user, true),
        ("user[]", &user, true),
        (" user", &user, true),
        ("users", &user, false),
        ("params[name]", &name, true),
        ("params[name][]", &name, true),
        ("params[names]", &name, false),
        ("params[name]x", &name, false),
        ("params", &name, false),
        ("messages[0][role]", &role, true),
        ("messages[1][role]", &role, false),
        ("[params][name]", &name, true),
        ("params[name][0]", &name, true),
        ("user\0x", &user, true),
        (" my.params[name]", &tokens("/my_params/name"), true),
    ] {
        assert_eq!(
            super::body::names_pointer(field, pointer.tokens()),
            named,
            "{field} for {}",
            pointer.text()
        );
    }
}
