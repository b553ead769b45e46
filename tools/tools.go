//go:build tools

// Package tools pins the real servers fencepub's tests and demo run: the etcd
// server, etcdctl and etcdutl. They live in this separate module so that
// importing fencepub's libraries never pulls the etcd server into a user's
// module graph. `make deps` builds them into ../bin.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
	_ "honnef.co/go/tools/cmd/staticcheck"
)
