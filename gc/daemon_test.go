//go:build !unit

package gc

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
	"github.com/prometheus/client_golang/prometheus"
)

// holderOwner returns the owner holding the GC lease, or "".
func (e *env) holderOwner() string {
	e.t.Helper()
	h, ok, err := e.auth.Holder(ctxT(e.t, 10*time.Second), defaultLeaseResource)
	if err != nil {
		e.t.Fatal(err)
	}
	if !ok {
		return ""
	}
	return h.Owner
}

// waitFor polls cond until it holds or timeout passes, and returns how
// long it took (testenv.Eventually).
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) time.Duration {
	t.Helper()
	return testenv.Eventually(t, what, timeout, cond)
}

// Killing the active GC daemon (a child process, SIGKILL) hands the work
// over to the standby within one lease TTL; the new leader collects; a
// SIGTERM'd leader releases the lease at once.
func TestDaemonHandover(t *testing.T) {
	e := newEnv(t)
	const ttl = 2 * time.Second
	cfg := helperConfig{TTL: ttl, Interval: 100 * time.Millisecond, Policy: Policy{Grace: time.Second, ClockSkew: 100 * time.Millisecond}}
	cfg.Owner = "gc-a"
	a := e.startChild("daemon", cfg)
	waitFor(t, "daemon A leads", 30*time.Second, func() bool { return e.holderOwner() == "gc-a" })
	cfg.Owner = "gc-b"
	b := e.startChild("daemon", cfg)
	// B campaigns: it found A holding the lease and waits (its authority
	// logs to stdout); A keeps the lease.
	for line := ""; !strings.Contains(line, "authority: waiting for the holder") || !strings.Contains(line, "gc-a"); {
		line = b.Next(30 * time.Second)
	}
	if got := e.holderOwner(); got != "gc-a" {
		t.Fatalf("holder %q while A is alive", got)
	}

	if err := a.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	took := waitFor(t, "daemon B takes over", 10*time.Second, func() bool { return e.holderOwner() == "gc-b" })
	t.Logf("handover after SIGKILL of the leader: %s (lease TTL %s)", took, ttl)
	if took > ttl+testenv.Slack {
		t.Fatalf("handover took %s; want about one lease TTL (%s; etcd expires leases on its own schedule, so allow %s more)", took, ttl, testenv.Slack)
	}

	// B acts: a stale worker's orphan disappears.
	const res = "daemon-res"
	w, pw := e.worker(res, "w1")
	e.publish(pw, "1", publisher.Applied)
	e.release(w)
	e.publish(e.bind(e.pub, e.acquire(res, "w2", 0)), "2", publisher.Applied)
	orphan := e.publish(pw, "3", publisher.Stale)
	waitFor(t, "daemon B deletes the orphan", 10*time.Second, func() bool { return !e.Exists(orphan.Attempt.Object.Key) })
}

// A daemon that is stopped (context cancelled, as on SIGTERM) releases the
// GC lease so a standby takes over at once; its endpoint serves /healthz and
// the Prometheus metrics.
func TestDaemonGracefulAndEndpoint(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := e.collector(func(c *Config) { c.Metrics = m })
	passes := make(chan *passReport, 100)
	d, err := newDaemon(daemonConfig{Collector: c, Interval: 50 * time.Millisecond, LeaseTTL: 10 * time.Second, Owner: "gc-x", Metrics: m,
		OnPass: func(r *passReport, err error) {
			if err != nil {
				t.Errorf("pass: %v", err)
			}
			select {
			case passes <- r:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler(reg))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	const res = "metered"
	g, pa := e.worker(res, "a")
	e.publish(pa, "1", publisher.Applied)
	e.release(g)
	e.publish(e.bind(e.pub, e.acquire(res, "b", 0)), "2", publisher.Applied)
	orphan := e.publish(pa, "3", publisher.Stale)
	waitFor(t, "the daemon deletes the orphan", 10*time.Second, func() bool { return !e.Exists(orphan.Attempt.Object.Key) })
	for r := range passes { // the metrics are recorded before OnPass
		if r.Deleted > 0 {
			break
		}
	}

	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/healthz")
	var st daemonStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 || !st.Running || !st.Leader || st.Passes == 0 || st.LastOK.IsZero() {
		t.Fatalf("/healthz %d %s", code, body)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{
		"fencepub_gc_deleted_objects_total", `fencepub_gc_kept_objects{decision="published"} 1`,
		"fencepub_gc_pass_duration_seconds_count", "fencepub_gc_last_success_timestamp_seconds",
		"fencepub_gc_last_success_duration_seconds", "fencepub_gc_leader 1",
	} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
	if strings.Contains(metrics, "fencepub_gc_deleted_objects_total 0") {
		t.Fatal("the deleted orphan was not counted")
	}

	// Graceful stop: the lease is released at once, not left to expire.
	standby, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if owner := e.holderOwner(); owner != "" {
		t.Fatalf("GC lease still held by %q after a graceful stop", owner)
	}
	if _, err := standby.Acquire(layout.WithReservedNames(ctxT(t, 5*time.Second)), authority.AcquireRequest{Resource: defaultLeaseResource, Owner: "gc-y", TTL: 2 * time.Second}); err != nil {
		t.Fatalf("standby could not take the lease at once: %v", err)
	}
	if code, _ := get("/healthz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz after stop: %d", code)
	}
	// The GC lease's own records stay bounded: one grant record per
	// campaign, pruned below the holder's.
	if n := e.Count(e.NS.GrantsPrefix(defaultLeaseResource)); n > 2 {
		t.Fatalf("%d grant records of the GC lease", n)
	}
}
