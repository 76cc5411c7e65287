//! An IPv6 client holds a whole network (usually a /64) and can send from any address in
//! it: under `key = "ip/64"` every address of the network is one key, over HTTP/1.1 and
//! HTTP/2, while IPv4 clients keep their own. The admin API and the config's overrides
//! take any address of the network (or the network) for its key.

use super::admin::{delete, put_ok, reload};
use super::config::errors_of;
use super::spellings::status;
use crate::support::*;

/// `net` (`ip/64`) and `addr` (`ip`), one request an hour each, behind a trusted proxy.
fn config(overrides: &str) -> String {
    Fixture::new()
        .server(r#"trusted_proxies = ["127.0.0.1/32"]"#)
        .policy_raw(
            "net",
            format!("key = \"ip/64\"\nlimit = 1\nperiod = \"1h\"\nburst = 1\n{overrides}"),
        )
        .policy("addr", "ip", 1, "1h", 1)
        .route("net", "/net", "api", &["net"])
        .route("addr", "/addr", "api", &["addr"])
        .build()
}

async fn no_overrides_left(gw: &TestGateway) {
    let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    let left = listed["overrides"].as_array().map(Vec::len);
    assert_eq!(left, Some(0), "{listed}");
}

async fn from(client: &HttpClient, gw: &TestGateway, path: &str, client_ip: &str) -> u16 {
    status(client, &gw.url(path), &[("x-forwarded-for", client_ip)]).await
}

#[tokio::test]
async fn rotating_addresses_within_a_network_gets_no_fresh_bucket() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(""), &up.url()).await;
    for (client, net) in [(http1(), "2001:db8:1:1"), (http2(), "2001:db8:1:2")] {
        assert_eq!(from(&client, &gw, "/net", &format!("{net}::1")).await, 200);
        for other in ["::2", ":ffff:ffff:ffff:ffff", ":8000::1", ":0:0:0:abcd"] {
            let ip = format!("{net}{other}");
            assert_eq!(from(&client, &gw, "/net", &ip).await, 429, "{ip}");
        }
        // A spelling of the address is no way out either.
        let upper = format!("{}::1", net.to_uppercase()).replace("DB8", "0DB8");
        assert_eq!(from(&client, &gw, "/net", &upper).await, 429, "{upper}");
    }
    // The next network over is another client; IPv4 clients keep one key an address.
    let h1 = http1();
    assert_eq!(from(&h1, &gw, "/net", "2001:db8:1:3::1").await, 200);
    assert_eq!(from(&h1, &gw, "/net", "192.0.2.1").await, 200);
    assert_eq!(from(&h1, &gw, "/net", "192.0.2.2").await, 200);
    assert_eq!(from(&h1, &gw, "/net", "::ffff:192.0.2.2").await, 429);
    // What `ip/64` is for: under `ip` each address of the network is a fresh bucket.
    assert_eq!(from(&h1, &gw, "/addr", "2001:db8:1:1::1").await, 200);
    assert_eq!(from(&h1, &gw, "/addr", "2001:db8:1:1::2").await, 200);

    // The admin API names the key by any address of the network, or the network.
    for typed in ["2001:db8:1:1::77", "2001:DB8:1:1::", "2001:db8:1:1::%2F64"] {
        let limits = get(&gw.admin_url(&format!("/admin/limits/net/{typed}")), &[]).await;
        assert_eq!(limits.status, 200, "{typed}: {}", limits.text());
        assert_eq!(limits.json()["remaining"], 0, "{typed}: {}", limits.text());
    }
    let wide = get(&gw.admin_url("/admin/limits/net/2001:db8::%2F48"), &[]).await;
    assert_eq!(wide.status, 400, "a /48 holds many keys: {}", wide.text());
    assert_eq!(wide.json()["error"], "bad_key");
    assert_eq!(wide.json()["expected_parts"], "ip/64");
    let top = get(&gw.admin_url("/admin/top"), &[]).await.text();
    assert!(top.contains("2001:db8:1:1::/64"), "{top}");
}

