//go:build !unit

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A command's deadline bounds the whole command. Each test cuts a server
// off at the worst moment and checks the command's wall time against its
// deadline plus a margin computed from the configured budgets: one
// etcd.request_timeout (rigRequestTimeout). The clean-up the command used
// to do after its deadline — a lease release retried for the authority's
// RetryTimeout (30 s), a multipart abort for 10 s — is far above it.

// rigRequestTimeout is etcd.request_timeout in these tests.
const rigRequestTimeout = 2 * time.Second

// proxiedRig is a cliRig whose connection flags go through a fault proxy
// in front of etcd and one in front of MinIO; r.etcd still reaches etcd
// directly.
type proxiedRig struct {
	*cliRig
	etcdProxy, storeProxy *faultproxy.Proxy
	ns                    layout.Namespace
	body                  string
}

func newProxiedRig(t *testing.T, domain string) *proxiedRig {
	t.Helper()
	r := newCLIRig(t, domain)
	t.Setenv("FENCEPUB_ETCD_REQUEST_TIMEOUT", rigRequestTimeout.String())
	start := func(target string) *faultproxy.Proxy {
		p, err := faultproxy.Start(target)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
	ep := start(strings.TrimPrefix(r.conn[slices.Index(r.conn, "--etcd-endpoints")+1], "http://"))
	sp := start(r.s3.Endpoint)
	ns, err := layout.NewNamespace("adv", domain)
	if err != nil {
		t.Fatal(err)
	}
	r.conn = withFlag(withFlag(r.conn, "--etcd-endpoints", ep.URL()), "--s3-endpoint", sp.Addr())
	return &proxiedRig{cliRig: r, etcdProxy: ep, storeProxy: sp, ns: ns, body: r.file("body.txt", "deadline")}
}

// cut makes p a black hole: bytes in both directions are dropped, and the
// connections stay open, as across a network partition.
func cut(p *faultproxy.Proxy) { p.Set(faultproxy.Faults{DropUpstream: true, DropDownstream: true}) }

// timedCLI runs fencepub in-process with stdin and args and returns its
// stdout, stderr, exit code and wall time.
func timedCLI(t *testing.T, stdin *bytes.Reader, args ...string) (string, string, int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	out, errs, code := cliIO(t, ctx, stdin, args...)
	return out, errs, code, time.Since(start)
}

// TestPublishTimeoutBoundsRelease cuts etcd off the moment a publish's
// transaction commits: the release of the grant it acquired cannot reach
// etcd, and the command still ends within --timeout (the release had the
// reserve the deadline keeps for it), saying the lease expires by itself.
func TestPublishTimeoutBoundsRelease(t *testing.T) {
	r := newProxiedRig(t, "release")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	now, err := r.etcd.Get(ctx, r.ns.HistoryPrefix("job"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	committed := r.etcd.Watch(ctx, r.ns.HistoryPrefix("job"), clientv3.WithPrefix(), clientv3.WithRev(now.Header.Revision+1))
	go func() {
		for resp := range committed {
			if len(resp.Events) > 0 {
				cut(r.etcdProxy)
				return
			}
		}
	}()
	const timeout = 8 * time.Second
	out, errs, code, took := timedCLI(t, bytes.NewReader(nil), append([]string{"publish", "--resource", "job", "--owner", "w", "--ttl", "10s",
		"--key", "k1", "--file", r.body, "--timeout", timeout.String(), "-o", "json"}, r.conn...)...)
	t.Logf("publish: exit %d after %s", code, took.Round(10*time.Millisecond))
	// Applied when the answer beat the cut, unknown when the cut beat it.
	if code != exitcode.OK && code != exitcode.Unknown {
		t.Fatalf("publish: exit %d, want 0 or 112\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if bound := timeout + rigRequestTimeout; took > bound {
		t.Fatalf("publish --timeout %s whose etcd went away after the commit took %s; want at most %s\nstderr: %s", timeout, took, bound, errs)
	}
	if !strings.Contains(errs, "expires by itself") {
		t.Fatalf("stderr does not say the lease was left to expire:\n%s", errs)
	}
}

// TestPublishTimeoutBoundsAbort cuts the object store off after the first
// part of a multipart upload: the upload fails at the work's deadline, the
// abort is left to GC instead of taking 10 s more, and the release (etcd is
// fine) fits in what the deadline kept for it.
func TestPublishTimeoutBoundsAbort(t *testing.T) {
	r := newProxiedRig(t, "abort")
	body := bytes.Repeat([]byte("0123456789abcdef"), 3<<20) // 48 MiB from stdin: three 16 MiB parts
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		for ctx.Err() == nil && r.storeProxy.Stats().BytesUp < 20<<20 {
			time.Sleep(5 * time.Millisecond)
		}
		cut(r.storeProxy)
	}()
	const timeout = 12 * time.Second
	out, errs, code, took := timedCLI(t, bytes.NewReader(body), append([]string{"publish", "--resource", "big", "--owner", "w", "--ttl", "10s",
		"--key", "k1", "-", "--timeout", timeout.String()}, r.conn...)...)
	t.Logf("publish: exit %d after %s", code, took.Round(10*time.Millisecond))
	if code != exitcode.Unavailable {
		t.Fatalf("publish with the store cut mid-upload: exit %d, want 115\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if bound := timeout + rigRequestTimeout; took > bound {
		t.Fatalf("publish --timeout %s whose store went away mid-upload took %s; want at most %s\nstderr: %s", timeout, took, bound, errs)
	}
	if !strings.Contains(errs, "GC aborts it") {
		t.Fatalf("stderr does not say GC aborts the upload:\n%s", errs)
	}
	if strings.Contains(errs, "lease not released") {
		t.Fatalf("the release, with etcd reachable, did not fit in the deadline:\n%s", errs)
	}
}

// TestRunExitsSoonAfterLosingEtcd cuts etcd off while run's command runs:
// the command is stopped once the lease can no longer be vouched for, and
// run exits 114 within --ttl + --grace + etcd.request_timeout (the release
// budget) of the cut, plus the margin, not after a 30 s release.
func TestRunExitsSoonAfterLosingEtcd(t *testing.T) {
	r := newProxiedRig(t, "runcut")
	started := filepath.Join(t.TempDir(), "started")
	const ttl, grace = 3 * time.Second, time.Second
	type result struct {
		out, errs string
		code      int
		end       time.Time
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		args := append(append([]string{"run", "--resource", "job", "--ttl", ttl.String(), "--grace", grace.String()}, r.conn...),
			"--", "sh", "-c", "touch "+started+"; sleep 120")
		out, errs, code := publishCLI(t, ctx, "", args...)
		done <- result{out, errs, code, time.Now()}
	}()
	testenv.Eventually(t, "the command started", time.Minute, func() bool { return exists(started) })
	cutAt := time.Now()
	cut(r.etcdProxy)
	res := <-done
	took := res.end.Sub(cutAt)
	t.Logf("run: exit %d, %s after the cut", res.code, took.Round(10*time.Millisecond))
	if res.code != exitcode.LeaseLost {
		t.Fatalf("run that lost etcd: exit %d, want 114\nstdout: %s\nstderr: %s", res.code, res.out, res.errs)
	}
	if bound := ttl + grace + rigRequestTimeout + rigRequestTimeout; took > bound {
		t.Fatalf("run exited %s after losing etcd; want at most %s\nstderr: %s", took, bound, res.errs)
	}
}
