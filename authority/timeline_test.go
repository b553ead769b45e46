//go:build !unit

package authority

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// The helper process: the test binary re-executed (testenv.StartChild) to run
// runHelper with a helperSpec. It acquires, prints its grant, keeps it with a
// Session, and when the Session reports the loss it tries one explicit Renew
// and prints both outcomes. It plays worker A of the protocol source's
// 41/42/41 timeline.
const helperChild = "authority-timeline-a"

type helperSpec struct {
	testenv.Servers
	Resource string        `json:"resource"`
	Owner    string        `json:"owner"`
	TTL      time.Duration `json:"ttl"`
}

// helperEvent is one JSON line the helper prints. It prints its errors on
// stderr and exits 1.
type helperEvent struct {
	Event     string `json:"event"` // "grant", "lost", "renew"
	Grant     *Grant `json:"grant,omitempty"`
	Err       string `json:"err,omitempty"`
	LeaseLost bool   `json:"lease_lost"`
}

func runHelper(specJSON []byte) error {
	out := json.NewEncoder(os.Stdout)
	var spec helperSpec
	cli, st, err := testenv.ConnectSpec(specJSON, &spec)
	if err != nil {
		return err
	}
	defer cli.Close()
	a, err := New(Config{Env: fencepub.Env{Namespace: fencepub.Namespace(spec.Namespace), Etcd: cli, Store: st}})
	if err != nil {
		return err
	}
	ctx := context.Background()
	g, err := a.Acquire(ctx, AcquireRequest{Resource: spec.Resource, Owner: spec.Owner, TTL: spec.TTL})
	if err != nil {
		return err
	}
	s, err := a.NewSession(ctx, g)
	if err != nil {
		return err
	}
	_ = out.Encode(helperEvent{Event: "grant", Grant: &g})
	<-s.Lost()
	_ = out.Encode(helperEvent{Event: "lost", Err: s.Err().Error(), LeaseLost: errors.Is(s.Err(), ErrLeaseLost)})
	err = a.Renew(ctx, g)
	ev := helperEvent{Event: "renew", LeaseLost: errors.Is(err, ErrLeaseLost)}
	if err != nil {
		ev.Err = err.Error()
	}
	_ = out.Encode(ev)
	return nil
}

// TestTimeline414241 is the protocol source's 41/42/41 grant timeline with a
// real paused process: A acquires in a child process that keeps its lease
// with a Session; the test SIGSTOPs A past its TTL; etcd expires the lease; B
// acquires a strictly larger generation; A is resumed, its Session reports
// the loss and its explicit renew fails with ErrLeaseLost; A's fence never
// grows and B keeps the resource.
func TestTimeline414241(t *testing.T) {
	env := testenv.Get(t)
	a := shared(t)
	res := "timeline"
	spec := helperSpec{Servers: env.Servers(a.ns), Resource: res, Owner: owner("A"), TTL: 2 * time.Second}
	child := testenv.StartChild(t, helperChild, spec)
	next := func(want string) helperEvent {
		t.Helper()
		var ev helperEvent
		child.NextJSON(&ev, 30*time.Second)
		if ev.Event != want {
			t.Fatalf("helper: want event %q, got %+v", want, ev)
		}
		return ev
	}

	// t0: A holds (owner=A, fence=gA) and keeps renewing.
	ga := *next("grant").Grant
	h, ok, err := a.Holder(ctxT(t, 10*time.Second), res)
	if err != nil || !ok || h.Owner != spec.Owner || h.Generation != ga.Generation {
		t.Fatalf("holder = %+v, %v, %v; want A's grant %+v", h, ok, err, ga)
	}
	// Renewals keep A's 2 s lease alive well past its TTL.
	time.Sleep(3 * time.Second)
	if !cmpHolds(t, a, ga.holderCmp(a.ns)) {
		t.Fatal("A's lease expired although its session was renewing")
	}

	// t5: A pauses. t10: etcd expires its lease.
	paused := time.Now()
	if err := child.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	awaitHolderGone(t, a, res, ga.HolderRevision, 15*time.Second)
	t.Logf("A's lease expired on the server %s after SIGSTOP (TTL %s)", time.Since(paused).Round(time.Millisecond), spec.TTL)

	// B acquires: a strictly larger fence, bound to B's grant record.
	gb := mustAcquire(t, a, AcquireRequest{Resource: res, Owner: owner("B"), TTL: 10 * time.Second})
	if gb.Generation <= ga.Generation || gb.Epoch != ga.Epoch {
		t.Fatalf("B got epoch %d generation %d; want a generation above A's %d in epoch %d", gb.Epoch, gb.Generation, ga.Generation, ga.Epoch)
	}
	if !cmpHolds(t, a, gb.holderCmp(a.ns), gb.grantCmp(a.ns)) || cmpHolds(t, a, ga.holderCmp(a.ns)) {
		t.Fatal("holder compares: want B live and A not")
	}

	// t20: A resumes. Its session has passed its local deadline; its renew
	// fails with the typed error and mints nothing.
	if err := child.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	lost := next("lost")
	if !lost.LeaseLost {
		t.Fatalf("A's session ended with %q; want ErrLeaseLost", lost.Err)
	}
	renew := next("renew")
	if !renew.LeaseLost {
		t.Fatalf("A's renew after the pause: %q; want ErrLeaseLost", renew.Err)
	}
	t.Logf("A resumed: session %q; renew %q", lost.Err, renew.Err)
	if err := child.Wait(); err != nil {
		t.Fatalf("helper exited: %v", err)
	}
	if g := generation(t, a, res); g != gb.Generation {
		t.Fatalf("generation after A's renew = %d; want B's %d (A must not mint)", g, gb.Generation)
	}
	if err := a.Renew(ctxT(t, 10*time.Second), gb); err != nil {
		t.Fatalf("B's renew: %v", err)
	}
	if err := a.Renew(ctxT(t, 10*time.Second), ga); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("A's grant renewed from here: %v; want ErrLeaseLost", err)
	}
	if err := a.Release(ctxT(t, 10*time.Second), ga); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("releasing A's old grant: %v; want ErrLeaseLost (A must not drop B's lease)", err)
	}
	if !cmpHolds(t, a, gb.holderCmp(a.ns)) {
		t.Fatal("B lost the resource to A's release")
	}
}
