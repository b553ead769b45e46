package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/publisher"
	"github.com/spf13/cobra"
)

// runOptionsOf returns run's options after parsing flags as the command
// line would, and Complete with CMD ARGS args.
func runOptionsOf(t *testing.T, flags []string, args ...string) (*runOptions, error) {
	t.Helper()
	o := &runOptions{}
	c := &cobra.Command{}
	o.addFlags(c)
	if err := c.ParseFlags(flags); err != nil {
		t.Fatalf("flags %q: %v", flags, err)
	}
	return o, o.Complete(c, args)
}

// TestRunOptionsValidate checks run's options without a process or a
// server: every refusal is a usage error (exit 2) before anything is
// acquired, and a valid set passes.
func TestRunOptionsValidate(t *testing.T) {
	valid := func() *runOptions {
		o, err := runOptionsOf(t, []string{"--resource", "report", "--publish-timeout", "1m"}, "true")
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	dir := t.TempDir()
	for name, mod := range map[string]func(*runOptions){
		"reserved resource": func(o *runOptions) { o.resource = "_gc" },
		"bad owner":         func(o *runOptions) { o.owner = "a b" },
		"file a directory":  func(o *runOptions) { o.file = dir },
		"negative wait":     func(o *runOptions) { o.maxWait = -time.Second },
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
	o := valid()
	if o.owner == "" || o.key == "" || o.requestID == "" {
		t.Errorf("Complete left owner %q, key %q, request id %q; want defaults", o.owner, o.key, o.requestID)
	}
}

// TestRunFormerSpellings: run's former flags keep their meaning — --wait
// is --max-wait, --output FILE is --file, --format is -o — and a former
// and a current spelling of one flag together are refused.
func TestRunFormerSpellings(t *testing.T) {
	o, err := runOptionsOf(t, []string{"--resource", "r", "--wait", "2m", "--output", "res.txt", "--format", "json"}, "true")
	if err != nil || o.maxWait != 2*time.Minute || o.file != "res.txt" || o.format != "json" {
		t.Fatalf("former spellings: max wait %s, file %q, format %q, err %v; want 2m0s, res.txt, json", o.maxWait, o.file, o.format, err)
	}
	o, err = runOptionsOf(t, []string{"--resource", "r", "--max-wait", "3s", "--file", "f", "-o", "json"}, "true")
	if err != nil || o.maxWait != 3*time.Second || o.file != "f" || o.format != "json" {
		t.Fatalf("current spellings: max wait %s, file %q, format %q, err %v", o.maxWait, o.file, o.format, err)
	}
	for _, flags := range [][]string{
		{"--wait", "1s", "--max-wait", "2s"},
		{"--output", "a", "--file", "b"},
		{"--request-id", ""},
	} {
		if _, err := runOptionsOf(t, append([]string{"--resource", "r"}, flags...), "true"); exitcode.Of(err) != exitcode.Usage {
			t.Errorf("%q: Complete = %v; want a usage error", flags, err)
		}
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

// TestPublishDirTimeout: publish --dir without --timeout gets dirTimeout,
// a file publish keeps 30s, and a given --timeout is kept with --dir.
func TestPublishDirTimeout(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		flags []string
		want  time.Duration
	}{
		{[]string{"--dir", dir}, dirTimeout},
		{[]string{"--dir", dir, "--timeout", "45s"}, 45 * time.Second},
		{[]string{"--file", "README.md"}, 30 * time.Second},
	} {
		o := &publishOptions{}
		c := &cobra.Command{}
		o.addFlags(c)
		if err := c.ParseFlags(append([]string{"--resource", "r", "--key", "k", "--ttl", "5s"}, tc.flags...)); err != nil {
			t.Fatal(err)
		}
		if err := o.Complete(c, nil); err != nil {
			t.Fatal(err)
		}
		if err := o.Validate(); err != nil || o.timeout != tc.want {
			t.Errorf("%q: timeout %s, err %v; want %s", tc.flags, o.timeout, err, tc.want)
		}
	}
}

// TestPublishExit checks the exit code of each publisher error as the
// publisher returns it (wrapped, with the store's error beside it).
func TestPublishExit(t *testing.T) {
	for _, tc := range []struct {
		res  publisher.Result
		err  error
		want int
	}{
		{publisher.Result{Outcome: publisher.Stale, Reason: publisher.ReasonLease}, publisher.ErrStale, exitcode.LeaseLost},
		{publisher.Result{Outcome: publisher.Stale, Reason: publisher.ReasonPointer}, publisher.ErrStale, exitcode.Stale},
		{publisher.Result{Outcome: publisher.Conflict}, publisher.ErrConflict, exitcode.Conflict},
		{publisher.Result{Outcome: publisher.Unknown}, publisher.ErrUnknown, exitcode.Unknown},
		{publisher.Result{}, fmt.Errorf("%w: k (upload u); nothing was stored or published: %w", publisher.ErrUploadAborted, fencepub.ErrObjectNotFound), exitcode.LeaseLost},
		{publisher.Result{}, fmt.Errorf("put: %w", fencepub.ErrObjectNotFound), exitcode.Usage},
		{publisher.Result{}, fmt.Errorf("body: %w", publisher.ErrBody), exitcode.Usage},
		{publisher.Result{}, fmt.Errorf("put: %w", fencepub.ErrUnavailable), exitcode.Unavailable},
		{publisher.Result{}, context.DeadlineExceeded, exitcode.Unavailable},
		{publisher.Result{}, errors.New("something else"), exitcode.Internal},
	} {
		if got := exitcode.Of(publishExit(tc.res, tc.err)); got != tc.want {
			t.Errorf("publishExit(%+v, %v): exit %d, want %d", tc.res, tc.err, got, tc.want)
		}
	}
	if err := publishExit(publisher.Result{Outcome: publisher.Applied}, nil); err != nil {
		t.Errorf("publishExit(applied, nil) = %v, want nil", err)
	}
}
