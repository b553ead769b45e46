//go:build !unit

package replay

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/lab"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func target(t *testing.T) Target {
	env := testenv.Get(t)
	return Target{Namespace: testenv.Namespace(t), Etcd: env.EtcdClient(t), Store: env.Store(t)}
}

// TestReplayMatchesModel runs every interleaving of the correct fencing
// scenario and of the operations case against real etcd and MinIO.
func TestReplayMatchesModel(t *testing.T) {
	for _, c := range []lab.Case{lab.Fencing, lab.Operations} {
		t.Run(string(c), func(t *testing.T) {
			s, err := lab.NewScenario(c, lab.Correct, 40)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, target(t), s)
			if err != nil {
				t.Fatal(err)
			}
			want := len(s.Interleavings())
			if rep.Interleavings != want || rep.Steps == 0 {
				t.Fatalf("replayed %d interleavings (%d steps), want %d", rep.Interleavings, rep.Steps, want)
			}
			for _, m := range rep.Mismatches {
				t.Errorf("interleaving %d step %d (%s %s): %s", m.Interleaving, m.Step, m.Expected.Actor, m.Expected.Action, m.Got)
			}
		})
	}
}

// TestReplayDetectsDivergence replays the correct model's third
// interleaving (B commits, then A's late write) with A's expected outcome
// changed to applied, as a model without the fence would predict: the real
// system answers stale and the replay must report exactly that step.
func TestReplayDetectsDivergence(t *testing.T) {
	s, err := lab.NewScenario(lab.Fencing, lab.Correct, 40)
	if err != nil {
		t.Fatal(err)
	}
	h := s.Interleavings()[2]
	last := len(h.Events) - 1
	if ev := h.Events[last]; ev.Actor != "A" || ev.Action != lab.Write || ev.Outcome != lab.Stale {
		t.Fatalf("interleaving 3 ends with %+v, want A's stale write", ev)
	}
	h.Events[last].Outcome = lab.Applied
	var rep Report
	if err := replayHistories(context.Background(), target(t), 40, []lab.History{h}, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Mismatches) != 1 || rep.Mismatches[0].Step != last+1 {
		t.Fatalf("mismatches %+v, want one at step %d", rep.Mismatches, last+1)
	}
	t.Logf("reported: %s", rep.Mismatches[0].Got)
}

// TestReplayReportsDefects replays the model of each deliberate defect
// that has real steps: the real system does not have the defect, so every
// interleaving in which the model finds a violation must show a mismatch at
// or before the violating step.
func TestReplayReportsDefects(t *testing.T) {
	for _, v := range []lab.Variant{lab.NoFence, lab.RollbackIssuer} {
		t.Run(string(v), func(t *testing.T) {
			s, err := lab.NewScenario(lab.Fencing, v, 40)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rep, err := Run(ctx, target(t), s)
			if err != nil {
				t.Fatal(err)
			}
			vs := s.Check().Violations
			if len(vs) == 0 || rep.OK() {
				t.Fatalf("%d model violations, mismatches %+v", len(vs), rep.Mismatches)
			}
			for _, x := range vs {
				found := false
				for _, m := range rep.Mismatches {
					found = found || m.Interleaving == x.Interleaving && m.Step <= x.Step
				}
				if !found {
					t.Errorf("interleaving %d: the model violates %s at step %d, the replay reports no mismatch by then: %+v",
						x.Interleaving, x.Property, x.Step, rep.Mismatches)
				}
			}
			t.Logf("%d mismatches, first: step %d: %s", len(rep.Mismatches), rep.Mismatches[0].Step, rep.Mismatches[0].Got)
		})
	}
}

// TestReplayRefusesSeparateMint: split-authority mints apart from the
// grant, which the real authority cannot do.
func TestReplayRefusesSeparateMint(t *testing.T) {
	s, err := lab.NewScenario(lab.Fencing, lab.SplitAuthority, 40)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), target(t), s); !errors.Is(err, ErrNotReplayable) {
		t.Fatalf("got %v, want ErrNotReplayable", err)
	}
}
