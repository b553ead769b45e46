package chaos

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
)

// The protocol source's 41/42/41 timeline as a clean history: A holds fence 41 and
// pauses; B gets 42 and publishes; A's late publish at 41 is stale; a reader
// sees 42 with the right bytes. Times in ms.
func seedTimeline() *History {
	const ms = 1_000_000
	v41, v42 := v(41, 1), v(42, 1)
	return &History{
		Epoch:    1,
		Counters: map[string]int{},
		Grants: []GrantEvent{
			{Client: "a", Resource: "r", Owner: "A", RequestID: "ra", Epoch: 1, Fence: 41},
			{Client: "b", Resource: "r", Owner: "B", RequestID: "rb", Epoch: 1, Fence: 42},
		},
		Publishes: []PublishOp{
			{ID: "b/1", Client: "b", Resource: "r", Key: "kb", Digest: "db", Owner: "B", Version: v42,
				Call: 10 * ms, Return: 11 * ms, Done: true, Reported: Applied, Outcome: Applied, Result: v42, Object: "obj42"},
			{ID: "a/1", Client: "a", Resource: "r", Key: "ka", Digest: "da", Owner: "A", Version: v41,
				Call: 20 * ms, Return: 21 * ms, Done: true, Reported: Stale, Outcome: Stale, Reason: "pointer", Result: v41},
		},
		Reads: []ReadOp{
			{Client: "reader", Resource: "r", Call: 22 * ms, Return: 23 * ms, Version: v42, Object: "obj42", PointerSHA: "db", SHA: "db"},
		},
		Changes: []Change{
			{Kind: ChangeGrant, Resource: "r", Number: 41, Value: layout.GrantRecordValue(1, "A"), Revision: 2, KVVersion: 1},
			{Kind: ChangeGeneration, Resource: "r", Number: 41, Revision: 2, KVVersion: 1},
			{Kind: ChangeGrant, Resource: "r", Number: 42, Value: layout.GrantRecordValue(1, "B"), Revision: 3, KVVersion: 1},
			{Kind: ChangeGeneration, Resource: "r", Number: 42, Revision: 3, KVVersion: 2},
			{Kind: ChangePointer, Resource: "r", Revision: 4, KVVersion: 1, Seen: 1},
			{Kind: ChangeSeal, Resource: "r", Revision: 4, KVVersion: 1, Seen: 1},
			{Kind: ChangePointer, Resource: "r", Version: v42, Object: "obj42", Revision: 5, KVVersion: 2, Seen: 11 * ms},
			{Kind: ChangeOpRecord, Resource: "r", Key: "kb", Version: v42, Value: "db", Object: "obj42", Revision: 5, KVVersion: 1, Seen: 11 * ms},
		},
	}
}

func invariants(vs []Violation) []string {
	var out []string
	for _, v := range vs {
		if !slices.Contains(out, v.Invariant) {
			out = append(out, v.Invariant)
		}
	}
	return out
}

// mutation is a change to a clean history, which is what a broken
// implementation would have produced, and the invariants it breaks.
type mutation struct {
	name   string
	mutate func(h *History)
	want   []string
}

// verifyMutations checks that the history base returns passes Verify, and
// that each mutation of a fresh copy is reported under exactly the
// invariants it names.
func verifyMutations(t *testing.T, base func() *History, cases []mutation) {
	t.Helper()
	if vs := Verify(base(), VerifyOptions{}); len(vs) > 0 {
		t.Fatalf("clean history: %v", vs)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := base()
			c.mutate(h)
			got := invariants(Verify(h, VerifyOptions{}))
			slices.Sort(got)
			want := slices.Clone(c.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("violated %v, want %v:\n%v", got, want, Verify(h, VerifyOptions{}))
			}
		})
	}
}

