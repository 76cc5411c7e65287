//! examples/kubernetes/ and examples/docker-compose.yml are safe to copy, checked by
//! tests/kubernetes/check_manifests.py: every manifest passes the Kubernetes API's JSON
//! schemas (PyPI's kubernetes-validate, strict, for every release it ships from 1.30 on;
//! kubeconform and kubeval are Go binaries neither PyPI nor Debian ship, and the
//! `kubernetes` client's models drop unknown fields instead of refusing them), every pod
//! template the Pod Security Standard "restricted" profile, control by control, and the
//! images, the PodDisruptionBudget, the Prometheus scrape, Redis's append-only file on a
//! claim and the Compose file's Redis are as they should be. Each check is also shown to
//! refuse a copy broken on purpose, so none passes by checking nothing.
//!
//! Needs python3 with kubernetes-validate (which brings PyYAML): `scripts/test` installs it
//! and runs these tests (a plain `cargo test` ignores them and says so); run by hand
//! without it, they fail saying what to install.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::kubernetes::DIR;

const NEEDS: &str =
    "install `pip install kubernetes-validate` (it brings PyYAML), or run scripts/test";

fn checker_available() -> bool {
    std::process::Command::new("python3")
        .args(["-c", "import yaml, kubernetes_validate"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `python3 tests/kubernetes/check_manifests.py ARGS…`: whether it passed, and its report.
fn check(args: &[&OsStr]) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kubernetes/check_manifests.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // 1: checks failed, and said so; anything else (a crash, a missing module) is no verdict.
    let code = out.status.code();
    assert!(
        matches!(code, Some(0 | 1)),
        "check_manifests.py: {code:?}\n{report}"
    );
    (code == Some(0), report)
}

/// A copy of the repository's files the checks read, for a broken variant of them.
fn copy_of_the_examples() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(root.path().join(DIR)).expect("mkdir");
    let files = std::fs::read_dir(DIR)
        .expect("examples/kubernetes")
        .map(|e| {
            let name = e.expect("entry").file_name();
            Path::new(DIR).join(name)
        });
    let others = ["Cargo.toml", "Dockerfile", "examples/docker-compose.yml"].map(PathBuf::from);
    for file in files.chain(others) {
        std::fs::copy(&file, root.path().join(&file)).expect("copy");
    }
    root
}

/// Replaces `from` (every occurrence, which must exist) with `to` in `root`/`file`.
fn mutate(root: &Path, file: &str, from: &str, to: &str) {
    let path = root.join(file);
    let text = std::fs::read_to_string(&path).expect("read");
    assert!(text.contains(from), "{file} has `{from}` to break");
    std::fs::write(&path, text.replace(from, to)).expect("write");
}

#[test]
#[ignore = "needs python3 with kubernetes-validate: scripts/test installs it and runs it (--include-ignored)"]
fn kubernetes_manifests_pass_the_kubernetes_schemas() {
    assert!(checker_available(), "{NEEDS}");
    let (passed, report) = check(&["schemas".as_ref(), DIR.as_ref()]);
    assert!(passed, "{report}");
    for object in [
        "deployment.yaml deployment/tollgate",
        "service.yaml service/tollgate-admin",
        "pdb.yaml poddisruptionbudget/tollgate",
        "networkpolicy.yaml networkpolicy/tollgate-redis",
        "redis.yaml statefulset/tollgate-redis",
        "servicemonitor.yaml servicemonitor/tollgate",
    ] {
        assert!(
            report.contains(&format!("ok schema {object}")),
            "{object}: {report}"
        );
    }
    assert!(report.contains("ok schema kustomization.yaml"), "{report}");

    // Strict: a misspelt field, a wrong type, or a ServiceMonitor field the CRD lacks fails.
    for (file, from, to, said) in [
        (
            "deployment.yaml",
            "readOnlyRootFilesystem",
            "readOnlyRootFileSystem",
            "'readOnlyRootFileSystem' was unexpected",
        ),
        (
            "service.yaml",
            "port: 80",
            "port: eighty",
            "'eighty' is not of type",
        ),
        (
            "servicemonitor.yaml",
            "interval: 15s",
            "intervall: 15s",
            "'intervall' was unexpected",
        ),
        (
            "kustomization.yaml",
            "- pdb.yaml",
            "- pdbs.yaml",
            "names pdbs.yaml, which is not there",
        ),
    ] {
        let root = copy_of_the_examples();
        mutate(root.path(), &format!("{DIR}/{file}"), from, to);
        let (passed, report) = check(&["schemas".as_ref(), root.path().join(DIR).as_os_str()]);
        assert!(
            !passed && report.contains(said),
            "{file}: {from} -> {to}:\n{report}"
        );
    }
}

/// The line of the container's securityContext a broken copy replaces.
const SC: &str = "privileged: false";

/// Each a pod template broken one way against the restricted profile, and what the checker must say of it.
const BROKEN_PODS: &[(&str, &str, &str)] = &[
    (
        "      automountServiceAccountToken: false",
        "      hostNetwork: true",
        "Host Namespaces",
    ),
    (SC, "privileged: true", "Privileged Containers"),
    (SC, "windowsOptions: {hostProcess: true}", "HostProcess"),
    (
        r#"drop: ["ALL"]"#,
        r#"drop: ["ALL"], add: ["NET_ADMIN"]"#,
        "Capabilities",
    ),
    (
        r#"drop: ["ALL"]"#,
        r#"add: ["NET_BIND_SERVICE"]"#,
        "Capabilities",
    ),
    (
        "      volumes:\n",
        "      volumes:\n        - {name: host, hostPath: {path: /}}\n",
        "HostPath Volumes",
    ),
    (
        "      volumes:\n",
        "      volumes:\n        - {name: nfs, nfs: {server: nas, path: /}}\n",
        "Volume Types",
    ),
    (
        "containerPort: 8080\n",
        "containerPort: 8080\n              hostPort: 8080\n",
        "Host Ports",
    ),
    (
        "prometheus.io/path: /metrics",
        "container.apparmor.security.beta.kubernetes.io/tollgate: unconfined",
        "AppArmor",
    ),
    (SC, "seLinuxOptions: {type: spc_t}", "SELinux"),
    (SC, "procMount: Unmasked", "/proc Mount Type"),
    (
        "fsGroup: 10001",
        r#"sysctls: [{name: kernel.msgmax, value: "65536"}]"#,
        "Sysctls",
    ),
    ("{type: RuntimeDefault}", "{type: Unconfined}", "Seccomp"),
    (
        "allowPrivilegeEscalation: false",
        "allowPrivilegeEscalation: true",
        "Privilege Escalation",
    ),
    (
        "runAsNonRoot: true",
        "runAsNonRoot: false",
        "Running as Non-root",
    ),
    (
        "runAsUser: 10001",
        "runAsUser: 0",
        "Running as Non-root user",
    ),
];

#[test]
#[ignore = "needs python3 with kubernetes-validate: scripts/test installs it and runs it (--include-ignored)"]
fn kubernetes_pod_templates_pass_the_restricted_pod_security_standard() {
    assert!(checker_available(), "{NEEDS}");
    let manifests: Vec<PathBuf> = std::fs::read_dir(DIR)
        .expect("examples/kubernetes")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension() == Some(OsStr::new("yaml")))
        .collect();
    let mut args = vec![OsStr::new("restricted")];
    args.extend(manifests.iter().map(|p| p.as_os_str()));
    let (passed, report) = check(&args);
    assert!(passed, "{report}");
    for workload in ["deployment/tollgate", "statefulset/tollgate-redis"] {
        assert!(
            report.contains(&format!(
                "{workload}: the restricted profile's 15 controls hold"
            )),
            "{report}"
        );
    }

    // Every control refuses the gateway's pod once it breaks that control.
    let d = "deployment.yaml";
    for &(from, to, control) in BROKEN_PODS {
        let root = copy_of_the_examples();
        mutate(root.path(), &format!("{DIR}/{d}"), from, to);
        let file = root.path().join(DIR).join(d);
        let (passed, report) = check(&["restricted".as_ref(), file.as_os_str()]);
        let said = format!("FAIL restricted {d} deployment/tollgate: {control}: ");
        assert!(
            !passed && report.contains(&said),
            "{from} -> {to}: want {control}:\n{report}"
        );
    }
}

