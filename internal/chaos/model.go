// Package chaos judges histories of fencepub operations recorded under
// injected faults: a linearizability check of each resource's publish, read
// and seal operations against a sequential model of the pointer (porcupine),
// and invariant checks over the whole log (DESIGN.md "Invariants").
package chaos

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/fencepub/fencepub/internal/layout"
)

// Kind is the kind of a logged operation.
type Kind string

// Operation kinds the model knows.
const (
	// KindPublish is one publish attempt; an unknown outcome is closed by the
	// Resolve that settled it (its output and return time).
	KindPublish Kind = "publish"
	// KindRead is a linearizable read of the pointer.
	KindRead Kind = "read"
	// KindSeal is a successful seal raise (GC abandon, decommission).
	KindSeal Kind = "seal"
)

// Outcomes of a publish, as the publisher reports them.
const (
	Applied   = "applied"
	Duplicate = "duplicate"
	Conflict  = "conflict"
	Stale     = "stale"
	// Unknown is not accepted by the checker: every unknown must have been
	// settled by Resolve before the history is checked.
	Unknown = "unknown"
	// ResolvedNotApplied is the outcome of an unknown publish that Resolve
	// settled as never applied: Resolve raised the seal to its version.
	ResolvedNotApplied = "resolved_not_applied"
)

// Input is what a client asked for.
type Input struct {
	Kind     Kind
	Resource string
	Key      string         // publish: idempotency key
	Digest   string         // publish: request digest
	Version  layout.Version // publish: the version carried; seal: the new seal
	// Authorized is false when the authority log shows the carried fence was
	// never granted to this client in this epoch; such a publish must never
	// apply (DESIGN.md invariant 2).
	Authorized bool
}

// Output is what the client was told.
type Output struct {
	Outcome string         // publish
	Version layout.Version // read: the pointer's version
}

// state is the model of one resource: the current epoch, the pointer's
// version, the seal and the applied op records (key → digest@version).
type state struct {
	epoch   uint64
	pointer layout.Version
	seal    layout.Version
	ops     map[string]opRec
}

type opRec struct {
	digest  string
	version layout.Version
}

// step applies one operation to s and reports whether the output is one the
// sequential specification allows. s is never mutated.
func step(s state, in Input, out Output) (bool, state) {
	switch in.Kind {
	case KindRead:
		return out.Version == s.pointer, s
	case KindSeal:
		n := s
		n.seal = s.seal.Max(in.Version)
		return true, n
	case KindPublish:
		if rec, ok := s.ops[in.Key]; ok {
			switch {
			case rec.digest != in.Digest:
				return out.Outcome == Conflict, s
			case rec.version == in.Version:
				// A resend of the attempt that applied: reported as applied.
				return out.Outcome == Applied || out.Outcome == Duplicate, s
			default:
				return out.Outcome == Duplicate, s
			}
		}
		accept := in.Authorized && in.Version.Epoch == s.epoch &&
			s.pointer.Less(in.Version) && s.seal.Less(in.Version)
		switch {
		case accept && out.Outcome == Applied:
			n := s
			n.pointer = in.Version
			n.ops = maps.Clone(s.ops)
			n.ops[in.Key] = opRec{digest: in.Digest, version: in.Version}
			return true, n
		case !accept && out.Outcome == Stale:
			return true, s
		case out.Outcome == ResolvedNotApplied:
			// Resolve found no op record and raised the seal above the
			// version, so the publish took no effect and never will.
			n := s
			n.seal = s.seal.Max(in.Version)
			return true, n
		}
		return false, s
	}
	return false, s
}

func equal(a, b state) bool {
	return a.epoch == b.epoch && a.pointer == b.pointer && a.seal == b.seal && maps.Equal(a.ops, b.ops)
}

// Model returns the porcupine model of a resource whose epoch is epoch at
// the start of the history. Histories are partitioned by resource; split
// them at an etcd restore (the pointer goes back there by design).
func Model(epoch uint64) porcupine.Model {
	return porcupine.Model{
		Partition: partitionByResource,
		Init:      func() any { return state{epoch: epoch, ops: map[string]opRec{}} },
		Step: func(s, in, out any) (bool, any) {
			return step(s.(state), in.(Input), out.(Output))
		},
		Equal: func(a, b any) bool { return equal(a.(state), b.(state)) },
		DescribeOperation: func(in, out any) string {
			i, o := in.(Input), out.(Output)
			switch i.Kind {
			case KindRead:
				return fmt.Sprintf("read %s -> %s", i.Resource, o.Version)
			case KindSeal:
				return fmt.Sprintf("seal %s to %s", i.Resource, i.Version)
			}
			return fmt.Sprintf("publish %s key=%s v=%s auth=%v -> %s", i.Resource, i.Key, i.Version, i.Authorized, o.Outcome)
		},
		DescribeState: func(s any) string {
			st := s.(state)
			keys := make([]string, 0, len(st.ops))
			for k := range st.ops {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return fmt.Sprintf("epoch=%d pointer=%s seal=%s ops=[%s]", st.epoch, st.pointer, st.seal, strings.Join(keys, ","))
		},
	}
}

func partitionByResource(history []porcupine.Operation) [][]porcupine.Operation {
	idx := map[string]int{}
	var out [][]porcupine.Operation
	for _, op := range history {
		r := op.Input.(Input).Resource
		i, ok := idx[r]
		if !ok {
			i = len(out)
			idx[r] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], op)
	}
	return out
}

// Op is one logged client operation: what was asked, what was answered and
// when (monotonic nanoseconds since the run started).
type Op struct {
	Client int
	Input  Input
	Output Output
	Call   int64
	Return int64
}

// Check decides whether history is linearizable with respect to Model(epoch).
// It returns an error for a history that still holds an unknown outcome, for
// a non-linearizable history (naming the longest linearizable prefix's
// state), and for a checker timeout: an undecided history fails the run.
func Check(epoch uint64, history []Op, timeout time.Duration) error {
	ops := make([]porcupine.Operation, len(history))
	for i, h := range history {
		if h.Input.Kind == KindPublish && h.Output.Outcome == Unknown {
			return fmt.Errorf("chaos: publish %s key %s still unknown: resolve it before checking", h.Input.Resource, h.Input.Key)
		}
		ops[i] = porcupine.Operation{ClientId: h.Client, Input: h.Input, Output: h.Output, Call: h.Call, Return: h.Return}
	}
	switch res := porcupine.CheckOperationsTimeout(Model(epoch), ops, timeout); res {
	case porcupine.Ok:
		return nil
	case porcupine.Illegal:
		return fmt.Errorf("chaos: history of %d operations is not linearizable", len(ops))
	default:
		return fmt.Errorf("chaos: linearizability check undecided after %s (%s); keep histories smaller", timeout, res)
	}
}
