//go:build !unit

package testenv

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Domain is one test's own domain on the shared servers: a fresh namespace
// (see Namespace) and clients of the shared etcd and MinIO. Its methods
// read the servers directly, bypassing the code under test, and fail the
// test that made the Domain on any error; each call has a 10 s timeout
// (30 s for listings). Like a testing.TB, a Domain belongs to its test.
type Domain struct {
	NS    layout.Namespace
	Etcd  *clientv3.Client // closed when the test ends
	Store *s3store.Store

	t testing.TB
}

// NewDomain returns a fresh Domain on the shared servers for t. It fails t
// if Main did not run or a client cannot be made.
func NewDomain(t testing.TB) *Domain {
	t.Helper()
	sh := Get(t)
	return &Domain{NS: Namespace(t), Etcd: sh.EtcdClient(t), Store: sh.Store(t), t: t}
}

// ClusterDomain returns a fresh Domain on cluster c (StartCluster) for t:
// its etcd client reaches every member, its Store the first MinIO node.
func ClusterDomain(t testing.TB, c *devstack.Cluster) *Domain {
	t.Helper()
	st, err := c.MinIO.Store()
	if err != nil {
		t.Fatal(err)
	}
	return &Domain{NS: Namespace(t), Etcd: EtcdClient(t, c.Etcd), Store: st, t: t}
}

// ctx returns a context that ends after d or when the test ends.
func (d *Domain) ctx(timeout time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	d.t.Cleanup(cancel)
	return ctx
}

// Count returns the number of etcd keys under prefix.
func (d *Domain) Count(prefix string) int64 {
	d.t.Helper()
	resp, err := d.Etcd.Get(d.ctx(10*time.Second), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		d.t.Fatal(err)
	}
	return resp.Count
}

// Pointer reads and decodes res's pointer in d.NS straight from etcd; it
// returns the zero Pointer if res has none.
func (d *Domain) Pointer(res string) layout.Pointer {
	d.t.Helper()
	resp, err := d.Etcd.Get(d.ctx(10*time.Second), d.NS.PointerKey(res))
	if err != nil {
		d.t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return layout.Pointer{}
	}
	p, err := layout.DecodePointer(resp.Kvs[0].Value)
	if err != nil {
		d.t.Fatal(err)
	}
	return p
}

// Exists reports whether the bucket holds an object named key.
func (d *Domain) Exists(key string) bool {
	d.t.Helper()
	_, err := d.Store.Stat(d.ctx(10*time.Second), key)
	if err == nil {
		return true
	}
	if errors.Is(err, objstore.ErrNotFound) {
		return false
	}
	d.t.Fatal(err)
	return false
}

// Keys returns the names of the objects under prefix in the bucket, sorted.
func (d *Domain) Keys(prefix string) []string {
	d.t.Helper()
	var out []string
	for o, err := range d.Store.List(d.ctx(30*time.Second), prefix, objstore.ListOptions{}) {
		if err != nil {
			d.t.Fatal(err)
		}
		out = append(out, o.Key)
	}
	slices.Sort(out)
	return out
}
