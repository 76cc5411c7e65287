# syntax=docker/dockerfile:1
#
# tollgate container image.
#
#   docker build -t tollgate .
#   docker run --rm --name tollgate \
#       -p 8080:8080 -p 127.0.0.1:9901:9901 \
#       -v "$PWD/conf:/etc/tollgate:ro" \
#       tollgate
#
# Configuration: the gateway reads /etc/tollgate/tollgate.toml. The image ships
# docker/tollgate.toml there as a default (the demo config, listening on 0.0.0.0:8080 with
# the admin API on 0.0.0.0:9901; its upstream, http://127.0.0.1:3000, must be changed).
# Mount your own: preferably the whole folder (-v "$PWD/conf:/etc/tollgate:ro"), because a
# single-file bind mount keeps showing the old file after an editor replaces it, and then
# a reload does not see your edit. Relative TLS paths resolve against /etc/tollgate.
#
#   validate:  docker run --rm -v "$PWD/conf:/etc/tollgate:ro" tollgate check --config /etc/tollgate/tollgate.toml
#   reload:    docker kill --signal=HUP tollgate        (or POST /admin/reload on the admin port)
#   stop:      docker stop tollgate                     (SIGTERM: graceful drain, see drain_timeout)
#
# `docker stop` sends SIGKILL after 10 s by default; keep [server] drain_timeout below the
# stop timeout (the default config uses 8s) or raise it: docker run --stop-timeout 35 ...
#
# The HEALTHCHECK asks GET /healthz on 127.0.0.1:${TOLLGATE_ADMIN_PORT} (default 9901)
# with bash's /dev/tcp, as the slim image has no curl. A config whose admin_listen uses
# another port needs -e TOLLGATE_ADMIN_PORT=<port>; one without admin_listen, or with it
# bound to an address other than 0.0.0.0 or 127.0.0.1, needs --no-healthcheck.

ARG RUST_VERSION=1

# ---- build ----------------------------------------------------------------------------
FROM rust:${RUST_VERSION}-bookworm AS builder
WORKDIR /src
COPY . .
# Cache mounts keep the registry and target/ between builds (BuildKit, the default builder
# since Docker 23). The binary is copied out in the same step because target/ is a cache.
# Debug info (Cargo.toml's release profile keeps it for profiling) is stripped; symbol
# names stay, so panics still show function names.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin tollgate \
    && install -D -m 0755 target/release/tollgate /out/tollgate \
    && strip --strip-debug /out/tollgate

# ---- runtime --------------------------------------------------------------------------
FROM debian:bookworm-slim

LABEL org.opencontainers.image.title="tollgate" \
      org.opencontainers.image.description="A rate-limiting reverse-proxy gateway" \
      org.opencontainers.image.licenses="Apache-2.0"

# ca-certificates only: https:// upstreams are verified against the roots built into the
# binary, but operators expect the system bundle to be present in a base image.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*

RUN groupadd --system --gid 10001 tollgate \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin tollgate

COPY --from=builder /out/tollgate /usr/local/bin/tollgate
COPY docker/tollgate.toml /etc/tollgate/tollgate.toml

ENV RUST_LOG=info \
    TOLLGATE_ADMIN_PORT=9901

USER 10001:10001

# 8080: data plane (listen). 9901: admin API (admin_listen) -- no authentication, publish
# it to loopback or a management network only.
EXPOSE 8080 9901

# SIGTERM (and SIGINT): stop accepting, let open connections finish for up to
# drain_timeout, exit 0. SIGHUP: reload /etc/tollgate/tollgate.toml.
STOPSIGNAL SIGTERM

HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>\"/dev/tcp/127.0.0.1/${TOLLGATE_ADMIN_PORT:-9901}\" && printf 'GET /healthz HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n' >&3 && IFS= read -r -t 2 status <&3 && [[ \"$status\" == 'HTTP/1.1 200 '* ]]"]

ENTRYPOINT ["tollgate"]
CMD ["run", "--config", "/etc/tollgate/tollgate.toml"]
