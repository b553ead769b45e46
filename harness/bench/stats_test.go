package bench

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	if Percentile(d, 0.5) != 50 || Percentile(d, 0.99) != 99 || Percentile(d, 1) != 100 || Percentile(d[:1], 0.99) != 1 {
		t.Fatalf("p50=%d p99=%d", Percentile(d, 0.5), Percentile(d, 0.99))
	}
}

func TestRecorderPercentiles(t *testing.T) {
	var r Recorder
	for i := 100; i >= 1; i-- {
		r.Add(time.Duration(i), nil)
	}
	s := r.Stats(time.Second)
	if s.P50 != 50 || s.P95 != 95 || s.P99 != 99 || s.Mean != 50 || s.Ops != 100 || s.Throughput != 100 {
		t.Fatalf("%+v", s)
	}
	x := NewRow("group", "largest", 0, 1, Stats{Ops: 1, Throughput: 42}, "docs", Stats{Ops: 1, Throughput: 42})
	x.Unit = "members"
	if got := x.WithTarget("largest = 42 members", func(Row) bool { return true }).Measured(); got != "42.0 members (baseline 42.0)" {
		t.Fatalf("Measured() = %q", got)
	}
}

func TestRunCountsOpsAndErrors(t *testing.T) {
	var n atomic.Int64
	s := Run(context.Background(), 100, 4, func(context.Context, int, int) error {
		if n.Add(1) == 7 {
			return errors.New("boom")
		}
		return nil
	})
	if s.Ops+s.Errors != 100 || s.Errors != 1 || s.FirstError != "boom" || s.Throughput <= 0 {
		t.Fatalf("%+v", s)
	}
}

func TestInterleaveSplitsAndRotates(t *testing.T) {
	var order []int
	var total [3]int
	side := func(k int) func(*Series, int) {
		return func(s *Series, n int) {
			order = append(order, k)
			total[k] += n
			s.Run(context.Background(), n, 2, func(context.Context, int, int) error { return nil })
		}
	}
	st := Interleave(context.Background(), 3, 10, side(0), side(1), side(2))
	if want := []int{0, 1, 2, 1, 2, 0, 2, 0, 1}; !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for k, s := range st {
		if total[k] != 10 || s.Ops != 10 || s.Throughput <= 0 {
			t.Fatalf("side %d: %d ops run, stats %+v", k, total[k], s)
		}
	}
}

func TestSeriesContinuesAcrossRounds(t *testing.T) {
	var s Series
	seen := map[[2]int]bool{}
	var mu sync.Mutex
	op := func(_ context.Context, w, i int) error {
		mu.Lock()
		defer mu.Unlock()
		if seen[[2]int{w, i}] {
			return errors.New("operation index reused")
		}
		seen[[2]int{w, i}] = true
		return nil
	}
	s.Run(context.Background(), 8, 2, op)
	s.Run(context.Background(), 8, 2, op)
	if st := s.Stats(); st.Ops != 16 || st.Errors != 0 {
		t.Fatalf("%+v", st)
	}
}