/// Each a copy of the examples broken one way, and what the checker must say of it: (file, from, to, said).
const BROKEN_COPIES: &[(&str, &str, &str, &str)] = &[
    (
        "examples/kubernetes/deployment.yaml",
        "image: tollgate:0.1.0",
        "image: tollgate:latest",
        "FAIL image",
    ),
    (
        "examples/kubernetes/redis.yaml",
        "imagePullPolicy: IfNotPresent",
        "imagePullPolicy: Always",
        "FAIL image",
    ),
    (
        "examples/kubernetes/deployment.yaml",
        "readOnlyRootFilesystem: true",
        "readOnlyRootFilesystem: false",
        "FAIL read-only root",
    ),
    (
        "Dockerfile",
        "USER 10001:10001",
        "USER 10002:10002",
        "FAIL gateway runs as",
    ),
    (
        "examples/kubernetes/pdb.yaml",
        "matchLabels: {app: tollgate}",
        "matchLabels: {app: api}",
        "FAIL pdb",
    ),
    (
        "examples/kubernetes/kustomization.yaml",
        "  - pdb.yaml\n",
        "",
        "FAIL kustomization.yaml: pdb.yaml",
    ),
    (
        "examples/kubernetes/deployment.yaml",
        r#"prometheus.io/port: "9901""#,
        r#"prometheus.io/port: "8080""#,
        "FAIL metrics: pod annotations",
    ),
    (
        "examples/kubernetes/service.yaml",
        "targetPort: admin",
        "targetPort: http",
        "FAIL metrics: servicemonitor.yaml endpoint",
    ),
    (
        "examples/kubernetes/tollgate.toml",
        "0.0.0.0:9901",
        "127.0.0.1:9901",
        "is not reachable from outside the pod",
    ),
    (
        "examples/kubernetes/redis.yaml",
        r#""--appendonly", "yes""#,
        r#""--appendonly", "no""#,
        "FAIL redis",
    ),
    (
        "examples/kubernetes/redis.yaml",
        "name: data\n      spec",
        "name: scratch\n      spec",
        "FAIL redis",
    ),
    (
        "examples/docker-compose.yml",
        r#""--appendonly", "yes""#,
        r#""--appendonly", "no""#,
        "FAIL compose redis",
    ),
    (
        "examples/docker-compose.yml",
        "redis-data:/data",
        "./redis:/data",
        "FAIL compose redis",
    ),
];

