package lab

import (
	"fmt"
	"slices"
	"strings"
)

// Case selects a scenario of the protocol source's experiment (§Lab).
type Case string

// The cases.
const (
	// Fencing: acquire A → A pauses → the lease expires → the authority
	// recovers → acquire B, then every interleaving of A's resumption and
	// late write with B's write.
	Fencing Case = "fencing"
	// Operations: several writes in one term, then a retry, a reused key and
	// a late write of the old term, as one fixed history (Correct only).
	Operations Case = "operations"
	// Dataset: A publishes dataset v1, pauses and loses its lease; B is
	// granted. Then every interleaving of A's late full publish of v2, B's
	// incremental publish of v3 (read the base, then publish reusing the
	// base's files) and one GC pass (DESIGN invariants 14 and 15).
	Dataset Case = "dataset"
	// Group: A publishes g1 to the group {report, breakdown}, then every
	// interleaving of A's publish of g2 with a reader reading both
	// pointers at one revision.
	Group Case = "group"
)

// ParseCase returns the case named s. It returns an error wrapping ErrInvalid
// for any other name.
func ParseCase(s string) (Case, error) {
	c := Case(s)
	if CaseVariants(c) == nil {
		return "", fmt.Errorf("%w: unknown case %q (want fencing, operations, dataset or group)", ErrInvalid, s)
	}
	return c, nil
}

// CaseVariants returns the variants case c runs, Correct first, or nil for an
// unknown case.
func CaseVariants(c Case) []Variant {
	switch c {
	case Fencing:
		return Variants()
	case Operations:
		return []Variant{Correct}
	case Dataset:
		return []Variant{Correct, NoBaseCompare}
	case Group:
		return []Variant{Correct, SplitGroup}
	}
	return nil
}

// Scenario is a declared partial order of steps. A fixed prefix runs first.
// Then the threads run: each thread keeps its own order, and the threads
// interleave freely. Build one with NewScenario. A Scenario is an immutable
// value and safe for concurrent use.
type Scenario struct {
	kase    Case
	variant Variant
	issuer  int
	clients []string
	prefix  []Step
	threads [][]Step
}

// NewScenario builds case c of the protocol source's experiment for variant
// v. The authority's issuer starts at issuer, so the first grant mints
// issuer+1. internal/lab/README.md lists the steps, and explains where the counts
// differ from the protocol source's.
//
// It returns an error wrapping ErrInvalid if issuer is outside
// [0, MaxIssuer], if c or v is unknown, or if v is not one of
// CaseVariants(c). The operations case checks business identity in the
// correct protocol only.
func NewScenario(c Case, v Variant, issuer int) (Scenario, error) {
	if _, err := ParseCase(string(c)); err != nil {
		return Scenario{}, err
	}
	if _, err := ParseVariant(string(v)); err != nil {
		return Scenario{}, err
	}
	if err := checkIssuer(issuer); err != nil {
		return Scenario{}, err
	}
	if vs := CaseVariants(c); !slices.Contains(vs, v) {
		return Scenario{}, fmt.Errorf("%w: case %s runs variant %s only, not %q", ErrInvalid, c, joinVariants(vs), v)
	}
	s := Scenario{kase: c, variant: v, issuer: issuer, clients: []string{"A", "B"}}
	switch c {
	case Dataset:
		s.prefix = []Step{
			{Actor: "A", Action: Acquire},
			{Actor: "A", Action: Write, Seq: 1, Version: "v1"},
			{Actor: "A", Action: Pause},
			{Actor: Authority, Action: Expire},
			{Actor: "B", Action: Acquire},
			{Actor: "A", Action: Resume},
		}
		s.threads = [][]Step{
			{{Actor: "A", Action: Write, Seq: 2, Version: "v2"}},
			{{Actor: "B", Action: Base}, {Actor: "B", Action: Write, Seq: 1, Version: "v3"}},
			{{Actor: Collector, Action: Collect}},
		}
		return s, nil
	case Group:
		s.clients = []string{"A"}
		publish := func(seq int, version string) []Step {
			if v == SplitGroup {
				return []Step{
					{Actor: "A", Action: Write, Seq: seq, Version: version, Member: "report"},
					{Actor: "A", Action: Write, Seq: seq, Version: version, Member: "breakdown"},
				}
			}
			return []Step{{Actor: "A", Action: Write, Seq: seq, Version: version}}
		}
		s.prefix = slices.Concat([]Step{{Actor: "A", Action: Acquire}}, publish(1, "g1"))
		s.threads = [][]Step{publish(2, "g2"), {{Actor: Reader, Action: Read}}}
		return s, nil
	case Operations:
		s.prefix = []Step{
			{Actor: "A", Action: Acquire},
			{Actor: "A", Action: Write, Seq: 1, Key: "op-1", Params: "body-1"},
			{Actor: "A", Action: Write, Seq: 2, Key: "op-2", Params: "body-2"},
			{Actor: "A", Action: Pause},
			{Actor: Authority, Action: Expire},
			{Actor: "B", Action: Acquire},
			{Actor: "B", Action: Write, Seq: 1, Key: "op-1", Params: "body-1"},
			{Actor: "B", Action: Write, Seq: 1, Key: "op-1", Params: "body-1-changed"},
			{Actor: "A", Action: Resume},
			{Actor: "A", Action: Write, Seq: 1, Key: "op-3", Params: "body-3"},
		}
		return s, nil
	}
	split := v == SplitAuthority
	s.prefix = slices.Concat(
		[]Step{{Actor: "A", Action: Acquire}},
		when(split, Step{Actor: "A", Action: Mint}),
		[]Step{
			{Actor: "A", Action: Pause},
			{Actor: Authority, Action: Expire},
			{Actor: Authority, Action: Recover},
			{Actor: "B", Action: Acquire},
		},
		when(split, Step{Actor: "B", Action: Mint}),
	)
	s.threads = [][]Step{
		slices.Concat(
			[]Step{{Actor: "A", Action: Resume}},
			when(split, Step{Actor: "A", Action: Mint}),
			[]Step{{Actor: "A", Action: Write, Seq: 2}},
		),
		{{Actor: "B", Action: Write, Seq: 1}},
	}
	return s, nil
}

