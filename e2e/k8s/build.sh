#!/usr/bin/env bash
# Builds the real-tier test binaries (kube-apiserver, kube-controller-manager, kube-scheduler, etcd,
# kwok), the real nodes' kubelet and kube-proxy, and the Helm test tools (helm, and registry: an
# in-memory OCI registry) from the upstream projects' published Go modules into a cache outside git:
#
#   ${ATOLL_K8S_CACHE:-$HOME/.cache/atoll/k8s}/<K8S_VERSION>/bin/
#
# The versions are pinned in versions.env beside this script; the Go modules of ours that require
# them (kubernetes/, node/, etcd/, kwok/, helm/, registry/) carry committed go.sum files. A second
# run with the same versions is a no-op. The control plane, the node binaries and the Helm tools
# are stamped apart (.stamp, .stamp-node, .stamp-helm), so a new helm does not rebuild
# kube-apiserver and the reverse.
#
#   e2e/k8s/build.sh                 build the pinned versions (what `make k8s` runs)
#   K8S_VERSION=v1.37.2 e2e/k8s/build.sh
#                                    build another Kubernetes version: its module is resolved
#                                    afresh in the cache (go.sum not committed); likewise
#                                    ETCD_VERSION, KWOK_VERSION, HELM_VERSION (v3.x or v4.x),
#                                    REGISTRY_VERSION
#   e2e/k8s/build.sh --print-bin-dir print where the binaries of K8S_VERSION are (built or not)
#   e2e/k8s/build.sh --helm-only     build only helm and registry (what `make images` needs)
#   e2e/k8s/build.sh --pin           rewrite the committed go.mod/go.sum from versions.env
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=versions.env
pinned_k8s="$(sed -n 's/^K8S_VERSION=//p' "$here/versions.env")"
pinned_etcd="$(sed -n 's/^ETCD_VERSION=//p' "$here/versions.env")"
pinned_kwok="$(sed -n 's/^KWOK_VERSION=//p' "$here/versions.env")"
pinned_helm="$(sed -n 's/^HELM_VERSION=//p' "$here/versions.env")"
pinned_registry="$(sed -n 's/^REGISTRY_VERSION=//p' "$here/versions.env")"
k8s_version="${K8S_VERSION:-$pinned_k8s}"
etcd_version="${ETCD_VERSION:-$pinned_etcd}"
kwok_version="${KWOK_VERSION:-$pinned_kwok}"
helm_version="${HELM_VERSION:-$pinned_helm}"
registry_version="${REGISTRY_VERSION:-$pinned_registry}"
cache="${ATOLL_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/atoll/k8s}"
bin="$cache/$k8s_version/bin"

fail() {
  echo "make k8s: $*" >&2
  exit 1
}

case "${1:-}" in
  --print-bin-dir)
    echo "$bin"
    exit 0
    ;;
  --pin | --helm-only | "") ;;
  *) fail "unknown argument '$1' (see the comment at the top of $0)" ;;
esac

# Go: the one at /usr/local/go on the project's machines, else whatever is on PATH.
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null 2>&1 || fail "no Go toolchain (need Go >= 1.24 at /usr/local/go or on PATH)"
# Never download another toolchain: the module proxy serves modules, the machine has the toolchain.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod

apiserver_tools=(
  k8s.io/kubernetes/cmd/kube-apiserver
  k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler
)
node_tools=(
  k8s.io/kubernetes/cmd/kubelet
  k8s.io/kubernetes/cmd/kube-proxy
)

