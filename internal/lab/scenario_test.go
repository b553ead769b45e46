package lab

import (
	"errors"
	"slices"
	"testing"
)

// move is what a test expects of one event after the prefix.
type move struct {
	actor   string
	action  Action
	token   int // relative to the issuer: issuer+token; 0 when the event has none
	outcome Outcome
}

func tail(t *testing.T, r Result, i int) []move {
	t.Helper()
	var out []move
	for _, e := range r.Histories[i].Events[r.Prefix:] {
		m := move{actor: e.Actor, action: e.Action, outcome: e.Outcome}
		if e.Token != 0 {
			m.token = e.Token - r.Issuer
		}
		out = append(out, m)
	}
	return out
}

func check(t *testing.T, c Case, v Variant, issuer int) Result {
	t.Helper()
	s, err := NewScenario(c, v, issuer)
	if err != nil {
		t.Fatalf("NewScenario(%s, %s, %d): %v", c, v, issuer, err)
	}
	return s.Check()
}

var (
	aResume = move{"A", Resume, 0, Done}
	bApply  = move{"B", Write, 2, Applied} // B's token: issuer+2
)

// The orderings are listed by hand from the protocol source's partial order (prefix,
// then A: resume → write, B: write), in enumeration order: A's thread first.
func TestFencingInterleavings(t *testing.T) {
	aApplied := move{"A", Write, 1, Applied}
	aStale := move{"A", Write, 1, Stale}
	// rollback-issuer: B is granted issuer+1 too.
	bSame, bSameStale := move{"B", Write, 1, Applied}, move{"B", Write, 1, Stale}
	// split-authority: A mints issuer+3 after resuming and writes with it.
	aMint, aLate := move{"A", Mint, 3, Minted}, move{"A", Write, 3, Applied}
	bStale := move{"B", Write, 2, Stale}

	tests := []struct {
		variant  Variant
		want     [][]move
		violated [][]Property
	}{
		{Correct, [][]move{
			{aResume, aApplied, bApply}, // A commits before B: allowed
			{aResume, bApply, aStale},   // once B committed, A is rejected
			{bApply, aResume, aStale},
		}, [][]Property{nil, nil, nil}},
		{NoFence, [][]move{
			{aResume, aApplied, bApply},
			{aResume, bApply, aApplied},
			{bApply, aResume, aApplied},
		}, [][]Property{nil, {RevokedGenerationOverwrite}, {RevokedGenerationOverwrite}}},
		{SplitAuthority, [][]move{
			{aResume, aMint, aLate, bStale},
			{aResume, aMint, bApply, aLate},
			{aResume, bApply, aMint, aLate}, // the protocol source's two: B commits before A's late mint
			{bApply, aResume, aMint, aLate},
		}, [][]Property{{UnauthorizedAccept}, {UnauthorizedAccept}, {UnauthorizedAccept}, {UnauthorizedAccept}}},
		{RollbackIssuer, [][]move{
			{aResume, aApplied, bSameStale},
			{aResume, bSame, aApplied},
			{bSame, aResume, aApplied},
		}, [][]Property{nil, {RevokedGenerationOverwrite}, {RevokedGenerationOverwrite}}},
	}
	for _, tt := range tests {
		for _, issuer := range []int{40, 7, 0} {
			r := check(t, Fencing, tt.variant, issuer)
			if r.Interleavings != len(tt.want) || len(r.Histories) != len(tt.want) {
				t.Fatalf("%s issuer %d: %d interleavings, want %d", tt.variant, issuer, r.Interleavings, len(tt.want))
			}
			nviol := 0
			for i := range tt.want {
				if got := tail(t, r, i); !slices.Equal(got, tt.want[i]) {
					t.Errorf("%s issuer %d interleaving %d:\n got %v\nwant %v", tt.variant, issuer, i+1, got, tt.want[i])
				}
				if got := r.Histories[i].Violated; !slices.Equal(got, tt.violated[i]) {
					t.Errorf("%s issuer %d interleaving %d: violated %v, want %v", tt.variant, issuer, i+1, got, tt.violated[i])
				}
				nviol += len(tt.violated[i])
			}
			if len(r.Violations) != nviol || r.OK() != (nviol == 0) {
				t.Errorf("%s issuer %d: %d violations (OK %v), want %d", tt.variant, issuer, len(r.Violations), r.OK(), nviol)
			}
		}
	}
}

func TestViolationCounterexample(t *testing.T) {
	r := check(t, Fencing, SplitAuthority, 7)
	for _, v := range r.Violations {
		h := r.Histories[v.Interleaving-1]
		if !slices.Equal(v.Counterexample.Events, h.Events) {
			t.Errorf("violation in interleaving %d: counterexample is not that history", v.Interleaving)
		}
		e := v.Counterexample.Events[v.Step-1]
		if e.Actor != "A" || e.Action != Write || e.Outcome != Applied || e.Token != 10 || e.Resource.Fence != 10 {
			t.Errorf("violating step %d = %+v, want A's write with token 10 applied", v.Step, e)
		}
		if v.Property != UnauthorizedAccept || v.Detail == "" {
			t.Errorf("violation %+v", v)
		}
	}
}

