package fencepub_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
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
		from: []string{".", "internal/errkind", "internal/fence", "internal/layout", "internal/objstore", "internal/debuglog", "internal/leader", "internal/ownership", "internal/retry", "internal/wait", "internal/sysproc", "internal/exitcode", "internal/manifest", "internal/lab", "internal/pubhook", "internal/recovery", "internal/operator", "internal/wallclock"},
		never: []string{"authority", "publisher", "reader", "gc", "config", "internal/cli/...", "internal/devstack",
			"internal/testkit/...", "cmd/..."},
	},
	// A reader-only program links no authority, publisher or GC.
	{from: []string{"reader"}, never: []string{"authority", "publisher", "gc"}},
	// The authority knows nothing of what its grants fence.
	{from: []string{"authority"}, never: []string{"publisher", "reader", "gc"}},
	// Writers and the collector are independent of each other and of reads.
	{from: []string{"publisher"}, never: []string{"reader", "gc"}},
	{from: []string{"gc"}, never: []string{"publisher", "reader"}},
	// No library package depends on the configuration loader, the CLI, the
	// dev stack, the test fixtures or a binary.
	{
		from: []string{"authority", "publisher", "reader", "gc"},
		never: []string{"config", "internal/cli/...", "internal/devstack", "internal/testkit/...", "internal/lab/...", "cmd/...",
			"github.com/spf13/cobra", "github.com/spf13/viper"},
	},
	// config is the configuration loader only: no command tree, no writer
	// or reader, nothing that starts servers.
	{
		from: []string{"config"},
		never: []string{"publisher", "reader", "internal/cli", "internal/devstack", "internal/testkit/...", "internal/lab/...", "cmd/...",
			"github.com/spf13/cobra"},
	},
	// What ships in fencepub links no test fixture.
	{from: []string{"cmd/fencepub", "internal/devstack"}, never: []string{"internal/testkit/..."}},
	// The dev stack starts servers; it knows nothing of the protocol above
	// the store.
	{from: []string{"internal/devstack"}, never: []string{"authority", "publisher", "reader", "gc", "config", "internal/cli/..."}},
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

