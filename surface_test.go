package fencepub_test

import (
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

// surfaceBound is the most names the public packages may export together,
// counted as apiSurface counts them. The test fails when the surface grows
// past it, and asks for a lower bound when it shrinks well below it. It
// rises only with a new capability, by that capability's names: groups
// (AcquireGroup, PublishGroup, ReadCut and their types) took it from 513;
// moving the operator's recovery (Recover, RestoreLost and their reports)
// to internal/recovery took it down to 507; datasets in a Pipeline
// (Pipeline.SubmitDataset, PipelineResult.Dataset) to 509; moving the
// operator's reads and writes (Inspect, Epoch, CheckHistory, Resources,
// Reader.State, Decommission and their types) to internal/operator down to
// 485; the digest helpers (RequestDigest to internal/pubhook, GroupDigest
// to internal/layout) to 483; publisher.ScanDir, a loop over DirFiles,
// to the CLI to 482; Grant.ExpiresAt, GrantedAt + TTL, to 481; the test
// clocks gc.Config.Now and publisher.Config.Now to internal/wallclock to
// 479; the GC daemon of `fencepub gc daemon` (Daemon, DaemonConfig,
// NewDaemon, DefaultDaemonConfig) to internal/operator to 463;
// Version.Less, Max and Encode to internal/layout to 460; the Seal alias
// and SealReasonDecommissioned, in no public signature, to 452; the
// domain setup of `fencepub init` and `doctor` (authority.Init,
// CheckOwnership and Domain) to internal/operator to 447; gc.Report a
// summary, the detailed report of `fencepub gc run -o json` (Decision,
// Kept, UploadCounts, RecordCounts, ClockReport, RunOptions.Verbose) to
// internal/operator to 407.
const surfaceBound = 407

// apiSurface counts the names a program outside the module can use from the
// package pkg: every exported package-level identifier, and for every
// exported type (through an alias too, whatever package the alias's target
// lives in) each exported method of its method set and each exported field
// its values can select, promoted ones included.
func apiSurface(pkg *types.Package) int {
	n := 0
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		n++
		if tn, ok := obj.(*types.TypeName); ok {
			n += len(members(types.Unalias(tn.Type())))
		}
	}
	return n
}

// members returns the exported methods and fields of type t that go doc
// lists under it: an interface's methods; a named type's own methods; a
// struct's fields. A field or method promoted from an embedded type counts
// once, under that type, unless the type is not itself public (unexported,
// or in an internal package): then it counts here, as the names that t
// makes reachable.
func members(t types.Type) []string {
	seen := map[string]bool{}
	var add func(t types.Type, depth int)
	add = func(t types.Type, depth int) {
		if p, ok := t.(*types.Pointer); ok {
			t = p.Elem()
		}
		if it, ok := t.Underlying().(*types.Interface); ok {
			for i := range it.NumMethods() {
				if m := it.Method(i); m.Exported() {
					seen["method "+m.Name()] = true
				}
			}
			return
		}
		if nt, ok := t.(*types.Named); ok {
			for i := range nt.NumMethods() {
				if m := nt.Method(i); m.Exported() {
					seen["method "+m.Name()] = true
				}
			}
		}
		st, ok := t.Underlying().(*types.Struct)
		if !ok {
			return
		}
		for i := range st.NumFields() {
			f := st.Field(i)
			if f.Exported() {
				seen["field "+f.Name()] = true
			}
			if f.Embedded() && depth < 8 && !public(f.Type()) {
				add(f.Type(), depth+1)
			}
		}
	}
	add(t, 0)
	names := make([]string, 0, len(seen))
	for k := range seen {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// public reports whether t (or *t) is an exported type of a package outside
// internal/, whose members count under its own name.
func public(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	nt, ok := t.(*types.Named)
	return ok && nt.Obj().Exported() && nt.Obj().Pkg() != nil && !strings.Contains(nt.Obj().Pkg().Path()+"/", "/internal/")
}

// loadExported type-checks nothing itself: it reads the compiler's export
// data of pkgs and their dependencies (go list -export).
func loadExported(t *testing.T, pkgs []string) map[string]*types.Package {
	t.Helper()
	export := map[string]string{}
	args := append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}} {{.Export}}"}, pkgs...)
	for _, line := range strings.Split(strings.TrimSpace(goOut(t, args...)), "\n") {
		if path, file, ok := strings.Cut(line, " "); ok && file != "" {
			export[path] = file
		}
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(export[path])
	})
	out := map[string]*types.Package{}
	for _, p := range pkgs {
		tp, err := imp.Import(p)
		if err != nil {
			t.Fatalf("import %s: %v", p, err)
		}
		out[p] = tp
	}
	return out
}

// TestAPISurface counts the public API (apiSurface) of every public package
// that is not a program, logs the count per package and holds the total to
// surfaceBound.
func TestAPISurface(t *testing.T) {
	var libs []string
	for _, line := range strings.Split(strings.TrimSpace(goOut(t, "list", "-f", "{{.Name}} {{.ImportPath}}", "./...")), "\n") {
		name, p, _ := strings.Cut(line, " ")
		if name != "main" && !matchesAny(p, []string{"internal/...", "cmd/...", "examples/..."}) {
			libs = append(libs, p)
		}
	}
	total := 0
	loaded := loadExported(t, libs)
	for _, p := range libs {
		n := apiSurface(loaded[p])
		total += n
		t.Logf("%-50s %4d", p, n)
	}
	t.Logf("%-50s %4d", "total", total)
	switch {
	case total > surfaceBound:
		t.Errorf("the public API has %d names, more than its bound %d: make the new names unexported or internal, or argue for raising the bound", total, surfaceBound)
	case total < surfaceBound-10:
		t.Errorf("the public API has %d names, well under its bound %d: lower surfaceBound to %d", total, surfaceBound, total)
	}
}