# Writes a Go module named after $1 in $2 that requires k8s.io/kubernetes $3, with every staging
# module the kubernetes go.mod replaces by a ./staging path pinned to the matching v0.x release
# instead, and tools $4...
resolve_k8s_tools_module() {
  local name="$1" dir="$2" version="$3" modfile staging m
  shift 3
  staging="v0.${version#v1.}"
  rm -f "$dir/go.mod" "$dir/go.sum"
  (
    cd "$dir"
    go mod init "atoll.invalid/e2e/k8s/$name" >/dev/null 2>&1
    modfile="$(go mod download -json "k8s.io/kubernetes@$version" 2>/dev/null | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')" || true
    [ -n "$modfile" ] || fail "k8s.io/kubernetes@$version: cannot be downloaded from the Go module proxy ($(go env GOPROXY))"
    go mod edit -require="k8s.io/kubernetes@$version"
    for m in $(grep -E '=> \./staging/' "$modfile" | awk '{print $1}'); do
      go mod edit -replace="$m=$m@$staging"
    done
    for m in "$@"; do go mod edit -tool="$m"; done
    go mod tidy
  )
}
resolve_kubernetes_module() { resolve_k8s_tools_module kubernetes "$1" "$2" "${apiserver_tools[@]}"; }
resolve_node_module() { resolve_k8s_tools_module node "$1" "$2" "${node_tools[@]}"; }

# Writes a Go module named after $1 in $2 that requires module $3 at $4, with optional tools $5...
resolve_simple_module() {
  local name="$1" dir="$2" module="$3" version="$4" tool
  shift 4
  rm -f "$dir/go.mod" "$dir/go.sum"
  (
    cd "$dir"
    go mod init "atoll.invalid/e2e/k8s/$name" >/dev/null 2>&1
    go mod edit -require="$module@$version"
    for tool in "$@"; do go mod edit -tool="$tool"; done
    go mod tidy
  )
}
resolve_etcd_module() { resolve_simple_module etcd "$1" go.etcd.io/etcd/server/v3 "$2"; }
resolve_kwok_module() { resolve_simple_module kwok "$1" sigs.k8s.io/kwok "$2" sigs.k8s.io/kwok/cmd/kwok; }
# Helm's module path carries its major version: helm.sh/helm/v3 for v3.x, helm.sh/helm/v4 for v4.x.
helm_module() { local major="${1#v}"; echo "helm.sh/helm/v${major%%.*}"; }
resolve_helm_module() { resolve_simple_module helm "$1" "$(helm_module "$2")" "$2" "$(helm_module "$2")/cmd/helm"; }
resolve_registry_module() {
  resolve_simple_module registry "$1" github.com/google/go-containerregistry "$2" \
    github.com/google/go-containerregistry/cmd/registry
}

if [ "${1:-}" = "--pin" ]; then
  resolve_kubernetes_module "$here/kubernetes" "$pinned_k8s"
  mkdir -p "$here/node"
  resolve_node_module "$here/node" "$pinned_k8s"
  resolve_etcd_module "$here/etcd" "$pinned_etcd"
  resolve_kwok_module "$here/kwok" "$pinned_kwok"
  resolve_helm_module "$here/helm" "$pinned_helm"
  resolve_registry_module "$here/registry" "$pinned_registry"
  echo "pinned: kubernetes $pinned_k8s, etcd $pinned_etcd, kwok $pinned_kwok, helm $pinned_helm, registry $pinned_registry"
  exit 0
fi

# What the binaries in $bin were built from; equal means there is nothing to do. Two groups, each
# with its own stamp: the control plane (.stamp) and the Helm tools (.stamp-helm).
digest() { cat "$@" | sha256sum | cut -c1-16; }
stamp="k8s=$k8s_version etcd=$etcd_version kwok=$kwok_version $(digest "$here"/{etcd,kubernetes,kwok}/go.sum "$here"/etcd/main.go)"
helm_stamp="helm=$helm_version registry=$registry_version $(digest "$here"/{helm,registry}/go.sum)"
node_stamp="k8s=$k8s_version $(digest "$here"/node/go.sum)"
up_to_date() { [ -f "$bin/$1" ] && [ "$(cat "$bin/$1")" = "$2" ]; }
helm_only=false
[ "${1:-}" = "--helm-only" ] && helm_only=true
if { $helm_only || { up_to_date .stamp "$stamp" && up_to_date .stamp-node "$node_stamp"; }; } \
  && up_to_date .stamp-helm "$helm_stamp"; then
  echo "make k8s: up to date in $bin"
  exit 0
fi

# Each tool builds from a copy of its module in the cache, so the work tree is never written.
work="$cache/$k8s_version/src"
mkdir -p "$bin" "$work"
start=$(date +%s)

