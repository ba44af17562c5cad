# syntax=docker/dockerfile:1
# One image with every Metnos binary: the five services, `metnos` (up, status, admin) and
# `metnos-exec`, `metnos-web`, `metnos-shell` and `metnos-mail` (the built-in executors). Dependencies are built in their own layer
# (cargo-chef), so a source change rebuilds only the workspace.

ARG RUST_IMAGE=rust:1.95.0-slim-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

# The runtime base comes first: `--target runtime-base` then builds nothing else, even with
# the classic builder (the compose smoke test puts host-built binaries on top of it).
FROM ${RUNTIME_IMAGE} AS runtime-base
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates=* tzdata=* \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --home-dir /var/lib/metnos --create-home metnos
ENV METNOS_DATA_DIR=/var/lib/metnos \
    HOME=/var/lib/metnos
WORKDIR /var/lib/metnos
VOLUME ["/var/lib/metnos"]
# Each service container overrides the command (metnos-policy, metnos-planner, …) and its
# healthcheck (metnos-<service> --health-check); the default runs the whole stack.
HEALTHCHECK --interval=15s --timeout=5s --start-period=20s --retries=3 \
    CMD ["metnos", "status"]
CMD ["metnos", "up"]

FROM ${RUST_IMAGE} AS chef
RUN cargo install cargo-chef --locked --version 0.1.71
# Binaries without their symbol tables: a fifth of each file, which the planner's catalog
# hashes at every start (issue 45). Set for the cook too, so its build is reused.
ENV CARGO_PROFILE_RELEASE_STRIP=symbols
WORKDIR /src

FROM chef AS recipe
COPY . .
RUN cargo chef prepare --recipe-path recipe.json

FROM chef AS builder
COPY --from=recipe /src/recipe.json recipe.json
RUN cargo chef cook --release --locked --recipe-path recipe.json
COPY . .
RUN cargo build --release --locked --workspace --bins \
    && mkdir /out \
    && find target/release -maxdepth 1 -type f -executable -name 'metnos*' -exec cp {} /out/ \;

# Release binaries built outside Docker, with BuildKit:
#   docker build --target prebuilt --build-context bin=target/release .
FROM runtime-base AS prebuilt
# `bin` is a named build context, not a stage.
# hadolint ignore=DL3022
COPY --from=bin metnos metnos-policy metnos-vaglio metnos-approval metnos-planner metnos-gateway metnos-exec metnos-web metnos-shell metnos-mail /usr/local/bin/
USER 10001:10001

FROM runtime-base AS runtime
COPY --from=builder /out/ /usr/local/bin/
USER 10001:10001
