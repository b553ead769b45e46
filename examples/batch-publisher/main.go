// Command batch-publisher is a fencepub example: a batch job that competes
// with its replicas for the lease on one resource, computes a real artefact
// (a deterministic gzip'd tar snapshot, with a manifest, of a directory —
// by default the Go source tree at $(go env GOROOT)/src, about 130 MB) and
// publishes it with the grant's fence through the fencepub libraries.
//
// Each step is printed to stdout as one JSON line ({"event": ...}) so a
// driver (the demo) can follow it; human lines go to stderr.
//
// Run several replicas against `fencepub dev up` (see README.md):
//
//	go run ./examples/batch-publisher --resource goroot-src --owner w1 &
//	go run ./examples/batch-publisher --resource goroot-src --owner w2 &
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/config"
	"github.com/fencepub/fencepub/publisher"
)

type options struct {
	config, resource, owner, src, key string
	ttl, wait, hold                   time.Duration
	ignoreLeaseLoss                   bool
}

func main() {
	var o options
	flag.StringVar(&o.config, "config", "", "fencepub config file (default ./fencepub.yaml)")
	flag.StringVar(&o.resource, "resource", "goroot-src", "resource to publish")
	flag.StringVar(&o.owner, "owner", "", "owner id of this replica (default host-pid)")
	flag.StringVar(&o.src, "src", "", "directory to snapshot (default $(go env GOROOT)/src)")
	flag.StringVar(&o.key, "key", "", "idempotency key (default: snapshot-<sha256 of the manifest>, so the same tree is a duplicate)")
	flag.DurationVar(&o.ttl, "ttl", 5*time.Second, "lease TTL (whole seconds, at least 2s)")
	flag.DurationVar(&o.wait, "max-wait", time.Minute, "how long to wait for the lease")
	var oldWait time.Duration
	flag.DurationVar(&oldWait, "wait", time.Minute, "deprecated spelling of -max-wait")
	flag.DurationVar(&o.hold, "hold", 0, "pause between computing and publishing (lets a demo stop this process there)")
	flag.BoolVar(&o.ignoreLeaseLoss, "unsafe-ignore-lease-loss", false,
		"publish even after the lease was lost, as a worker paused between its last check and its send would; the fence rejects it (demo only)")
	flag.Parse()
	given := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["wait"] {
		if given["max-wait"] {
			fmt.Fprintln(os.Stderr, "batch-publisher: give -max-wait, not also the deprecated -wait")
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "batch-publisher: warning: -wait is deprecated and will be removed: use -max-wait")
		o.wait = oldWait
	}
	if o.src == "" {
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			fmt.Fprintln(os.Stderr, "batch-publisher: --src not given and `go env GOROOT` failed:", err)
			os.Exit(2)
		}
		o.src = filepath.Join(strings.TrimSpace(string(out)), "src")
	}
	if o.owner == "" {
		host, _ := os.Hostname()
		o.owner = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "batch-publisher:", err)
		os.Exit(1)
	}
}

// event prints one JSON line to stdout for a driver to follow.
func event(name string, fields map[string]any) {
	fields["event"] = name
	fields["time"] = time.Now().UTC().Format(time.RFC3339Nano)
	b, _ := json.Marshal(fields)
	fmt.Println(string(b))
}

func run(ctx context.Context, o options) error {
	env, err := config.Connect(o.config)
	if err != nil {
		return err
	}
	defer env.Etcd.Close()
	ns, cli, store := env.Namespace, env.Etcd, env.Store
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	auth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: ns, Etcd: cli, Store: store}, Logger: log})
	if err != nil {
		return err
	}
	pub, err := publisher.New(publisher.Config{Env: fencepub.Env{Namespace: ns, Etcd: cli, Store: store}, Logger: log})
	if err != nil {
		return err
	}

	event("acquiring", map[string]any{"owner": o.owner, "resource": o.resource})
	actx, cancel := context.WithTimeout(ctx, o.wait)
	g, err := auth.Acquire(actx, authority.AcquireRequest{Resource: o.resource, Owner: o.owner, TTL: o.ttl, Wait: true})
	cancel()
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	event("granted", map[string]any{"owner": o.owner, "epoch": g.Epoch, "fence": g.Generation, "lease_id": int64(g.LeaseID)})
	sess, err := auth.NewSession(ctx, g)
	if err != nil {
		return err
	}
	defer sess.Close()
	p, err := pub.Bind(ctx, publisher.GrantTerm(g, false))
	if err != nil {
		return err
	}

	// Hash the tree first to learn the manifest (and so the default key),
	// then stream the archive into the publish: nothing is held in memory.
	event("computing", map[string]any{"owner": o.owner, "src": o.src})
	m, err := buildManifest(o.src)
	if err != nil {
		return err
	}
	key := o.key
	if key == "" {
		key = "snapshot-" + manifestDigest(m)
	}
	event("computed", map[string]any{"owner": o.owner, "files": len(m.Files), "bytes": m.Bytes, "key": key})
	if o.hold > 0 {
		event("holding", map[string]any{"owner": o.owner, "for_ms": o.hold.Milliseconds()})
		time.Sleep(o.hold)
	}
	select {
	case <-sess.Lost():
		event("lease_lost", map[string]any{"owner": o.owner, "err": fmt.Sprint(sess.Err())})
		if !o.ignoreLeaseLoss {
			return fmt.Errorf("lease lost before publishing: %w", sess.Err())
		}
	default:
	}

	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeArchive(pw, o.src, m)) }()
	res, err := p.Publish(ctx, publisher.Operation{
		IdempotencyKey: key, Body: pr, ContentType: "application/gzip",
		Metadata: map[string]string{"files": fmt.Sprint(len(m.Files))},
	})
	pr.Close()
	event("published", map[string]any{
		"owner": o.owner, "outcome": res.Outcome, "reason": res.Reason, "version": res.Version,
		"object": res.Object, "err": errString(err),
	})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, publisher.ErrStale):
		fmt.Fprintf(os.Stderr, "batch-publisher: %s: stale (%s): a newer state is published; nothing overwritten\n", o.owner, res.Reason)
		return nil
	}
	return err
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