// TestVerify: the clean timeline passes; each mutation, which is what a
// broken implementation would have produced, is reported under the
// invariants it breaks.
func TestVerify(t *testing.T) {
	const ms = 1_000_000
	verifyMutations(t, seedTimeline, []mutation{
		{"late A accepted after B (no pointer compare)", func(h *History) {
			h.Publishes[1].Reported, h.Publishes[1].Outcome, h.Publishes[1].Object = Applied, Applied, "obj41"
			h.Changes = append(h.Changes, Change{Kind: ChangePointer, Resource: "r", Version: v(41, 1), Object: "obj41", Revision: 6, KVVersion: 3, Seen: 21 * ms})
		}, []string{InvLinearizable, InvPointerMonotonic}},
		{"fence granted twice", func(h *History) {
			h.Grants = append(h.Grants, GrantEvent{Client: "c", Resource: "r", Owner: "C", RequestID: "rc", Epoch: 1, Fence: 42})
		}, []string{InvFenceOnce}},
		{"grant record overwritten", func(h *History) {
			h.Changes = append(h.Changes, Change{Kind: ChangeGrant, Resource: "r", Number: 42, Value: layout.GrantRecordValue(1, "C"), Revision: 7, KVVersion: 2})
		}, []string{InvFenceOnce}},
		{"generation went back", func(h *History) {
			h.Changes = append(h.Changes, Change{Kind: ChangeGeneration, Resource: "r", Number: 40, Revision: 8, KVVersion: 3})
		}, []string{InvFenceOnce}},
		{"key applied twice", func(h *History) {
			h.Publishes[1].Key, h.Publishes[1].Digest = "kb", "db"
			h.Publishes[1].Reported, h.Publishes[1].Outcome = Applied, Applied
		}, []string{InvKeyOnce, InvLinearizable, InvNoPhantom}},
		{"op record overwritten", func(h *History) {
			h.Changes = append(h.Changes, Change{Kind: ChangeOpRecord, Resource: "r", Key: "kb", Version: v(43, 1), Revision: 9, KVVersion: 2})
		}, []string{InvKeyOnce}},
		{"unauthorized token applied", func(h *History) {
			h.Grants = h.Grants[:1]
		}, []string{InvUnauthorized, InvLinearizable}},
		{"pointer moved without an applied publish", func(h *History) {
			h.Changes = append(h.Changes, Change{Kind: ChangePointer, Resource: "r", Version: v(43, 1), Object: "obj43", Revision: 10, KVVersion: 3, Seen: 30 * ms})
		}, []string{InvNoPhantom}},
		{"applied publish never moved the pointer", func(h *History) {
			h.Changes = slices.DeleteFunc(h.Changes, func(c Change) bool { return c.Kind == ChangePointer && !c.Version.IsZero() })
		}, []string{InvNoPhantom}},
		{"reader went back", func(h *History) {
			h.Reads = append(h.Reads, ReadOp{Client: "reader", Resource: "r", Call: 24 * ms, Return: 25 * ms})
		}, []string{InvLinearizable, InvReaderMonotonic}},
		{"reader got other bytes", func(h *History) {
			h.Reads[0].SHA = "zz"
		}, []string{InvReaderBytes}},
		{"reader got a digest error", func(h *History) {
			h.Reads = append(h.Reads, ReadOp{Client: "reader", Resource: "r", Problem: ReadDigest, Err: "mismatch"})
		}, []string{InvReaderBytes}},
		{"reader found the pointer's object missing", func(h *History) {
			h.Reads = append(h.Reads, ReadOp{Client: "reader", Resource: "r", Call: 24 * ms, Return: 25 * ms, Version: v(42, 1),
				Object: "obj42", Problem: ReadMissing, Err: "missing"})
		}, []string{InvObjectKept}},
		{"reader found the pointer's object missing, and the final listing did not", func(h *History) {
			h.Reads = append(h.Reads, ReadOp{Client: "reader", Resource: "r", Call: 24 * ms, Return: 25 * ms, Version: v(42, 1),
				Object: "obj42", Problem: ReadMissing, Err: "missing"})
			h.Objects = 3
		}, nil},
		{"reader found the pointer's object missing, and so did the final listing", func(h *History) {
			h.Reads = append(h.Reads, ReadOp{Client: "reader", Resource: "r", Call: 24 * ms, Return: 25 * ms, Version: v(42, 1),
				Object: "obj42", Problem: ReadMissing, Err: "missing"})
			h.Objects, h.Missing = 3, []string{"obj42"}
		}, []string{InvObjectKept}},
		{"reader went back without a restore", func(h *History) {
			h.Reads = append(h.Reads, ReadOp{Client: "reader", Resource: "r", Call: 24 * ms, Return: 25 * ms, After: 22 * ms,
				Problem: ReadWentBack, Err: "went back"})
		}, []string{InvReaderMonotonic}},
		{"the watch lost events", func(h *History) {
			h.WatchGaps = 1
		}, []string{InvWatchComplete}},
		{"an error a restore explains, without a restore", func(h *History) {
			h.Anomalies = []Anomaly{{Client: "b", Time: 30 * ms, Since: 5 * ms, What: "publish b/2", Err: "not initialized", AfterRestore: true}}
		}, []string{InvAnomaly}},
		{"published object deleted", func(h *History) {
			h.Missing = []string{"obj42"}
		}, []string{InvObjectKept}},
		{"unknown never settled", func(h *History) {
			h.Publishes[1].Outcome = Unknown
		}, []string{InvSettled}},
		{"publish never completed", func(h *History) {
			h.Publishes[1].Done = false
		}, []string{InvSettled}},
		{"seal went down", func(h *History) {
			h.Changes = append(h.Changes,
				Change{Kind: ChangeSeal, Resource: "r", Version: v(42, 5), Value: "gc-abandoned", Revision: 11, KVVersion: 2, Seen: 40 * ms, At: 39 * ms},
				Change{Kind: ChangeSeal, Resource: "r", Version: v(42, 2), Value: "gc-abandoned", Revision: 12, KVVersion: 3, Seen: 41 * ms, At: 40 * ms})
		}, []string{InvSealMonotonic}},
		{"anomaly reported by a component", func(h *History) {
			h.Anomalies = []Anomaly{{Client: "w0", What: "acquire r", Err: "authority: rolled back"}}
		}, []string{InvAnomaly}},
		{"stale by a seal raised after it returned", func(h *History) {
			h.Publishes = append(h.Publishes, PublishOp{ID: "b/2", Client: "b", Resource: "r", Key: "kb2", Digest: "db2", Owner: "B",
				Version: v(42, 2), Call: 30 * ms, Return: 31 * ms, Done: true, Reported: Stale, Outcome: Stale, Reason: "seal"})
			h.Changes = append(h.Changes, Change{Kind: ChangeSeal, Resource: "r", Version: v(42, 2), Value: "gc-abandoned", Revision: 13, KVVersion: 2, At: 35 * ms, Seen: 36 * ms})
		}, []string{InvLinearizable}},
	})
}

