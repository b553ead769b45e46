//go:build !unit

package config

import (
	"context"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/internal/wait"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestEtcdClientReconnectsAfterOutage cuts an EtcdClient off a real etcd for
// 32 s (every connection reset, every new one refused), as a cluster
// restarted or replaced is, then lets it back: the client must answer again
// within ReconnectMaxDelay plus a request, not after gRPC's default backoff
// (by then ~17 s between dials, so the first one after the outage comes
// seconds later).
func TestEtcdClientReconnectsAfterOutage(t *testing.T) {
	px, _ := testenv.Get(t).EtcdProxy(t)
	cli, err := Config{Etcd: Etcd{Endpoints: []string{px.URL()}, DialKeepAliveTime: DefaultDialKeepAliveTime, DialKeepAliveTimeout: DefaultDialKeepAliveTimeout}}.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	get := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := cli.Get(ctx, "reconnect-probe")
		return err
	}
	if err := get(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	px.Set(faultproxy.Faults{Refuse: true})
	px.ResetAll()
	outage := time.Now()
	for time.Since(outage) < 32*time.Second {
		if err := get(time.Second); err == nil {
			t.Fatal("a request succeeded while every connection was refused")
		}
		wait.Sleep(context.Background(), 500*time.Millisecond)
	}
	px.Set(faultproxy.Faults{})
	back := testenv.Eventually(t, "a request succeeds once etcd is reachable again", 30*time.Second, func() bool {
		return get(time.Second) == nil
	})
	if limit := ReconnectMaxDelay + time.Second + testenv.Slack; back > limit {
		t.Fatalf("the client answered %s after the outage ended, want at most %s", back.Round(time.Millisecond), limit)
	}
	t.Logf("back %s after a 32 s outage", back.Round(time.Millisecond))
}
