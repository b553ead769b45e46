package authority_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Example is the program of docs/library.md, "Using the libraries":
// everything it needs is public (this file imports no internal package), so
// it builds from other modules too. Its settings are those `fencepub dev up`
// writes to fencepub.yaml (domain "dev"), the keys taken from the CLI's
// FENCEPUB_S3_ACCESS_KEY and FENCEPUB_S3_SECRET_KEY. It is compiled, not run
// (it needs etcd and MinIO).
func Example() {
	ctx := context.Background()
	ns, err := fencepub.NewNamespace("fencepub", "dev") // namespace.prefix, namespace.domain
	if err != nil {
		panic(err)
	}
	store, err := fencepub.NewStore(fencepub.StoreConfig{
		Endpoint: "127.0.0.1:9000", Bucket: "fencepub", // s3.endpoint, s3.bucket
		AccessKey: os.Getenv("FENCEPUB_S3_ACCESS_KEY"), SecretKey: os.Getenv("FENCEPUB_S3_SECRET_KEY"),
	})
	if err != nil {
		panic(err)
	}
	etcdClient, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer etcdClient.Close()

	auth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: ns, Etcd: etcdClient, Store: store}})
	if err != nil {
		panic(err)
	}
	g, err := auth.Acquire(ctx, authority.AcquireRequest{Resource: "report", Owner: authority.NewID(), TTL: 15 * time.Second, Wait: true})
	if err != nil {
		panic(err)
	}
	sess, err := auth.NewSession(ctx, g) // renews; sess.Lost() fires no later than etcd could expire the lease
	if err != nil {
		panic(err)
	}
	defer sess.Close() // releases

	pub, err := publisher.New(publisher.Config{Env: fencepub.Env{Namespace: ns, Etcd: etcdClient, Store: store}})
	if err != nil {
		panic(err)
	}
	p, err := pub.Bind(ctx, publisher.GrantTerm(g, false))
	if err != nil {
		panic(err)
	}
	res, err := p.Publish(ctx, publisher.Operation{IdempotencyKey: "report-2026-11-30", Body: strings.NewReader("result")})
	fmt.Println(res.Outcome, err) // applied | duplicate | conflict | stale | unknown (then pub.Resolve)

	r, err := reader.New(reader.Config{Env: fencepub.Env{Namespace: ns, Etcd: etcdClient, Store: store}}, "report")
	if err != nil {
		panic(err)
	}
	b, err := r.Open(ctx) // read to EOF and check the error before trusting the bytes
	if err == nil {
		defer b.Close()
	}
}
