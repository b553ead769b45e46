//go:build !unit

package suite

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestSuiteQuick is the smoke run of the whole suite (`fencepub-bench
// --quick`) against real servers, so the benchmarks cannot rot: every
// workload runs, every row is measured on both sides without failed
// operations (none is skipped: wrk must be installed), the report and chart are
// written, and the suite leaves no objects or etcd keys behind.
func TestSuiteQuick(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin := t.TempDir()
	svc, cli := filepath.Join(bin, "reader-service"), filepath.Join(bin, "fencepub")
	// Built in the main module (three levels up), whose go.sum covers them.
	for path, pkg := range map[string]string{svc: "./examples/reader-service", cli: "./cmd/fencepub"} {
		if out, err := exec.Command("go", "-C", filepath.Join("..", "..", ".."), "build", "-o", path, pkg).CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", pkg, err, out)
		}
	}
	env := testEnv(t)
	env.StartCluster = func(ctx context.Context) (*devstack.Cluster, func(), error) {
		return testenv.StartCluster(t, devstack.MultiNode()), func() {}, nil
	}
	start := time.Now()
	rep, err := Run(ctx, env, Options{Quick: true, ReaderService: svc, Fencepub: cli, Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("quick suite: %s, %d rows", time.Since(start).Round(time.Millisecond), len(rep.Rows))
	seen := map[string]int{}
	for _, r := range rep.Rows {
		seen[r.Workload]++
		switch {
		case r.Skipped != "":
			// Every row runs here: wrk drives the reader-service rows
			// (`make test` installs it) and the cluster rows get their etcd.
			t.Errorf("%s %s skipped: %s", r.Workload, r.Config, r.Skipped)
		case r.Subject.Errors > 0 || r.Base.Errors > 0:
			t.Errorf("%s %s: failed operations: %s", r.Workload, r.Config, r.Note)
		case strings.HasPrefix(r.Target, "peak RSS"):
			if r.Subject.PeakRSS <= 0 || r.Base.PeakRSS <= 0 {
				t.Errorf("%s %s: RSS not measured: %+v", r.Workload, r.Config, r)
			}
		case strings.HasPrefix(r.Target, "orphans"):
			// The subject counts what is left, where 0 is the goal; the
			// leftovers made before the pass are the measurement.
			if r.Base.Ops == 0 {
				t.Errorf("%s %s: no leftovers made: %+v", r.Workload, r.Config, r)
			}
		case r.Subject.Ops == 0 || r.Base.Ops == 0:
			t.Errorf("%s %s: not measured: %+v", r.Workload, r.Config, r)
		}
		if r.Target != "" && r.Met == nil && r.Skipped == "" {
			t.Errorf("%s %s: target %q without a verdict", r.Workload, r.Config, r.Target)
		}
	}
	for _, w := range Workloads() {
		if seen[w] == 0 {
			t.Errorf("workload %s has no rows", w)
		}
	}
	// 2 sizes × 2 concurrencies × 2 resource counts, plus 2 A/A rows.
	if seen[WorkloadPublish] != 10 {
		t.Errorf("publish rows: %d, want 10", seen[WorkloadPublish])
	}
	dir := t.TempDir()
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	if err := rep.Chart(filepath.Join(dir, "latest.png"), WorkloadPublish, WorkloadScaling); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"latest.json", "latest.md", "latest.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() < 500 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// Each workload cleaned its domain ("<domain>-<workload>").
	domains := env.NS.Prefix + "/" + env.NS.Domain
	left, err := (&stack{Target: env.Target}).count(ctx, domains)
	if err != nil || left != 0 {
		t.Errorf("%d objects left under %s (%v)", left, domains, err)
	}
	kv, err := env.Etcd.Get(ctx, domains, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || kv.Count != 0 {
		t.Errorf("etcd keys left under %s: %v %v", domains, kv, err)
	}
}

// testEnv is the suite's Env on the shared test servers, with dedicated
// etcd clusters and no multi-node cluster.
func testEnv(t *testing.T) Env {
	shared := testenv.Get(t)
	return Env{
		Target:  bench.Target{Etcd: shared.EtcdClient(t), Store: shared.Store(t), NS: testenv.Namespace(t)},
		Config:  config.Config{Etcd: config.Etcd{Endpoints: shared.Etcd.Endpoints()}, S3: shared.S3.S3Config()},
		NewEtcd: shared.Etcd.Client,
		StartEtcd: func(ctx context.Context, members int) (*clientv3.Client, func(), error) {
			e := testenv.StartEtcd(t, devstack.EtcdOptions{Members: members})
			cli, err := e.Client()
			if err != nil {
				return nil, nil, err
			}
			return cli, func() { _ = cli.Close() }, nil
		},
		Servers: "testenv",
	}
}

// TestFootprint runs the footprint workload at a small count: every row is
// measured, the compact op record stays within the 200-byte target and
// below the JSON form, and the capacity rows follow from the bytes.
func TestFootprint(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, testEnv(t), Options{Workloads: []string{WorkloadFootprint}, Scale: 0.02, Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 4 {
		t.Fatalf("%d rows, want 4: %+v", len(rep.Rows), rep.Rows)
	}
	for _, r := range rep.Rows {
		if r.Skipped != "" || r.Subject.Ops != 2000 || r.Subject.Throughput <= 0 || r.Base.Throughput <= 0 {
			t.Fatalf("row not measured: %+v", r)
		}
		t.Logf("%s: %s %s (JSON forms %s)", r.Config, bench.Num(r.Subject.Throughput), r.Unit, bench.Num(r.Base.Throughput))
	}
	withHist, op, rate2, rate8 := rep.Rows[0], rep.Rows[1], rep.Rows[2], rep.Rows[3]
	if op.Met == nil || !*op.Met || op.Subject.Throughput >= op.Base.Throughput || withHist.Subject.Throughput >= withHist.Base.Throughput {
		t.Errorf("compact forms not smaller, or op record above 200 bytes: %+v, %+v", withHist, op)
	}
	if op.Subject.Throughput >= withHist.Subject.Throughput {
		t.Errorf("pruning the history freed nothing: %v vs %v bytes", op.Subject.Throughput, withHist.Subject.Throughput)
	}
	if want := sustainedRate(quotaDefault, op.Subject.Throughput); rate2.Subject.Throughput != want || math.Abs(rate8.Subject.Throughput/want-4) > 1e-9 {
		t.Errorf("rates %v, %v; want %v and 4x", rate2.Subject.Throughput, rate8.Subject.Throughput, want)
	}
}

// TestGroup runs the group workload at its quick counts: every row is
// measured on both sides with its ratios and percentiles filled, the
// group publish lands between its floor and the single publishes it
// replaces, the largest groups are the documented ones, and the workload
// leaves no objects or etcd keys behind.
func TestGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := testEnv(t)
	rep, err := Run(ctx, env, Options{Workloads: []string{WorkloadGroup}, Quick: true, Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 15 {
		t.Fatalf("%d rows, want 6 per size and 3 limits: %+v", len(rep.Rows), rep.Rows)
	}
	ratios := map[string]float64{}
	for _, r := range rep.Rows[:12] {
		iters := 5
		if r.Size == 1<<20 {
			iters = 3
		}
		for _, side := range []bench.Stats{r.Subject, r.Base} {
			if side.Ops != iters || side.Errors != 0 || side.P50 <= 0 || side.P95 < side.P50 || side.P99 < side.P95 || side.Throughput <= 0 {
				t.Errorf("%s: a side not measured over %d iterations: %+v", r.Config, iters, side)
			}
		}
		if want := float64(r.Subject.P50) / float64(r.Base.P50); r.RatioP50 <= 0 || math.Abs(r.RatioP50-want) > 1e-9 || r.RatioThroughput <= 0 {
			t.Errorf("%s: ratios p50 %v (want %v), throughput %v", r.Config, r.RatioP50, want, r.RatioThroughput)
		}
		if !strings.Contains(r.Note, "p95 ") {
			t.Errorf("%s: no p95 in the note %q", r.Config, r.Note)
		}
		kind, _, _ := strings.Cut(r.Config, ", ")
		ratios[fmt.Sprintf("%s %d", kind, r.Size)] = r.RatioP50
		if kind == "PublishGroup" && (r.Target != "p50 <= 1.20x" || r.Met == nil || *r.Met != (r.RatioP50 <= 1.2)) {
			t.Errorf("%s: target %q met %v at p50 %.2fx", r.Config, r.Target, r.Met != nil && *r.Met, r.RatioP50)
		}
	}
	for _, size := range []int{1 << 10, 1 << 20} {
		// The group writes every member's object: at least the slowest
		// one and one transaction. It sends one transaction instead of 8.
		if f, sg := ratios[fmt.Sprintf("PublishGroup %d", size)], ratios[fmt.Sprintf("PublishGroup vs single publishes %d", size)]; f < 0.5 || sg <= 0 || sg > 1.5 {
			t.Errorf("%s: PublishGroup at %.2fx the floor and %.2fx the single publishes", sizeName(size), f, sg)
		}
	}
	for i, want := range []int{31, 42, 31} {
		r := rep.Rows[12+i]
		if met := r.Met != nil && *r.Met; r.Unit != "members" || r.Subject.Throughput != float64(want) || !met {
			t.Errorf("%s: %v members, met %v; want %d: %+v", r.Config, r.Subject.Throughput, met, want, r)
		}
	}
	domain := env.NS.Prefix + "/" + env.NS.Domain
	left, err := (&stack{Target: env.Target}).count(ctx, domain)
	if err != nil || left != 0 {
		t.Errorf("%d objects left under %s (%v)", left, domain, err)
	}
	kv, err := env.Etcd.Get(ctx, domain, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || kv.Count != 0 {
		t.Errorf("etcd keys left under %s: %v %v", domain, kv, err)
	}
}

// TestRunRejectsBadOptions: bad options fail before anything is written.
func TestRunRejectsBadOptions(t *testing.T) {
	shared := testenv.Get(t)
	env := Env{Target: bench.Target{Etcd: shared.EtcdClient(t), Store: shared.Store(t), NS: testenv.Namespace(t)}}
	for _, c := range []struct {
		opts Options
		want error
	}{
		{Options{Workloads: []string{"publish", "nope"}}, ErrUnknownWorkload},
		{Options{Workloads: []string{"publish"}, Sizes: []int{1024, 0}}, ErrInvalid},
		{Options{Scale: -1}, ErrInvalid},
		{Options{Scale: math.NaN()}, ErrInvalid},
		{Options{Scale: math.Inf(1)}, ErrInvalid},
		{Options{Rounds: -1}, ErrInvalid},
		{Options{GCObjects: -5}, ErrInvalid},
		{Options{WrkDuration: -time.Second}, ErrInvalid},
		{Options{ScaleFiles: []int{100}}, ErrInvalid},
		{Options{ScaleFiles: []int{300, 100}}, ErrInvalid},
		{Options{ScaleFiles: []int{0, 100}}, ErrInvalid},
	} {
		if err := c.opts.Validate(); !errors.Is(err, c.want) {
			t.Errorf("%+v: Validate() = %v; want %v", c.opts, err, c.want)
		}
		rep, err := Run(context.Background(), env, c.opts)
		if !errors.Is(err, c.want) || len(rep.Rows) != 0 {
			t.Errorf("%+v: err = %v, %d rows; want %v", c.opts, err, len(rep.Rows), c.want)
		}
	}
	if !slices.Equal(Workloads(), []string{"publish", "pipeline", "peer", "authority", "reader", "gc", "scaling", "cluster", "recovery", "footprint", "scale", "dataset", "group"}) {
		t.Errorf("Workloads() = %v", Workloads())
	}
}
