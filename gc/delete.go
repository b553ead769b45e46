package gc

import (
	"context"
	"sync"
)

// deleter removes one resource's objects in batches of Config.DeleteBatch
// keys (one multi-object delete each) with at most Config.DeleteConcurrency
// batches in flight, each holding a slot of the pass's slots (shared by the
// resources collected at once), and records each decision with its outcome.
// It holds at most (DeleteConcurrency+1) batches in memory. add is called
// from one goroutine; close waits for every batch.
type deleter struct {
	c    *Collector
	ctx  context.Context
	dry  bool
	p    *resourcePass
	size int

	batch []decision
	work  chan []decision
	slots chan struct{}
	wg    sync.WaitGroup
}

func (c *Collector) newDeleter(ctx context.Context, dry bool, p *resourcePass, slots chan struct{}) *deleter {
	d := &deleter{c: c, ctx: ctx, dry: dry, p: p, size: c.cfg.DeleteBatch, work: make(chan []decision), slots: slots}
	if !dry {
		for range c.cfg.DeleteConcurrency {
			d.wg.Add(1)
			go func() {
				defer d.wg.Done()
				for b := range d.work {
					d.remove(b)
				}
			}()
		}
	}
	return d
}

// add queues dec for deletion (in a dry run, records it as would_delete).
func (d *deleter) add(dec decision) {
	if d.dry {
		d.p.record(dec, "would_delete", nil)
		return
	}
	d.batch = append(d.batch, dec)
	if len(d.batch) >= d.size {
		d.work <- d.batch
		d.batch = nil
	}
}

// close sends the last batch and waits for all of them.
func (d *deleter) close() {
	if len(d.batch) > 0 && !d.dry {
		d.work <- d.batch
	}
	d.batch = nil
	close(d.work)
	d.wg.Wait()
}

// remove deletes one batch with one multi-object delete (objstore.Store
// Delete).
func (d *deleter) remove(b []decision) {
	keys := make([]string, len(b))
	for i, dec := range b {
		keys[i] = dec.Key
	}
	d.slots <- struct{}{}
	errs := d.c.st.Delete(d.ctx, keys)
	<-d.slots
	for i, dec := range b {
		err := errs[i]
		if err != nil {
			err = storeErr(d.ctx, "delete", err)
		}
		d.p.record(dec, "deleted", err)
	}
}
