//go:build !unit

package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
)

// TestConnectOverLossyLink settles an attempt with resolve from a worker
// whose link to etcd is lossy: TCP gets its connection up only after 3.5 s
// (two lost SYNs, as in a 30 % loss test), and every segment is 200 ms
// late. etcd answers within the command's deadline, so the command must
// not fail on its first contact with etcd: the connection probe asks again
// until the deadline. The answer is definite: stale with reason seal.
func TestConnectOverLossyLink(t *testing.T) {
	r := newProxiedRig(t, "lossy")
	acq, errs, code := runCLI(t, append([]string{"authority", "acquire", "--resource", "job", "--owner", "w", "--ttl", "60s", "-o", "json"}, r.conn...)...)
	if code != 0 {
		t.Fatalf("acquire: exit %d: %s", code, errs)
	}
	g := jsonKeys(t, acq)
	epoch, fence := strconv.Itoa(int(g["epoch"].(float64))), strconv.Itoa(int(g["generation"].(float64)))
	r.etcdProxy.Set(faultproxy.Faults{ConnectDelay: 3500 * time.Millisecond, Latency: 200 * time.Millisecond})
	out, errs, code, took := timedCLI(t, bytes.NewReader(nil), append([]string{"resolve", "--resource", "job", "--key", "k", "--epoch", epoch,
		"--fence", fence, "--seq", "1", "--sha256", zeroDigest, "-o", "json"}, r.conn...)...)
	t.Logf("resolve over the lossy link: exit %d after %s", code, took.Round(10*time.Millisecond))
	var res struct{ Outcome, Reason string }
	if err := json.Unmarshal([]byte(out), &res); code != exitcode.Stale || err != nil || res.Outcome != "stale" || res.Reason != "seal" {
		t.Fatalf("resolve over a lossy link: exit %d, %+v (%v); want 110, stale with reason seal\nstdout: %s\nstderr: %s", code, res, err, out, errs)
	}
}
