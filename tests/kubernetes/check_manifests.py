#!/usr/bin/env python3
"""Checks of the shipped Kubernetes and Compose examples (tests/integration/kubernetes.rs).

Usage:
    python3 tests/kubernetes/check_manifests.py schemas DIR
    python3 tests/kubernetes/check_manifests.py restricted FILE...
    python3 tests/kubernetes/check_manifests.py conventions REPO_ROOT

schemas      every object in DIR/*.yaml against the Kubernetes API's own JSON schemas, in
             strict mode (an unknown or misspelt field fails), for every Kubernetes release
             from MIN_KUBERNETES on that kubernetes-validate ships. The validator is PyPI's
             `kubernetes-validate` (Will Thames): it carries the schemas generated from each
             release's OpenAPI document (the same yannh/kubernetes-json-schema set kubeconform
             uses), so it works offline, and it is kept in step with Kubernetes releases.
             kubeconform and kubeval are Go binaries that neither PyPI nor Debian ship; the
             `kubernetes` client's models are not strict (unknown fields are dropped). An
             object with no built-in schema fails, never passes unchecked, except two:
             kustomization.yaml (kustomize's file, not an API object: its keys and the files it
             names are checked) and the ServiceMonitor (a Prometheus Operator CRD: its
             metadata against the API's ObjectMeta schema, its spec against SERVICEMONITOR_SPEC,
             the fields this example uses transcribed from the operator's CRD, v0.80).
restricted   every pod template in FILEs against the Pod Security Standard "restricted"
             profile (which includes "baseline"), rule by rule, as the Kubernetes docs list
             them (concepts/security/pod-security-standards).
conventions  the rest of what makes the examples safe to copy: pinned images pulled
             IfNotPresent, the image's own uid, read-only root filesystems, a
             PodDisruptionBudget over the gateway's pods, Prometheus scraping the config's
             admin port at /metrics, Redis's append-only file on a PersistentVolumeClaim, and
             the Compose file's Redis with its append-only file on a named volume.

Prints one `ok ...` line per passed check and one `FAIL ...` line per failed one; exits 0 when
nothing failed, 1 otherwise, 2 on bad usage, 3 when a module it needs is missing, 4 when it
crashed (a file that does not parse, say).
"""

from __future__ import annotations

import ipaddress
import pathlib
import re
import sys
import tomllib

try:
    import yaml
except ImportError:
    print("missing Python module yaml: pip install PyYAML (scripts/test installs it)", file=sys.stderr)
    sys.exit(3)

MIN_KUBERNETES = "1.30"
METRICS_PATH = "/metrics"  # where the admin listener serves Prometheus's text (docs/admin-api.md)

failures: list[str] = []


def ok(message: str) -> None:
    print(f"ok {message}")


def fail(message: str) -> None:
    failures.append(message)
    print(f"FAIL {message}")


def load(path: pathlib.Path) -> list[dict]:
    with open(path) as f:
        return [doc for doc in yaml.safe_load_all(f) if doc is not None]


def name_of(doc: dict) -> str:
    return f"{doc.get('kind', '?').lower()}/{doc.get('metadata', {}).get('name', '?')}"


# ---- schemas --------------------------------------------------------------------------

DURATION = "^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["key", "operator"],
                "properties": {
                    "key": {"type": "string"},
                    "operator": {"type": "string"},
                    "values": {"type": "array", "items": {"type": "string"}},
                },
            },
        },
    },
}
SERVICEMONITOR_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["endpoints", "selector"],
    "properties": {
        "selector": LABEL_SELECTOR,
        "jobLabel": {"type": "string"},
        "namespaceSelector": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "any": {"type": "boolean"},
                "matchNames": {"type": "array", "items": {"type": "string"}},
            },
        },
        "endpoints": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "port": {"type": "string"},
                    "targetPort": {"type": ["integer", "string"]},
                    "path": {"type": "string"},
                    "scheme": {"enum": ["http", "https"]},
                    "interval": {"type": "string", "pattern": DURATION},
                    "scrapeTimeout": {"type": "string", "pattern": DURATION},
                    "honorLabels": {"type": "boolean"},
                },
            },
        },
    },
}
KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "configMapGenerator", "secretGenerator",
                      "namespace", "labels", "commonLabels", "images", "patches"}


