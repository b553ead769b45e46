//go:build !unit

package reader

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// Config.StallTimeout ends a read that gets no byte for that long — no
// answer to the GET, or a body that stops — with fencepub.ErrUnavailable, while the
// caller's own pauses between reads (longer than the timeout) do not count.
func TestStallTimeout(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	body := strings.Repeat("0123456789", 400_000) // 4 MB
	e.publish("k1", body)
	px, st := testenv.Get(t).StoreProxy(t)
	const stall = 500 * time.Millisecond
	r := e.reader(e.Etcd, func(c *Config) { c.Store, c.StallTimeout = st, stall })

	// Healthy, read slowly: pauses of 2x the timeout between reads.
	b, err := r.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	buf := make([]byte, 1<<20)
	for {
		n, err := b.Read(buf)
		got.Write(buf[:n])
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("slow but healthy read: %v", err)
		}
		time.Sleep(2 * stall)
	}
	b.Close()
	if got.String() != body {
		t.Fatalf("slow read got %d bytes", got.Len())
	}

	for _, tc := range []struct {
		name   string
		faults faultproxy.Faults
	}{
		{"no answer", faultproxy.Faults{DropDownstream: true}},
		{"body stops after 1 MiB", faultproxy.Faults{StallDownstreamAfter: 1 << 20}},
	} {
		px.Set(tc.faults)
		start := time.Now()
		b, err := r.OpenPointer(ctx, b.Pointer)
		if err == nil {
			_, err = io.Copy(io.Discard, b)
			b.Close()
		}
		if took := time.Since(start); !errors.Is(err, fencepub.ErrUnavailable) || !strings.Contains(err.Error(), "sent no bytes") || took > 10*time.Second {
			t.Fatalf("%s: %v after %s; want fencepub.ErrUnavailable naming the stall within seconds", tc.name, err, took)
		}
	}
	if _, err := New(Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd}, StallTimeout: -time.Second}, res); !errors.Is(err, fencepub.ErrInvalid) {
		t.Fatalf("negative StallTimeout: %v, want fencepub.ErrInvalid", err)
	}
}

// TestOpenThroughStalledFollower stops (SIGSTOP) an etcd follower of the
// multi-node topology. The reader's client keeps every member in its
// round-robin balancer, so every third read is sent to the stalled one;
// each Current and Open must still succeed within its RequestTimeout,
// retrying on another member (DESIGN.md invariant 12).
func TestOpenThroughStalledFollower(t *testing.T) {
	cl := testenv.StartCluster(t, devstack.MultiNode())
	e := newDomainEnv(t, testenv.ClusterDomain(t, cl))
	const body = "published before the stall"
	want := e.publish("k1", body)
	const timeout = 3 * time.Second
	r := e.reader(e.Etcd, func(c *Config) { c.RequestTimeout = timeout })
	m := testenv.PauseFollower(t, cl.Etcd)
	var worst time.Duration
	for i := range 9 {
		start := time.Now()
		if ptr, err := r.Current(ctxT(t, time.Minute)); err != nil || ptr.Version != want.Version {
			t.Fatalf("Current %d with follower %s stalled: %s, %v; want %s", i, m.Name, ptr.Version, err, want.Version)
		}
		b, err := r.Open(ctxT(t, time.Minute))
		if err != nil {
			t.Fatalf("Open %d with follower %s stalled: %v", i, m.Name, err)
		}
		got, err := io.ReadAll(b)
		b.Close()
		if err != nil || string(got) != body {
			t.Fatalf("Open %d read %q, %v; want %q", i, got, err, body)
		}
		worst = max(worst, time.Since(start))
	}
	t.Logf("follower %s stalled: 9 Current and 9 Open calls succeeded, the slowest pair in %s", m.Name, worst.Round(time.Millisecond))
}
