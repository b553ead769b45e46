package bench

import (
	"context"
	"errors"
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