prepare() { # tool pinned wanted
  local tool="$1" pinned="$2" wanted="$3"
  rm -rf "${work:?}/$tool"
  cp -r "$here/$tool" "$work/$tool"
  if [ "$wanted" != "$pinned" ]; then
    echo "make k8s: resolving $tool $wanted (pinned: $pinned)"
    "resolve_${tool}_module" "$work/$tool" "$wanted"
  fi
  (cd "$work/$tool" && go mod download >/dev/null 2>&1) \
    || fail "downloading the modules $tool $wanted needs from the Go module proxy ($(go env GOPROXY)) failed"
}

version_ldflags() { # version -> the -X flags that make /version and --version report it
  local v="$1" major minor pkg flags=""
  major="${v#v}"; major="${major%%.*}"
  minor="${v#v*.}"; minor="${minor%%.*}"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$flags"
}

build_control_plane() {
  prepare kubernetes "$pinned_k8s" "$k8s_version"
  echo "make k8s: building kubernetes $k8s_version (kube-apiserver, kube-controller-manager, kube-scheduler)"
  (cd "$work/kubernetes" && go build -trimpath -ldflags "-s -w $(version_ldflags "$k8s_version")" -o "$bin/" "${apiserver_tools[@]}") \
    || fail "building kubernetes $k8s_version failed (output above)"

  prepare etcd "$pinned_etcd" "$etcd_version"
  echo "make k8s: building etcd $etcd_version"
  (cd "$work/etcd" && go build -trimpath -ldflags "-s -w" -o "$bin/etcd" .) \
    || fail "building etcd $etcd_version failed (output above)"

  prepare kwok "$pinned_kwok" "$kwok_version"
  echo "make k8s: building kwok $kwok_version"
  (cd "$work/kwok" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_version" -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok) \
    || fail "building kwok $kwok_version failed (output above)"

  # kwok plays nothing without Stages: the node (initialise, heartbeat) and pod (ready, complete,
  # delete) stages kwok ships in its module, in one file for `kwok --config`.
  kwok_dir="$(cd "$work/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
  for f in node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [ -f "$kwok_dir/kustomize/stage/$f" ] || fail "kwok $kwok_version has no stage $f"
    echo "---"
    cat "$kwok_dir/kustomize/stage/$f"
  done >"$bin/kwok-stages.yaml"

  echo "$stamp" >"$bin/.stamp"
}

build_node() {
  prepare node "$pinned_k8s" "$k8s_version"
  echo "make k8s: building kubernetes $k8s_version node binaries (kubelet, kube-proxy)"
  (cd "$work/node" && go build -trimpath -ldflags "-s -w $(version_ldflags "$k8s_version")" -o "$bin/" "${node_tools[@]}") \
    || fail "building kubelet and kube-proxy $k8s_version failed (output above)"
  echo "$node_stamp" >"$bin/.stamp-node"
}

build_helm_tools() {
  local module
  module="$(helm_module "$helm_version")"
  prepare helm "$pinned_helm" "$helm_version"
  echo "make k8s: building helm $helm_version"
  (cd "$work/helm" && go build -trimpath -ldflags "-s -w -X $module/internal/version.version=$helm_version" -o "$bin/helm" "$module/cmd/helm") \
    || fail "building helm $helm_version failed (output above)"

  prepare registry "$pinned_registry" "$registry_version"
  echo "make k8s: building registry $registry_version"
  (cd "$work/registry" && go build -trimpath -ldflags "-s -w" -o "$bin/registry" github.com/google/go-containerregistry/cmd/registry) \
    || fail "building registry $registry_version failed (output above)"

  echo "$helm_stamp" >"$bin/.stamp-helm"
}

if $helm_only; then
  :
else
  if up_to_date .stamp "$stamp"; then
    echo "make k8s: control plane up to date"
  else
    build_control_plane
  fi
  if up_to_date .stamp-node "$node_stamp"; then
    echo "make k8s: kubelet and kube-proxy up to date"
  else
    build_node
  fi
fi
if up_to_date .stamp-helm "$helm_stamp"; then
  echo "make k8s: helm and registry up to date"
else
  build_helm_tools
fi
echo "make k8s: built in $(($(date +%s) - start)) s into $bin"
