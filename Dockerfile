# tollgate container image (docs/container.md).
#
# From source, the default target (BuildKit, Docker's default builder since 23, for the
# cache mounts):
#
#   docker build -t tollgate .
#
# From a binary built beforehand, so that no rust image is pulled (the `prebuilt` target;
# the binary is linked against glibc, so build it on Debian bookworm or older, for the
# image's architecture). .dockerignore keeps every target/ folder out of the build
# context, so copy the binary to dist/ (TOLLGATE_BINARY, a path inside the context):
#
#   cargo build --profile dist --locked && install -D target/dist/tollgate dist/tollgate
#   strip --strip-debug dist/tollgate     # the dist profile keeps debug info (~50 MB)
#   docker build --target prebuilt -t tollgate .
#   docker build --target prebuilt --build-arg TOLLGATE_BINARY=elsewhere/tollgate -t tollgate .
#
# Base images are pinned by exact tag: rust:1.95.0-bookworm (the builder) and
# debian:bookworm-20260824-slim (Debian 12.15, the runtime). scripts/container-base (the
# container test's base image) reads the runtime tag from the FROM line below.
#
#   docker run --rm --name tollgate -p 8080:8080 -v "$PWD/conf:/etc/tollgate:ro" tollgate
#
# Configuration: the gateway reads /etc/tollgate/tollgate.toml. The image ships
# docker/tollgate.toml there as a default (the demo config listening on 0.0.0.0:8080, with
# the admin API on the container's loopback, 127.0.0.1:9901; its upstream,
# http://127.0.0.1:3000, must be changed). Mount your own: preferably the whole folder
# (-v "$PWD/conf:/etc/tollgate:ro"), because a single-file bind mount keeps showing the old
# file after an editor replaces it, and then a reload does not see your edit. Relative TLS
# paths resolve against /etc/tollgate.
#
#   validate:  docker run --rm -v "$PWD/conf:/etc/tollgate:ro" tollgate check --config /etc/tollgate/tollgate.toml
#   reload:    docker kill --signal=HUP tollgate        (or POST /admin/reload on the admin port)
#   stop:      docker stop tollgate                     (SIGTERM: graceful drain, see drain_timeout)
#
# `docker stop` sends SIGKILL after 10 s by default; keep [server] drain_timeout below the
# stop timeout (the default config uses 8s) or raise it: docker run --stop-timeout 35 ...
#
# The HEALTHCHECK runs `tollgate health` inside the container: GET $TOLLGATE_HEALTH_URL
# (http://127.0.0.1:9901/healthz), healthy on 200 within 2 s. A config whose admin_listen
# uses another port needs -e TOLLGATE_HEALTH_URL=http://127.0.0.1:<port>/healthz; one
# without an admin listener needs --no-healthcheck. Podman keeps HEALTHCHECK only in the
# docker image format: podman build --format docker.

# ---- runtime base: everything but the binary ------------------------------------------
FROM debian:bookworm-20260824-slim AS base

LABEL org.opencontainers.image.title="tollgate" \
      org.opencontainers.image.description="A rate-limiting reverse-proxy gateway" \
      org.opencontainers.image.licenses="Apache-2.0"

# ca-certificates only: https:// upstreams are verified against the roots built into the
# binary, but operators expect the system bundle to be present in a base image.
# The package lists and apt's caches go in the same step (Debian's own images clean the
# caches through a hook; a base made without it would keep ~80 MB of them).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log

RUN groupadd --system --gid 10001 tollgate \
    && useradd --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin tollgate

COPY docker/tollgate.toml /etc/tollgate/tollgate.toml

ENV RUST_LOG=info \
    TOLLGATE_HEALTH_URL=http://127.0.0.1:9901/healthz

USER 10001:10001

# 8080: data plane (listen). The admin API (admin_listen; set admin_token_file before exposing it) listens on the
# container's loopback in the default config, so it is not exposed; see docs/container.md
# for reaching /metrics from outside.
EXPOSE 8080

# SIGTERM (and SIGINT): stop accepting, let open connections finish for up to
# drain_timeout, exit 0. SIGHUP: reload /etc/tollgate/tollgate.toml.
STOPSIGNAL SIGTERM

HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["tollgate", "health"]

ENTRYPOINT ["tollgate"]
CMD ["run", "--config", "/etc/tollgate/tollgate.toml"]

# ---- prebuilt: the base with a binary from the build context ---------------------------
# Before the builder stage, so that even a builder that runs every stage up to its target
# (the legacy one) never needs the rust image for it.
FROM base AS prebuilt
ARG TOLLGATE_BINARY=dist/tollgate
COPY --chmod=0755 ${TOLLGATE_BINARY} /usr/local/bin/tollgate

# ---- build from source ----------------------------------------------------------------
FROM rust:1.95.0-bookworm AS builder
WORKDIR /src
COPY . .
# Cache mounts keep the registry and target/ between builds. The binary is copied out in
# the same step because target/ is a cache. The dist profile (Cargo.toml: release with
# whole-program LTO) is what production runs. Debug info (kept for profiling) is
# stripped; symbol names stay, so panics still show function names.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked --bin tollgate \
    && install -D -m 0755 target/dist/tollgate /out/tollgate \
    && strip --strip-debug /out/tollgate

# ---- the default target: the base with the binary built from source -------------------
FROM base AS runtime
COPY --from=builder /out/tollgate /usr/local/bin/tollgate
