//go:build !unit

package gc

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestDaemonStatusReadiness(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	const interval = time.Minute
	for _, c := range []struct {
		st     daemonStatus
		want   bool
		reason string
	}{
		{daemonStatus{}, false, "not running"},
		{daemonStatus{Running: true}, false, "campaigning"},
		{daemonStatus{Running: true, Leader: true}, false, "first pass"},
		{daemonStatus{Running: true, Leader: true, Passes: 1, LastError: "boom"}, false, "boom"},
		{daemonStatus{Running: true, Leader: true, Passes: 1, LastOK: now.Add(-interval)}, true, ""},
		{daemonStatus{Running: true, Leader: true, Passes: 9, LastOK: now.Add(-2*interval - time.Second), LastError: "boom"}, false, "ended 2m1s ago, more than 2x (the interval 1m0s + that pass's 0s); last error: boom"},
		// Passes longer than the interval: ready while the next one runs,
		// until two such cycles went by without a success.
		{daemonStatus{Running: true, Leader: true, Passes: 2, LastOK: now.Add(-3 * interval), LastOKTook: 2 * interval}, true, ""},
		{daemonStatus{Running: true, Leader: true, Passes: 2, LastOK: now.Add(-6*interval - 1500*time.Millisecond), LastOKTook: 2 * interval}, false, "ended 6m1.5s ago, more than 2x (the interval 1m0s + that pass's 2m0s)"},
		{daemonStatus{Running: true, Standby: true}, true, "standby"},
		{daemonStatus{Running: true, Passes: 3, LastOK: now}, false, "campaigning"},
		{daemonStatus{Running: false, Standby: true, Passes: 3}, false, "not running"},
	} {
		got, why := c.st.readiness(now, interval)
		if got != c.want || !strings.Contains(why, c.reason) || (c.reason == "" && why != "") {
			t.Errorf("%+v.readiness() = %v %q, want %v %q", c.st, got, why, c.want, c.reason)
		}
	}
}

// readyDaemon is one in-process daemon replica with its HTTP endpoint.
type readyDaemon struct {
	srv    *httptest.Server
	cancel context.CancelFunc
	once   sync.Once
	err    error
	done   chan error
}

// stop ends Run and returns its error; later calls return the same.
func (r *readyDaemon) stop() error {
	r.once.Do(func() { r.cancel(); r.err = <-r.done })
	return r.err
}

func (e *env) readyDaemon(owner string) *readyDaemon {
	e.t.Helper()
	d, err := newDaemon(daemonConfig{Collector: e.collector(nil), Interval: time.Hour, LeaseTTL: 10 * time.Second, Owner: owner})
	if err != nil {
		e.t.Fatal(err)
	}
	r := &readyDaemon{srv: httptest.NewServer(d.Handler(prometheus.NewRegistry())), done: make(chan error, 1)}
	e.t.Cleanup(r.srv.Close)
	if code, _ := r.get(e.t, "/readyz"); code != http.StatusServiceUnavailable {
		e.t.Fatalf("%s: /readyz %d before Run", owner, code)
	}
	var ctx context.Context
	ctx, r.cancel = context.WithCancel(context.Background())
	go func() { r.done <- d.Run(ctx) }()
	e.t.Cleanup(func() { _ = r.stop() })
	return r
}

// get returns the status code and the body of path (/healthz's has no
// readiness fields).
func (r *readyDaemon) get(t testing.TB, path string) (int, readyStatus) {
	t.Helper()
	resp, err := http.Get(r.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st readyStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return resp.StatusCode, st
}

// waitReady polls path until it answers 200 and returns that status.
func (r *readyDaemon) waitReady(t *testing.T, what string) readyStatus {
	t.Helper()
	var st readyStatus
	waitFor(t, what, 30*time.Second, func() bool {
		var code int
		code, st = r.get(t, "/readyz")
		return code == http.StatusOK
	})
	return st
}

// /readyz answers 503 until a replica has settled: the leader after its
// first pass, a second replica as soon as it finds the GC lease held
// (standby); a stopped daemon is neither live nor ready again.
func TestDaemonReadyz(t *testing.T) {
	e := newEnv(t)
	a := e.readyDaemon("gc-ready-a")
	if st := a.waitReady(t, "leader ready"); !st.Leader || st.Passes == 0 || st.Standby {
		t.Fatalf("leader ready with %+v; want leader after a pass", st)
	}
	b := e.readyDaemon("gc-ready-b")
	if st := b.waitReady(t, "standby ready"); st.Leader || !st.Standby || st.Passes != 0 || st.Reason != "standby" {
		t.Fatalf("second replica ready with %+v; want standby", st)
	}
	if code, st := b.get(t, "/healthz"); code != http.StatusOK || !st.Running {
		t.Fatalf("standby /healthz %d %+v", code, st)
	}

	// The leader stops and releases the lease: the standby leads and stays
	// ready; the stopped one is neither live nor ready.
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the standby leads after a pass", 30*time.Second, func() bool {
		code, st := b.get(t, "/readyz")
		return code == http.StatusOK && st.Leader && !st.Standby && st.Passes > 0
	})
	for _, path := range []string{"/readyz", "/healthz"} {
		if code, _ := a.get(t, path); code != http.StatusServiceUnavailable {
			t.Fatalf("stopped daemon: %s %d", path, code)
		}
	}
}
