# syntax=docker/dockerfile:1
# opsrun container image.
#   docker build -t opsrun --build-arg OPSRUN_COMMIT="$(git rev-parse --short=12 HEAD)" .
#   docker run --rm opsrun token new --name ci --tenant acme --scopes submit,read
#     (line 1: the token, for the client; line 2: its entry for "auth": {"tokens": [...]}
#     in opsrun.json)
#   docker run --rm -p 8080:8080 -v "$PWD/opsrun.json:/etc/opsrun.json:ro" \
#     -e OPSRUN_CONFIG=/etc/opsrun.json -e OPSRUN_DATABASE_URL=postgresql://user:pass@db/opsrun opsrun
# The image listens on 0.0.0.0:8080 (OPSRUN_LISTEN), so it serves only with
# auth.tokens configured; without them it exits 2 naming auth.tokens. To try
# it on your own machine without tokens:
#   docker run --rm -p 127.0.0.1:8080:8080 -e OPSRUN_DATABASE_URL=... opsrun \
#     serve --insecure-no-auth
# opsrun speaks plain HTTP: put a TLS proxy in front of it (docs/operations.md).
# Migrations are embedded in the binary; `serve` applies them at start
# (or run `docker run ... opsrun migrate` first).
# Every event stream is a connection: for many SSE clients give the container
# a file limit to match, e.g. `docker run --ulimit nofile=20000:20000 ...`.

# Both stages start from the same Debian 12 image, pinned by its dated tag
# and the digest of that tag's multi-platform index. To move to a newer one
# (docs/operations.md, "Updating the base image"):
#   docker buildx imagetools inspect debian:bookworm-YYYYMMDD-slim
# and copy the "Digest:" line into BASE below.
ARG BASE=debian:bookworm-20261005-slim@sha256:7c7b2c966bc9ee8cedfeef67e0e279108992c77681fa595db4a9d65c06ccc587

FROM ${BASE} AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config \
      libmicrohttpd-dev libpq-dev libjansson-dev libcurl4-openssl-dev libxml2-dev libssl-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The build context has no .git: `opsrun version` shows this commit, or
# "unknown" without it.
ARG OPSRUN_COMMIT=
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DOPSRUN_TESTS=OFF \
      -DOPSRUN_COMMIT="$OPSRUN_COMMIT" \
 && cmake --build build -j "$(nproc)" \
 && ./build/opsrun version

FROM ${BASE}
# tini is process 1: it forwards SIGTERM to opsrun and reaps the orphaned
# grandchildren of `exec` actions, which opsrun, not being an init, would
# leave as zombies. tzdata: the IANA time zones that schedules name (read
# from /usr/share/zoneinfo; only "UTC" works without it). Its rules change
# a few times a year: rebuild the image to take a new release.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libmicrohttpd12 libpq5 libjansson4 libcurl4 libxml2 libssl3 ca-certificates tini tzdata \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin opsrun
COPY --from=build /src/build/opsrun /usr/local/bin/opsrun
USER 10001:10001
WORKDIR /tmp
ENV OPSRUN_LISTEN=0.0.0.0:8080
EXPOSE 8080
# Healthy once /readyz answers 200 (docs/cli.md, "health"); it asks
# OPSRUN_SERVER, default http://127.0.0.1:8080: set it when listening elsewhere.
# The start period covers serve's wait for its database (up to 30 s).
HEALTHCHECK --interval=10s --timeout=5s --start-period=40s CMD ["opsrun", "health"]
# SIGTERM drains gracefully (up to queue.shutdown_grace_s): give `docker stop`
# / Kubernetes a long enough grace period.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/bin/tini", "--", "opsrun"]
# No flags here: OPSRUN_* variables (OPSRUN_LISTEN above included) decide.
CMD ["serve"]