#[tokio::test]
async fn an_override_set_on_one_address_applies_to_its_network() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(""), &up.url()).await;
    let put = put_ok(
        &gw.admin_url("/admin/overrides/net/2001:db8:5:5::1"),
        br#"{"burst": 3}"#,
    )
    .await;
    assert_eq!(put.json()["key"][0], "2001:db8:5:5::/64", "{}", put.text());
    for client in [http1(), http2(), http1()] {
        assert_eq!(from(&client, &gw, "/net", "2001:db8:5:5:a::9").await, 200);
    }
    assert_eq!(from(&http2(), &gw, "/net", "2001:db8:5:5::1").await, 429);
    // Deleted by another address of the network, then by the network's own spelling.
    let deleted = delete(&gw.admin_url("/admin/overrides/net/2001:db8:5:5:ffff::2")).await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    put_ok(
        &gw.admin_url("/admin/overrides/net/2001:db8:5:5::1"),
        br#"{"burst": 3}"#,
    )
    .await;
    let deleted = delete(&gw.admin_url("/admin/overrides/net/2001:db8:5:5::%2F64")).await;
    assert_eq!(deleted.status, 200, "{}", deleted.text());
    no_overrides_left(&gw).await;
}

#[tokio::test]
async fn a_config_override_names_its_network_by_any_address() {
    let up = Upstream::start().await;
    let overrides = "[policies.net.overrides]\n\"2001:DB8:9:9::1\" = { burst = 2, limit = 2 }\n";
    let gw = TestGateway::start(&config(overrides), &up.url()).await;
    for client in [http1(), http2()] {
        assert_eq!(from(&client, &gw, "/net", "2001:db8:9:9:1::").await, 200);
    }
    assert_eq!(from(&http1(), &gw, "/net", "2001:db8:9:9::abc").await, 429);
    // On `ip` too, an address is matched in its canonical spelling.
    let addr = Fixture::new()
        .server(r#"trusted_proxies = ["127.0.0.1/32"]"#)
        .policy_raw(
            "addr",
            "key = \"ip\"\nlimit = 1\nperiod = \"1h\"\nburst = 1\n[policies.addr.overrides]\n\"2001:0DB8::7\" = { burst = 2, limit = 2 }\n",
        )
        .route("addr", "/", "api", &["addr"])
        .build();
    let gw = TestGateway::start(&addr, &up.url()).await;
    for expected in [200, 200, 429] {
        assert_eq!(from(&http1(), &gw, "/", "2001:db8::7").await, expected);
    }
}

#[test]
fn a_prefix_or_an_override_that_names_no_one_key_is_a_config_error() {
    let text = config("").replace("ip/64", "ip/0");
    let err = errors_of(&text);
    assert!(
        err.contains("`ip/0`: the IPv6 prefix length is a whole number from 1 to 128"),
        "{err}"
    );
    for (typed, says) in [
        ("2001:db8::/48", "is not one key of `ip/64`"),
        ("alice", "is not one key of `ip/64`"),
    ] {
        let overrides = format!("[policies.net.overrides]\n\"{typed}\" = {{ burst = 2 }}\n");
        let err = errors_of(&config(&overrides));
        assert!(err.contains(says) && err.contains(typed), "{typed}: {err}");
        assert!(err.contains("a network of /64 or narrower"), "{err}");
    }
    let twice = "[policies.net.overrides]\n\"2001:db8::1\" = { burst = 2 }\n\"2001:db8::2\" = { burst = 3 }\n";
    let err = errors_of(&config(twice));
    assert!(
        err.contains("names the key `2001:db8::/64` another override names"),
        "{err}"
    );
}

#[tokio::test]
async fn an_override_set_under_ip_says_why_it_stops_applying_under_ip_64_and_is_deleted_as_typed() {
    let up = Upstream::start().await;
    let under_ip = config("").replace("ip/64", "ip");
    let gw = TestGateway::start(&under_ip, &up.url()).await;
    put_ok(
        &gw.admin_url("/admin/overrides/net/2001:db8:6:6::1"),
        br#"{"burst": 3}"#,
    )
    .await;
    gw.rewrite(&config(""), &up.url());
    let reloaded = reload(&gw).await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.text());
    let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    let one = &listed["overrides"][0];
    assert_eq!(one["active"], false, "{listed}");
    let message = one["problems"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("keys requests as 2001:db8:6:6::/64")
            && message.contains("written 2001:db8:6:6::1"),
        "{listed}"
    );
    // Not applied: the network has the policy's burst of one.
    assert_eq!(from(&http1(), &gw, "/net", "2001:db8:6:6::1").await, 200);
    assert_eq!(from(&http1(), &gw, "/net", "2001:db8:6:6::1").await, 429);
    // Set again as the hint says, by the same address: the network's override applies.
    let put = put_ok(
        &gw.admin_url("/admin/overrides/net/2001:db8:6:6::1"),
        br#"{"burst": 3}"#,
    )
    .await;
    assert_eq!(put.json()["key"][0], "2001:db8:6:6::/64");
    // A DELETE by the address removes the one written so first, and says which.
    let url = gw.admin_url("/admin/overrides/net/2001:db8:6:6::1");
    for removed in ["2001:db8:6:6::1", "2001:db8:6:6::/64"] {
        let deleted = delete(&url).await;
        assert_eq!(deleted.status, 200, "{}", deleted.text());
        assert_eq!(deleted.json()["key"][0], removed, "{}", deleted.text());
    }
    assert_eq!(delete(&url).await.status, 404);
    no_overrides_left(&gw).await;
}

