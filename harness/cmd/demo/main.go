// Command demo runs fencepub's main job end to end on real etcd and MinIO
// (package harness/demo): three batch-publisher replicas compete, the holder
// is paused past its lease, a replica with a larger fence takes over, the
// paused one's late publish is stale, the reader service serves each version
// in order with verified bytes, and a GC pass removes the orphan. `make demo`
// builds the servers and example binaries into ./bin and runs it. Exit 0 only
// if every check held; Ctrl-C stops everything it started.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencepub/fencepub/harness/demo"
)

func main() {
	var o demo.Options
	flag.StringVar(&o.BinDir, "bin", "bin", "directory with etcd, minio, batch-publisher and reader-service")
	flag.StringVar(&o.Src, "src", "", "directory the batch jobs snapshot (default $GOROOT/src)")
	flag.DurationVar(&o.TTL, "ttl", 3*time.Second, "the workers' lease TTL")
	flag.StringVar(&o.Dir, "dir", "", "keep the servers' data and logs here (default: a temp dir, removed on success)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := demo.Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