// goOut runs the go command with args in this module and returns its
// standard output.
func goOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// TestArchitecture checks the "never imports" rules on the build graph of
// every package of the module (go list: non-test dependencies).
func TestArchitecture(t *testing.T) {
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(goOut(t, "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./...")), "\n") {
		f := strings.Fields(line)
		deps[f[0]] = f[1:]
	}
	for _, r := range neverImports {
		checked := 0
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
		if checked == 0 {
			t.Errorf("the rule for %v matched no package", r.from)
		}
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

// publicPackages returns the import paths of the module's public
// packages: every package outside internal/, cmd/ and examples/.
func publicPackages(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	for _, p := range strings.Fields(goOut(t, "list", "./...")) {
		if !matchesAny(p, []string{"internal/...", "cmd/...", "examples/..."}) {
			pkgs = append(pkgs, p)
		}
	}
	return pkgs
}

// shipped returns the import paths of what a user builds: the public
// packages of the module and cmd/fencepub.
func shipped(t *testing.T) []string {
	t.Helper()
	return append([]string{module + "/cmd/fencepub"}, publicPackages(t)...)
}

// linkedModules returns the modules providing the packages that pkgs
// depend on (go list -deps; test dependencies too when test is set).
func linkedModules(t *testing.T, test bool, pkgs ...string) map[string]bool {
	t.Helper()
	args := []string{"list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}"}
	if test {
		args = append(args, "-test")
	}
	mods := map[string]bool{}
	for _, m := range strings.Fields(goOut(t, append(args, pkgs...)...)) {
		mods[m] = true
	}
	return mods
}

// The module's go.mod holds only what the library and fencepub need: every
// module that any package of the module links, its tests included, is one
// that the public packages or cmd/fencepub link, and so is every module
// go.mod requires directly. The programs and tests that need more (the
// chaos soak's checker, the benchmark suite's charts, the Kubernetes API
// types) live in the harness module, the build tools in the tools module.
func TestGoModNeedsOnlyWhatShips(t *testing.T) {
	need := linkedModules(t, false, shipped(t)...)
	all := linkedModules(t, true, "./...")
	for m := range all {
		if !need[m] {
			t.Errorf("a package or test of this module links %s, which neither the library nor fencepub needs: move its user to the harness module", m)
		}
	}
	var gomod struct {
		Require []struct {
			Path     string
			Indirect bool
		}
	}
	if err := json.Unmarshal([]byte(goOut(t, "mod", "edit", "-json")), &gomod); err != nil {
		t.Fatal(err)
	}
	direct := 0
	for _, r := range gomod.Require {
		if r.Indirect {
			continue
		}
		direct++
		if !need[r.Path] {
			t.Errorf("go.mod requires %s, which neither the library nor fencepub links", r.Path)
		}
	}
	if direct == 0 || !need["go.etcd.io/etcd/client/v3"] {
		t.Fatalf("%d direct requirements, linked modules %v: the check saw nothing", direct, need)
	}
}

// config costs a program the configuration loader: beyond the modules the
// four product packages link, it links github.com/spf13/viper and modules
// viper requires, nothing else (ARCHITECTURE.md, "config").
func TestConfigDependencyCost(t *testing.T) {
	product := linkedModules(t, false, "./authority", "./publisher", "./reader", "./gc")
	cfg := linkedModules(t, false, "./config")
	// viperReq: viper and the modules it requires, transitively, by path.
	viperReq := map[string]bool{}
	graph := map[string][]string{}
	var viper []string
	for _, line := range strings.Split(strings.TrimSpace(goOut(t, "mod", "graph")), "\n") {
		from, to, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		graph[from] = append(graph[from], to)
		if strings.HasPrefix(from, "github.com/spf13/viper@") && !slices.Contains(viper, from) {
			viper = append(viper, from)
		}
	}
	for len(viper) > 0 {
		n := viper[len(viper)-1]
		viper = viper[:len(viper)-1]
		path, _, _ := strings.Cut(n, "@")
		if viperReq[n] {
			continue
		}
		viperReq[n], viperReq[path] = true, true
		viper = append(viper, graph[n]...)
	}
	extra := 0
	for m := range cfg {
		if product[m] {
			continue
		}
		extra++
		if !viperReq[m] {
			t.Errorf("config links %s, which neither the product packages nor viper need", m)
		}
	}
	if !cfg["github.com/spf13/viper"] || extra == 0 {
		t.Fatalf("config links %v: the check saw no viper", cfg)
	}
}

// The CLI's packages, and the internal packages below the public library
// packages, whose sentinels the CLI must not classify with.
var (
	cliPackages     = []string{"./cmd/...", "./internal/cli/..."}
	libraryInternal = []string{"internal/debuglog", "internal/errkind", "internal/leader", "internal/fence", "internal/layout", "internal/objstore/...", "internal/ownership", "internal/retry", "internal/wait"}
)

// TestCLIClassifiesWithPublicErrors checks that the CLI picks its exit
// codes the way a program outside the module can: no non-test file of
// cmd/ or internal/cli names an Err* identifier of a package below the
// public library packages (libraryInternal), so every error it classifies
// matches a public sentinel (fencepub.ErrUnavailable, ...).
func TestCLIClassifiesWithPublicErrors(t *testing.T) {
	out := goOut(t, append([]string{"list", "-f", `{{.Dir}}{{range .GoFiles}} {{.}}{{end}}`}, cliPackages...)...)
	fset := token.NewFileSet()
	files := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
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
// name an internal package: its path ("internal/") or one of its
// identifiers ("layout.Version", "objstore.ErrExists"), which a program
// outside the module can neither import nor read. The root package's
// aliases (Version = layout.Version, Store = objstore.Store, ...) and the
// constants and errors it re-exports still show; every other public package
// shows none. A bound only ever falls: the test fails when a package shows
// more, and when it shows fewer (lower the bound).
var goDocLeaks = map[string]int{".": 23}

// TestGoDocShowsNoInternals runs `go doc -all` on every public package
// (every package of the module outside internal/, cmd/ and examples/) and
// checks its lines naming internal packages against goDocLeaks.
func TestGoDocShowsNoInternals(t *testing.T) {
	var names []string
	for _, p := range strings.Fields(goOut(t, "list", "-f", "{{.Name}}", "./internal/...")) {
		if !slices.Contains(names, p) {
			names = append(names, p)
		}
	}
	leak := regexp.MustCompile(`internal/|\b(` + strings.Join(names, "|") + `)\.[A-Z]`)
	pkgs := publicPackages(t)
	for _, p := range pkgs {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if rel == "" {
			rel = "."
		}
		var leaks []string
		for _, line := range strings.Split(goOut(t, "doc", "-all", p), "\n") {
			if leak.MatchString(line) {
				leaks = append(leaks, strings.TrimSpace(line))
			}
		}
		if bound := goDocLeaks[rel]; len(leaks) != bound {
			t.Errorf("go doc -all %s: %d lines name internal packages, the bound is %d:\n\t%s",
				rel, len(leaks), bound, strings.Join(leaks, "\n\t"))
		}
	}
	if len(pkgs) < 5 {
		t.Fatalf("found %d public packages; want the root, authority, publisher, reader and gc at least", len(pkgs))
	}
}

// No tracked file keeps a merge's conflict markers.
func TestNoConflictMarkers(t *testing.T) {
	out, err := exec.Command("git", "grep", "-n", "-I", "-E", "^(<{7,}|>{7,})( |$)").CombinedOutput()
	if err == nil {
		t.Fatalf("conflict markers:\n%s", out)
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("git grep: %v\n%s", err, out)
	}
}
