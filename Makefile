# atoll developer targets. `make test` is what CI runs (.ci/run).
CARGO ?= cargo

.PHONY: all build test fmt fmt-check lint clippy crds crds-check unit bench

all: build

build:
	$(CARGO) build --workspace --all-targets

## test: formatting, lints (warnings denied), CRD drift, module cycles, and every test tier on both backends:
## the whole workspace on devcluster, then the end-to-end suites again on real control planes.
KUBE_TESTS ?= --test fleet --test pods --test scenarios --test disruption --test permissions --test apiserver_parity --test helm --test chaos
## Tests to leave out of the real-tier pass (`--skip NAME`); none today.
KUBE_SKIP ?=
## The suites run once more with atoll as pods on real nodes (FLEET_REAL_NODES: `fleet up
## --real-nodes`); they skip with a NOTICE where real nodes cannot run (no root or containerd).
POD_TESTS ?= --test scenarios
test: fmt-check clippy crds-check cycles-check k8s
	$(CARGO) test --workspace --all-targets
	FLEET_BACKEND=kube $(CARGO) test -p atoll-e2e $(KUBE_TESTS) -- $(KUBE_SKIP)
	FLEET_BACKEND=kube FLEET_REAL_NODES=true $(CARGO) test -p atoll-e2e $(POD_TESTS)
	$(MAKE) fuzz-smoke

## cycles-check: no module of a crate reaches a module that reaches it back (.ci/cycles).
.PHONY: cycles-check
cycles-check:
	@out="$$(python3 .ci/cycles)"; if [ -n "$$out" ]; then echo "module cycles:"; echo "$$out"; exit 1; fi

## test-kube: only the end-to-end suites on real control planes (FLEET_BACKEND=kube).
.PHONY: test-kube
test-kube: k8s
	FLEET_BACKEND=kube $(CARGO) test -p atoll-e2e $(KUBE_TESTS) -- $(KUBE_SKIP)

## test-pods: the pod tier only: the suites with atoll as pods on real nodes.
.PHONY: test-pods
test-pods: k8s
	FLEET_BACKEND=kube FLEET_REAL_NODES=true $(CARGO) test -p atoll-e2e $(POD_TESTS)

fmt:
	$(CARGO) fmt --all

fmt-check:
	$(CARGO) fmt --all -- --check

lint: fmt-check clippy

## clippy: the workspace and the fuzz crate (outside the workspace, so a change of a library's API
## that breaks a fuzz target fails here, in a minute, not in the sanitizer build at the end).
clippy:
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --manifest-path fuzz/Cargo.toml --bins --target-dir target -- -D warnings

## crds: regenerate manifests/crds/ from the Rust API types.
crds:
	$(CARGO) run --quiet -p atoll-crds --bin crdgen -- --out manifests/crds --docs docs/api.md

## crds-check: fail when the committed CRDs differ from what the types generate.
crds-check:
	$(CARGO) run --quiet -p atoll-crds --bin crdgen -- --check manifests/crds --docs docs/api.md

## ----- fuzzing (cargo-fuzz; fuzz/ is a crate outside the workspace, built with nightly) --------
## fuzz: every target for FUZZ_SECONDS each (on demand); fuzz-smoke: a few seconds each (make test).
## A crash is saved under fuzz/artifacts/<target>/ and replayed with
## `cargo +nightly fuzz run <target> fuzz/artifacts/<target>/<file>`. Without cargo-fuzz or a
## nightly toolchain the smoke is skipped with a note (.ci/run installs both).
.PHONY: fuzz fuzz-smoke fuzz-build
FUZZ_TARGETS ?= overrides dividing quantity hub_protocol devcluster_patch yaml
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 10
FUZZ_TOOLCHAIN ?= +nightly
## libFuzzer options: memory and per-input time limits turn bombs into reported crashes.
FUZZ_OPTIONS ?= -rss_limit_mb=2048 -timeout=20 -print_final_stats=1
FUZZ = $(CARGO) $(FUZZ_TOOLCHAIN) fuzz
## The sanitizer build of the fuzz crate takes about 18 minutes on 2 cores: it is kept outside
## the checkout, like the real tier's binaries, so that a fresh clone (CI) pays it once.
FUZZ_TARGET_DIR ?= $(HOME)/.cache/atoll/fuzz-target

fuzz-build:
	$(FUZZ) build --target-dir $(FUZZ_TARGET_DIR)

fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
		echo "== fuzz $$t ($(FUZZ_SECONDS) s)"; \
		$(FUZZ) run --target-dir $(FUZZ_TARGET_DIR) $$t -- -max_total_time=$(FUZZ_SECONDS) $(FUZZ_OPTIONS) || exit 1; \
	done

fuzz-smoke:
	@if ! $(FUZZ) --version >/dev/null 2>&1; then \
		echo "fuzz-smoke skipped: needs cargo-fuzz (cargo install cargo-fuzz --locked) and a nightly toolchain"; \
	else \
		$(MAKE) fuzz FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS); \
	fi

## bench: throughput, latency and memory figures, printed as tables.
bench:
	$(CARGO) build --release -p devcluster -p atoll-scheduler -p atoll-hub -p atoll-agent --bins --examples
	@echo "## devcluster" && $(CARGO) run --quiet --release -p devcluster --example bench
	@echo "## scheduler: pure core" && $(CARGO) run --quiet --release -p atoll-scheduler --example bench_core
	@echo "## scheduler: 1,000 Subscriptions x 100 clusters" && $(CARGO) run --quiet --release -p atoll-scheduler --example bench_scale
	@echo "## hub: fan-out to agents" && $(CARGO) run --quiet --release -p atoll-hub --example bench_fanout
	@echo "## hub + 1,000 real agents" && $(CARGO) run --quiet --release -p atoll-agent --example bench_agents
	@echo "## agent" && $(CARGO) run --quiet --release -p atoll-agent --example bench_agent

## bench-hub-agents: one hub holding BENCH_HUB_AGENTS_N real agents spread over host processes
## (BENCH_HUB_AGENTS_HOSTS, default one per 1,000): connect, RSS per idle agent, heartbeat CPU,
## one change per namespace to all, a hub restart with every agent reconnecting, and a raw gRPC
## fan-out baseline in the same run (docs/bench/hub_agents.md). BENCH_HUB_AGENTS_NOOP=1 gives
## the agents a child that does nothing (the same hub client, no child API server behind it).
.PHONY: bench-hub-agents
BENCH_HUB_AGENTS_N ?= 10000
BENCH_HUB_AGENTS_HOSTS ?=
BENCH_HUB_AGENTS_NOOP ?=
bench-hub-agents:
	$(CARGO) build --release -p atoll-hub -p atoll-agent --example bench_hub_agents
	$(TARGET_DIR)/release/examples/bench_hub_agents $(if $(BENCH_HUB_AGENTS_HOSTS),--hosts $(BENCH_HUB_AGENTS_HOSTS)) $(if $(filter 1,$(BENCH_HUB_AGENTS_NOOP)),--noop-children) $(BENCH_HUB_AGENTS_N)

## bench-fleet: propagation end to end on a fleet of real processes (parent, scheduler, hub, N
## child devclusters, N agents): feed edit -> every child, first placement, raw API-server
## baseline (e2e/README.md, "Fleet benchmark"). BENCH_FLEET_N lists the fleet sizes.
.PHONY: bench-fleet
BENCH_FLEET_N ?= 10 100
bench-fleet:
	$(CARGO) build --release -p devcluster -p atoll-scheduler -p atoll-hub -p atoll-agent -p atoll-e2e --bins
	$(CARGO) run --release -p atoll-e2e --example bench_fleet -- $(BENCH_FLEET_N)

## bench-fleet-shared: the same with the children BENCH_FLEET_PER_HOST to a fleet-children process
## (1,000 children: ~2.8 MiB each instead of ~24 MiB for a devcluster and an agent process).
## bench-plots: docs/bench/*.png from docs/bench/propagation.csv.
.PHONY: bench-fleet-shared bench-plots
BENCH_FLEET_SHARED_N ?= 1000
BENCH_FLEET_PER_HOST ?= 250
bench-fleet-shared:
	$(CARGO) build --release -p devcluster -p atoll-scheduler -p atoll-hub -p atoll-agent -p atoll-e2e --bins
	$(CARGO) run --release -p atoll-e2e --example bench_fleet -- --per-host $(BENCH_FLEET_PER_HOST) $(BENCH_FLEET_SHARED_N)
bench-plots:
	$(CARGO) run -p atoll-bench --example bench_plots

