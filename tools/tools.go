//go:build tools

// Package tools pins the real servers fencepub's tests and demo run (the etcd
// server, etcdctl and etcdutl) and the build tools: staticcheck and
// goreleaser. They live in this separate module so that importing fencepub's
// libraries never pulls them into a user's module graph. `make deps` builds
// the servers into ../bin; `make lint` and `make release-snapshot` build their
// tool there.
package tools

import (
	_ "github.com/goreleaser/goreleaser/v2"
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
	_ "honnef.co/go/tools/cmd/staticcheck"
)
