//! The container image for real: built with podman from the repository's Dockerfile (its
//! `prebuilt` target, fed this build's `tollgate` binary) on the pinned Debian base, then
//! run on the host network with a config folder mounted at /etc/tollgate. Checks /healthz,
//! a limited route in front of a real upstream, the image's HEALTHCHECK (`tollgate health`),
//! the non-root user, SIGHUP reload and SIGTERM drain (`podman stop` exits 0).
//!
//! Needs podman (and, the first time, root and debootstrap for the base image:
//! scripts/container-base makes it from the Debian mirror when no registry serves it).
//! `scripts/test` installs podman, runc and debootstrap and runs this test (it is ignored
//! by a plain `cargo test`, which says so: never passed by not running); run by hand
//! without podman, it fails saying what to install.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::container_podman::{
    podman, podman_available, run_bounded, strings, text, ulimits, Made,
};
use crate::support::*;

/// The status of `GET url`, `None` when nothing answers within 5 s.
async fn status_of(url: &str) -> Option<u16> {
    let req = http::Request::get(url)
        .body(http_body_util::Full::new(bytes::Bytes::new()))
        .expect("request");
    match tokio::time::timeout(Duration::from_secs(5), http1().request(req)).await {
        Ok(Ok(resp)) => Some(resp.status().as_u16()),
        _ => None,
    }
}

/// The gateway's config in the container: data plane and admin on free loopback ports of
/// the host network, `/limited` 2 at once then 1 per hour per address, `/drain` unlimited
/// (the upstream holds `/drain/delay` for 1 s), plus `extra` routes.
fn config(port: u16, admin: u16, upstream: &str, extra: &str) -> String {
    let routes = Fixture::new()
        .listen(&format!("127.0.0.1:{port}"))
        .server(r#"drain_timeout = "10s""#)
        .policy("client", "ip", 1, "1h", 2)
        .route("limited", "/limited", "api", &["client"])
        .route("drain", "/drain", "api", &[])
        .raw(extra)
        .build_for(upstream);
    routes.replace(
        "admin_listen = \"127.0.0.1:0\"",
        &format!("admin_listen = \"127.0.0.1:{admin}\""),
    )
}

/// Writes the config beside the old one and renames it over, as an editor does; readable
/// by the container's user.
fn write_config(dir: &Path, toml: &str) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = dir.join("tollgate.toml.new");
    std::fs::write(&tmp, toml).expect("write config");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    std::fs::rename(&tmp, dir.join("tollgate.toml")).expect("rename config");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs podman, runc and debootstrap: scripts/test installs them and runs it (--include-ignored)"]
async fn image_builds_runs_limits_reloads_and_drains() {
    assert!(
        podman_available(),
        "install podman, runc and debootstrap (as root: apt-get install podman runc debootstrap), or run scripts/test"
    );
    let started = Instant::now();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    make_base(repo, started).await;
    let context = build_context(repo);
    let made = made_names();
    build_image(repo, context.path(), &made, started).await;
    check_image_user_and_healthcheck(&made).await;

    // Run it: the config folder mounted, the real upstream in this process.
    let up = Upstream::start().await;
    let (port, admin) = (free_port(), free_port());
    let conf = config_dir();
    write_config(conf.path(), &config(port, admin, &up.url(), ""));
    run_container(&made, admin, conf.path()).await;
    wait_until_serving(&made, admin).await;
    eprintln!("container: serving after {:?}", started.elapsed());

    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");
    check_limited_route(&up, &url).await;
    check_health(&made, admin).await;
    check_not_root(&made).await;
    reload_adds_a_route(&made, &up, conf.path(), port, admin, &url).await;
    let took = stop_drains(&made, &up, &url).await;
    let logs = made.logs().await;
    assert!(logs.contains("configuration reloaded"), "{logs}");
    assert!(logs.contains("tollgate stopped"), "{logs}");
    eprintln!(
        "container: stopped in {took:?}; whole test {:?}",
        started.elapsed()
    );
}

/// The pinned base: present, or made by debootstrap (the first time only).
async fn make_base(repo: &'static Path, started: Instant) {
    let base = tokio::task::spawn_blocking(move || {
        run_bounded(
            &mut Command::new(repo.join("scripts/container-base")),
            Duration::from_secs(900),
        )
    })
    .await
    .expect("join");
    assert!(
        base.status.success(),
        "scripts/container-base failed: {}",
        text(&base)
    );
    eprintln!(
        "container: base image {} ready after {:?}",
        String::from_utf8_lossy(&base.stdout).trim(),
        started.elapsed()
    );
}

/// The build context of the prebuilt target: the default config and the binary.
fn build_context(repo: &Path) -> tempfile::TempDir {
    let context = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(context.path().join("docker")).expect("mkdir");
    std::fs::copy(
        repo.join("docker/tollgate.toml"),
        context.path().join("docker/tollgate.toml"),
    )
    .expect("copy the default config");
    std::fs::copy(
        env!("CARGO_BIN_EXE_tollgate"),
        context.path().join("tollgate"),
    )
    .expect("copy the binary");
    context
}

/// Names for this run's image and container, unique to it, removed when dropped.
fn made_names() -> Made {
    let unique = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos()
    );
    Made {
        image: format!("localhost/tollgate-test:{unique}"),
        container: format!("tollgate-test-{unique}"),
    }
}