#[test]
#[ignore = "needs python3 with kubernetes-validate: scripts/test installs it and runs it (--include-ignored)"]
fn kubernetes_and_compose_examples_are_safe_to_copy() {
    assert!(checker_available(), "{NEEDS}");
    let (passed, report) = check(&["conventions".as_ref(), env!("CARGO_MANIFEST_DIR").as_ref()]);
    assert!(passed, "{report}");
    for said in [
        "ok gateway image tollgate:",
        "ok image redis.yaml statefulset/tollgate-redis container redis: redis:",
        "ok gateway runs as the image's user 10001:10001",
        "ok pdb pdb.yaml poddisruptionbudget/tollgate selects the gateway's pods",
        "ok metrics: the pod's prometheus.io annotations point at admin_listen 0.0.0.0:9901/metrics",
        "ok metrics: servicemonitor.yaml scrapes port admin -> 9901/metrics",
        "ok metrics: servicemonitor.yaml is optional",
        "ok redis redis.yaml statefulset/tollgate-redis: appendonly yes, /data on the claim data",
        "ok compose redis: appendonly yes, /data on the named volume redis-data",
    ] {
        assert!(report.contains(said), "{said}:\n{report}");
    }

    for &(file, from, to, said) in BROKEN_COPIES {
        let root = copy_of_the_examples();
        mutate(root.path(), file, from, to);
        let (passed, report) = check(&["conventions".as_ref(), root.path().as_os_str()]);
        assert!(
            !passed && report.contains(said),
            "{file}: {from} -> {to}: want {said}:\n{report}"
        );
    }
}
