package main

import (
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
)

// TestRunOptionsValidate checks run's options without a process or a
// server: every refusal is a usage error (exit 2) before anything is
// acquired, and a valid set passes.
func TestRunOptionsValidate(t *testing.T) {
	valid := func() *runOptions {
		o := &runOptions{resource: "report", ttl: 15 * time.Second, wait: time.Minute, grace: 10 * time.Second, timeout: time.Minute}
		o.Complete([]string{"true"})
		return o
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for name, mod := range map[string]func(*runOptions){
		"reserved resource": func(o *runOptions) { o.resource = "_gc" },
		"bad owner":         func(o *runOptions) { o.owner = "a b" },
		"output format":     func(o *runOptions) { o.output = "json" },
		"negative wait":     func(o *runOptions) { o.wait = -time.Second },
		"negative grace":    func(o *runOptions) { o.grace = -time.Second },
		"zero timeout":      func(o *runOptions) { o.timeout = 0 },
		"missing command":   func(o *runOptions) { o.args = []string{"fencepub-no-such-command"} },
		"bad key":           func(o *runOptions) { o.key = "a\x00b" },
	} {
		o := valid()
		mod(o)
		if err := o.Validate(); exitcode.Of(err) != exitcode.Usage {
			t.Errorf("%s: Validate = %v; want a usage error", name, err)
		}
	}
	o := &runOptions{resource: "report"}
	o.Complete([]string{"true"})
	if o.owner == "" || o.key == "" {
		t.Errorf("Complete left owner %q, key %q; want defaults", o.owner, o.key)
	}
}

// TestDevUpOptionsValidate checks dev up's topology bounds and store kinds:
// several MinIO nodes only with MinIO.
func TestDevUpOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		store          string
		members, nodes int
		ok             bool
	}{
		{"", 1, 1, true}, {"minio", maxDevEtcdMembers, maxDevMinIONodes, true}, {"", 0, 1, false},
		{"", maxDevEtcdMembers + 1, 1, false}, {"", 1, 0, false}, {"", 1, maxDevMinIONodes + 1, false},
		{"seaweedfs", 3, 1, true}, {"seaweedfs", 1, 2, false}, {"s3", 1, 1, false},
	} {
		err := (&devUpOptions{store: tc.store, members: tc.members, minioNodes: tc.nodes}).Validate()
		if tc.ok != (err == nil) || err != nil && exitcode.Of(err) != exitcode.Usage {
			t.Errorf("store %q, members %d, nodes %d: Validate = %v", tc.store, tc.members, tc.nodes, err)
		}
	}
}
