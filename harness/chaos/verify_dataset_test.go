package chaos

import (
	"slices"
	"testing"

	"github.com/fencepub/fencepub/internal/layout"
)

// datasetTimeline is a clean dataset history: A publishes {a.bin, dir/b.bin}
// at fence 41; B changes dir/b.bin and reuses a.bin at fence 42 (base
// 41.1); C, whose base 41.1 was read before B's publish, is stale (reason
// base) at fence 43; readers read files of the current and of a retained
// version, list the manifest, ask for a path it does not name; the final
// sweep reads every file of both retained versions. Times in ms.
func datasetTimeline() *History {
	const ms = 1_000_000
	v41, v42, v43 := v(41, 1), v(42, 1), v(43, 1)
	a1 := FileEntry{Path: "a.bin", Size: 10, SHA256: "sa1"}
	b1 := FileEntry{Path: "dir/b.bin", Size: 20, SHA256: "sb1"}
	b2 := FileEntry{Path: "dir/b.bin", Size: 21, SHA256: "sb2"}
	h := &History{
		Epoch:    1,
		Counters: map[string]int{},
		Grants: []GrantEvent{
			{Client: "a", Resource: "d", Owner: "A", RequestID: "ra", Epoch: 1, Fence: 41},
			{Client: "b", Resource: "d", Owner: "B", RequestID: "rb", Epoch: 1, Fence: 42},
			{Client: "c", Resource: "d", Owner: "C", RequestID: "rc", Epoch: 1, Fence: 43},
		},
		Publishes: []PublishOp{
			{ID: "a/1", Client: "a", Resource: "d", Key: "ka", RequestDigest: "da", Owner: "A", Version: v41,
				Call: 10 * ms, Return: 11 * ms, Done: true, Reported: Applied, Outcome: Applied, Result: v41, Object: "m41",
				Files: []FileEntry{a1, b1}},
			{ID: "b/1", Client: "b", Resource: "d", Key: "kb", RequestDigest: "db", Owner: "B", Version: v42,
				Call: 20 * ms, Return: 21 * ms, Done: true, Reported: Applied, Outcome: Applied, Result: v42, Object: "m42",
				Files: []FileEntry{a1, b2}, Base: &v41, Reused: 1},
			{ID: "c/1", Client: "c", Resource: "d", Key: "kc", RequestDigest: "dc", Owner: "C", Version: v43,
				Call: 15 * ms, Return: 25 * ms, Done: true, Reported: Stale, Outcome: Stale, Reason: "base", Result: v43,
				Files: []FileEntry{a1}, Base: &v41, Reused: 1},
		},
		Changes: []Change{
			{Kind: ChangeGrant, Resource: "d", Number: 41, Value: layout.GrantRecordValue(1, "A"), Revision: 2, KVVersion: 1},
			{Kind: ChangeGeneration, Resource: "d", Number: 41, Revision: 2, KVVersion: 1},
			{Kind: ChangePointer, Resource: "d", Revision: 3, KVVersion: 1, Seen: 1},
			{Kind: ChangePointer, Resource: "d", Version: v41, Object: "m41", Revision: 4, KVVersion: 2, Seen: 11 * ms},
			{Kind: ChangeOpRecord, Resource: "d", Key: "ka", Version: v41, Value: "da", Object: "m41", Revision: 4, KVVersion: 1, Seen: 11 * ms},
			{Kind: ChangeGrant, Resource: "d", Number: 42, Value: layout.GrantRecordValue(1, "B"), Revision: 5, KVVersion: 1},
			{Kind: ChangeGeneration, Resource: "d", Number: 42, Revision: 5, KVVersion: 2},
			{Kind: ChangeGrant, Resource: "d", Number: 43, Value: layout.GrantRecordValue(1, "C"), Revision: 6, KVVersion: 1},
			{Kind: ChangeGeneration, Resource: "d", Number: 43, Revision: 6, KVVersion: 3},
			{Kind: ChangePointer, Resource: "d", Version: v42, Object: "m42", Revision: 7, KVVersion: 3, Seen: 21 * ms},
			{Kind: ChangeOpRecord, Resource: "d", Key: "kb", Version: v42, Value: "db", Object: "m42", Revision: 7, KVVersion: 1, Seen: 21 * ms},
		},
		DatasetReads: []DatasetRead{
			{Client: "dreader", Resource: "d", Call: 22 * ms, Return: 23 * ms, Version: v42, Path: "a.bin", SHA: "sa1", Size: 10},
			{Client: "dreader", Resource: "d", Call: 24 * ms, Return: 25 * ms, Version: v42, Listing: []FileEntry{a1, b2}},
			{Client: "dreader", Resource: "d", Call: 26 * ms, Return: 27 * ms, Version: v41, Retained: true, Path: "dir/b.bin", SHA: "sb1", Size: 20},
			{Client: "dreader", Resource: "d", Call: 28 * ms, Return: 29 * ms, Version: v42, Path: "z.txt", Problem: ReadNoSuchFile, Err: "no such file"},
		},
	}
	for _, p := range h.Publishes[:2] {
		h.DatasetReads = append(h.DatasetReads, DatasetRead{Client: DatasetSweep, Resource: "d", Call: 40 * ms, Return: 41 * ms, Version: p.Version, Retained: true, Listing: p.Files})
		for _, f := range p.Files {
			h.DatasetReads = append(h.DatasetReads, DatasetRead{Client: DatasetSweep, Resource: "d", Call: 40 * ms, Return: 41 * ms, Version: p.Version, Retained: true, Path: f.Path, SHA: f.SHA256, Size: f.Size})
		}
	}
	return h
}

