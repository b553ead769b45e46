package lab

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// order names a history by its steps after the prefix, e.g. "B:base A:write gc:gc B:write".
func order(r Result, i int) string {
	var s []string
	for _, e := range r.Histories[i].Events[r.Prefix:] {
		s = append(s, e.Actor+":"+string(e.Action))
	}
	return strings.Join(s, " ")
}

// TestDataset checks every interleaving of case dataset. A history where B
// read its base (v1) before A's late publish of v2 moved the pointer must
// end with B stale (reason base) in the correct protocol. Without the base
// compare B's v3 is applied; when GC ran between A's publish and B's, GC has
// deleted v1's file, which B's now published manifest names.
func TestDataset(t *testing.T) {
	for _, v := range CaseVariants(Dataset) {
		for _, issuer := range []int{40, 0} {
			r := check(t, Dataset, v, issuer)
			if r.Interleavings != 12 {
				t.Fatalf("%s: %d interleavings, want 12", v, r.Interleavings)
			}
			var violating []string
			for i, h := range r.Histories {
				o := order(r, i)
				b, a, g, bw := strings.Index(o, "B:base"), strings.Index(o, "A:write"), strings.Index(o, "gc:gc"), strings.Index(o, "B:write")
				moved := b < a && a < bw // the pointer left B's base before B published
				last := h.Events[len(h.Events)-1]
				for _, e := range h.Events {
					if e.Actor == "B" && e.Action == Write {
						last = e
					}
				}
				switch {
				case moved && v == Correct:
					if last.Outcome != Stale || last.Reason != "base" || last.Resource.Version != "v2" {
						t.Errorf("%s %q: B's write %+v, want stale, reason base, pointer v2", v, o, last)
					}
				case last.Outcome != Applied || last.Resource.Version != "v3" || last.Reason != "":
					t.Errorf("%s %q: B's write %+v, want applied v3", v, o, last)
				}
				if len(h.Violated) > 0 {
					violating = append(violating, o)
					if !slices.Equal(h.Violated, []Property{MissingFile}) {
						t.Errorf("%s %q: violated %v", v, o, h.Violated)
					}
				}
				if want := v == NoBaseCompare && moved && a < g && g < bw; want != (len(h.Violated) > 0) {
					t.Errorf("%s %q: violated %v", v, o, h.Violated)
				}
			}
			if v == Correct {
				if !r.OK() {
					t.Errorf("correct: violations %+v", r.Violations)
				}
				continue
			}
			if len(r.Violations) != 1 {
				t.Fatalf("%s: violations in %q, want exactly one history", v, violating)
			}
			x := r.Violations[0]
			e := x.Counterexample.Events[x.Step-1]
			if x.Property != MissingFile || e.Actor != "B" || e.Action != Write || e.Outcome != Applied || !strings.Contains(x.Detail, "v1/part-1") {
				t.Errorf("%s: violation %+v at %+v", v, x, e)
			}
			gc := x.Counterexample.Events[x.Step-2]
			if gc.Action != Collect || gc.Note != "deletes v1/part-1" {
				t.Errorf("%s: the step before the violation is %+v, want GC deleting v1/part-1", v, gc)
			}
		}
	}
}

// TestDatasetGCKeepsWhatTheBaseNames: in the correct protocol a GC pass
// deletes v1's file exactly when A's v2 superseded v1 before it. Then the
// pointer names v2, or B's v3 built on base v2; neither names v1's file.
// Otherwise the pointer names v1, or B's v3 reusing v1's file, and GC
// deletes nothing.
func TestDatasetGCKeepsWhatTheBaseNames(t *testing.T) {
	r := check(t, Dataset, Correct, 40)
	for i, h := range r.Histories {
		evs := h.Events[r.Prefix:]
		for j, e := range evs {
			if e.Action != Collect {
				continue
			}
			want := "deletes nothing"
			if slices.ContainsFunc(evs[:j], func(p Event) bool { return p.Actor == "A" && p.Outcome == Applied }) {
				want = "deletes v1/part-1" // v1 superseded by v2, named by no retained manifest
			}
			if e.Note != want {
				t.Errorf("%q: GC %q, want %q", order(r, i), e.Note, want)
			}
		}
	}
}

// TestGroup: one transaction for both members never shows the reader a torn
// pair; members published in separate transactions do, exactly when the read
// falls between them.
func TestGroup(t *testing.T) {
	tests := []struct {
		v     Variant
		reads []string // what the reader sees, in enumeration order
		torn  []bool
	}{
		{Correct, []string{"sees report=g2 breakdown=g2", "sees report=g1 breakdown=g1"}, []bool{false, false}},
		{SplitGroup, []string{"sees report=g2 breakdown=g2", "sees report=g2 breakdown=g1", "sees report=g1 breakdown=g1"}, []bool{false, true, false}},
	}
	for _, tt := range tests {
		r := check(t, Group, tt.v, 40)
		if r.Interleavings != len(tt.reads) {
			t.Fatalf("%s: %d interleavings, want %d", tt.v, r.Interleavings, len(tt.reads))
		}
		for i, h := range r.Histories {
			var read Event
			for _, e := range h.Events {
				if e.Action == Read {
					read = e
				}
			}
			if read.Note != tt.reads[i] {
				t.Errorf("%s interleaving %d: reader %q, want %q", tt.v, i+1, read.Note, tt.reads[i])
			}
			if got := slices.Equal(h.Violated, []Property{TornRead}); got != tt.torn[i] || (!got && len(h.Violated) > 0) {
				t.Errorf("%s interleaving %d: violated %v", tt.v, i+1, h.Violated)
			}
			if last := h.Events[len(h.Events)-1]; last.Pointers != "report=g2 breakdown=g2" {
				t.Errorf("%s interleaving %d: final pointers %q", tt.v, i+1, last.Pointers)
			}
		}
		if tt.v == SplitGroup && (len(r.Violations) != 1 || r.Violations[0].Detail == "") {
			t.Errorf("split-group: violations %+v", r.Violations)
		}
	}
}

// A stale member stops the whole group transaction: nothing moves.
func TestGroupStaleMovesNothing(t *testing.T) {
	w := newWorld(Correct, 40, []string{"A"})
	w.members = []member{{name: "report", fence: 41, seq: 5, version: "g0"}, {name: "breakdown"}}
	w.apply(Step{Actor: "A", Action: Acquire})
	ev, f := w.apply(Step{Actor: "A", Action: Write, Seq: 1, Version: "g1"})
	if ev.Outcome != Stale || f != nil || ev.Pointers != "report=g0 breakdown=none" {
		t.Fatalf("group write %+v, finding %v; want stale, nothing moved", ev, f)
	}
}

func TestCaseVariants(t *testing.T) {
	for _, tt := range []struct {
		c Case
		v Variant
	}{
		{Fencing, NoBaseCompare}, {Fencing, SplitGroup}, {Dataset, NoFence}, {Dataset, SplitGroup},
		{Group, NoBaseCompare}, {Group, RollbackIssuer}, {Operations, SplitGroup},
	} {
		if _, err := NewScenario(tt.c, tt.v, 40); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewScenario(%s, %s): %v, want ErrInvalid", tt.c, tt.v, err)
		}
	}
	for _, v := range []Variant{NoBaseCompare, SplitGroup} {
		if _, err := ParseVariant(string(v)); err != nil {
			t.Errorf("ParseVariant(%s): %v", v, err)
		}
		if _, err := Explore(v, 40, 2, 2); !errors.Is(err, ErrInvalid) {
			t.Errorf("Explore(%s): %v, want ErrInvalid", v, err)
		}
	}
}
