# atoll developer targets. `make test` is what CI runs (.ci/run).
CARGO ?= cargo

.PHONY: all build test fmt fmt-check lint clippy crds crds-check unit bench

all: build

build:
	$(CARGO) build --workspace --all-targets

## test: formatting, lints (warnings denied), CRD drift, and every test tier.
test: fmt-check clippy crds-check
	$(CARGO) test --workspace --all-targets

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

lint: fmt-check clippy

clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## crds: regenerate manifests/crds/ from the Rust API types.
crds:
	$(CARGO) run --quiet -p atoll-crds --bin crdgen -- --out manifests/crds

## crds-check: fail when the committed CRDs differ from what the types generate.
crds-check:
	$(CARGO) run --quiet -p atoll-crds --bin crdgen -- --check manifests/crds

## bench: throughput, latency and memory figures, printed as tables.
bench:
	$(CARGO) run --release -p atoll-scheduler --example bench_placement
