package reader

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// slowKV is the real etcd KV whose Get answers reach the caller delay after
// etcd served them (a slow network), counting the Gets sent.
type slowKV struct {
	clientv3.KV
	delay time.Duration
	gets  atomic.Int64
}

func (s *slowKV) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	s.gets.Add(1)
	resp, err := s.KV.Get(ctx, key, opts...)
	time.Sleep(s.delay)
	return resp, err
}

// slowEtcd returns a client of the shared etcd whose Gets are slowed by
// delay, and its counter.
func slowEtcd(t *testing.T, delay time.Duration) (*clientv3.Client, *slowKV) {
	cli := testenv.Get(t).EtcdClient(t)
	kv := &slowKV{KV: cli.KV, delay: delay}
	cli.KV = kv
	return cli, kv
}

// Concurrent Current calls on one Reader share etcd reads, and every call
// still sees every pointer written before it began (linearizable): a call
// never joins a read already sent. The slowed answers leave a window in
// which a write completes after a read was served; a call that began after
// that write and took the served read would return an older version.
func TestSharedReadsAreLinearizable(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	p := e.publish("k0", "zero")
	cli, kv := slowEtcd(t, 5*time.Millisecond)
	for _, serializable := range []bool{false, true} {
		rd := e.reader(cli, func(c *Config) { c.Serializable = serializable })
		var written atomic.Uint64 // the highest seq whose put returned
		written.Store(p.Version.Seq)
		stop := make(chan struct{})
		var writer sync.WaitGroup
		writer.Go(func() {
			for i := 0; i < 60; i++ {
				p.Version.Seq++
				e.putPointer(p)
				written.Store(p.Version.Seq)
				time.Sleep(time.Millisecond)
			}
			close(stop)
		})
		gets := kv.gets.Load()
		var calls atomic.Int64
		errs := make(chan error, 16)
		var readers sync.WaitGroup
		for range 16 {
			readers.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					// Staggered arrivals: calls join reads at every stage.
					time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
					before := written.Load()
					cur, err := rd.Current(ctx)
					calls.Add(1)
					if err != nil {
						errs <- err
						return
					}
					if cur.Version.Seq < before {
						errs <- errors.New("stale read: got version " + cur.Version.String() + " though a later write had returned before the call")
						return
					}
				}
			})
		}
		writer.Wait()
		readers.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("serializable=%v: %v", serializable, err)
		}
		sent := kv.gets.Load() - gets
		if n := calls.Load(); sent*2 > n {
			t.Errorf("serializable=%v: %d calls sent %d etcd reads; want them shared (at most half)", serializable, n, sent)
		}
		t.Logf("serializable=%v: %d calls, %d etcd reads", serializable, calls.Load(), sent)
	}
}

// A call whose context ends while it waits for a shared read returns its
// context's error at once (not ErrUnavailable), and the read still serves
// the calls that wait for it.
func TestSharedReadCallerLeaves(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, 30*time.Second)
	p := e.publish("k0", "zero")
	cli, _ := slowEtcd(t, 300*time.Millisecond)
	rd := e.reader(cli)
	got := make(chan error, 1)
	go func() {
		cur, err := rd.Current(ctx)
		if err == nil && cur.Version != p.Version {
			err = errors.New("patient caller got " + cur.Version.String())
		}
		got <- err
	}()
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := rd.Current(short)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("a caller whose context ended: %v; want its deadline, not ErrUnavailable", err)
	}
	if waited := time.Since(start); waited > 200*time.Millisecond {
		t.Fatalf("a caller whose context ended waited %s for the shared read", waited)
	}
	if err := <-got; err != nil {
		t.Fatalf("the caller that waited: %v", err)
	}
}
