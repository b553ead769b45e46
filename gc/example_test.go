package gc_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/gc"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ExampleCollector_Run runs one GC pass over every resource of a domain.
// The Collector builds the authority it needs from the Env. It imports
// public packages only and is compiled, not run (it needs etcd and MinIO).
func ExampleCollector_Run() {
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

	cfg := gc.DefaultConfig()
	cfg.Env = fencepub.Env{Namespace: ns, Etcd: cli, Store: store}
	c, err := gc.New(cfg)
	if err != nil {
		panic(err)
	}
	rep, err := c.Run(ctx, gc.RunOptions{All: true})
	switch {
	case errors.Is(err, fencepub.ErrUnavailable):
		fmt.Println("etcd or the store did not answer; the next pass retries")
	case errors.Is(err, gc.ErrIncomplete):
		fmt.Println("some resources failed:", err)
	case err != nil:
		panic(err)
	}
	if rep != nil {
		fmt.Println("deleted", rep.Deleted, "of", rep.Scanned)
	}
}
