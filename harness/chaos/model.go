// Package chaos judges histories of fencepub operations recorded under
// injected faults: a linearizability check of each resource's publish, read
// and seal operations against a sequential model of the pointer (porcupine),
// and invariant checks over the whole log (DESIGN.md "Invariants").
package chaos

import (
	"fmt"
	"io"
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
	// KindSeal is a successful seal raise (GC abandon, decommission,
	// resolve, release), as the watch of seals/ saw it.
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
	// Strict marks a strict-mode publish: it also required the grant's lease
	// to be live, which the model does not track (etcd expires leases on its
	// own timing), so where it could apply it may also be stale.
	Strict bool
	// HasBase marks a dataset publish that reuses files from version Base:
	// it also required the pointer to be Base exactly (DESIGN.md invariant
	// 15), and is stale (reason base) where the pointer moved.
	HasBase bool
	Base    layout.Version
	// Group marks a member of a group publish that another member may have
	// refused (every member but the one a stale group result names): the
	// whole group is stale then, so it may be stale where it could apply.
	Group bool
}

// Output is what the client was told.
type Output struct {
	Outcome string // publish
	// Version is, for a read, the pointer's version; for a duplicate, the
	// version that applied the key (zero: not checked).
	Version layout.Version
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
		n.seal = layout.MaxVersion(s.seal, in.Version)
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
				return out.Outcome == Duplicate && (out.Version.IsZero() || out.Version == rec.version), s
			}
		}
		accept := in.Authorized && in.Version.Epoch == s.epoch &&
			s.pointer.Compare(in.Version) < 0 && s.seal.Compare(in.Version) < 0 &&
			(!in.HasBase || s.pointer == in.Base)
		switch {
		case accept && out.Outcome == Applied:
			n := s
			n.pointer = in.Version
			n.ops = maps.Clone(s.ops)
			n.ops[in.Key] = opRec{digest: in.Digest, version: in.Version}
			return true, n
		case (!accept || in.Strict || in.Group) && out.Outcome == Stale:
			return true, s
		case out.Outcome == ResolvedNotApplied:
			// Resolve found no op record and raised the seal above the
			// version, so the publish took no effect and never will.
			n := s
			n.seal = layout.MaxVersion(s.seal, in.Version)
			return true, n
		}
		return false, s
	}
	return false, s
}

func equal(a, b state) bool {
	return a.epoch == b.epoch && a.pointer == b.pointer && a.seal == b.seal && maps.Equal(a.ops, b.ops)
}

// InitialState is a resource's state at the start of a history: the
// domain's epoch and, for a history that starts after an etcd restore, the
// pointer, seal and op records the restore left.
type InitialState struct {
	Epoch   uint64         `json:"epoch"`
	Pointer layout.Version `json:"pointer"`
	Seal    layout.Version `json:"seal"`
	// Ops maps idempotency keys to the op records' digest and version.
	Ops map[string]OpState `json:"ops,omitempty"`
}

// OpState is an op record as the model sees it.
type OpState struct {
	Digest  string         `json:"digest"`
	Version layout.Version `json:"version"`
}

func (i InitialState) state() state {
	s := state{epoch: i.Epoch, pointer: i.Pointer, seal: i.Seal, ops: make(map[string]opRec, len(i.Ops))}
	for k, o := range i.Ops {
		s.ops[k] = opRec{digest: o.Digest, version: o.Version}
	}
	return s
}

// Model returns the porcupine model of a resource whose epoch is epoch at
// the start of the history, with nothing published. Histories are
// partitioned by resource; split them at an etcd restore (the pointer goes
// back there by design) and start the later part from ModelFrom.
func Model(epoch uint64) porcupine.Model { return ModelFrom(InitialState{Epoch: epoch}) }

// ModelFrom returns the porcupine model of resources that all start in
// state init.
func ModelFrom(init InitialState) porcupine.Model {
	return porcupine.Model{
		Partition: partitionByResource,
		Init:      func() any { return init.state() },
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
			base := ""
			if i.HasBase {
				base = " base=" + i.Base.String()
			}
			if i.Group {
				base += " group"
			}
			return fmt.Sprintf("publish %s key=%s digest=%.8s v=%s auth=%v strict=%v%s -> %s", i.Resource, i.Key, i.Digest, i.Version, i.Authorized, i.Strict, base, o.Outcome)
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
// a non-linearizable history, and for a checker timeout: an undecided history
// fails the run (keep histories per resource small).
func Check(epoch uint64, history []Op, timeout time.Duration) error {
	return CheckFrom(InitialState{Epoch: epoch}, history, timeout)
}

// CheckFrom is Check for a history whose resources start in state init.
func CheckFrom(init InitialState, history []Op, timeout time.Duration) error {
	ops, err := operations(history)
	if err != nil {
		return err
	}
	switch res := porcupine.CheckOperationsTimeout(ModelFrom(init), ops, timeout); res {
	case porcupine.Ok:
		return nil
	case porcupine.Illegal:
		return fmt.Errorf("chaos: history of %d operations is not linearizable", len(ops))
	default:
		return fmt.Errorf("chaos: linearizability check undecided after %s (%s); keep histories smaller", timeout, res)
	}
}

// Visualize checks history like CheckFrom and writes porcupine's HTML view of
// it to w: the longest linearizable prefixes and where they fail. Use it on a
// history Check rejected. Errors: those of Check's input validation and of
// writing w.
func Visualize(init InitialState, history []Op, timeout time.Duration, w io.Writer) error {
	ops, err := operations(history)
	if err != nil {
		return err
	}
	m := ModelFrom(init)
	_, info := porcupine.CheckOperationsVerbose(m, ops, timeout)
	return porcupine.Visualize(m, info, w)
}

// operations converts history for porcupine, refusing unsettled publishes.
func operations(history []Op) ([]porcupine.Operation, error) {
	ops := make([]porcupine.Operation, len(history))
	for i, h := range history {
		if h.Input.Kind == KindPublish && h.Output.Outcome == Unknown {
			return nil, fmt.Errorf("chaos: publish %s key %s still unknown: resolve it before checking", h.Input.Resource, h.Input.Key)
		}
		ops[i] = porcupine.Operation{ClientId: h.Client, Input: h.Input, Output: h.Output, Call: h.Call, Return: h.Return}
	}
	return ops, nil
}