def schemas(directory: pathlib.Path) -> None:
    try:
        import jsonschema
        import kubernetes_validate
        from kubernetes_validate import utils as kv
    except ImportError as e:
        print(f"missing Python module {e.name}: pip install kubernetes-validate "
              "(scripts/test installs it)", file=sys.stderr)
        sys.exit(3)
    from packaging.version import Version

    # all_versions() names each release twice (its plain and its strict schema folder).
    versions = sorted({v for v in kv.all_versions() if Version(v) >= Version(MIN_KUBERNETES)}, key=Version)
    if len(versions) < 2:
        fail(f"kubernetes-validate {kubernetes_validate.__version__} ships no schemas from "
             f"Kubernetes {MIN_KUBERNETES} on: upgrade it")
        return
    span = f"{kv.major_minor(versions[0])}…{kv.major_minor(versions[-1])}"

    def validate(doc: dict, where: str) -> bool:
        """Strictly against each release; the first error each release finds, said once."""
        errors: dict[str, list[str]] = {}
        for version in versions:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kv.SchemaNotFoundError as e:
                fail(f"schema {where}: {e.message}")
                return False
            except kv.ValidationError as e:
                path = ".".join(str(p) for p in e.path) or "(top)"
                errors.setdefault(f"{path}: {e.message}", []).append(kv.major_minor(version))
        for error, releases in errors.items():
            fail(f"schema {where} against {', '.join(releases)}: {error}")
        return not errors

    files = sorted(directory.glob("*.yaml"))
    if not files:
        fail(f"schema: no manifest in {directory}")
    for path in files:
        for doc in load(path):
            where = f"{path.name} {name_of(doc)}"
            if doc.get("kind") == "Kustomization":
                where = path.name
                check_kustomization(directory, doc, where)
            elif doc.get("kind") == "ServiceMonitor":
                # The metadata against the API's ObjectMeta, inside an object that has nothing else.
                meta_ok = validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": doc.get("metadata")},
                                   f"{where} metadata")
                extra = set(doc) - {"apiVersion", "kind", "metadata", "spec"}
                if doc.get("apiVersion") != "monitoring.coreos.com/v1" or extra:
                    fail(f"schema {where}: apiVersion monitoring.coreos.com/v1 and only metadata and spec")
                    meta_ok = False
                errors = sorted(jsonschema.Draft7Validator(SERVICEMONITOR_SPEC).iter_errors(doc.get("spec")),
                                key=str)
                for e in errors:
                    fail(f"schema {where}: spec.{'.'.join(str(p) for p in e.path)}: {e.message}")
                if meta_ok and not errors:
                    ok(f"schema {where} (metadata against {span}, spec against the CRD's fields)")
            elif validate(doc, where):
                ok(f"schema {where} against {span} (strict)")


def check_kustomization(directory: pathlib.Path, doc: dict, where: str) -> None:
    before = len(failures)
    if doc.get("apiVersion") != "kustomize.config.k8s.io/v1beta1":
        fail(f"schema {where}: apiVersion kustomize.config.k8s.io/v1beta1")
    for key in set(doc) - KUSTOMIZATION_KEYS:
        fail(f"schema {where}: unknown key {key}")
    named = list(doc.get("resources", []))
    for generator in doc.get("configMapGenerator", []) + doc.get("secretGenerator", []):
        named += generator.get("files", [])
    for name in named:
        if not (directory / name).is_file():
            fail(f"schema {where}: names {name}, which is not there")
    if len(failures) == before:
        ok(f"schema {where}: every file it names is there")


# ---- restricted -----------------------------------------------------------------------

TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController", "Job"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
# The profile's controls, baseline's first (Seccomp and Capabilities are tightened by restricted).
RULES = ("HostProcess", "Host Namespaces", "Privileged Containers", "Capabilities",
         "HostPath Volumes", "Host Ports", "AppArmor", "SELinux", "/proc Mount Type", "Seccomp",
         "Sysctls", "Volume Types", "Privilege Escalation", "Running as Non-root",
         "Running as Non-root user")


def pod_templates(doc: dict):
    """(pod metadata, pod spec) of every pod the object makes."""
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind == "Pod":
        yield doc.get("metadata") or {}, spec
    elif kind in TEMPLATE_KINDS:
        template = spec.get("template") or {}
        yield template.get("metadata") or {}, template.get("spec") or {}
    elif kind == "CronJob":
        template = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
        yield template.get("metadata") or {}, template.get("spec") or {}


def containers(pod: dict):
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in pod.get(field) or []:
            yield c, c.get("securityContext") or {}


def restricted_violations(meta: dict, pod: dict) -> list[tuple[str, str]]:
    """(rule, what) for each rule of the restricted profile the pod breaks."""
    out = []
    psc = pod.get("securityContext") or {}
    ctrs = list(containers(pod))
    contexts = [("pod", psc)] + [(f"container {c.get('name')}", sc) for c, sc in ctrs]

    # Baseline.
    for where, sc in contexts:
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(("HostProcess", f"{where}: windowsOptions.hostProcess"))
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            out.append(("Host Namespaces", f"{field}: true"))
    for c, sc in ctrs:
        if sc.get("privileged"):
            out.append(("Privileged Containers", f"container {c.get('name')}: privileged: true"))
    for v in pod.get("volumes") or []:
        if "hostPath" in v:
            out.append(("HostPath Volumes", f"volume {v.get('name')}: hostPath"))
    for c, _ in ctrs:
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append(("Host Ports", f"container {c.get('name')}: hostPort {p['hostPort']}"))
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
                value == "runtime/default" or value.startswith("localhost/")):
            out.append(("AppArmor", f"annotation {key}: {value}"))
    for where, sc in contexts:
        apparmor = (sc.get("appArmorProfile") or {}).get("type")
        if apparmor not in (None, "RuntimeDefault", "Localhost"):
            out.append(("AppArmor", f"{where}: appArmorProfile.type {apparmor}"))
        selinux = sc.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            out.append(("SELinux", f"{where}: seLinuxOptions {selinux}"))
        if where != "pod" and sc.get("procMount", "Default") != "Default":
            out.append(("/proc Mount Type", f"{where}: procMount {sc['procMount']}"))
    for sysctl in psc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            out.append(("Sysctls", f"pod: sysctl {sysctl.get('name')}"))

    # Restricted.
    for v in pod.get("volumes") or []:
        sources = set(v) - {"name"}
        if not sources or not sources <= RESTRICTED_VOLUMES:
            out.append(("Volume Types", f"volume {v.get('name')}: {', '.join(sorted(sources)) or 'no source'}"))
    for c, sc in ctrs:
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(("Privilege Escalation",
                        f"container {c.get('name')}: allowPrivilegeEscalation is not false"))
    pod_non_root = psc.get("runAsNonRoot") is True
    for c, sc in ctrs:
        explicit = sc.get("runAsNonRoot")
        if explicit is False or (explicit is None and not pod_non_root):
            out.append(("Running as Non-root", f"container {c.get('name')}: runAsNonRoot is not true"))
    if psc.get("runAsNonRoot") is False:
        out.append(("Running as Non-root", "pod: runAsNonRoot: false"))
    for where, sc in contexts:
        if sc.get("runAsUser") == 0:
            out.append(("Running as Non-root user", f"{where}: runAsUser: 0"))
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        out.append(("Seccomp", f"pod: seccompProfile.type {pod_seccomp}"))
    for c, sc in ctrs:
        own = (sc.get("seccompProfile") or {}).get("type")
        if own not in (None, "RuntimeDefault", "Localhost"):
            out.append(("Seccomp", f"container {c.get('name')}: seccompProfile.type {own}"))
        elif own is None and pod_seccomp is None:
            out.append(("Seccomp", f"container {c.get('name')}: no seccompProfile, nor on the pod"))
    for c, sc in ctrs:
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(("Capabilities", f"container {c.get('name')}: does not drop ALL"))
        added = set(caps.get("add") or []) - {"NET_BIND_SERVICE"}
        if added:
            out.append(("Capabilities", f"container {c.get('name')}: adds {', '.join(sorted(added))}"))
    return out


