//! A `query:` key sent in a request body: PHP's `$_REQUEST`, Rails' `params`, Laravel's
//! `input()` and Flask's `request.values` read a query parameter from a form, from a
//! multipart body's text fields and (Rails, Laravel) from a JSON body's members too. So
//! does tollgate, on routes keyed by a query parameter: a key moved into the body is the
//! same bucket, not a skipped tier (`missing = "skip"` here, where a key read as missing
//! would go around the tier). The body still reaches the upstream whole. Over HTTP/1.1
//! and HTTP/2, and a chunked form from a raw socket, against a real upstream. A `json:`
//! key sent as a form or multipart field (Express, Rails, Laravel read either into one
//! object) is the same bucket too.

use bytes::Bytes;

use crate::support::*;

const FORM: &str = "application/x-www-form-urlencoded";

async fn post(client: &HttpClient, url: &str, content_type: &str, body: String) -> Got {
    let headers = [("content-type", content_type)];
    send_bytes(client, "POST", url, &headers, Bytes::from(body)).await
}

fn multipart(fields: &[(&str, &str)]) -> String {
    let mut body = String::new();
    for (disposition, value) in fields {
        body.push_str(&format!(
            "--XyZ\r\nContent-Disposition: form-data; {disposition}\r\n\r\n{value}\r\n"
        ));
    }
    body + "--XyZ--\r\n"
}

const MULTIPART: &str = "multipart/form-data; boundary=XyZ";

/// One request an hour per `api_key`; a request without one skips the tier.
fn per_key_route() -> String {
    Fixture::new()
        .skipping_policy("per_key", "query:api_key", 1)
        .route("api", "/v1", "api", &["per_key"])
        .build()
}

#[tokio::test]
async fn a_query_key_in_a_form_multipart_or_json_body_is_the_same_bucket() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_key_route(), &up.url()).await;
    let url = gw.url("/v1/login");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let in_query = |key: &str| format!("{url}?api_key={key}{i}");
        // A form body: the key it carries is charged, and the body goes upstream whole.
        let form = format!("user=alice&api_key=f{i}&password=x");
        let r = post(client, &url, FORM, form.clone()).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(
            r.text()
                .ends_with(&format!("with {} body bytes", form.len())),
            "{}",
            r.text()
        );
        assert_eq!(
            send(client, "GET", &in_query("f"), &[], b"").await.status,
            429
        );
        // The key in the query first, then in a form under a spelling PHP and Rack read.
        assert_eq!(
            send(client, "GET", &in_query("s"), &[], b"").await.status,
            200
        );
        let r = post(
            client,
            &url,
            "Application/X-WWW-Form-URLEncoded; charset=utf-8",
            format!("api_key%5B%5D=s{i}"),
        )
        .await;
        assert_eq!(r.status, 429, "a bracketed, encoded name: {}", r.text());
        // A multipart text field, under a quoted, an escaped and an extended name.
        for (n, name) in [
            "name=\"api_key\"",
            "name=\"api\\_key\"",
            "name*=UTF-8''api%5Fkey",
        ]
        .iter()
        .enumerate()
        {
            let key = format!("m{n}{i}");
            let body = multipart(&[("name=\"user\"", "alice"), (name, &key)]);
            assert_eq!(
                post(client, &url, MULTIPART, body).await.status,
                200,
                "{name}"
            );
            let again = post(client, &url, FORM, format!("api_key={key}")).await;
            assert_eq!(again.status, 429, "{name}: {}", again.text());
        }
        // A JSON body's member, as Rails and Laravel read it.
        let json = format!("{{\"api_key\":\"j{i}\",\"user\":\"alice\"}}");
        assert_eq!(
            post(client, &url, "application/json", json).await.status,
            200
        );
        assert_eq!(
            send(client, "GET", &in_query("j"), &[], b"").await.status,
            429
        );
    }
}

#[tokio::test]
async fn bodies_frameworks_take_no_parameters_from_are_not_keys() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_key_route(), &up.url()).await;
    let url = gw.url("/v1/upload");
    for client in [http1(), http2()] {
        // An uploaded file called api_key is an upload, not a parameter; a text body is
        // no form; a JSON array (here one a JSON-RPC batch would look like) on a route
        // keyed by a query parameter is no batch to refuse. Each skips the tier, every time, and reaches the upstream.
        let file = multipart(&[("name=\"api_key\"; filename=\"k.txt\"", "k")]);
        for (content_type, body) in [
            (MULTIPART, file),
            ("text/plain", "api_key=t".to_owned()),
            (
                "application/json",
                "[{\"method\":\"add\",\"api_key\":\"a\"},2]".to_owned(),
            ),
        ] {
            for _ in 0..2 {
                let r = post(&client, &url, content_type, body.clone()).await;
                assert_eq!(r.status, 200, "{content_type}: {}", r.text());
            }
        }
    }
}