// Interleavings is what a replay runs: the same histories Check judged.
func TestInterleavingsAreCheckedHistories(t *testing.T) {
	for _, v := range Variants() {
		s, err := NewScenario(Fencing, v, 40)
		if err != nil {
			t.Fatal(err)
		}
		hs, r := s.Interleavings(), s.Check()
		if len(hs) != len(r.Histories) {
			t.Fatalf("%s: %d interleavings, Check ran %d", v, len(hs), len(r.Histories))
		}
		for i := range hs {
			if !slices.Equal(hs[i].Events, r.Histories[i].Events) || !slices.Equal(hs[i].Violated, r.Histories[i].Violated) {
				t.Errorf("%s: interleaving %d differs from Check's", v, i+1)
			}
		}
	}
}

func TestPrefixIsShared(t *testing.T) {
	for _, v := range Variants() {
		r := check(t, Fencing, v, 40)
		first := r.Histories[0].Events[:r.Prefix]
		for i, h := range r.Histories {
			if !slices.Equal(h.Events[:r.Prefix], first) {
				t.Errorf("%s: interleaving %d does not share the prefix", v, i+1)
			}
		}
		if got := first[len(first)-1]; got.Actor != "B" {
			t.Errorf("%s: prefix ends with %+v, want B's acquire or mint", v, got)
		}
	}
}

func TestOperations(t *testing.T) {
	for _, issuer := range []int{40, 7} {
		r := check(t, Operations, Correct, issuer)
		if r.Interleavings != 1 || !r.OK() {
			t.Fatalf("issuer %d: %d interleavings, violations %v", issuer, r.Interleavings, r.Violations)
		}
		evs := r.Histories[0].Events
		var got []Outcome
		for _, e := range evs {
			if e.Action == Write {
				got = append(got, e.Outcome)
			}
		}
		want := []Outcome{Applied, Applied, Duplicate, Conflict, Stale}
		if !slices.Equal(got, want) {
			t.Errorf("issuer %d: outcomes %v, want %v", issuer, got, want)
		}
		last := evs[len(evs)-1].Resource
		if want := (Resource{Fence: issuer + 1, Seq: 2, Writer: "A", Effects: 2}); last != want {
			t.Errorf("issuer %d: final resource %+v, want %+v", issuer, last, want)
		}
	}
}

func TestLinearizeCounts(t *testing.T) {
	mk := func(n int) []Step { return make([]Step, n) }
	tests := []struct {
		lens []int
		want int
	}{
		{nil, 1}, {[]int{3}, 1}, {[]int{2, 1}, 3}, {[]int{3, 1}, 4}, {[]int{2, 2}, 6}, {[]int{2, 2, 1}, 30},
	}
	for _, tt := range tests {
		var threads [][]Step
		for _, n := range tt.lens {
			threads = append(threads, mk(n))
		}
		if got := len(linearize(threads)); got != tt.want {
			t.Errorf("linearize(%v): %d orders, want %d", tt.lens, got, tt.want)
		}
	}
}

func TestInvalidParameters(t *testing.T) {
	if _, err := ParseVariant("no-fencing"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseVariant: %v", err)
	}
	if _, err := ParseCase("ops"); !errors.Is(err, ErrInvalid) {
		t.Errorf("ParseCase: %v", err)
	}
	for _, tt := range []struct {
		c      Case
		v      Variant
		issuer int
	}{
		{Fencing, Correct, -1},
		{Fencing, Correct, MaxIssuer + 1},
		{Fencing, "bogus", 40},
		{"bogus", Correct, 40},
		{Operations, NoFence, 40},
	} {
		if _, err := NewScenario(tt.c, tt.v, tt.issuer); !errors.Is(err, ErrInvalid) {
			t.Errorf("NewScenario(%q, %q, %d): %v, want ErrInvalid", tt.c, tt.v, tt.issuer, err)
		}
	}
	for _, args := range [][4]int{{-1, 2, 2}, {40, 1, 2}, {40, MaxClients + 1, 2}, {40, 2, 0}, {40, 2, MaxWrites + 1}} {
		if _, err := Explore(Correct, args[0], args[1], args[2]); !errors.Is(err, ErrInvalid) {
			t.Errorf("Explore(correct, %v): %v, want ErrInvalid", args[:3], err)
		}
	}
	if _, err := Explore("bogus", 40, 2, 2); !errors.Is(err, ErrInvalid) {
		t.Errorf("Explore(bogus): %v", err)
	}
}