// sweepOf returns the final sweep's read of path at v in h.
func sweepOf(h *History, v layout.Version, path string) *DatasetRead {
	i := slices.IndexFunc(h.DatasetReads, func(r DatasetRead) bool {
		return r.Client == DatasetSweep && r.Version == v && r.Path == path
	})
	return &h.DatasetReads[i]
}

// TestVerifyDatasets: the clean dataset timeline passes; each mutation,
// what a broken implementation would have produced, is reported under
// the dataset invariants it breaks.
func TestVerifyDatasets(t *testing.T) {
	const ms = 1_000_000
	verifyMutations(t, datasetTimeline, []mutation{
		{"a file read with other bytes than its entry", func(h *History) {
			h.DatasetReads[0].SHA = "zz"
		}, []string{InvDatasetFile}},
		{"a file read with another size than its entry", func(h *History) {
			h.DatasetReads[0].Size = 11
		}, []string{InvDatasetFile}},
		{"a retained version's file read with the newer version's bytes", func(h *History) {
			h.DatasetReads[2].SHA, h.DatasetReads[2].Size = "sb2", 21
		}, []string{InvDatasetFile}},
		{"a file the manifest does not name", func(h *History) {
			h.DatasetReads[3].Problem, h.DatasetReads[3].SHA, h.DatasetReads[3].Err = "", "sz", ""
		}, []string{InvDatasetFile}},
		{"a listing that misses an entry", func(h *History) {
			h.DatasetReads[1].Listing = h.DatasetReads[1].Listing[:1]
		}, []string{InvDatasetFile}},
		{"no such file for a path the manifest names", func(h *History) {
			h.DatasetReads[3].Path = "dir/b.bin"
		}, []string{InvDatasetFile}},
		{"a dataset version read as a single object", func(h *History) {
			h.DatasetReads[3].Problem = ReadNotDataset
		}, []string{InvDatasetFile}},
		{"a file of a version no publish applied", func(h *History) {
			h.DatasetReads[0].Version = v(44, 1)
		}, []string{InvDatasetFile}},
		{"a file whose bytes failed verification", func(h *History) {
			h.DatasetReads[0].Problem, h.DatasetReads[0].Err = ReadDigest, "digest mismatch"
		}, []string{InvDatasetFile}},
		{"a reused file collected (GC ignoring manifest-named files)", func(h *History) {
			r := sweepOf(h, v(42, 1), "a.bin")
			r.Problem, r.Err, r.SHA, r.Size = ReadMissing, "missing", "", 0
		}, []string{InvDatasetFileKept}},
		{"a retained version's manifest collected", func(h *History) {
			r := sweepOf(h, v(41, 1), "")
			r.Problem, r.Err, r.Listing = ReadMissing, "missing", nil
		}, []string{InvDatasetFileKept}},
		{"a file missing during the run and at the sweep", func(h *History) {
			h.DatasetReads[0].Problem, h.DatasetReads[0].Err = ReadMissing, "missing"
			r := sweepOf(h, v(42, 1), "a.bin")
			r.Problem, r.Err = ReadMissing, "missing"
		}, []string{InvDatasetFileKept}},
		{"a file missing during the run that the sweep did not read", func(h *History) {
			h.DatasetReads = append(h.DatasetReads, DatasetRead{Client: "dreader", Resource: "d", Call: 30 * ms, Return: 31 * ms,
				Version: v(41, 1), Retained: true, Path: "a.bin", Problem: ReadMissing, Err: "missing"})
			h.DatasetReads = slices.DeleteFunc(h.DatasetReads, func(r DatasetRead) bool { return r.Client == DatasetSweep && r.Version == v(41, 1) })
		}, []string{InvDatasetFileKept}},
		{"a missing answer the sweep read again is the store's glitch", func(h *History) {
			h.DatasetReads[0].Problem, h.DatasetReads[0].Err = ReadMissing, "missing"
		}, nil},
		{"a missing file explained by a later restore", func(h *History) {
			h.DatasetReads = append(h.DatasetReads, DatasetRead{Client: "dreader", Resource: "d", Call: 30 * ms, Return: 31 * ms,
				Version: v(41, 1), Retained: true, Path: "x.bin", Problem: ReadMissing, Err: "missing"})
			h.Restores = []RestoreEvent{{Snapshot: 5 * ms, Start: 32 * ms, End: 33 * ms, Revision: 7, OldEpoch: 1, NewEpoch: 2,
				States: map[string]InitialState{"d": {Epoch: 2, Pointer: v(41, 1), Ops: map[string]OpState{"ka": {Digest: "da", Version: v(41, 1)}}}}}}
		}, nil},
		{"applied without the base compare", func(h *History) {
			c := &h.Publishes[2]
			c.Reported, c.Outcome, c.Reason, c.Object = Applied, Applied, "", "m43"
			h.Changes = append(h.Changes,
				Change{Kind: ChangePointer, Resource: "d", Version: v(43, 1), Object: "m43", Revision: 8, KVVersion: 4, Seen: 25 * ms},
				Change{Kind: ChangeOpRecord, Resource: "d", Key: "kc", Version: v(43, 1), Value: "dc", Object: "m43", Revision: 8, KVVersion: 1, Seen: 25 * ms})
		}, []string{InvDatasetBase, InvLinearizable}},
	})
}
