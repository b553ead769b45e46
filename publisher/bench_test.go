//go:build !unit

package publisher

import (
	"bytes"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The publish benchmarks run against the shared etcd and MinIO and compare a
// publish with its floor measured in the same run: one create-only PUT of
// the same body plus one bare etcd transaction (one compare, one put). The
// difference is the protocol's own cost (more compares and puts in the
// transaction, hashing, the resource init on first use).

const benchBody = 1 << 10 // bytes

func BenchmarkPublish(b *testing.B) {
	e := newEnv(b)
	ctx := ctxT(b, 10*time.Minute)
	body := bytes.Repeat([]byte("x"), benchBody)
	var n atomic.Int64 // a fresh resource per round and goroutine
	bind := func() (*Publisher, error) {
		g, err := e.auth.Acquire(ctx, authority.AcquireRequest{Resource: fmt.Sprint("bench-", n.Add(1)), Owner: "w", TTL: time.Minute})
		if err != nil {
			return nil, err
		}
		return e.pub.Bind(ctx, GrantTerm(g, false))
	}
	b.Run("serial", func(b *testing.B) {
		p, err := bind()
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(benchBody)
		o0, t0 := e.histogram("fencepub_publish_object_write_duration_seconds"), e.histogram("fencepub_publish_txn_duration_seconds")
		for i := 0; b.Loop(); i++ {
			if _, err := p.Publish(ctx, Operation{IdempotencyKey: fmt.Sprint("k", i), Body: bytes.NewReader(body)}); err != nil {
				b.Fatal(err)
			}
		}
		o1, t1 := e.histogram("fencepub_publish_object_write_duration_seconds"), e.histogram("fencepub_publish_txn_duration_seconds")
		b.ReportMetric((o1[0]-o0[0])/(o1[1]-o0[1])*1e3, "ms-object/op")
		b.ReportMetric((t1[0]-t0[0])/(t1[1]-t0[1])*1e3, "ms-txn/op")
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetBytes(benchBody)
		b.RunParallel(func(pb *testing.PB) {
			p, err := bind()
			if err != nil {
				b.Error(err)
				return
			}
			for i := 0; pb.Next(); i++ {
				if _, err := p.Publish(ctx, Operation{IdempotencyKey: fmt.Sprint("k", i), Body: bytes.NewReader(body)}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func BenchmarkFloor(b *testing.B) {
	e := newEnv(b)
	ctx := ctxT(b, 10*time.Minute)
	body := bytes.Repeat([]byte("x"), benchBody)
	var n atomic.Int64 // a fresh resource per round and goroutine
	// floor makes one create-only PUT and one bare transaction, adding their
	// durations to put and txn.
	floor := func(res string, i int, put, txn *time.Duration) error {
		key := e.NS.ObjectKey(res, layout.Version{Epoch: 1, Fence: 1, Seq: uint64(i + 1)}, layout.NewNonce())
		start := time.Now()
		if _, err := objstore.PutSmallCreateOnly(ctx, e.Store, key, body, "application/octet-stream"); err != nil {
			return err
		}
		mid := time.Now()
		v := layout.EncodeVersion(layout.Version{Epoch: 1, Fence: 1, Seq: uint64(i + 1)})
		k := e.NS.PointerKey(res)
		_, err := e.Etcd.Txn(ctx).If(clientv3.Compare(clientv3.Value(k), "<", v)).Then(clientv3.OpPut(k, v)).Commit()
		*put += mid.Sub(start)
		*txn += time.Since(mid)
		return err
	}
	b.Run("serial", func(b *testing.B) {
		b.SetBytes(benchBody)
		res := fmt.Sprint("floor-", n.Add(1))
		var put, txn time.Duration
		for i := 0; b.Loop(); i++ {
			if err := floor(res, i, &put, &txn); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(put.Seconds()*1e3/float64(b.N), "ms-object/op")
		b.ReportMetric(txn.Seconds()*1e3/float64(b.N), "ms-txn/op")
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetBytes(benchBody)
		b.RunParallel(func(pb *testing.PB) {
			res := fmt.Sprint("floor-", n.Add(1))
			var put, txn time.Duration
			for i := 0; pb.Next(); i++ {
				if err := floor(res, i, &put, &txn); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
