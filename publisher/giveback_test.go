//go:build !unit

package publisher

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/objstore/faultstore"
)

// seqPath is one way of publishing that takes a seq, run with p on a
// resource whose seq 1 is base.
type seqPath struct {
	name string
	// multipart: base, or the path's own body, is of unknown length and
	// larger than a part, so it is written in a multipart upload.
	multipart bool
	run       func(ctx context.Context, p *Publisher, base Result, body func() Operation) (Result, error)
}

// bigBody is a body of unknown length of two parts of minPartSize.
func bigBody(key string) Operation {
	return Operation{IdempotencyKey: key, Body: onlyReader{bytes.NewReader(bytes.Repeat([]byte("b"), minPartSize+1))}}
}

func smallBody(key string) Operation {
	return Operation{IdempotencyKey: key, Body: strings.NewReader("body of " + key), ContentType: "text/plain"}
}

// seqPaths lists every path that takes a seq: Publish and PublishSeq (a
// single PUT or a multipart upload), the pipeline, Rollback and Republish
// (a server-side copy; Republish of a multipart object also reads it).
func seqPaths() []seqPath {
	publish := func(ctx context.Context, p *Publisher, _ Result, body func() Operation) (Result, error) {
		return p.Publish(ctx, body())
	}
	publishSeq := func(ctx context.Context, p *Publisher, _ Result, body func() Operation) (Result, error) {
		return p.PublishSeq(ctx, p.nextSeq(), body())
	}
	pipeline := func(ctx context.Context, p *Publisher, _ Result, body func() Operation) (Result, error) {
		pl := p.Pipeline(ctx, 2)
		r := <-pl.Submit(body())
		_ = pl.Close() // its error is r.Err
		return r.Result, r.Err
	}
	rollback := func(ctx context.Context, p *Publisher, base Result, _ func() Operation) (Result, error) {
		return p.Rollback(ctx, base.Version, "rollback")
	}
	republish := func(ctx context.Context, p *Publisher, base Result, _ func() Operation) (Result, error) {
		return p.republishKey(ctx, base.Object.Key, "republish")
	}
	return []seqPath{
		{"publish", false, publish}, {"publish-multipart", true, publish},
		{"publish-seq", false, publishSeq}, {"publish-seq-multipart", true, publishSeq},
		{"pipeline", false, pipeline}, {"pipeline-multipart", true, pipeline},
		{"rollback", false, rollback},
		{"republish", false, republish}, {"republish-multipart", true, republish},
	}
}

// Every path that takes a seq gives it back when nothing that can apply
// was sent (DESIGN.md "Publish" step 6): with a failure injected into each
// store call the path makes — refused before reaching MinIO, or applied by
// it with the answer lost — a contiguous-mode Publisher's next publish
// applies, never stale with reason gap. Real etcd and MinIO, with the store
// calls going through faultstore.
func TestSeqGivenBackOnStoreFailure(t *testing.T) {
	e := newEnv(t)
	methods := []faultstore.Method{faultstore.PutCreateOnly, faultstore.CreateUpload, faultstore.UploadPart,
		faultstore.CopyPart, faultstore.CompleteUpload, faultstore.Stat, faultstore.Get}
	// attempt runs path on a fresh resource, with inject's faults queued on
	// the path's store, then publishes once more with the same Publisher. It
	// returns the store calls of the path, by method.
	attempt := func(t *testing.T, path seqPath, res string, inject func(*faultstore.Store)) map[faultstore.Method]int {
		ctx := ctxT(t, time.Minute)
		g := e.acquire(authority.AcquireRequest{Resource: res, Owner: "w"})
		baseOp := smallBody("base")
		if path.multipart {
			baseOp = bigBody("base")
		}
		base, err := e.bind(g, false).Publish(ctx, baseOp)
		if err != nil || base.Outcome != Applied {
			t.Fatalf("base publish: %q %v", base.Outcome, err)
		}
		fs := faultstore.New(e.Store)
		c := e.client(e.Etcd, func(c *Config) { c.Store, c.PartSize = fs, minPartSize })
		term := GrantTerm(g, false)
		term.contiguous = true
		p, err := c.Bind(ctx, term)
		if err != nil {
			t.Fatal(err)
		}
		inject(fs)
		body := func() Operation {
			if path.multipart {
				return bigBody("path")
			}
			return smallBody("path")
		}
		r, err := path.run(ctx, p, base, body)
		calls := map[faultstore.Method]int{}
		for _, m := range methods {
			calls[m] = fs.Calls(m)
		}
		if r.Outcome != Applied && (r.Outcome != "" || err == nil) {
			t.Fatalf("%s: %q %q, %v; want applied or an error that publishes nothing", path.name, r.Outcome, r.Reason, err)
		}
		after, err := p.Publish(ctx, smallBody("after"))
		if after.Outcome != Applied {
			t.Fatalf("the publish after %s (%q, %v): %q %q, %v; want applied: a seq was not given back",
				path.name, r.Outcome, err, after.Outcome, after.Reason, err)
		}
		return calls
	}
	for _, path := range seqPaths() {
		t.Run(path.name, func(t *testing.T) {
			// A run without faults counts the store calls of the path.
			clean := attempt(t, path, path.name, func(*faultstore.Store) {})
			for _, m := range methods {
				for i := 1; i <= clean[m]; i++ {
					for _, f := range []struct {
						when  string
						fault faultstore.Fault
					}{{"before", faultstore.Fault{Before: errLost}}, {"lost", faultstore.Fault{After: errLost}}} {
						name := fmt.Sprintf("%s-%d-%s", m, i, f.when)
						t.Run(name, func(t *testing.T) {
							calls := attempt(t, path, path.name+"-"+name, func(fs *faultstore.Store) {
								fs.Inject(m, i-1, faultstore.Fault{})
								fs.Inject(m, 1, f.fault)
							})
							if calls[m] < i {
								t.Fatalf("%d calls of %s; the fault was queued for call %d", calls[m], m, i)
							}
						})
					}
				}
			}
		})
	}
}
