//! What sits at the config's path when a reload reads it: a FIFO (which would hold the
//! reload, and the shutdown behind it, until someone wrote to it) and a link to a device
//! (which would be read into memory without end) are refused at once with a reason, the
//! running config keeps serving, and a good file put back reloads.

use std::path::Path;
use std::time::Duration;

use super::config_reload::reloadable;
use crate::support::*;

/// `POST /admin/reload` on `gw`, failing the test if it does not answer within 20 s.
async fn reload_answers(gw: &TestGateway, what: &str) -> Got {
    let url = gw.admin_url("/admin/reload");
    let client = http1();
    let asked = send(&client, "POST", &url, &[], b"");
    tokio::time::timeout(Duration::from_secs(20), asked)
        .await
        .unwrap_or_else(|_| panic!("a reload of {what} did not answer"))
}

/// Puts something in the config's place.
type Maker = fn(&Path) -> std::io::Result<()>;

fn fifo(path: &Path) -> std::io::Result<()> {
    let made = std::process::Command::new("mkfifo").arg(path).status()?;
    assert!(made.success(), "mkfifo");
    Ok(())
}

fn zero(path: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink("/dev/zero", path)
}

async fn limit_seen(gw: &TestGateway) -> u64 {
    get(&gw.url("/limited"), &[("x-tenant-id", "t")])
        .await
        .num("x-ratelimit-limit")
}

#[tokio::test]
async fn a_fifo_or_a_device_in_the_configs_place_is_refused_at_once() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&reloadable("/load", 3).build(), &up.url()).await;
    let path = gw.config_path();
    let makers: [(&str, Maker); 2] = [("a FIFO", fifo), ("a link to /dev/zero", zero)];
    for (what, make) in makers {
        std::fs::remove_file(&path).expect("the config removed");
        make(&path).expect("made");
        let r = reload_answers(&gw, what).await;
        assert_eq!(r.status, 422, "{what}: {}", r.text());
        let error = r.json()["errors"][0].as_str().unwrap_or("").to_owned();
        assert!(error.contains("not a regular file"), "{what}: {error}");
        assert_eq!(
            limit_seen(&gw).await,
            3,
            "{what}: the running config serves"
        );
    }
    std::fs::remove_file(&path).expect("the link removed");
    gw.rewrite(&reloadable("/load", 4).build(), &up.url());
    let r = reload_answers(&gw, "a good file").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(limit_seen(&gw).await, 4);
}