#[tokio::test]
async fn an_envoy_remote_address_descriptor_is_keyed_by_its_network_as_a_request_is() {
    let up = Upstream::start().await;
    let toml = format!(
        "{}\n[rls]\nlisten = \"127.0.0.1:0\"\n[[rls.rules]]\ndomain = \"edge\"\n\
         descriptor = [\"remote_address\"]\npolicy = \"net\"\n",
        config("")
    );
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut rls = RlsClient::connect(gw.rls.expect("[rls] listens")).await;
    let ask = |ip: &'static str| vec![descriptor(&[("remote_address", ip)])];
    assert_eq!(from(&http1(), &gw, "/net", "2001:db8:4:4::1").await, 200);
    for ip in ["2001:db8:4:4::99", "2001:DB8:4:4:ffff::1"] {
        assert_eq!(
            rls.ask("edge", ask(ip)).await.overall_code,
            OVER_LIMIT,
            "{ip}"
        );
    }
    assert_eq!(
        rls.ask("edge", ask("2001:db8:4:5::1")).await.overall_code,
        OK
    );
    assert_eq!(from(&http2(), &gw, "/net", "2001:db8:4:5::2").await, 429);
    // An IPv4 client stays one address.
    assert_eq!(rls.ask("edge", ask("192.0.2.9")).await.overall_code, OK);
    assert_eq!(rls.ask("edge", ask("192.0.2.10")).await.overall_code, OK);
    // The service's keys are named by their networks too (one row with the request's
    // admission), their state found by them.
    let top = get(&gw.admin_url("/admin/top?policy=net"), &[])
        .await
        .json();
    let rows = top.as_array().expect("rows");
    let row = |key: &str| rows.iter().find(|r| r["key"][0] == key);
    for addr in ["2001:db8:4:4::99", "2001:db8:4:5::1"] {
        assert!(!top.to_string().contains(addr), "{top}");
    }
    let refused = row("2001:db8:4:4::/64").unwrap_or_else(|| panic!("{top}"));
    assert_eq!(
        (&refused["admitted"], &refused["refused"]),
        (&1.into(), &2.into()),
        "{top}"
    );
    assert_eq!(refused["remaining"], 0, "{top}");
}

#[test]
fn two_spellings_of_one_address_under_ip_load_with_a_warning_the_one_that_applied_applying() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("twice.toml");
    let text = config("").replace("{upstream}", "http://127.0.0.1:9").replace("ip/64", "ip").replacen(
        "burst = 1\n\n",
        "burst = 1\n[policies.net.overrides]\n\"2001:DB8::1\" = { burst = 2 }\n\"2001:db8::1\" = { burst = 3 }\n\n",
        1,
    );
    assert!(text.contains("2001:DB8::1"), "{text}");
    std::fs::write(&path, &text).expect("write");
    let config = tollgate::config::load(&path).expect("valid");
    let warning = config.warnings.join("\n");
    assert!(
        warning.contains("override `2001:DB8::1` names the key `2001:db8::1` another override names: the one spelled as requests spell it applies"),
        "{warning}"
    );
    let policy = config.policy("net").expect("net");
    let applied = policy.rate().and_then(|r| r.overrides.get("2001:db8::1"));
    assert_eq!(
        applied.map(|q| q.burst()),
        Some(3),
        "`2001:db8::1`, which matched requests before"
    );
}
