//go:build !unit

package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fencepub/fencepub/internal/lab"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

func TestLabFencingText(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want []string
	}{
		{[]string{}, 0, []string{"3 interleavings explored, no violation", "rejected (stale)"}},
		{[]string{"--variant", "no-fence"}, 1, []string{"violation 1: revoked_generation_overwrite", "counterexample.events:"}},
		{[]string{"--variant", "split-authority", "--issuer", "7"}, 1, []string{"4 interleavings explored", "unauthorized_accept", "mint     token 10"}},
		{[]string{"--variant", "rollback-issuer"}, 1, []string{"revoked_generation_overwrite", "recover                   done              issuer 40"}},
		{[]string{"--case", "operations"}, 0, []string{"writes: applied, applied, duplicate, conflict, stale; effects: 2"}},
		{[]string{"--clients", "3"}, 0, []string{"3 clients x 2 writes", "states explored", "no violation"}},
		{[]string{"--variant", "split-authority", "--writes", "1"}, 1, []string{"states explored", "unauthorized_accept"}},
		{[]string{"--case", "dataset"}, 0, []string{"12 interleavings explored, no violation", "rejected (stale, base)", "deletes v1/part-1"}},
		{[]string{"--case", "dataset", "--variant", "no-base-compare"}, 1, []string{"12 interleavings explored, 1 violation", "violation 1: missing_file", "names v1/part-1, which GC deleted"}},
		{[]string{"--case", "group"}, 0, []string{"2 interleavings explored, no violation", "sees report=g2 breakdown=g2", "sees report=g1 breakdown=g1"}},
		{[]string{"--case", "group", "--variant", "split-group"}, 1, []string{"3 interleavings explored, 1 violation", "violation 1: torn_read", "sees report=g2 breakdown=g1"}},
	}
	for _, tt := range tests {
		out, errs, code := runCLI(t, append([]string{"lab", "fencing"}, tt.args...)...)
		if code != tt.code {
			t.Errorf("%v: exit %d, want %d; stderr %s", tt.args, code, tt.code, errs)
		}
		for _, w := range tt.want {
			if !strings.Contains(out, w) {
				t.Errorf("%v: output lacks %q:\n%s", tt.args, w, out)
			}
		}
	}
}

func TestLabFencingJSON(t *testing.T) {
	out, _, code := runCLI(t, "lab", "fencing", "--variant", "split-authority", "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	var r lab.Result
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if r.Interleavings != 4 || len(r.Histories) != 4 || len(r.Violations) != 4 {
		t.Fatalf("%d interleavings, %d histories, %d violations", r.Interleavings, len(r.Histories), len(r.Violations))
	}
	for _, v := range r.Violations {
		e := v.Counterexample.Events[v.Step-1]
		if v.Property != lab.UnauthorizedAccept || e.Token != 43 || e.Resource.Fence != 43 {
			t.Errorf("violation %s at %+v", v.Property, e)
		}
	}
}

func TestLabUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"lab", "nope"},
		{"lab", "fencing", "extra"},
		{"lab", "fencing", "--variant", "bogus"},
		{"lab", "fencing", "--case", "bogus"},
		{"lab", "fencing", "--case", "operations", "--variant", "no-fence"},
		{"lab", "fencing", "--case", "operations", "--clients", "3"},
		{"lab", "fencing", "--case", "dataset", "--variant", "no-fence"},
		{"lab", "fencing", "--case", "group", "--variant", "no-base-compare"},
		{"lab", "fencing", "--variant", "split-group"},
		{"lab", "fencing", "--case", "group", "--clients", "3"},
		{"lab", "fencing", "--variant", "no-base-compare", "--clients", "3"},
		{"lab", "fencing", "--issuer", "-1"},
		{"lab", "fencing", "--issuer", "x"},
		{"lab", "fencing", "--clients", "9"},
		{"lab", "fencing", "--writes", "0"},
		{"lab", "fencing", "-o", "yaml"},
		{"lab", "fencing", "--bogus"},
	} {
		if _, errs, code := runCLI(t, args...); code != 2 || errs == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, errs)
		}
	}
}

// TestLabReplayBrokenVariant: `lab replay` of a deliberately broken model
// against real servers reports where the real system differs (exit 1); a
// variant with no real counterpart is a usage error.
func TestLabReplayBrokenVariant(t *testing.T) {
	conn, _, _ := testenv.CLIStack(t, "labreplay")
	out, errs, code := runCLI(t, append([]string{"lab", "replay", "--variant", "no-fence"}, conn...)...)
	if code != 1 || !strings.Contains(out, "expected applied: got outcome stale") {
		t.Fatalf("lab replay --variant no-fence: exit %d, stdout:\n%s\nstderr: %s", code, out, errs)
	}
	if _, errs, code := runCLI(t, append([]string{"lab", "replay", "--variant", "split-authority"}, conn...)...); code != 2 || errs == "" {
		t.Fatalf("lab replay --variant split-authority: exit %d, stderr %q; want 2", code, errs)
	}
}

// TestLabDatasetGroupJSON: the defect variants of cases dataset and group
// report their counterexample in JSON: the violating step is B's applied
// publish of v3 after GC deleted v1's file, and the reader's torn read.
func TestLabDatasetGroupJSON(t *testing.T) {
	for _, tt := range []struct {
		kase, variant string
		prop          lab.Property
		check         func(e lab.Event) bool
	}{
		{"dataset", "no-base-compare", lab.MissingFile, func(e lab.Event) bool {
			return e.Actor == "B" && e.Outcome == lab.Applied && e.Resource.Version == "v3"
		}},
		{"group", "split-group", lab.TornRead, func(e lab.Event) bool {
			return e.Action == lab.Read && e.Pointers == "report=g2 breakdown=g1"
		}},
	} {
		out, _, code := runCLI(t, "lab", "fencing", "--case", tt.kase, "--variant", tt.variant, "-o", "json")
		if code != 1 {
			t.Fatalf("%s %s: exit %d, want 1", tt.kase, tt.variant, code)
		}
		var r lab.Result
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Violations) != 1 || r.Violations[0].Property != tt.prop {
			t.Fatalf("%s %s: violations %+v", tt.kase, tt.variant, r.Violations)
		}
		v := r.Violations[0]
		if e := v.Counterexample.Events[v.Step-1]; !tt.check(e) {
			t.Errorf("%s %s: violating step %+v", tt.kase, tt.variant, e)
		}
	}
}