def restricted(paths: list[pathlib.Path]) -> None:
    pods = 0
    for path in paths:
        for doc in load(path):
            for meta, pod in pod_templates(doc):
                pods += 1
                where = f"{path.name} {name_of(doc)}"
                broken = restricted_violations(meta, pod)
                for rule, what in broken:
                    assert rule in RULES, rule
                    fail(f"restricted {where}: {rule}: {what}")
                if not broken:
                    ok(f"restricted {where}: the restricted profile's {len(RULES)} controls hold")
    if pods == 0:
        fail("restricted: no pod template in " + ", ".join(str(p) for p in paths))


# ---- conventions ----------------------------------------------------------------------

def matches(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def has_flag(args: list, flag: str, value: str) -> bool:
    """`flag value` is the last setting of `flag` in args."""
    settings = [args[i + 1] for i in range(len(args) - 1) if args[i] == flag]
    return bool(settings) and settings[-1] == value


def conventions(root: pathlib.Path) -> None:
    directory = root / "examples/kubernetes"
    docs = {}
    for path in sorted(directory.glob("*.yaml")):
        for doc in load(path):
            docs.setdefault(doc.get("kind"), []).append((path.name, doc))
    kustomization = docs.get("Kustomization", [("", {})])[0][1]
    resources = kustomization.get("resources") or []
    for path in sorted(directory.glob("*.yaml")):
        kinds = {d.get("kind") for d in load(path)}
        if path.name not in resources and kinds not in ({"Kustomization"}, {"ServiceMonitor"}):
            fail(f"kustomization.yaml: {path.name} is not in its resources")
    config = tomllib.loads((directory / "tollgate.toml").read_text())
    version = tomllib.loads((root / "Cargo.toml").read_text())["package"]["version"]
    user = re.search(r"^USER (\d+):(\d+)$", (root / "Dockerfile").read_text(), re.M)
    if not user:
        fail("conventions: the Dockerfile has no numeric `USER uid:gid`")
        return

    # Images: a pinned tag, pulled only when missing; the root filesystem read-only.
    workloads = [(f, d) for kind in sorted(TEMPLATE_KINDS) for f, d in docs.get(kind, [])]
    for file, doc in workloads:
        for _, pod in pod_templates(doc):
            for c, sc in containers(pod):
                where = f"{file} {name_of(doc)} container {c.get('name')}"
                image = c.get("image", "")
                tag = image.rsplit("/", 1)[-1].partition(":")[2]
                if not tag or tag == "latest" or c.get("imagePullPolicy") != "IfNotPresent":
                    fail(f"image {where}: {image} pulled {c.get('imagePullPolicy')}: "
                         "want a version tag, IfNotPresent")
                else:
                    ok(f"image {where}: {image}, IfNotPresent")
                if sc.get("readOnlyRootFilesystem") is not True:
                    fail(f"read-only root {where}: readOnlyRootFilesystem is not true")
                else:
                    ok(f"read-only root {where}")

    gateway = next((d for f, d in docs.get("Deployment", []) if name_of(d) == "deployment/tollgate"), None)
    if gateway is None:
        fail("conventions: no Deployment tollgate")
        return
    meta, pod = next(pod_templates(gateway))
    labels = meta.get("labels") or {}
    psc = pod.get("securityContext") or {}
    container = pod["containers"][0]
    if container.get("image") == f"tollgate:{version}":
        ok(f"gateway image tollgate:{version}, Cargo.toml's version")
    else:
        fail(f"gateway image {container.get('image')}: want tollgate:{version} (Cargo.toml)")
    uid, gid = int(user[1]), int(user[2])
    csc = container.get("securityContext") or {}
    if (psc.get("runAsUser"), psc.get("runAsGroup")) == (uid, gid) and \
            csc.get("runAsUser", uid) == uid and csc.get("runAsGroup", gid) == gid:
        ok(f"gateway runs as the image's user {uid}:{gid} (the Dockerfile's USER)")
    else:
        fail(f"gateway runs as {psc.get('runAsUser')}:{psc.get('runAsGroup')}, the image as {uid}:{gid}")

    # What the gateway writes, and reads from a Secret, is mounted.
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts") or []}
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    server, store = config.get("server", {}), config.get("store", {})
    for field, value in (("server.overrides_file", server.get("overrides_file")),
                         ("store.state_file", store.get("state_file"))):
        if value is None:
            continue
        folder = str(pathlib.PurePosixPath("/etc/tollgate", value).parent)
        volume = volumes.get((mounts.get(folder) or {}).get("name"), {})
        if mounts.get(folder, {}).get("readOnly") or not ({"emptyDir", "persistentVolumeClaim"} & set(volume)):
            fail(f"writable {field} = {value}: {folder} is not a writable emptyDir or claim")
        else:
            ok(f"writable {field}: {folder} is a writable volume")
    token = server.get("admin_token_file")
    token_folder = str(pathlib.PurePosixPath(token).parent) if token else None
    if token and "secret" in volumes.get((mounts.get(token_folder) or {}).get("name"), {}):
        ok(f"admin_token_file {token} is in a Secret mounted at {token_folder}")
    else:
        fail(f"admin_token_file {token}: its folder is not a mounted Secret")

    # A PodDisruptionBudget over the gateway's pods, one that lets a drain go on.
    pdbs = [(f, d) for f, d in docs.get("PodDisruptionBudget", [])
            if matches((d["spec"].get("selector") or {}).get("matchLabels"), labels)]
    for file, pdb in pdbs:
        spec, replicas = pdb["spec"], gateway["spec"].get("replicas", 1)
        lets_one_go = spec.get("maxUnavailable", 0) >= 1 or (
            "minAvailable" in spec and spec["minAvailable"] < replicas)
        one_bound = ("minAvailable" in spec) != ("maxUnavailable" in spec)  # the API takes one
        if file in resources and one_bound and lets_one_go and spec.get("minAvailable", 1) >= 1:
            ok(f"pdb {file} {name_of(pdb)} selects the gateway's pods {labels}, listed in kustomization.yaml")
        else:
            fail(f"pdb {file} {name_of(pdb)}: want it listed in kustomization.yaml, with one of "
                 "minAvailable and maxUnavailable, keeping a pod and letting one go")
    if not pdbs:
        fail(f"pdb: no PodDisruptionBudget selects the gateway's pods {labels}")

    # Prometheus: the admin listener, reachable from the pod IP, scraped at /metrics.
    admin = server.get("admin_listen", "")
    host, _, port = admin.rpartition(":")
    if not port or ipaddress.ip_address(host.strip("[]")).is_loopback:
        fail(f"metrics: admin_listen {admin!r} is not reachable from outside the pod")
        return
    notes = meta.get("annotations") or {}
    want = {"prometheus.io/scrape": "true", "prometheus.io/port": port, "prometheus.io/path": METRICS_PATH}
    if all(notes.get(k) == v for k, v in want.items()):
        ok(f"metrics: the pod's prometheus.io annotations point at admin_listen {admin}{METRICS_PATH}")
    else:
        fail(f"metrics: pod annotations {notes}, want {want}")
    admin_ports = [p for p in container.get("ports") or [] if str(p.get("containerPort")) == port]
    if admin_ports:
        ok(f"metrics: the container declares the admin port {port} ({admin_ports[0].get('name')})")
    else:
        fail(f"metrics: the container does not declare the admin port {port}")
    readme = (directory / "README.md").read_text()
    for file, monitor in docs.get("ServiceMonitor", []):
        selector = (monitor["spec"].get("selector") or {}).get("matchLabels")
        services = [s for _, s in docs.get("Service", [])
                    if matches(selector, s["metadata"].get("labels") or {})
                    and matches(s["spec"].get("selector"), labels)]
        for endpoint in monitor["spec"].get("endpoints") or []:
            targets = [sp.get("targetPort") for s in services for sp in s["spec"]["ports"]
                       if sp.get("name") == endpoint.get("port")]
            reaches = any(t == int(port) or t in [p.get("name") for p in admin_ports] for t in targets)
            if reaches and endpoint.get("path") == METRICS_PATH:
                ok(f"metrics: {file} scrapes port {endpoint['port']} -> {port}{METRICS_PATH} of the gateway's pods")
            else:
                fail(f"metrics: {file} endpoint {endpoint}: no Service port of the gateway's pods "
                     f"reaching {port}{METRICS_PATH}")
        if file in resources or file not in readme or "optional" not in readme.lower():
            fail(f"metrics: {file} must stay out of kustomization.yaml and be in README.md as optional")
        else:
            ok(f"metrics: {file} is optional (README.md), not in kustomization.yaml")
    if not docs.get("ServiceMonitor"):
        fail("metrics: no ServiceMonitor")

    # Redis: the append-only file, on a PersistentVolumeClaim.
    redis_sets = docs.get("StatefulSet", [])
    for file, redis in redis_sets:
        _, pod = next(pod_templates(redis))
        claims = {t["metadata"]["name"] for t in redis["spec"].get("volumeClaimTemplates") or []}
        for c, _ in containers(pod):
            args = (c.get("command") or []) + (c.get("args") or [])
            data = next((args[i + 1] for i in range(len(args) - 1) if args[i] == "--dir"), "/data")
            on_claim = [m for m in c.get("volumeMounts") or []
                        if m["mountPath"] == data and m["name"] in claims and not m.get("readOnly")]
            if has_flag(args, "--appendonly", "yes") and on_claim:
                ok(f"redis {file} {name_of(redis)}: appendonly yes, {data} on the claim {on_claim[0]['name']}")
            else:
                fail(f"redis {file} {name_of(redis)}: want --appendonly yes and {data} on a volumeClaimTemplate")
        if (pod.get("securityContext") or {}).get("runAsUser") != 999:
            fail(f"redis {file}: runs as the image's redis user, uid 999")
    if not redis_sets:
        fail("redis: no StatefulSet with a volumeClaimTemplate")

    # Compose: its Redis keeps its append-only file on a named volume.
    compose = yaml.safe_load((root / "examples/docker-compose.yml").read_text())
    redis = compose["services"]["redis"]
    command = redis.get("command") or []
    command = command.split() if isinstance(command, str) else command
    named = [v.split(":")[0] for v in redis.get("volumes") or []
             if isinstance(v, str) and v.split(":")[1:2] == ["/data"]]
    if has_flag(command, "--appendonly", "yes") and named and named[0] in (compose.get("volumes") or {}):
        ok(f"compose redis: appendonly yes, /data on the named volume {named[0]}")
    else:
        fail("compose redis: want --appendonly yes and /data on a named volume")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] not in ("schemas", "restricted", "conventions"):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[1] == "schemas":
        schemas(pathlib.Path(argv[2]))
    elif argv[1] == "restricted":
        restricted([pathlib.Path(p) for p in argv[2:]])
    else:
        conventions(pathlib.Path(argv[2]))
    print(f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except Exception:  # a crash (a file that does not parse, ...) is no verdict: not 1
        import traceback
        traceback.print_exc()
        sys.exit(4)