## bench-failover: kill one agent of a Dividing Subscription (N = 100, default flags) and time
## until its replicas are ready in the other children; BENCH_FAILOVER_ARGS="--freeze" freezes it
## (SIGSTOP) instead (docs/bench/failover.md).
## bench-cold-start: 1,000 Subscriptions x 100 clusters in place, restart the hub and the
## scheduler together, time until every agent resynced and every Subscription is scheduled
## (docs/bench/cold_start.md).
.PHONY: bench-failover bench-cold-start
BENCH_FAILOVER_ARGS ?= --children 100 --trials 3
BENCH_COLD_START_ARGS ?= --subscriptions 1000 --children 100 --per-host 25
bench-failover:
	$(CARGO) build --release -p devcluster -p atoll-scheduler -p atoll-hub -p atoll-agent -p atoll-e2e --bins
	$(CARGO) run --release -p atoll-e2e --example bench_failover -- $(BENCH_FAILOVER_ARGS)
bench-cold-start:
	$(CARGO) build --release -p devcluster -p atoll-scheduler -p atoll-hub -p atoll-agent -p atoll-e2e --bins
	$(CARGO) run --release -p atoll-e2e --example bench_cold_start -- $(BENCH_COLD_START_ARGS)

## bench-write-cost: kube-apiserver's and etcd's CPU per request for each way atoll writes a
## Description (apply, unchanged apply, YAML body, many managers, merge patch, update, status
## apply and merge patch), for Descriptions of 1, 10 and 50 objects (docs/bench/write_cost.md).
.PHONY: bench-write-cost
BENCH_WRITE_COST_ARGS ?= --objects 1,10,50 --writes 200
bench-write-cost: k8s
	$(CARGO) run --release -p atoll-e2e --example bench_write_cost -- $(BENCH_WRITE_COST_ARGS)

## k8s: the real tier's control-plane binaries (kube-apiserver, kube-controller-manager,
## kube-scheduler, etcd, kwok) and the test tools helm and registry (an OCI registry), built from
## the upstream Go modules pinned in e2e/k8s/versions.env into a cache outside git
## ($$HOME/.cache/atoll/k8s; K8S_VERSION=... builds another version).
.PHONY: k8s
k8s:
	e2e/k8s/build.sh

## images: OCI image archives of the scheduler, the hub, the agent (with helm) and kubectl-atoll
## in target/images/<binary>.tar, built from the release binaries without a container daemon
## (images/): `docker load -i`, `podman load -i`, `ctr images import`, `kind load image-archive`
## and `k3s ctr images import` take them. Same inputs, same digests. HELM=/path/to/helm to use
## a helm of your own instead of building the pinned one.
.PHONY: images
HELM ?=
# Where cargo puts what it builds: CARGO_TARGET_DIR when set (a target directory shared by
# several checkouts), else target/.
TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))
IMAGES_BIN_DIR = $(TARGET_DIR)/release
images:
	$(CARGO) build --release -p atoll-scheduler -p atoll-hub -p atoll-agent -p kubectl-atoll -p atoll-images
	@if [ -z "$(HELM)" ]; then e2e/k8s/build.sh --helm-only; fi
	$(IMAGES_BIN_DIR)/atoll-images --bin-dir $(IMAGES_BIN_DIR) --out target/images \
		--helm "$(if $(HELM),$(HELM),$$(e2e/k8s/build.sh --print-bin-dir)/helm)"

## ----- local fleet (atoll-e2e) -----------------------------------------------------------------
## Debug binaries: the shared target/ already holds most debug artifacts, and the dev profile
## builds dependencies at opt-level 1, so a debug build finishes in a fraction of a release build
## on 2 cores and runs a 3-child fleet comfortably.
.PHONY: fleet-build fleet-up fleet-down demo demo-kube
FLEET_DIR ?= $(CURDIR)/target/fleet
FLEET_CHILDREN ?= 3
## devcluster (default) or kube: real control planes built by `make k8s`.
FLEET_BACKEND ?= devcluster
FLEET_PROFILE_DIR ?= $(TARGET_DIR)/debug
FLEET = $(FLEET_PROFILE_DIR)/fleet
KUBECTL ?= kubectl
PARENT = $(KUBECTL) --kubeconfig $(FLEET_DIR)/parent.kubeconfig

fleet-build:
	$(CARGO) build -p devcluster -p atoll-scheduler -p atoll-hub -p atoll-agent -p atoll-e2e -p kubectl-atoll --bins

## fleet-up: a parent and $(FLEET_CHILDREN) child devclusters, scheduler, hub and agents, as local processes.
fleet-up: fleet-build
	$(FLEET) up --backend $(FLEET_BACKEND) --children $(FLEET_CHILDREN) --dir $(FLEET_DIR) --manifests $(CURDIR)/manifests \
		$(if $(filter true,$(FLEET_REAL_NODES)),--real-nodes)

