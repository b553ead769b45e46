#!/usr/bin/env bash
# Builds the pinned real servers (etcd, MinIO, SeaweedFS) into ./bin. Idempotent: a binary that is
# already there at the pinned version is kept. Called by `make deps`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=$ROOT/bin
MINIO_VERSION=$(cat tools/MINIO_VERSION)
mkdir -p "$BIN"

stamp() { cat "$BIN/.$1.version" 2>/dev/null || true; }
ETCD_VERSION=$(cd tools && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)

if [[ ! -x $BIN/etcd || ! -x $BIN/etcdctl || ! -x $BIN/etcdutl || $(stamp etcd) != "$ETCD_VERSION" ]]; then
  echo "deps: building etcd, etcdctl, etcdutl $ETCD_VERSION into ./bin" >&2
  (cd tools && go build -o "$BIN/etcd" go.etcd.io/etcd/server/v3 \
    && go build -o "$BIN/etcdctl" go.etcd.io/etcd/etcdctl/v3 \
    && go build -o "$BIN/etcdutl" go.etcd.io/etcd/etcdutl/v3)
  echo "$ETCD_VERSION" > "$BIN/.etcd.version"
fi

if [[ ! -x $BIN/minio || $(stamp minio) != "$MINIO_VERSION" ]]; then
  echo "deps: building minio $MINIO_VERSION into ./bin (about 2.5 minutes cold)" >&2
  # Outside our module graph: GOFLAGS=-mod=mod and a temp working dir so the
  # tools module does not constrain MinIO's own dependencies.
  (cd "$(mktemp -d)" && GOBIN="$BIN" GOFLAGS=-buildvcs=false go install "github.com/minio/minio@$MINIO_VERSION")
  echo "$MINIO_VERSION" > "$BIN/.minio.version"
fi
# SeaweedFS, the second object store the tests run on: its own tools module
# (tools/seaweedfs/go.mod holds the pin and the one replace it needs).
WEED_VERSION=$(cd tools/seaweedfs && go list -m -f '{{.Version}}' github.com/seaweedfs/seaweedfs)
if [[ ! -x $BIN/weed || $(stamp weed) != "$WEED_VERSION" ]]; then
  echo "deps: building seaweedfs (weed) $WEED_VERSION into ./bin (about 3.5 minutes cold)" >&2
  (cd tools/seaweedfs && GOFLAGS=-buildvcs=false go build -o "$BIN/weed" github.com/seaweedfs/seaweedfs/weed)
  echo "$WEED_VERSION" > "$BIN/.weed.version"
fi
echo "deps: ok ($("$BIN/etcd" --version | head -1); minio $MINIO_VERSION; seaweedfs $WEED_VERSION)" >&2
