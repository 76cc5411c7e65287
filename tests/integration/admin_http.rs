//! The admin listener speaks HTTP as RFC 9110 asks: a method a path does not take is
//! `405` with an `Allow` header naming the ones it does (it speaks HTTP/1.1 alone), a path
//! with a trailing slash is the path, and a request with two `Host` headers names no host
//! the token-less guard can trust (each reader would pick another).

use super::admin::tenant_config;
use crate::support::*;

#[tokio::test]
async fn a_method_a_path_does_not_take_is_405_with_allow() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&tenant_config(""), &up.url()).await;
    let cases = [
        ("POST", "/admin/stats", "GET"),
        ("DELETE", "/admin/config", "GET"),
        ("PUT", "/metrics", "GET"),
        ("GET", "/admin/reload", "POST"),
        ("GET", "/admin/reset/tenant/acme", "POST"),
        ("POST", "/admin/limits/tenant/acme", "GET"),
        ("POST", "/admin/overrides", "GET"),
        ("GET", "/admin/overrides/tenant/acme", "PUT, DELETE"),
    ];
    let client = http1();
    for (method, path, allow) in cases {
        let r = send(&client, method, &gw.admin_url(path), &[], b"").await;
        assert_eq!(r.status, 405, "{method} {path}: {}", r.text());
        assert_eq!(r.header("allow"), Some(allow), "{method} {path}");
        assert_eq!(r.json()["allow"], allow, "{method} {path}");
    }
    let unknown = send(&client, "GET", &gw.admin_url("/admin/nothing"), &[], b"").await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    let listed = send(&client, "GET", &gw.admin_url("/admin/overrides/"), &[], b"").await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert!(listed.json()["overrides"].is_array(), "{}", listed.text());
}

#[tokio::test]
async fn two_host_headers_are_trusted_by_no_token_less_guard() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&tenant_config(""), &up.url()).await;
    let admin = gw.admin.expect("admin");
    let reset = |hosts: &str| {
        format!("POST /admin/reset/tenant/acme HTTP/1.1\r\n{hosts}Content-Length: 0\r\nConnection: close\r\n\r\n")
    };
    let one = raw(admin, reset("Host: 127.0.0.1\r\n").as_bytes()).await.0;
    assert_eq!(raw_status(&one), 200, "{one}");
    for hosts in [
        "Host: 127.0.0.1\r\nHost: rebound.attacker.example\r\n",
        "Host: rebound.attacker.example\r\nHost: 127.0.0.1\r\n",
    ] {
        let two = raw(admin, reset(hosts).as_bytes()).await.0;
        assert_eq!(raw_status(&two), 403, "{hosts:?}: {two}");
        let read = format!("GET /admin/config HTTP/1.1\r\n{hosts}Connection: close\r\n\r\n");
        let read = raw(admin, read.as_bytes()).await.0;
        assert_eq!(raw_status(&read), 403, "{hosts:?}: {read}");
    }
}