## chaos: CHAOS_RUNS chaos runs (seeds CHAOS_SEED, CHAOS_SEED+1, ...) of CHAOS_SECONDS of faults
## each on a fleet of CHAOS_CHILDREN children (e2e/src/chaos): proxy faults, kills and restarts,
## edits, checks while the faults last, then the invariants. A failing run names its seed;
## `make chaos CHAOS_SEED=<n> CHAOS_RUNS=1` replays it. `make test` runs a short one
## (e2e/tests/chaos.rs, 20 s, 3 children). FLEET_BACKEND=kube for real clusters.
.PHONY: chaos
CHAOS_SEED ?= 1
CHAOS_RUNS ?= 5
CHAOS_SECONDS ?= 120
CHAOS_CHILDREN ?= 6
chaos: fleet-build
	$(FLEET) chaos --backend $(FLEET_BACKEND) --dir $(CURDIR)/target/chaos --manifests $(CURDIR)/manifests \
		--seed $(CHAOS_SEED) --runs $(CHAOS_RUNS) --seconds $(CHAOS_SECONDS) --children $(CHAOS_CHILDREN)

## fleet-down: stop everything fleet-up started.
fleet-down:
	$(FLEET) down --dir $(FLEET_DIR)

## demo-kube: the same demo on real control planes (builds them the first time). As root with
## containerd installed, every cluster also gets a real node and atoll runs as pods on them,
## installed with kubectl apply -k (FLEET_REAL_NODES=false keeps atoll as local processes).
FLEET_REAL_NODES ?= false
DEMO_REAL_NODES ?= $(shell [ "$$(id -u)" = 0 ] && command -v containerd >/dev/null && echo true || echo false)
demo-kube: k8s
	$(MAKE) demo FLEET_BACKEND=kube FLEET_REAL_NODES=$(DEMO_REAL_NODES)

## demo: fleet-up, apply manifests/examples, show what every child received. Leaves the fleet up.
demo: fleet-up
	$(PARENT) apply -k manifests/examples/localization \
		-n "$$($(FLEET) dedicated-namespace --dir $(FLEET_DIR) --cluster child-1)"
	$(PARENT) apply -k manifests/examples
	$(FLEET) wait --dir $(FLEET_DIR) --timeout-seconds 120
	@for kc in $(FLEET_DIR)/child-*.kubeconfig; do \
		echo; echo "== $$(basename $$kc .kubeconfig): Deployments"; \
		$(KUBECTL) --kubeconfig $$kc get deployments -A \
			-o custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,REPLICAS:.spec.replicas,READY:.status.readyReplicas; \
		echo "== $$(basename $$kc .kubeconfig): ConfigMap demo/web-config greeting"; \
		$(KUBECTL) --kubeconfig $$kc get configmap web-config -n demo -o jsonpath='{.data.greeting}{"\n"}' 2>/dev/null || echo "(none)"; \
	done
	@if [ "$(FLEET_REAL_NODES)" = true ]; then for kc in $(FLEET_DIR)/parent.kubeconfig $(FLEET_DIR)/child-*.kubeconfig; do \
		echo; echo "== $$(basename $$kc .kubeconfig): atoll's pods"; \
		$(KUBECTL) --kubeconfig $$kc get pods -n clusternet-system -o wide; \
	done; fi
	@echo
	$(FLEET) status --dir $(FLEET_DIR)
	@echo
	@echo "== kubectl atoll (the plugin, found on PATH as kubectl-atoll)"
	PATH="$(FLEET_PROFILE_DIR):$$PATH" $(KUBECTL) atoll clusters --kubeconfig $(FLEET_DIR)/parent.kubeconfig
	PATH="$(FLEET_PROFILE_DIR):$$PATH" $(KUBECTL) atoll status web-everywhere -n demo --kubeconfig $(FLEET_DIR)/parent.kubeconfig
	@echo
	@echo "Explore further:"
	@echo "  $(PARENT) get subs -A"
	@echo "  $(PARENT) get mcls -A"
	@echo "  $(PARENT) get desc -A -o yaml"
	@for kc in $(FLEET_DIR)/child-*.kubeconfig; do echo "  $(KUBECTL) --kubeconfig $$kc get deploy,cm -n demo"; done
	@echo "  $(FLEET) status --dir $(FLEET_DIR)"
	@echo "  PATH=$(FLEET_PROFILE_DIR):\$$PATH $(KUBECTL) atoll status api-divided -n demo --kubeconfig $(FLEET_DIR)/parent.kubeconfig"
	@echo "  logs: $(FLEET_DIR)/logs/"
	@echo "Stop the fleet with: make fleet-down"
