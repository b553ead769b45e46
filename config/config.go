// Package config connects a program to a fencepub domain the way the
// fencepub CLI does: from the same YAML configuration file (the keys the
// docs/configuration.md lists) and FENCEPUB_* environment
// variables, so a program and the CLI share one fencepub.yaml.
package config

import (
	"github.com/fencepub/fencepub"
	iconfig "github.com/fencepub/fencepub/internal/cli/config"
)

// Connect loads the configuration from its defaults, FENCEPUB_* environment
// variables and the file at path ("" searches ./fencepub.yaml and the
// other default locations; a missing file is fine, a malformed one is an
// error) and returns the domain's Env with a new etcd client. It does not
// wait for a server to answer. The caller closes env.Etcd. Errors: a
// configuration value that does not validate (wrapping the invalid key),
// a store or etcd client that cannot be built.
func Connect(path string) (fencepub.Env, error) {
	conn, err := iconfig.Connect(path)
	if err != nil {
		return fencepub.Env{}, err
	}
	return fencepub.Env{Namespace: fencepub.Namespace(conn.NS), Etcd: conn.Etcd, Store: conn.Store}, nil
}
