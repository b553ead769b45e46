package publisher_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/publisher"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ExamplePublisher_Rollback republishes an earlier version of a resource
// under a grant, with the version given as text (a flag, a log line). It
// imports public packages only and is compiled, not run (it needs etcd and
// MinIO).
func ExamplePublisher_Rollback() {
	ctx := context.Background()
	ns, err := fencepub.NewNamespace("fencepub", "dev") // as `fencepub dev up` writes it
	if err != nil {
		panic(err)
	}
	store, err := fencepub.NewStore(fencepub.StoreConfig{
		Endpoint: "127.0.0.1:9000", Bucket: "fencepub",
		AccessKey: os.Getenv("FENCEPUB_S3_ACCESS_KEY"), SecretKey: os.Getenv("FENCEPUB_S3_SECRET_KEY"),
	})
	if err != nil {
		panic(err)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}, DialTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}
	defer cli.Close()
	env := fencepub.Env{Namespace: ns, Etcd: cli, Store: store}

	auth, err := authority.New(authority.Config{Env: env})
	if err != nil {
		panic(err)
	}
	g, err := auth.Acquire(ctx, authority.AcquireRequest{Resource: "report", Owner: "worker-1", TTL: 15 * time.Second, Wait: true})
	if err != nil {
		panic(err)
	}
	defer func() { _ = auth.Release(context.WithoutCancel(ctx), g) }()

	client, err := publisher.New(publisher.Config{Env: env})
	if err != nil {
		panic(err)
	}
	p, err := client.Bind(ctx, publisher.GrantTerm(g, false))
	if err != nil {
		panic(err)
	}
	to, err := fencepub.ParseVersion("1.4.2") // Version.String's form
	if err != nil {
		panic(err)
	}
	res, err := p.Rollback(ctx, to, "rollback-to-1.4.2")
	switch {
	case errors.Is(err, fencepub.ErrUnavailable):
		fmt.Println("etcd did not answer; retry with the same key")
	case err != nil:
		panic(err)
	default:
		fmt.Println(res.Outcome, res.Version)
	}
}
