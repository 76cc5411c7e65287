//! A session cookie as the readers that split a `Cookie` header further than at `;`, or
//! register its name otherwise, read it: ASP.NET Core splits at `,` too, Python's
//! `SimpleCookie` (Bottle, CherryPy) at white space, and PHP turns `.`, a space and an
//! unclosed `[` in a name into `_`. Each such reading of a spent session is refused, over
//! HTTP/1.1 and HTTP/2: a fresh value beside it is no fresh bucket.

use super::spellings::{spend, start, status};
use super::spellings_keys::refused_everywhere;
use crate::support::*;

#[tokio::test]
async fn cookies_split_at_commas_or_spaces_or_named_as_php_mangles_are_the_key() {
    let (_up, gw) = start().await;
    spend(&gw, "/k/cookie", &[("cookie", "sid=a")]).await;
    spend(&gw, "/k/phpcookie", &[("cookie", "s_id=a")]).await;
    refused_everywhere(
        &gw,
        &[
            // ASP.NET Core: the last `sid` of `sid=f1, sid=a` is `a`.
            ("/k/cookie", vec![("cookie", "sid=f1, sid=a")]),
            ("/k/cookie", vec![("cookie", "x=1,sid=a")]),
            // SimpleCookie: pairs apart at white space, `=` with space around it.
            ("/k/cookie", vec![("cookie", "sid=f2 sid=a")]),
            ("/k/cookie", vec![("cookie", "x=1 sid=a")]),
            ("/k/cookie", vec![("cookie", "x=1 sid = a")]),
            // PHP: the first cookie registered as `s_id` wins.
            ("/k/phpcookie", vec![("cookie", "s.id=a; s_id=f3")]),
            ("/k/phpcookie", vec![("cookie", "s id=a")]),
            ("/k/phpcookie", vec![("cookie", "s[id=a")]),
        ],
    )
    .await;
    // Those readers take a quoted value whole: `"q b"` and `"q c"` are two sessions, not
    // one bucket of `"q`.
    spend(&gw, "/k/cookie", &[("cookie", "sid=\"q b\"")]).await;
    for client in [http1(), http2()] {
        let other = [("cookie", "sid=\"q c\"")];
        assert_eq!(status(&client, &gw.url("/k/cookie"), &other).await, 200);
    }
}
