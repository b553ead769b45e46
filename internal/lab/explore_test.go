package lab

import (
	"fmt"
	"testing"
)

func TestExplore(t *testing.T) {
	want := map[Variant]Property{
		Correct:        "",
		NoFence:        RevokedGenerationOverwrite,
		SplitAuthority: UnauthorizedAccept,
		RollbackIssuer: RevokedGenerationOverwrite,
	}
	for _, v := range Variants() {
		for _, issuer := range []int{40, 7} {
			r, err := Explore(v, issuer, 3, 2)
			if err != nil {
				t.Fatal(err)
			}
			if r.States == 0 || r.Transitions < r.States-1 || r.Clients != 3 || r.Writes != 2 {
				t.Errorf("%s: %+v", v, r)
			}
			if want[v] == "" {
				if !r.OK() {
					t.Errorf("%s issuer %d: violations %+v", v, issuer, r.Violations)
				}
				continue
			}
			if len(r.Violations) != 1 || r.Violations[0].Property != want[v] {
				t.Fatalf("%s issuer %d: violations %+v, want one %s", v, issuer, r.Violations, want[v])
			}
			x := r.Violations[0]
			evs := x.Counterexample.Events
			if x.Step != len(evs) || x.Interleaving != 0 || x.Detail == "" {
				t.Errorf("%s: violation %+v", v, x)
			}
			if last := evs[len(evs)-1]; last.Action != Write || last.Outcome != Applied {
				t.Errorf("%s: violating step %+v, want an applied write", v, last)
			}
			if first := evs[0]; first.Action != Acquire || first.Issuer < issuer {
				t.Errorf("%s: first step %+v", v, first)
			}
			replayCounterexample(t, v, issuer, 3, x)
		}
	}
}

// replayCounterexample applies the steps of x's counterexample to a fresh
// model of variant v: every step must give the recorded event, no step
// before the last may violate a property, and the last must violate x's
// property with x's detail.
func replayCounterexample(t *testing.T, v Variant, issuer, clients int, x Violation) {
	t.Helper()
	w := newWorld(v, issuer, []string{"A", "B", "C", "D", "E"}[:clients])
	evs := x.Counterexample.Events
	for i, want := range evs {
		got, f := w.apply(want.Step)
		if got != want {
			t.Fatalf("%s issuer %d: replayed step %d gives %+v, the counterexample says %+v", v, issuer, i+1, got, want)
		}
		switch {
		case i < len(evs)-1 && f != nil:
			t.Fatalf("%s issuer %d: replayed step %d already violates %s (%s)", v, issuer, i+1, f.property, f.detail)
		case i == len(evs)-1 && (f == nil || f.property != x.Property || f.detail != x.Detail):
			t.Fatalf("%s issuer %d: replayed last step gives %+v, want %s (%s)", v, issuer, f, x.Property, x.Detail)
		}
	}
}

// With two clients and one write each, both grants of the shared fence carry
// op_seq 1, so the resource rejects the older one: rollback-issuer is clean
// there. A third client's newer grant under the restored issuer gets a
// smaller fence than an older grant, and that breaks it again.
func TestExploreRollbackBounds(t *testing.T) {
	r, err := Explore(RollbackIssuer, 40, 2, 1)
	if err != nil || !r.OK() {
		t.Fatalf("Explore(rollback-issuer, 2 clients, 1 write): %v, %+v", err, r.Violations)
	}
	r, err = Explore(RollbackIssuer, 40, 3, 1)
	if err != nil || r.OK() || r.Violations[0].Property != RevokedGenerationOverwrite {
		t.Fatalf("Explore(rollback-issuer, 3 clients, 1 write): %v, %+v", err, r.Violations)
	}
	replayCounterexample(t, RollbackIssuer, 40, 3, r.Violations[0])
}

// issuers are the initial issuer values the reduction and abstraction
// tests run at: the smallest, the protocol source's, others, and the largest.
var issuers = []int{0, 7, 40, MaxIssuer}

// exactKey is the whole state, with no abstraction: exact fences and grant
// ordinals, and finished clients kept as they are.
func exactKey(w *world, paused []bool) string {
	return fmt.Sprint(w.issuer, w.holder, w.grants, w.recovers, w.res.Fence, w.res.Seq, w.resGrant, w.clients, paused)
}