#[tokio::test]
async fn a_chunked_form_split_inside_its_key_is_read_whole() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_key_route(), &up.url()).await;
    // From a raw socket: the body in two chunks, cut inside the key's value.
    let head = "POST /v1/login HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-www-form-urlencoded\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    let request = format!("{head}9\r\napi_key=r\r\n5\r\naw&x=\r\n0\r\n\r\n");
    let (answer, _) = raw(gw.addr, request.as_bytes()).await;
    assert_eq!(raw_status(&answer), 200, "{answer}");
    let r = get(&gw.url("/v1/login?api_key=raw"), &[]).await;
    assert_eq!(r.status, 429, "{}", r.text());
}

/// One request an hour per `user` of the JSON body, skipped without one.
fn per_user_route() -> String {
    Fixture::new()
        .skipping_policy("per_user", "json:/params/user", 1)
        .route("api", "/v1", "api", &["per_user"])
        .build()
}

#[tokio::test]
async fn a_json_key_sent_as_a_form_or_multipart_field_is_the_same_bucket() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_user_route(), &up.url()).await;
    let url = gw.url("/v1/tools");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let json = |user: &str| format!("{{\"params\":{{\"user\":\"{user}{i}\"}}}}");
        // Express (`urlencoded({extended: true})` beside `json()`), Rails and Laravel
        // read `params[user]` of a form into the same object as the JSON body's.
        let r = post(client, &url, FORM, format!("params%5Buser%5D=f{i}&x=1")).await;
        assert_eq!(r.status, 200, "{}", r.text());
        let r = post(client, &url, "application/json", json("f")).await;
        assert_eq!(r.status, 429, "{}", r.text());
        let body = multipart(&[("name=\"params[user]\"", &format!("m{i}"))]);
        assert_eq!(post(client, &url, MULTIPART, body).await.status, 200);
        let r = post(client, &url, "application/json", json("m")).await;
        assert_eq!(r.status, 429, "{}", r.text());
    }
}

#[tokio::test]
async fn a_body_no_reader_would_misread_hides_no_key() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_key_route(), &up.url()).await;
    let url = gw.url("/v1/login");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let spent = |key: String| {
            let url = format!("{url}?api_key={key}");
            async move { send(client, "GET", &url, &[], b"").await.status }
        };
        // A NUL second byte, as a UTF-16 text would have: still a form, not transcoded.
        let r = post(client, &url, FORM, format!("x\0&api_key=n{i}")).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(spent(format!("n{i}")).await, 429);
        // A POST without a Content-Type is a form to Rack.
        let headers: [(&str, &str); 0] = [];
        let body = Bytes::from(format!("api_key=t{i}"));
        let r = send_bytes(client, "POST", &url, &headers, body).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(spent(format!("t{i}")).await, 429);
        // A part after the closing delimiter, which PHP reads on to.
        let reopened = format!(
            "{}--XyZ\r\nContent-Disposition: form-data; name=\"api_key\"\r\n\r\nr{i}",
            multipart(&[("name=\"user\"", "alice")])
        );
        assert_eq!(post(client, &url, MULTIPART, reopened).await.status, 200);
        assert_eq!(spent(format!("r{i}")).await, 429);
    }
}

#[tokio::test]
async fn content_type_lines_naming_more_bodies_than_are_read_are_refused() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_key_route(), &up.url()).await;
    let url = gw.url("/v1/login");
    let lines: Vec<String> = (0..5)
        .map(|i| format!("multipart/form-data; xboundary=a{i}; boundary=b{i}"))
        .collect();
    let mut headers: Vec<(&str, &str)> =
        lines.iter().map(|l| ("content-type", l.as_str())).collect();
    for client in [http1(), http2()] {
        let body = Bytes::from_static(b"api_key=k");
        let r = send_bytes(&client, "POST", &url, &headers, body).await;
        assert_eq!(r.status, 400, "{}", r.text());
        assert_eq!(r.json()["error"], "ambiguous_content_type");
    }
    // Two such lines and a form (five readings, within eight): admitted and charged.
    headers.truncate(2);
    headers.push(("content-type", FORM));
    let body = Bytes::from_static(b"api_key=four");
    assert_eq!(
        send_bytes(&http1(), "POST", &url, &headers, body)
            .await
            .status,
        200
    );
    assert_eq!(get(&format!("{url}?api_key=four"), &[]).await.status, 429);
    assert_eq!(up.requests(), 1);
}

/// A `query:` key reads the body too, but its route's 429 is the contract's JSON body,
/// a JSON-RPC request's included: only a route whose policies key or price by the body
/// answers a refused JSON-RPC call with a JSON-RPC error.
#[tokio::test]
async fn a_query_keyed_routes_refusal_of_a_json_rpc_body_is_the_contracts_body() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&per_key_route(), &up.url()).await;
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let url = gw.url(&format!("/v1/rpc?api_key=r{i}"));
        let call = || r#"{"jsonrpc":"2.0","id":7,"method":"tools/call"}"#.to_owned();
        assert_eq!(
            post(client, &url, "application/json", call()).await.status,
            200
        );
        let refused = post(client, &url, "application/json", call()).await;
        assert_eq!(refused.status, 429);
        let body = refused.json();
        assert_eq!(body["error"], "rate_limited", "{body}");
        assert_eq!(body["policy"], "per_key", "{body}");
    }
}
