//go:build !unit

package partition

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
)

// TestNetCutLossDelay starts one etcd member on a host of a Net and checks
// each fault from this process's end of the bridge: a cut makes a read
// time out and its heal brings it back, a one-way cut towards this process
// does too, a delay of d adds at least 2d to a read's round trip.
func TestNetCutLossDelay(t *testing.T) {
	Require(t)
	n := newTestNet(t, "fppnet", netip.MustParsePrefix("10.213.90.0/24"))
	h, err := n.AddHost("e0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := devstack.StartEtcd(ctx, t.TempDir(), devstack.EtcdOptions{Hosts: []devstack.Host{{Addr: h.Addr.String(), Netns: h.Netns}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Stop)
	c, err := e.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	get := func(timeout time.Duration) (time.Duration, error) {
		gctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		start := time.Now()
		_, err := c.Get(gctx, "k")
		return time.Since(start), err
	}
	if _, err := get(5 * time.Second); err != nil {
		t.Fatalf("read before any fault: %v", err)
	}
	for _, oneWay := range []bool{false, true} {
		heal, err := n.Cut([]Host{h}, []Host{n.Ctl()}, oneWay)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := get(time.Second); err == nil {
			t.Errorf("cut (one way %v): a read succeeded", oneWay)
		}
		if err := heal(); err != nil {
			t.Fatal(err)
		}
		if _, err := get(10 * time.Second); err != nil {
			t.Errorf("healed cut (one way %v): %v", oneWay, err)
		}
	}
	const d = 100 * time.Millisecond
	heal, err := n.Delay(h, []Host{n.Ctl()}, d)
	if err != nil {
		t.Fatal(err)
	}
	took, err := get(5 * time.Second)
	if err != nil || took < 2*d {
		t.Errorf("delayed read: %v after %s, want success after at least %s", err, took, 2*d)
	}
	if err := heal(); err != nil {
		t.Fatal(err)
	}
	if took, err := get(5 * time.Second); err != nil || took >= d {
		t.Errorf("read after the delay healed: %v after %s, want success within %s", err, took, d)
	}
	healLoss, err := n.Loss([]Host{h}, []Host{n.Ctl()}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := get(time.Second); err == nil {
		t.Error("100 % loss: a read succeeded")
	}
	if err := healLoss(); err != nil {
		t.Fatal(err)
	}
}

// newTestNet returns a Net for t that is closed when t ends.
func newTestNet(t *testing.T, prefix string, subnet netip.Prefix) *Net {
	t.Helper()
	n, err := New(prefix, subnet)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	return n
}
