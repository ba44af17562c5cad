# The one task runner. `make ci` runs .ci/run, exactly what CI runs (it calls these targets).
.PHONY: ci fmt-check clippy deps-check deploy-check compose-smoke build-all test release up install

# cargo-nextest when installed, else cargo's own runner.
TEST_RUNNER := $(if $(shell command -v cargo-nextest 2>/dev/null),cargo nextest run --workspace --locked --profile ci,cargo test --workspace --locked)

ci:
	.ci/run

fmt-check:
	cargo fmt --all --check

clippy:
	cargo clippy --workspace --all-targets --locked -- -D warnings

# One tonic, one prost, one hyper in the tree.
deps-check:
	scripts/check-single-versions.sh

# The Dockerfile, docker-compose.yml and the Kubernetes overlays, checked by the real tools
# (hadolint, Compose v2, kubectl kustomize + kubernetes-validate --strict), then what they
# render against the isolation they promise (scripts/check-deploy-isolation.py).
deploy-check:
	scripts/deploy-check.sh

# The README's compose steps for real (Docker engine, debootstrap base image, host network).
compose-smoke:
	scripts/compose-smoke.sh

# Every binary, test and example in one cargo invocation, so the dependencies are resolved
# and compiled once: `cargo build --bins` alone resolves features without the
# dev-dependencies (tokio's test-util, figment's test, metnos-llm's fake, ...) and would
# compile most of the tree a second time (twice the disk, ~90 s more on two cores).
build-all:
	cargo build --workspace --bins --tests --examples --locked

# All tests; starts a throwaway PostgreSQL and installs grpcurl first. The service
# binaries are built first: system tests run them as real processes.
test: build-all
	scripts/with-test-services.sh $(TEST_RUNNER)

# Every binary the stack runs: the command, the five services, the executors' programs
# (tests/crate_graph.rs checks this list against the workspace's binaries).
BINS := metnos metnos-policy metnos-vaglio metnos-approval metnos-planner metnos-gateway metnos-exec metnos-web metnos-shell metnos-mail
PREFIX ?= $(HOME)/.local

# Every binary, release build: `cargo run --bin metnos` built the root package only, so
# `metnos executors install` then found no metnos-exec.
release:
	cargo build --release --locked --workspace --bins

# Build and run the whole stack on this machine (SQLite under the data directory).
up: release
	target/release/metnos up

# `metnos` and the programs it runs, in $(PREFIX)/bin (default ~/.local/bin), without
# their symbol tables (`-s`): a fifth of each file, which the catalog hashes at every start.
install: release
	install -d $(PREFIX)/bin
	install -s -m 0755 $(addprefix target/release/,$(BINS)) $(PREFIX)/bin/