// TestVerifySealExplainsStale: a GC seal raised while a publish was in
// flight makes its stale outcome legal, and a Resolve's seal is bounded by
// the call of the publish it settled.
func TestVerifySealExplainsStale(t *testing.T) {
	const ms = 1_000_000
	h := seedTimeline()
	h.Publishes = append(h.Publishes,
		PublishOp{ID: "b/2", Client: "b", Resource: "r", Key: "kb2", Digest: "db2", Owner: "B",
			Version: v(42, 2), Call: 30 * ms, Return: 36 * ms, Done: true, Reported: Stale, Outcome: Stale, Reason: "seal"},
		PublishOp{ID: "b/3", Client: "b", Resource: "r", Key: "kb3", Digest: "db3", Owner: "B",
			Version: v(42, 4), Call: 40 * ms, Return: 50 * ms, Done: true, Reported: Unknown, Outcome: ResolvedNotApplied, Reason: "seal", ResolvedBy: "worker"},
		PublishOp{ID: "b/4", Client: "b", Resource: "r", Key: "kb4", Digest: "db4", Owner: "B",
			Version: v(42, 3), Call: 51 * ms, Return: 52 * ms, Done: true, Reported: Stale, Outcome: Stale, Reason: "seal"})
	h.Changes = append(h.Changes,
		Change{Kind: ChangeSeal, Resource: "r", Version: v(42, 2), Value: "gc-abandoned", Revision: 13, KVVersion: 2, At: 32 * ms, Seen: 40 * ms},
		Change{Kind: ChangeSeal, Resource: "r", Version: v(42, 4), Value: "resolve kb3", Revision: 14, KVVersion: 3, Seen: 49 * ms})
	if vs := Verify(h, VerifyOptions{}); len(vs) > 0 {
		t.Fatal(vs)
	}
}

