//! examples/kubernetes/ holds together: its config passes `tollgate check`, and the
//! Deployment's probes, port, mount and grace period match what that config says.
//! That they are safe to copy is kubernetes_security.rs.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tollgate::config::Config;

pub const DIR: &str = "examples/kubernetes";
/// tollgate.toml's admin token file, mounted from a Secret (deployment.yaml).
const TOKEN_LINE: &str = r#"admin_token_file = "/run/secrets/tollgate/admin-token""#;

fn read(name: &str) -> String {
    std::fs::read_to_string(Path::new(DIR).join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The value after `key:` on the first line that has it (`containerPort: 8080` → "8080").
fn value_of<'a>(yaml: &'a str, key: &str) -> &'a str {
    yaml.lines()
        .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
        .unwrap_or_else(|| panic!("no `{key}:` in the manifest"))
        .trim()
}

/// tollgate.toml as shipped but for its admin token file, which is only in the pod: a copy
/// whose `admin_token_file` names a token in the returned folder.
fn config_with_a_token() -> (tempfile::TempDir, PathBuf) {
    let toml = read("tollgate.toml");
    assert_eq!(
        toml.matches(TOKEN_LINE).count(),
        1,
        "tollgate.toml has {TOKEN_LINE}"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("admin-token");
    std::fs::write(&token, "0123456789abcdef0123456789abcdef\n").expect("token");
    let line = format!("admin_token_file = {:?}", token.display().to_string());
    let path = dir.path().join("tollgate.toml");
    std::fs::write(&path, toml.replace(TOKEN_LINE, &line)).expect("config");
    (dir, path)
}

#[test]
fn the_kubernetes_example_matches_its_config() {
    let (_dir, toml) = config_with_a_token();
    let config = checked_config(&toml);
    let deployment = read("deployment.yaml");

    let listen = config.server.listen.port().to_string();
    assert_eq!(value_of(&deployment, "containerPort"), listen);
    check_probes(&config, &deployment);
    check_config_mount(&deployment);
    check_grace_period(&config, &deployment);
    check_redis(&config);
    let service = read("service.yaml");
    assert_eq!(value_of(&service, "targetPort"), "http");
    // The token file's folder is the Secret's mount.
    assert!(deployment.contains("mountPath: /run/secrets/tollgate\n"));
    assert!(deployment.contains("secretName: tollgate-admin-token"));
}

/// The config at `toml`, which passes `tollgate check` and has the pods reload it.
fn checked_config(toml: &Path) -> Config {
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "--config"])
        .arg(toml)
        .output()
        .expect("run tollgate check");
    assert!(
        check.status.success(),
        "tollgate check: {}",
        String::from_utf8_lossy(&check.stderr)
    );
    let config = tollgate::config::load(toml).expect("valid");
    assert!(
        config.server.watch_config,
        "the pods reload their ConfigMap by themselves"
    );
    config
}

/// The readiness and liveness probes ask the config's admin listener.
fn check_probes(config: &Config, deployment: &str) {
    let admin = config
        .server
        .admin_listen
        .expect("an admin listener for the probes");
    // Listening on every address (for Prometheus), it answers the probes on the loopback.
    let admin = if admin.ip().is_unspecified() {
        SocketAddr::from((Ipv4Addr::LOCALHOST, admin.port()))
    } else {
        admin
    };
    for path in ["/readyz", "/healthz"] {
        let url = format!("\"http://{admin}{path}\"");
        assert!(
            deployment.contains(&url),
            "a probe asks {url} (the config's admin_listen)"
        );
    }
    assert!(deployment.contains("readinessProbe") && deployment.contains("livenessProbe"));
}

/// The config is mounted as a folder (so ConfigMap swaps are seen) where `run` reads it.
fn check_config_mount(deployment: &str) {
    assert_eq!(value_of(deployment, "mountPath"), "/etc/tollgate");
    assert!(
        !deployment.lines().any(|l| l.trim().starts_with("subPath:")),
        "a subPath mount never sees an update"
    );
    assert!(deployment.contains(r#"args: ["run", "--config", "/etc/tollgate/tollgate.toml"]"#));
    let kustomization = read("kustomization.yaml");
    assert!(kustomization.contains("- tollgate.toml"));
    assert!(kustomization.contains("name: tollgate-config"));
    assert!(deployment.contains("name: tollgate-config"));
}

/// The grace period covers the preStop pause and the drain.
fn check_grace_period(config: &Config, deployment: &str) {
    let grace: u64 = value_of(deployment, "terminationGracePeriodSeconds")
        .parse()
        .expect("seconds");
    let pause: u64 = deployment
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix(r#"command: ["sleep", ""#)?
                .split('"')
                .next()?
                .parse()
                .ok()
        })
        .expect("a preStop sleep");
    assert!(
        Duration::from_secs(grace) > Duration::from_secs(pause) + config.server.drain_timeout,
        "terminationGracePeriodSeconds {grace} > preStop {pause} s + drain_timeout {:?}",
        config.server.drain_timeout
    );
}

/// The Redis the config names is the one the manifests run.
fn check_redis(config: &Config) {
    let redis = read("redis.yaml");
    match &config.store.backend {
        tollgate::config::Backend::Redis { urls, .. } => {
            assert_eq!(urls, &["redis://tollgate-redis:6379".to_owned()]);
        }
        other => panic!("a fleet shares its limits through Redis: {other:?}"),
    }
    assert!(redis.contains("name: tollgate-redis") && redis.contains("port: 6379"));
    assert!(
        redis.contains(r#""--appendonly", "yes""#),
        "a restart forgives nothing"
    );
}