// TestExploreKeyIsExact checks the state abstraction of appendKey against
// exact states, reached with Explore's own steps. Every two reachable states
// with the same key must have the same transitions: the same steps, with the
// same violations, leading to states with the same key. By induction, states
// merged by the key have the same futures. Where no violation stops Explore,
// the keys of the exactly reachable states must also be exactly the states
// Explore visited. It runs at every issuer of issuers.
func TestExploreKeyIsExact(t *testing.T) {
	for _, tt := range []struct {
		v       Variant
		clients int
		writes  int
	}{
		{Correct, 3, 2}, {Correct, 2, 4}, {Correct, 4, 1},
		{NoFence, 3, 2}, {SplitAuthority, 2, 2}, {SplitAuthority, 3, 1},
		{RollbackIssuer, 3, 2}, {RollbackIssuer, 2, 1},
	} {
		for _, issuer := range issuers {
			name := fmt.Sprintf("%s issuer %d, %d clients x %d writes", tt.v, issuer, tt.clients, tt.writes)
			seen := map[string]bool{}
			signature := map[string]string{} // key -> transitions
			var dfs func(w *world)
			dfs = func(w *world) {
				k := exactKey(w, nil)
				if seen[k] {
					return
				}
				seen[k] = true
				var sig []string
				var next []*world
				for _, s := range w.enabled(tt.writes) {
					n := w.clone()
					steps := []Step{s}
					if s.Action == Pause {
						steps = append(steps, Step{Actor: s.Actor, Action: Resume})
					}
					var props []Property
					for _, st := range steps {
						if _, f := n.apply(st); f != nil {
							props = append(props, f.property)
						}
					}
					sig = append(sig, fmt.Sprintf("%+v %v %q", s, props, n.appendKey(nil, tt.writes)))
					next = append(next, n)
				}
				ak := string(w.appendKey(nil, tt.writes))
				if old, ok := signature[ak]; ok && old != fmt.Sprint(sig) {
					t.Fatalf("%s: states with the same key differ:\n%s\n%s", name, old, fmt.Sprint(sig))
				}
				signature[ak] = fmt.Sprint(sig)
				for _, n := range next {
					dfs(n)
				}
			}
			dfs(newWorld(tt.v, issuer, []string{"A", "B", "C", "D"}[:tt.clients]))

			r, err := Explore(tt.v, issuer, tt.clients, tt.writes)
			if err != nil {
				t.Fatal(err)
			}
			if r.OK() && len(signature) != r.States {
				t.Errorf("%s: %d exact states with %d distinct keys; Explore visited %d", name, len(seen), len(signature), r.States)
			}
		}
	}
}

// TestExploreReductionsLoseNothing searches without Explore's reductions:
// pause and resume are separate steps in every variant, and the authority may
// recover in every variant. It must find exactly the properties Explore
// finds, at every issuer of issuers.
func TestExploreReductionsLoseNothing(t *testing.T) {
	for _, tt := range []struct {
		v       Variant
		clients int
		writes  int
	}{
		{Correct, 3, 2}, {NoFence, 3, 2}, {SplitAuthority, 2, 2}, {RollbackIssuer, 3, 1}, {RollbackIssuer, 2, 2}, {RollbackIssuer, 2, 1},
	} {
		for _, issuer := range issuers {
			r, err := Explore(tt.v, issuer, tt.clients, tt.writes)
			if err != nil {
				t.Fatal(err)
			}
			want := map[Property]bool{}
			for _, x := range r.Violations {
				want[x.Property] = true
			}
			got := map[Property]bool{}
			seen := map[string]bool{}
			var dfs func(w *world, paused []bool)
			dfs = func(w *world, paused []bool) {
				k := exactKey(w, paused)
				if seen[k] {
					return
				}
				seen[k] = true
				for _, s := range unreducedSteps(w, paused, tt.writes) {
					n, p := w.clone(), append([]bool(nil), paused...)
					i := -1
					if s.Actor != Authority {
						i, _ = n.client(s.Actor)
					}
					switch s.Action {
					case Pause:
						p[i] = true
					case Resume:
						p[i] = false
					}
					if _, f := n.apply(s); f != nil {
						got[f.property] = true
					}
					dfs(n, p)
				}
			}
			w := newWorld(tt.v, issuer, []string{"A", "B", "C"}[:tt.clients])
			dfs(w, make([]bool, tt.clients))
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s issuer %d %+v: unreduced search finds %v, Explore %v (%d exact states)", tt.v, issuer, tt, got, want, len(seen))
			}
		}
	}
}

func unreducedSteps(w *world, paused []bool, writes int) []Step {
	var out []Step
	for i, c := range w.clients {
		if paused[i] {
			out = append(out, Step{Actor: c.name, Action: Resume})
			continue
		}
		switch {
		case c.grant == 0:
			if w.holder < 0 {
				out = append(out, Step{Actor: c.name, Action: Acquire})
			}
		case c.token.fence == 0 || c.remint:
			out = append(out, Step{Actor: c.name, Action: Mint})
		case c.next <= writes:
			out = append(out, Step{Actor: c.name, Action: Write, Seq: c.next})
		}
		if c.grant > 0 && c.next <= writes && c.pauses == 0 {
			out = append(out, Step{Actor: c.name, Action: Pause})
		}
	}
	if w.holder >= 0 {
		out = append(out, Step{Actor: Authority, Action: Expire})
	}
	if w.recovers == 0 && w.grants > 0 && w.holder < 0 {
		out = append(out, Step{Actor: Authority, Action: Recover})
	}
	return out
}