// TestVerifyTimeout: a linearizability check that takes longer than its
// timeout is undecided, a violation, even when porcupine finished it.
func TestVerifyTimeout(t *testing.T) {
	if got := invariants(Verify(seedTimeline(), VerifyOptions{Timeout: time.Nanosecond})); !slices.Equal(got, []string{InvLinearizable}) {
		t.Fatalf("violations %v with a 1 ns timeout, want %s", got, InvLinearizable)
	}
}

// TestVerifyVisualizes: a non-linearizable resource gets porcupine's view.
func TestVerifyVisualizes(t *testing.T) {
	h := seedTimeline()
	h.Publishes[1].Reported, h.Publishes[1].Outcome = Applied, Applied
	var buf bytes.Buffer
	vs := Verify(h, VerifyOptions{Visualize: func(res string) (io.WriteCloser, error) { return nopCloser{&buf}, nil }})
	if !slices.Contains(invariants(vs), InvLinearizable) {
		t.Fatalf("violations %v", vs)
	}
	if !strings.Contains(buf.String(), "<html") {
		t.Fatalf("no HTML written: %.200q", buf.String())
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// restoredTimeline is the protocol source's timeline followed by more publishes, an etcd
// restore from a snapshot taken after B's first publish, and a new epoch.
func restoredTimeline() *History {
	const ms = 1_000_000
	h := seedTimeline()
	e2 := func(fence, seq uint64) layout.Version { return layout.Version{Epoch: 2, Fence: fence, Seq: seq} }
	h.Publishes = append(h.Publishes,
		// Applied after the snapshot: the restore loses it.
		PublishOp{ID: "b/2", Client: "b", Resource: "r", Key: "kb2", Digest: "db2", Owner: "B", Version: v(42, 2),
			Call: 30 * ms, Return: 31 * ms, Done: true, Reported: Applied, Outcome: Applied, Result: v(42, 2), Object: "obj422"},
		// In flight at the cut: applied before it (the watch saw the
		// pointer move), settled after it as not applied.
		PublishOp{ID: "b/3", Client: "b", Resource: "r", Key: "kb3", Digest: "db3", Owner: "B", Version: v(42, 3),
			Call: 35 * ms, Return: 60 * ms, Done: true, Reported: Unknown, Outcome: ResolvedNotApplied, Reason: "seal", ResolvedBy: "worker"},
		// Other attempts at the same version, with forged tokens, also in
		// flight at the cut: they did not apply (the op record is B's of
		// key kb3), whatever their key.
		PublishOp{ID: "f/1", Client: "f", Resource: "r", Key: "kf", Digest: "df", Owner: "F", Version: v(42, 3), Forged: true,
			Call: 37 * ms, Return: 58 * ms, Done: true, Reported: Unknown, Outcome: ResolvedNotApplied, Reason: "epoch", ResolvedBy: "worker"},
		PublishOp{ID: "f/2", Client: "f", Resource: "r", Key: "kb3", Digest: "db3", Owner: "F", Version: v(42, 3), Forged: true,
			Call: 38 * ms, Return: 59 * ms, Done: true, Reported: Unknown, Outcome: ResolvedNotApplied, Reason: "epoch", ResolvedBy: "worker"},
		// The new epoch: C publishes; a retry of B's first key finds the
		// restored op record.
		PublishOp{ID: "c/1", Client: "c", Resource: "r", Key: "kc", Digest: "dc", Owner: "C", Version: e2(43, 1),
			Call: 61 * ms, Return: 62 * ms, Done: true, Reported: Applied, Outcome: Applied, Result: e2(43, 1), Object: "obj43"},
		PublishOp{ID: "c/2", Client: "c", Resource: "r", Key: "kb", Digest: "db", Owner: "C", Version: e2(43, 2),
			Call: 63 * ms, Return: 64 * ms, Done: true, Reported: Duplicate, Outcome: Duplicate, Result: v(42, 1), Object: "obj42"},
	)
	// B bound r before the restore took r's pointer away: ErrNotInitialized.
	h.Anomalies = append(h.Anomalies, Anomaly{Client: "b", Time: 52 * ms, Since: 34 * ms, What: "publish b/9", Err: "not initialized", AfterRestore: true})
	h.Grants = append(h.Grants, GrantEvent{Client: "c", Resource: "r", Owner: "C", RequestID: "rc", Epoch: 2, Fence: 43})
	h.Reads = append(h.Reads,
		ReadOp{Client: "reader", Resource: "r", Call: 36 * ms, Return: 37 * ms, Version: v(42, 3), PointerSHA: "db3", SHA: "db3"},
		// After the restore the pointer is back at 42.1: by design.
		ReadOp{Client: "reader", Resource: "r", Call: 55 * ms, Return: 56 * ms, Version: v(42, 1), PointerSHA: "db", SHA: "db"},
		ReadOp{Client: "reader", Resource: "r", Call: 65 * ms, Return: 66 * ms, Version: e2(43, 1), PointerSHA: "dc", SHA: "dc"},
		// A Reader that read 42.3 before the restore finds the pointer back.
		ReadOp{Client: "reader2", Resource: "r", Call: 36 * ms, Return: 37 * ms, Version: v(42, 3), PointerSHA: "db3", SHA: "db3"},
		ReadOp{Client: "reader2", Resource: "r", Call: 53 * ms, Return: 54 * ms, After: 36 * ms, Problem: ReadWentBack, Err: "went back"},
	)
	h.Changes = append(h.Changes,
		Change{Kind: ChangePointer, Resource: "r", Version: v(42, 2), Object: "obj422", Revision: 6, KVVersion: 3, Seen: 31 * ms},
		Change{Kind: ChangeOpRecord, Resource: "r", Key: "kb2", Version: v(42, 2), Value: "db2", Revision: 6, KVVersion: 1, Seen: 31 * ms},
		Change{Kind: ChangePointer, Resource: "r", Version: v(42, 3), Object: "obj423", Revision: 7, KVVersion: 4, Seen: 36 * ms},
		Change{Kind: ChangeOpRecord, Resource: "r", Key: "kb3", Version: v(42, 3), Value: "db3", Owner: "B", Revision: 7, KVVersion: 1, Seen: 36 * ms},
		Change{Kind: ChangeEpoch, Number: 2, Revision: restoreRevisionBump + 10, KVVersion: 2, Seen: 45 * ms},
		Change{Kind: ChangeSeal, Resource: "r", Version: v(42, 3), Value: "resolve kb3", Revision: restoreRevisionBump + 11, KVVersion: 2, Seen: 59 * ms},
		Change{Kind: ChangeGrant, Resource: "r", Number: 43, Value: layout.GrantRecordValue(2, "C"), Revision: restoreRevisionBump + 12, KVVersion: 1},
		Change{Kind: ChangeGeneration, Resource: "r", Number: 43, Revision: restoreRevisionBump + 12, KVVersion: 3},
		Change{Kind: ChangePointer, Resource: "r", Version: e2(43, 1), Object: "obj43", Revision: restoreRevisionBump + 13, KVVersion: 3, Seen: 62 * ms},
		Change{Kind: ChangeOpRecord, Resource: "r", Key: "kc", Version: e2(43, 1), Value: "dc", Revision: restoreRevisionBump + 13, KVVersion: 1, Seen: 62 * ms},
	)
	h.Restores = []RestoreEvent{{
		Snapshot: 25 * ms, Start: 40 * ms, End: 50 * ms, Revision: 8, OldEpoch: 1, NewEpoch: 2,
		States: map[string]InitialState{"r": {Epoch: 2, Pointer: v(42, 1), Ops: map[string]OpState{"kb": {Digest: "db", Version: v(42, 1)}}}},
	}}
	return h
}

// TestVerifyAcrossRestore: a restore takes the pointer, the op records and
// the generation back by design; the history is judged in two parts, and
// violations within either part are still found.
func TestVerifyAcrossRestore(t *testing.T) {
	const ms = 1_000_000
	verifyMutations(t, restoredTimeline, []mutation{
		{"old epoch applied after the restore", func(h *History) {
			h.Publishes = append(h.Publishes, PublishOp{ID: "a/2", Client: "a", Resource: "r", Key: "ka2", Digest: "da2", Owner: "A",
				Version: v(41, 2), Call: 70 * ms, Return: 71 * ms, Done: true, Reported: Applied, Outcome: Applied, Result: v(41, 2)})
		}, []string{InvLinearizable, InvNoPhantom}},
		{"the restored op record ignored", func(h *History) {
			h.Publishes[len(h.Publishes)-1].Outcome = Applied
			h.Publishes[len(h.Publishes)-1].Result = layout.Version{Epoch: 2, Fence: 43, Seq: 2}
		}, []string{InvLinearizable, InvNoPhantom}},
		{"the pointer went back after the restore", func(h *History) {
			h.Changes = append(h.Changes, Change{Kind: ChangePointer, Resource: "r", Version: v(42, 1), Object: "obj42", Revision: restoreRevisionBump + 20, KVVersion: 4, Seen: 80 * ms})
		}, []string{InvPointerMonotonic}},
		{"the epoch changed without a restore", func(h *History) {
			h.Changes = append(h.Changes, Change{Kind: ChangeEpoch, Number: 3, Revision: restoreRevisionBump + 30, KVVersion: 3})
		}, []string{InvAnomaly}},
		{"a Reader created after the restore went back", func(h *History) {
			h.Reads = append(h.Reads, ReadOp{Client: "reader3", Resource: "r", Call: 67 * ms, Return: 68 * ms, After: 51 * ms, Problem: ReadWentBack, Err: "went back"})
		}, []string{InvReaderMonotonic}},
		{"a Reader went back twice across one restore", func(h *History) {
			h.Reads = append(h.Reads, ReadOp{Client: "reader2", Resource: "r", Call: 70 * ms, Return: 71 * ms, After: 53 * ms, Problem: ReadWentBack, Err: "went back"})
		}, []string{InvReaderMonotonic}},
		{"an error a restore explains, from a publisher bound after it", func(h *History) {
			h.Anomalies = append(h.Anomalies, Anomaly{Client: "c", Time: 70 * ms, Since: 60 * ms, What: "publish c/3", Err: "not initialized", AfterRestore: true})
		}, []string{InvAnomaly}},
		{"an error a restore explains, before the restore", func(h *History) {
			h.Anomalies = append(h.Anomalies, Anomaly{Client: "b", Time: 39 * ms, Since: 34 * ms, What: "publish b/8", Err: "not initialized", AfterRestore: true})
		}, []string{InvAnomaly}},
		{"the recover's epoch not above a pointer before it", func(h *History) {
			h.Changes = append(h.Changes, Change{Kind: ChangePointer, Resource: "r2", Version: layout.Version{Epoch: 2, Fence: 1, Seq: 1}, Object: "obj-r2", Revision: 8, KVVersion: 1, Seen: 39 * ms})
		}, []string{InvPointerMonotonic, InvNoPhantom}},
		{"a publish seen applied before the cut reported stale before it", func(h *History) {
			h.Publishes[3].Return, h.Publishes[3].Reported, h.Publishes[3].Outcome = 38*ms, Stale, Stale
		}, []string{InvLinearizable, InvNoPhantom, InvReaderBytes}},
	})
}
