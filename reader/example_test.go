package reader_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/reader"
)

// ExampleReader_Open is a reader-only program: it needs the core package
// and reader, nothing of the authority. It imports public packages only and
// is compiled, not run (it needs etcd and MinIO).
func ExampleReader_Open() {
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

	r, err := reader.New(reader.Config{Env: fencepub.Env{Namespace: ns, Etcd: cli, Store: store}}, "report")
	if err != nil {
		panic(err)
	}
	b, err := r.Open(ctx)
	switch {
	case errors.Is(err, reader.ErrNotPublished):
		fmt.Println("nothing published yet")
		return
	case errors.Is(err, fencepub.ErrUnavailable):
		fmt.Println("etcd or the store did not answer; retry later")
		return
	case err != nil:
		panic(err)
	}
	defer b.Close()
	// The bytes are verified against the pointer's sha256 at EOF: trust
	// them only once Copy returns no error.
	if _, err := io.Copy(os.Stdout, b); err != nil {
		panic(err)
	}
}
