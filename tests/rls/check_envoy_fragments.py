#!/usr/bin/env python3
"""Put the Envoy pieces carried inside the Istio EnvoyFilter and the Envoy Gateway EnvoyPatchPolicy
examples (the ratelimit filter, the tollgate_rls cluster, the vhost/route rate_limits) into one static
bootstrap and ask a real Envoy (`envoy --mode validate`) whether it accepts them.

It checks Envoy field names, types and enums only, not the platforms' own matching/patching.
Usage: envoy_fragments_check.py ENVOY_BINARY EXAMPLES_DIR
"""
import copy, subprocess, sys, tempfile, yaml

envoy, examples = sys.argv[1], sys.argv[2]

def docs(name):
    return [d for d in yaml.safe_load_all(open(f"{examples}/{name}")) if d]

def bootstrap(http_filter, cluster, vhost_rate_limits, route_rate_limits):
    return {
        "static_resources": {
            "listeners": [{
                "name": "main",
                "address": {"socket_address": {"address": "127.0.0.1", "port_value": 10000}},
                "filter_chains": [{"filters": [{
                    "name": "envoy.filters.network.http_connection_manager",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "ingress",
                        "route_config": {"name": "local", "virtual_hosts": [{
                            "name": "all", "domains": ["*"],
                            "rate_limits": vhost_rate_limits,
                            "routes": [
                                {"match": {"prefix": "/v1/search"},
                                 "route": {"cluster": "api", "rate_limits": route_rate_limits}},
                                {"match": {"prefix": "/"}, "route": {"cluster": "api"}},
                            ]}]},
                        "http_filters": [http_filter, {
                            "name": "envoy.filters.http.router",
                            "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}],
                    }}]}],
            }],
            "clusters": [cluster, {
                "name": "api", "type": "STATIC", "connect_timeout": "1s",
                "load_assignment": {"cluster_name": "api", "endpoints": [{"lb_endpoints": [{"endpoint": {
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": 8080}}}}]}]}}],
        }
    }

def validate(label, boot):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(boot, f)
        f.flush()
        r = subprocess.run([envoy, "--mode", "validate", "-c", f.name], capture_output=True, text=True)
    ok = r.returncode == 0
    print(("OK   " if ok else "FAIL ") + label + ("" if ok else "\n" + (r.stdout + r.stderr)[-2000:]))
    return ok

results = []

# Istio: patches by applyTo.
patches = [p for d in docs("istio.yaml") if d["kind"] == "EnvoyFilter" for p in d["spec"]["configPatches"]]
by = {}
for p in patches:
    by.setdefault(p["applyTo"], []).append(p["patch"]["value"])
results.append(validate("istio.yaml (EnvoyFilter values)", bootstrap(
    by["HTTP_FILTER"][0], by["CLUSTER"][0],
    by["VIRTUAL_HOST"][0]["rate_limits"], by["HTTP_ROUTE"][0]["route"]["rate_limits"])))

# Envoy Gateway: jsonPatches by type / target.
epp = next(d for d in docs("envoy-gateway.yaml") if d["kind"] == "EnvoyPatchPolicy")
jp = epp["spec"]["jsonPatches"]
cluster = next(p for p in jp if p["type"].endswith("Cluster"))["operation"]["value"]
filt = next(p for p in jp if p["type"].endswith("Listener"))["operation"]["value"]
rcs = [p["operation"] for p in jp if p["type"].endswith("RouteConfiguration")]
vh = next(o for o in rcs if "virtual_hosts" in o["jsonPath"])["value"]
rt = next(o for o in rcs if "routes" in o["jsonPath"])["value"]
results.append(validate("envoy-gateway.yaml (EnvoyPatchPolicy values)", bootstrap(filt, cluster, vh, rt)))

# Negative control: a misspelt field must be refused.
bad = copy.deepcopy(filt)
bad["typed_config"]["failure_mode_denny"] = True
results.append(not validate("negative control (misspelt field; FAIL expected)", bootstrap(bad, cluster, vh, rt)))

print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
sys.exit(0 if all(results) else 1)
