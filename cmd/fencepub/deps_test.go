package main

import (
	"os/exec"
	"strings"
	"testing"
)

// heavyDeps are the import paths the benchmark suite links (internal/bench,
// its plotting and PDF libraries) and the worker binary must not: they
// belong to cmd/fencepub-bench (ARCHITECTURE.md "Layout").
var heavyDeps = []string{
	"github.com/fencepub/fencepub/internal/harness/bench",
	"gonum.org/",
	"codeberg.org/go-pdf/",
	"codeberg.org/go-latex/",
}

// linked returns the import paths among pkg's dependencies (go list -deps)
// that start with one of heavyDeps.
func linked(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var heavy []string
	for _, p := range strings.Fields(string(out)) {
		for _, h := range heavyDeps {
			if strings.HasPrefix(p, h) {
				heavy = append(heavy, p)
				break
			}
		}
	}
	return heavy
}

// TestNoBenchDeps: fencepub links neither the benchmark suite nor its
// plotting libraries, while fencepub-bench links both (so the check would
// see them).
func TestNoBenchDeps(t *testing.T) {
	if heavy := linked(t, "."); len(heavy) > 0 {
		t.Errorf("fencepub links %d packages of the benchmark suite: %s", len(heavy), strings.Join(heavy, " "))
	}
	heavy := strings.Join(linked(t, "../fencepub-bench"), " ")
	if !strings.Contains(heavy, "fencepub/internal/harness/bench") || !strings.Contains(heavy, "gonum.org/v1/plot") {
		t.Errorf("fencepub-bench: heavy dependencies %q, want internal/bench and gonum.org/v1/plot", heavy)
	}
}