/// `podman build` of the Dockerfile's prebuilt target from `context`, tagged `made.image`.
async fn build_image(repo: &Path, context: &Path, made: &Made, started: Instant) {
    let mut build = strings(&[
        "build",
        "--format",
        "docker", // the OCI format drops HEALTHCHECK
        "--pull=never",
        "--target",
        "prebuilt",
        "--build-arg",
        "TOLLGATE_BINARY=tollgate",
        "--file",
    ]);
    build.push(repo.join("Dockerfile").display().to_string());
    build.extend(ulimits());
    build.extend(strings(&["--tag", &made.image]));
    build.push(context.display().to_string());
    let built = podman(build, Duration::from_secs(900)).await;
    assert!(
        built.status.success(),
        "podman build failed: {}",
        text(&built)
    );
    eprintln!("container: image built after {:?}", started.elapsed());
}

/// The image runs as uid 10001 and checks its health with `tollgate health`.
async fn check_image_user_and_healthcheck(made: &Made) {
    let inspect = podman(
        strings(&[
            "image",
            "inspect",
            "--format",
            "{{.Config.User}} {{json .Config.Healthcheck.Test}}",
            &made.image,
        ]),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        String::from_utf8_lossy(&inspect.stdout).trim(),
        r#"10001:10001 ["CMD","tollgate","health"]"#,
        "{}",
        text(&inspect)
    );
}