func joinVariants(vs []Variant) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = string(v)
	}
	return strings.Join(s, " or ")
}

func when(ok bool, s Step) []Step {
	if ok {
		return []Step{s}
	}
	return nil
}

func checkIssuer(issuer int) error {
	if issuer < 0 || issuer > MaxIssuer {
		return fmt.Errorf("%w: issuer %d outside [0, %d]", ErrInvalid, issuer, MaxIssuer)
	}
	return nil
}

// History is one complete run of a scenario: every step in order, with its
// expected outcome and the resource's state after it. Violated lists the
// properties the history breaks, in the order they were found.
type History struct {
	Events   []Event    `json:"events"`
	Violated []Property `json:"violated,omitempty"`
}

// Counterexample is the history that shows a violation.
type Counterexample struct {
	Events []Event `json:"events"`
}

// Violation is one property broken by one transition.
type Violation struct {
	Property Property `json:"property"`
	// Interleaving is the 1-based index of the history in
	// Result.Histories. It is 0 for a violation found by Explore.
	Interleaving int `json:"interleaving,omitempty"`
	// Step is the 1-based index, in Counterexample.Events, of the
	// transition that broke the property.
	Step   int    `json:"step"`
	Detail string `json:"detail"`
	// Counterexample is the whole interleaving (Check), or the path from the
	// initial state up to and including the violating step (Explore).
	Counterexample Counterexample `json:"counterexample"`
}

// Result is what a check found.
type Result struct {
	Case    Case    `json:"case"`
	Variant Variant `json:"variant"`
	Issuer  int     `json:"issuer"`
	Clients int     `json:"clients"`
	// Writes is the number of writes per client (Explore only).
	Writes int `json:"writes,omitempty"`
	// Interleavings is the number of histories explored (Check only).
	Interleavings int `json:"interleavings,omitempty"`
	// Prefix is how many leading events every history shares (Check only).
	Prefix int `json:"prefix,omitempty"`
	// States is the number of distinct states explored, and Transitions the
	// number of transitions taken from them (Explore only).
	States      int `json:"states,omitempty"`
	Transitions int `json:"transitions,omitempty"`
	// Histories holds every interleaving in enumeration order (Check only).
	Histories []History `json:"histories,omitempty"`
	// Violations lists every violation found. It is empty, never nil, when
	// the properties hold.
	Violations []Violation `json:"violations"`
}

// OK reports whether no property was violated.
func (r Result) OK() bool { return len(r.Violations) == 0 }

// Interleavings returns every linearization of the scenario's partial order,
// executed from the initial state, in a fixed enumeration order. The threads
// are tried in order, A's before B's. Each history carries the outcome the
// model expects at each step and the resource's state after it. A replay
// against the real implementation performs the same steps in the same order,
// and must observe the same outcomes and resource states. The fences it sees
// may differ if its issuer does not start where the model's did.
func (s Scenario) Interleavings() []History {
	hs, _ := s.run()
	return hs
}

// Check runs every interleaving and checks both properties on every
// transition (see the package doc). The Result holds all histories and one
// Violation per violating transition.
func (s Scenario) Check() Result {
	hs, vs := s.run()
	return Result{
		Case:          s.kase,
		Variant:       s.variant,
		Issuer:        s.issuer,
		Clients:       len(s.clients),
		Interleavings: len(hs),
		Prefix:        len(s.prefix),
		Histories:     hs,
		Violations:    vs,
	}
}

func (s Scenario) run() ([]History, []Violation) {
	var hs []History
	vs := []Violation{}
	for i, order := range linearize(s.threads) {
		w := newWorld(s.variant, s.issuer, s.clients)
		switch s.kase {
		case Dataset:
			w.data = newDatasets()
		case Group:
			w.members = []member{{name: "report"}, {name: "breakdown"}}
		}
		var h History
		first := len(vs)
		for _, st := range slices.Concat(s.prefix, order) {
			ev, f := w.apply(st)
			h.Events = append(h.Events, ev)
			if f != nil {
				h.Violated = append(h.Violated, f.property)
				vs = append(vs, Violation{
					Property:     f.property,
					Interleaving: i + 1,
					Step:         len(h.Events),
					Detail:       f.detail,
				})
			}
		}
		for j := range vs[first:] {
			vs[first+j].Counterexample.Events = h.Events
		}
		hs = append(hs, h)
	}
	return hs, vs
}

// linearize returns every merge of threads that keeps each thread's order:
// (n1+…+nk)! / (n1!…nk!) sequences. Earlier threads are tried first at
// each position.
func linearize(threads [][]Step) [][]Step {
	var out [][]Step
	pos := make([]int, len(threads))
	var cur []Step
	var rec func()
	rec = func() {
		done := true
		for i, t := range threads {
			if pos[i] == len(t) {
				continue
			}
			done = false
			cur = append(cur, t[pos[i]])
			pos[i]++
			rec()
			pos[i]--
			cur = cur[:len(cur)-1]
		}
		if done {
			out = append(out, slices.Clone(cur))
		}
	}
	rec()
	return out
}
