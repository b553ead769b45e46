package gc

import (
	"context"
	"time"

	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/wallclock"
)

func init() {
	wallclock.Register(func(c *Config, now func() time.Time) { c.now = now })
	operator.Decommission = func(ctx context.Context, c any, res string, force bool) (operator.Decommissioned, error) {
		return c.(*Collector).decommission(ctx, res, force)
	}
	operator.NewDaemon = func(c operator.DaemonConfig) (operator.Daemon, error) {
		col, _ := c.Collector.(*Collector)
		m, _ := c.Metrics.(*Metrics)
		d, err := newDaemon(daemonConfig{Collector: col, Interval: c.Interval, LeaseTTL: c.LeaseTTL, Owner: c.Owner,
			Run: RunOptions{Resources: c.Resources, All: c.All}, Logger: c.Logger, Metrics: m})
		if err != nil {
			return nil, err
		}
		return d, nil
	}
	operator.RunGC = func(ctx context.Context, c any, opts any, verbose bool) (*operator.GCReport, error) {
		rep, err := c.(*Collector).runPass(ctx, opts.(RunOptions), verbose)
		return &rep.GCReport, err
	}
	operator.DefaultDaemonConfig = func() operator.DaemonConfig {
		d := defaultDaemonConfig()
		return operator.DaemonConfig{Interval: d.Interval, LeaseTTL: d.LeaseTTL}
	}
}
