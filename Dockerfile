# syntax=docker/dockerfile:1.7
#
# Images of atoll's three in-cluster components from one Dockerfile, one target each:
#
#   docker build --target scheduler -t atoll-scheduler .
#   docker build --target hub       -t atoll-hub .
#   docker build --target agent     -t atoll-agent .
#   docker build --target kubectl-atoll -t atoll-kubectl-atoll .   # the kubectl plugin
#
# All the binaries are compiled once in the shared `builder` stage (BuildKit reuses it across
# the three builds). Runtime images are distroless/cc (glibc, CA certificates, no shell) and run
# as the `nonroot` user (65532), matching the securityContext in manifests/.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
WORKDIR /src
# protoc comes from the protoc-bin-vendored crate; rusqlite (bundled), ring and mimalloc need only the C
# toolchain the rust image already has.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/usr/local/cargo/git,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked \
        -p atoll-scheduler -p atoll-hub -p atoll-agent -p kubectl-atoll \
    && mkdir -p /out \
    && cp target/release/atoll-scheduler target/release/atoll-hub target/release/atoll-agent \
          target/release/kubectl-atoll /out/

# helm v3 for the agent, which installs HelmChart feeds with it (and for the hub, which does
# so in the Push-mode clusters); the version is the one the
# tests use (HELM_VERSION in e2e/k8s/versions.env).
FROM golang:1.26-${DEBIAN_RELEASE} AS helm
ARG HELM_VERSION=v3.21.4
RUN CGO_ENABLED=0 GOBIN=/out go install \
        -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
        helm.sh/helm/v3/cmd/helm@${HELM_VERSION}

FROM gcr.io/distroless/cc-debian12:nonroot AS runtime-base
USER 65532:65532
# Admin server: /metrics, /healthz, /readyz.
EXPOSE 9090

FROM runtime-base AS scheduler
LABEL org.opencontainers.image.title="atoll-scheduler" \
      org.opencontainers.image.description="Turns Subscriptions and overrides into one Description per chosen cluster" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/atoll-scheduler /usr/local/bin/atoll-scheduler
ENTRYPOINT ["/usr/local/bin/atoll-scheduler"]

FROM runtime-base AS agent
LABEL org.opencontainers.image.title="atoll-agent" \
      org.opencontainers.image.description="Registers a child cluster with the hub and applies its Descriptions" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/atoll-agent /usr/local/bin/atoll-agent
COPY --from=helm /out/helm /usr/local/bin/helm
ENTRYPOINT ["/usr/local/bin/atoll-agent"]

# The kubectl plugin, for a workstation without a Rust toolchain: run it from the image
# (docker run --rm -v ~/.kube:/home/nonroot/.kube:ro atoll-kubectl-atoll clusters), or copy the
# binary out onto PATH (docker create, then docker cp <id>:/usr/local/bin/kubectl-atoll .).
FROM runtime-base AS kubectl-atoll
LABEL org.opencontainers.image.title="kubectl-atoll" \
      org.opencontainers.image.description="kubectl plugin for an atoll fleet: clusters, registrations, status, plan, Manifests" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/kubectl-atoll /usr/local/bin/kubectl-atoll
ENTRYPOINT ["/usr/local/bin/kubectl-atoll"]

# Last, so that a plain `docker build .` produces the hub.
FROM runtime-base AS hub
LABEL org.opencontainers.image.title="atoll-hub" \
      org.opencontainers.image.description="gRPC hub streaming Descriptions to atoll agents" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /out/atoll-hub /usr/local/bin/atoll-hub
COPY --from=helm /out/helm /usr/local/bin/helm
# gRPC for agents.
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/atoll-hub"]
