package lab

import (
	"fmt"
	"slices"
)

// Bounds of Explore. At the bounds the correct variant, which has to explore
// its whole state space, visits about 530,000 states in a few seconds.
const (
	MaxClients = 5
	MaxWrites  = 4
)

// Explore checks variant v with the given number of clients (named A, B, C, …)
// and writes per client. It uses depth-first search over the transition
// system, with state hashing. The authority's issuer starts at issuer.
//
// Each client acquires once, waiting while another lease is valid, then
// writes op_seq 1 to writes. The lease may expire whenever it is held. Both
// properties are checked on every transition, including transitions into
// states already explored. So a violation reachable within these bounds is
// always found. The search stops at the first violation. The Result then
// holds that violation, with the path from the initial state as its
// counterexample, and States counts the states explored so far. Without a
// violation, States is the whole reachable state space.
//
// Steps that cannot change any outcome are not generated. This shrinks the
// search and loses no history:
//   - A recovery from durable state, with no lease held, changes nothing. So
//     the authority recovers (once) only in RollbackIssuer.
//   - A paused client only fails to step, and interleaving already covers
//     that. Resuming commutes with every other actor's step. So pause and
//     resume appear only in SplitAuthority, where a worker that resumes
//     without its lease mints again. They form one transition (the pair is
//     adjacent in a counterexample), at most once per client, and only while
//     the client has lost its lease.
//
// Explore returns an error wrapping ErrInvalid if v is unknown or not a
// variant of case fencing, if issuer is
// outside [0, MaxIssuer], if clients is outside [2, MaxClients], or if writes
// is outside [1, MaxWrites]. With two clients and one write each,
// RollbackIssuer shows no violation: both grants of the shared fence carry
// op_seq 1, so the resource rejects the older one. That result is true of
// that bounded model. Two writes (the older grant carries the larger op_seq)
// or a third client (a newer grant under the restored issuer gets a smaller
// fence) expose the defect. Explore runs synchronously, in memory
// proportional to the states explored.
func Explore(v Variant, issuer, clients, writes int) (Result, error) {
	if _, err := ParseVariant(string(v)); err != nil {
		return Result{}, err
	}
	if !slices.Contains(Variants(), v) {
		return Result{}, fmt.Errorf("%w: variant %q has no case fencing to search", ErrInvalid, v)
	}
	if err := checkIssuer(issuer); err != nil {
		return Result{}, err
	}
	if clients < 2 || clients > MaxClients {
		return Result{}, fmt.Errorf("%w: clients %d outside [2, %d]", ErrInvalid, clients, MaxClients)
	}
	if writes < 1 || writes > MaxWrites {
		return Result{}, fmt.Errorf("%w: writes %d outside [1, %d]", ErrInvalid, writes, MaxWrites)
	}
	names := make([]string, clients)
	for i := range names {
		names[i] = string(rune('A' + i))
	}
	w := newWorld(v, issuer, names)
	x := explorer{writes: writes, seen: map[string]bool{string(w.appendKey(nil, writes)): true}}
	x.dfs(w, nil)
	vs := []Violation{}
	if x.violation != nil {
		vs = append(vs, *x.violation)
	}
	return Result{
		Case:        Fencing,
		Variant:     v,
		Issuer:      issuer,
		Clients:     clients,
		Writes:      writes,
		States:      len(x.seen),
		Transitions: x.transitions,
		Violations:  vs,
	}, nil
}

type explorer struct {
	writes      int
	seen        map[string]bool
	transitions int
	violation   *Violation // the first violation found; the search stops there
	buf         []byte
}

// dfs explores every transition from w. path holds the events from the
// initial state to w. Its backing array is reused by siblings, so a
// counterexample is copied out of it.
func (x *explorer) dfs(w *world, path []Event) {
	for _, s := range w.enabled(x.writes) {
		n := w.clone()
		steps := []Step{s}
		if s.Action == Pause {
			steps = append(steps, Step{Actor: s.Actor, Action: Resume})
		}
		x.transitions++
		p := path
		for _, st := range steps {
			ev, f := n.apply(st)
			p = append(p, ev)
			if f != nil {
				x.violation = &Violation{
					Property:       f.property,
					Step:           len(p),
					Detail:         f.detail,
					Counterexample: Counterexample{Events: slices.Clone(p)},
				}
				return
			}
		}
		x.buf = n.appendKey(x.buf[:0], x.writes)
		if x.seen[string(x.buf)] {
			continue
		}
		x.seen[string(x.buf)] = true
		x.dfs(n, p)
		if x.violation != nil {
			return
		}
	}
}

// enabled lists the steps Explore can take next, in a fixed order: each
// client's in name order, then the authority's (see Explore for what is left
// out).
func (w *world) enabled(writes int) []Step {
	var out []Step
	for i, c := range w.clients {
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
		if w.variant == SplitAuthority && c.token.fence > 0 && !c.remint && w.holder != i && c.next <= writes && c.pauses == 0 {
			out = append(out, Step{Actor: c.name, Action: Pause})
		}
	}
	if w.holder >= 0 {
		out = append(out, Step{Actor: Authority, Action: Expire})
	}
	if w.variant == RollbackIssuer && w.recovers == 0 && w.grants > 0 && w.holder < 0 {
		out = append(out, Step{Actor: Authority, Action: Recover})
	}
	return out
}
