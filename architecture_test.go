package fencepub_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// module is this module's import path.
const module = "github.com/fencepub/fencepub"

// The "never imports" rules of ARCHITECTURE.md. A rule forbids every
// package matching from (an import path relative to the module, "..." a
// subtree) to depend, directly or transitively, on a package matching one of
// never.
var neverImports = []struct {
	from  []string
	never []string
}{
	// The core and the foundations sit below the product.
	{
		from:  []string{".", "internal/errkind", "internal/fence", "internal/layout", "internal/objstore", "internal/ownership", "internal/retry", "internal/wait", "internal/sysproc", "internal/exitcode", "internal/lab"},
		never: []string{"authority", "publisher", "reader", "gc", "internal/cli/...", "internal/harness/...", "cmd/..."},
	},
	// A reader-only program links no authority, publisher or GC.
	{from: []string{"reader"}, never: []string{"authority", "publisher", "gc"}},
	// The authority knows nothing of what its grants fence.
	{from: []string{"authority"}, never: []string{"publisher", "reader", "gc"}},
	// Writers and the collector are independent of each other and of reads.
	{from: []string{"publisher"}, never: []string{"reader", "gc"}},
	{from: []string{"gc"}, never: []string{"publisher", "reader"}},
	// No library package depends on the CLI, the harnesses or a binary.
	{
		from:  []string{"authority", "publisher", "reader", "gc"},
		never: []string{"internal/cli/...", "internal/harness/...", "internal/lab/...", "cmd/...", "github.com/spf13/cobra", "github.com/spf13/viper"},
	},
	// The worker binary does not link the benchmark suite.
	{from: []string{"cmd/fencepub"}, never: []string{"internal/harness/bench/...", "gonum.org/v1/plot"}},
}

// matches reports whether import path p matches pattern pat: a path
// relative to the module (or ".", the module itself), a full external
// path, either ending in "/..." for a subtree.
func matches(p, pat string) bool {
	full := pat
	switch {
	case pat == ".":
		full = module
	case !strings.Contains(strings.SplitN(pat, "/", 2)[0], "."):
		full = module + "/" + pat
	}
	if sub, ok := strings.CutSuffix(full, "/..."); ok {
		return p == sub || strings.HasPrefix(p, sub+"/")
	}
	return p == full
}

// TestArchitecture checks the "never imports" rules on the build graph of
// every package of the module (go list: non-test dependencies).
func TestArchitecture(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		deps[f[0]] = f[1:]
	}
	checked := 0
	for _, r := range neverImports {
		for pkg, ds := range deps {
			if !matchesAny(pkg, r.from) {
				continue
			}
			checked++
			for _, d := range ds {
				if matchesAny(d, r.never) {
					t.Errorf("%s depends on %s (ARCHITECTURE.md forbids it)", pkg, d)
				}
			}
		}
	}
	if checked < len(neverImports) {
		t.Fatalf("the rules matched %d packages; each rule should match at least one", checked)
	}
}

func matchesAny(p string, pats []string) bool {
	for _, pat := range pats {
		if matches(p, pat) {
			return true
		}
	}
	return false
}

// The CLI's packages, and the internal packages below the public library
// packages, whose sentinels the CLI must not classify with.
var (
	cliPackages     = []string{"./cmd/...", "./internal/cli/..."}
	libraryInternal = []string{"internal/errkind", "internal/fence", "internal/layout", "internal/objstore/...", "internal/ownership", "internal/retry", "internal/wait"}
)

// TestCLIClassifiesWithPublicErrors checks that the CLI picks its exit
// codes the way a program outside the module can: no non-test file of
// cmd/ or internal/cli names an Err* identifier of a package below the
// public library packages (libraryInternal), so every error it classifies
// matches a public sentinel (fencepub.ErrUnavailable, ...).
func TestCLIClassifiesWithPublicErrors(t *testing.T) {
	args := append([]string{"list", "-f", `{{.Dir}}{{range .GoFiles}} {{.}}{{end}}`}, cliPackages...)
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	fset := token.NewFileSet()
	files := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		for _, name := range f[1:] {
			file, err := parser.ParseFile(fset, filepath.Join(f[0], name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files++
			for _, use := range internalSentinels(file) {
				t.Errorf("%s: %s classifies with an internal sentinel; use the public one (fencepub, authority, publisher, reader, gc)",
					fset.Position(use.Pos()), use.X.(*ast.Ident).Name+"."+use.Sel.Name)
			}
		}
	}
	if files == 0 {
		t.Fatal("no CLI source file found")
	}
}

// internalSentinels returns file's selector expressions pkg.ErrX whose pkg
// is an import of a library-internal package (libraryInternal).
func internalSentinels(file *ast.File) []*ast.SelectorExpr {
	internal := map[string]bool{} // local import names of libraryInternal packages
	for _, im := range file.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if !matchesAny(p, libraryInternal) {
			continue
		}
		name := path.Base(p)
		if im.Name != nil {
			name = im.Name.Name
		}
		internal[name] = true
	}
	var uses []*ast.SelectorExpr
	ast.Inspect(file, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok && internal[id.Name] && strings.HasPrefix(sel.Sel.Name, "Err") {
				uses = append(uses, sel)
			}
		}
		return true
	})
	return uses
}

// goDocLeaks bounds, per public package, the lines of `go doc -all` that
// name an internal package ("internal/") or the storage layout ("layout."),
// which a program outside the module can neither import nor read. The root
// package's aliases (Version = layout.Version, ...) and the constants and
// errors defined by the layout still show; every other public package shows
// none. A bound only ever falls: the test fails when a package shows more,
// and when it shows fewer (lower the bound).
var goDocLeaks = map[string]int{".": 10}

// TestGoDocShowsNoInternals runs `go doc -all` on every public package
// (every package of the module outside internal/, cmd/ and examples/) and
// checks its lines naming internal packages against goDocLeaks.
func TestGoDocShowsNoInternals(t *testing.T) {
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	public := 0
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if rel == "" {
			rel = "."
		}
		if matchesAny(p, []string{"internal/...", "cmd/...", "examples/..."}) {
			continue
		}
		public++
		doc, err := exec.Command("go", "doc", "-all", p).Output()
		if err != nil {
			t.Fatalf("go doc -all %s: %v", p, err)
		}
		var leaks []string
		for _, line := range strings.Split(string(doc), "\n") {
			if strings.Contains(line, "internal/") || strings.Contains(line, "layout.") {
				leaks = append(leaks, strings.TrimSpace(line))
			}
		}
		if bound := goDocLeaks[rel]; len(leaks) != bound {
			t.Errorf("go doc -all %s: %d lines name internal packages, the bound is %d:\n\t%s",
				rel, len(leaks), bound, strings.Join(leaks, "\n\t"))
		}
	}
	if public < 5 {
		t.Fatalf("found %d public packages; want the root, authority, publisher, reader and gc at least", public)
	}
}