/// A folder for the config, readable by the container's user.
fn config_dir() -> tempfile::TempDir {
    let conf = tempfile::tempdir().expect("tempdir");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(conf.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    conf
}

/// `podman run` of the image on the host network, `conf` mounted at /etc/tollgate.
async fn run_container(made: &Made, admin: u16, conf: &Path) {
    let mut run = strings(&[
        "run",
        "--detach",
        "--name",
        &made.container,
        "--network",
        "host",
    ]);
    run.extend(ulimits());
    run.extend(strings(&[
        "--env",
        &format!("TOLLGATE_HEALTH_URL=http://127.0.0.1:{admin}/healthz"),
        "--volume",
        &format!("{}:/etc/tollgate:ro", conf.display()),
        &made.image,
    ]));
    let ran = podman(run, Duration::from_secs(120)).await;
    assert!(ran.status.success(), "podman run failed: {}", text(&ran));
}

/// Waits up to 60 s for a 200 from /healthz, failing early if the container stops.
async fn wait_until_serving(made: &Made, admin: u16) {
    let healthz = format!("http://127.0.0.1:{admin}/healthz");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if status_of(&healthz).await == Some(200) {
            break;
        }
        if made.state("Running").await != "true" || Instant::now() > deadline {
            panic!(
                "no 200 from {healthz} within 60 s (running: {})\n{}",
                made.state("Running").await,
                made.logs().await
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The limited route: the burst of 2 passes to the upstream, the third is refused.
async fn check_limited_route(up: &Upstream, url: &impl Fn(&str) -> String) {
    let before = up.requests();
    for n in 1..=2 {
        let got = get(&url("/limited"), &[]).await;
        assert_eq!(got.status, 200, "request {n}: {}", got.text());
    }
    let refused = get(&url("/limited"), &[]).await;
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(up.requests() - before, 2, "the refused request stayed in");
}

/// The image's own HEALTHCHECK, and `tollgate health` saying why when unhealthy.
async fn check_health(made: &Made, admin: u16) {
    let hc = podman(
        strings(&["healthcheck", "run", &made.container]),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        hc.status.code(),
        Some(0),
        "podman healthcheck run: {}",
        text(&hc)
    );
    let ok = made.exec(&["tollgate", "health"]).await;
    assert_eq!(ok.status.code(), Some(0), "{}", text(&ok));
    let bad = made
        .exec(&[
            "tollgate",
            "health",
            "--url",
            &format!("http://127.0.0.1:{admin}/no-such-page"),
        ])
        .await;
    assert_eq!(bad.status.code(), Some(1), "{}", text(&bad));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("404"),
        "{}",
        text(&bad)
    );
}

/// Not root: the gateway (pid 1) and an exec'd process run as 10001.
async fn check_not_root(made: &Made) {
    let status = made.exec(&["cat", "/proc/1/status"]).await;
    let uid = String::from_utf8_lossy(&status.stdout)
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .map(|l| l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "));
    assert_eq!(
        uid.as_deref(),
        Some("10001 10001 10001 10001"),
        "{}",
        text(&status)
    );
    let id = made.exec(&["id", "-u"]).await;
    assert_eq!(
        String::from_utf8_lossy(&id.stdout).trim(),
        "10001",
        "{}",
        text(&id)
    );
}

/// SIGHUP reloads the mounted config: a new route appears, the process stays.
async fn reload_adds_a_route(
    made: &Made,
    up: &Upstream,
    conf: &Path,
    port: u16,
    admin: u16,
    url: &impl Fn(&str) -> String,
) {
    assert_eq!(
        get(&url("/added"), &[]).await.status,
        404,
        "no such route yet"
    );
    let added = r#"
        [[routes]]
        name = "added"
        path = "/added"
        upstream = "api"
        policies = []
    "#;
    write_config(conf, &config(port, admin, &up.url(), added));
    let hup = podman(
        strings(&["kill", "--signal", "HUP", &made.container]),
        Duration::from_secs(60),
    )
    .await;
    assert!(hup.status.success(), "podman kill: {}", text(&hup));
    let reloaded = eventually_async(Duration::from_secs(30), || async {
        status_of(&url("/added")).await == Some(200)
    })
    .await;
    assert!(
        reloaded,
        "the new route never answered\n{}",
        made.logs().await
    );
    assert_eq!(made.state("Running").await, "true", "{}", made.logs().await);
    // The limiter's state survived the reload: still refused.
    assert_eq!(get(&url("/limited"), &[]).await.status, 429);
}

/// SIGTERM (podman stop): the request in flight finishes, the gateway exits 0 well
/// within the 30 s before podman would send SIGKILL. Returns how long the stop took.
async fn stop_drains(made: &Made, up: &Upstream, url: &impl Fn(&str) -> String) -> Duration {
    let before = up.requests();
    let in_flight = tokio::spawn({
        let url = url("/drain/delay");
        async move { get(&url, &[]).await.status }
    });
    assert!(
        eventually(Duration::from_secs(30), || up.requests() > before).await,
        "the slow request never reached the upstream"
    );
    let stopping = Instant::now();
    let stop = podman(
        strings(&["stop", "--time", "30", &made.container]),
        Duration::from_secs(90),
    )
    .await;
    let took = stopping.elapsed();
    assert!(stop.status.success(), "podman stop: {}", text(&stop));
    let answered = tokio::time::timeout(Duration::from_secs(30), in_flight)
        .await
        .expect("the in-flight request ends")
        .expect("join");
    assert_eq!(answered, 200, "the in-flight request was drained, not cut");
    let code = made.state("ExitCode").await;
    assert_eq!(code, "0", "exit code after SIGTERM\n{}", made.logs().await);
    assert!(
        took < Duration::from_secs(25),
        "podman stop took {took:?}: the drain (10 s at most) did not end it"
    );
    took
}
