// Command chaos is fencepub's fault-injection soak (`make chaos`): it starts
// the multi-node topology from ./bin (a 3-member etcd cluster and a 4-node
// distributed MinIO; with -store seaweedfs the etcd cluster and one
// SeaweedFS whose volume server is its own process, under the faults that
// apply to it, chaos.SeaweedFSFaults), runs one chaos run (harness/chaos.Run) for
// -duration with the fault schedule of -seed, prints the operations, the
// faults injected by kind, the liveness figures and the violations, and exits
// 1 when there was a violation (the failure file is in -out) and 2 when the
// run could not be made.
//
// Run as root (with iproute2 and iptables), it also injects network
// partitions (chaos.PartitionFaults): the servers and the worker processes
// then run on hosts of their own, network namespaces on a bridge
// (harness/partition, docs/partitions.md). -partitions=false, or
// FENCEPUB_NETNS=0, runs without them; on SeaweedFS there are none.
//
// The same binary is the run's worker process: started with
// FENCEPUB_CHAOS_WORKER set, it runs chaos.WorkerMain instead.
//
// Usage:
//
//	chaos [-store minio|seaweedfs] [-seed N] [-duration 30m] [-partitions=false] [-dir DIR] [-out DIR] [-history FILE] [-summary FILE] [-v]
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencepub/fencepub/harness/chaos"
	"github.com/fencepub/fencepub/harness/partition"
	"github.com/fencepub/fencepub/internal/devstack"
)

func main() {
	if chaos.IsWorker() {
		os.Exit(chaos.WorkerMain())
	}
	os.Exit(run())
}

// processes is the run's number of worker processes (chaos.Config's
// default), each on a host of its own with partitions.
const processes = 3

func run() int {
	store := flag.String("store", devstack.StoreMinIO, "object store: "+strings.Join(devstack.StoreKinds, "|"))
	seedFlag := flag.String("seed", "", "seed of the fault schedule and the workload (empty: random, printed)")
	duration := flag.Duration("duration", 5*time.Minute, "how long the workload and the faults run")
	dir := flag.String("dir", "", "run directory: server data and worker logs (default: a new temporary directory)")
	out := flag.String("out", ".", "directory for chaos-failure-<seed>.json")
	verbose := flag.Bool("v", false, "log every fault as it is injected")
	histFile := flag.String("history", "", "also write the run's history as JSON to this file")
	sumFile := flag.String("summary", "", "also write the run's summary, liveness figures included, as JSON to this file")
	partitions := flag.Bool("partitions", partition.Root() && os.Getenv(partition.DeselectEnv) != "0",
		"also inject network partitions, with the servers and worker processes in network namespaces (default: when root and "+partition.DeselectEnv+" is not 0)")
	flag.Parse()
	start := chaos.StartCluster
	switch *store {
	case devstack.StoreMinIO:
	case devstack.StoreSeaweedFS:
		start = chaos.StartSeaweedFSCluster
	default:
		fmt.Fprintf(os.Stderr, "chaos: -store %q: want one of %s\n", *store, strings.Join(devstack.StoreKinds, ", "))
		return 2
	}
	seed := time.Now().UnixNano() % 1_000_000_000
	if *seedFlag != "" {
		s, err := strconv.ParseInt(*seedFlag, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaos: -seed %q: %v\n", *seedFlag, err)
			return 2
		}
		seed = s
	}
	if *dir == "" {
		d, err := os.MkdirTemp("", "fencepub-chaos-")
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			return 2
		}
		*dir = d
	}
	fmt.Printf("chaos: %s, seed %d, duration %s, run directory %s (replay: make chaos STORE=%s SEED=%d DURATION=%s)\n",
		*store, seed, *duration, *dir, *store, seed, *duration)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var network chaos.Network
	var cl *chaos.Cluster
	var err error
	switch {
	case *partitions && *store == devstack.StoreMinIO:
		topo, terr := partition.Start(ctx, "fpchaos", netip.MustParsePrefix("10.213.200.0/24"), filepath.Join(*dir, "cluster"),
			partition.Options{Workers: processes, MinIONodes: chaos.Topology.MinIO.Nodes})
		if terr != nil {
			fmt.Fprintln(os.Stderr, "chaos: start the servers in network namespaces:", terr)
			return 2
		}
		defer func() {
			if err := topo.Stop(); err != nil {
				fmt.Fprintln(os.Stderr, "chaos:", err)
			}
		}()
		cl, network = topo.Cluster, topo
		fmt.Println("chaos: with network partitions (servers and worker processes in network namespaces fpchaos-*)")
	default:
		if *partitions {
			fmt.Println("chaos: no network partitions on " + *store)
		}
		if cl, err = start(ctx, filepath.Join(*dir, "cluster")); err != nil {
			fmt.Fprintln(os.Stderr, "chaos: start the servers:", err)
			return 2
		}
		defer cl.Stop()
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	res, err := chaos.Run(ctx, chaos.Config{
		Cluster: cl, Network: network, Processes: processes, Seed: seed, Duration: *duration, Dir: *dir, FailureDir: *out,
		Progress: os.Stdout, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	if *histFile != "" {
		b, err := json.Marshal(res.History)
		if err == nil {
			err = os.WriteFile(*histFile, b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos: write the history:", err)
		}
	}
	if *sumFile != "" {
		b, err := json.MarshalIndent(res.Summary, "", " ")
		if err == nil {
			err = os.WriteFile(*sumFile, b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "chaos: write the summary:", err)
		}
	}
	for _, v := range res.Violations {
		fmt.Println("VIOLATION", v)
	}
	if len(res.Violations) > 0 {
		return 1
	}
	return 0
}
