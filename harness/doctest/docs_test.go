//go:build !unit

package doctest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/scanner"
	"go/token"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"

	"github.com/fencepub/fencepub/internal/devstack"
)

// The repository's documentation is checked against the repository
// (docs/development.md, "Documentation"): every relative link of every
// Markdown file resolves, every ```go block compiles, the README's first
// steps and its program run on a `fencepub dev up` stack, and every path the
// Makefile hands to `go run` or `go build` exists.

// mdDoc is one parsed Markdown file of the repository.
type mdDoc struct {
	rel  string // path relative to the repository root, with slashes
	src  []byte
	root ast.Node
}

// markdownParser parses GitHub-flavoured Markdown (tables and autolinks
// included), as the repository's host renders it.
var markdownParser = goldmark.New(goldmark.WithExtensions(extension.GFM)).Parser()

// markdownFiles returns the repository's Markdown files: tracked, or new and
// not ignored (the set `make fmt` takes for Go files), relative to root.
func markdownFiles(t *testing.T, root string) []mdDoc {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard", "*.md").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var docs []mdDoc
	for rel := range strings.SplitSeq(string(out), "\x00") {
		if rel == "" {
			continue
		}
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, mdDoc{rel: rel, src: src, root: markdownParser.Parse(text.NewReader(src))})
	}
	if len(docs) == 0 {
		t.Fatalf("no Markdown file found under %s", root)
	}
	return docs
}

// line returns the 1-based line of byte offset off in d.
func (d mdDoc) line(off int) int { return bytes.Count(d.src[:off], []byte("\n")) + 1 }

// anchors returns the fragment identifiers of d's headings, as GitHub makes
// them: githubSlug of the heading's text, a repeated one suffixed -1, -2, ...
func (d mdDoc) anchors() map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	_ = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		h, ok := n.(*ast.Heading)
		if !entering || !ok {
			return ast.WalkContinue, nil
		}
		slug := githubSlug(plainText(h, d.src))
		if k := seen[slug]; k > 0 {
			out[slug+"-"+strconv.Itoa(k)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
		return ast.WalkSkipChildren, nil
	})
	return out
}

// plainText returns the text n renders to, without markup: code spans'
// contents included, link destinations and raw HTML left out.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch c := c.(type) {
		case *ast.Text:
			b.Write(c.Segment.Value(src))
			if c.SoftLineBreak() {
				b.WriteByte(' ')
			}
		case *ast.String:
			b.Write(c.Value)
		case *ast.RawHTML:
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// githubSlug is the anchor GitHub gives a heading of text s: lower case,
// every character but letters, marks, digits, connector punctuation ("_"),
// "-" and " " removed, and each space turned into "-".
func githubSlug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.Pc):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubSlug(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"Exit codes": "exit-codes",
		"etcd lost with no snapshot: recover --from-bucket": "etcd-lost-with-no-snapshot-recover---from-bucket",
		"Alert rules and dashboard: deploy/monitoring":      "alert-rules-and-dashboard-deploymonitoring",
		"§Scope: the resource's commit point":               "scope-the-resources-commit-point",
		"Garbage collection — by fences, not_clocks":        "garbage-collection--by-fences-not_clocks",
	} {
		if got := githubSlug(in); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", in, got, want)
		}
	}
}

// mdLink is a link or image destination in a Markdown file.
type mdLink struct {
	dest string
	line int
}

// links returns every link and image destination of d.
func (d mdDoc) links() []mdLink {
	var out []mdLink
	_ = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		var dest []byte
		switch n := n.(type) {
		case *ast.Link:
			dest = n.Destination
		case *ast.Image:
			dest = n.Destination
		default:
			return ast.WalkContinue, nil
		}
		out = append(out, mdLink{dest: string(dest), line: d.line(firstOffset(n, d.src))})
		return ast.WalkContinue, nil
	})
	return out
}

// firstOffset returns the offset of the first text segment at or under n
// (0 when it has none), to name a link's line.
func firstOffset(n ast.Node, src []byte) int {
	off := -1
	_ = ast.Walk(n, func(c ast.Node, entering bool) (ast.WalkStatus, error) {
		if t, ok := c.(*ast.Text); ok && entering {
			off = t.Segment.Start
			return ast.WalkStop, nil
		}
		return ast.WalkContinue, nil
	})
	for p := n; off < 0 && p != nil; p = p.Parent() {
		if p.Type() == ast.TypeBlock && p.Lines().Len() > 0 {
			off = p.Lines().At(0).Start
		}
	}
	return max(off, 0)
}

// TestMarkdownLinks checks every relative link and image of every Markdown
// file in the repository: the file or directory it names exists inside the
// repository, and a #fragment into a Markdown file names one of its
// headings. Links with a scheme (https:, mailto:) are not followed.
func TestMarkdownLinks(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	docs := markdownFiles(t, root)
	anchors := map[string]map[string]bool{}
	for _, d := range docs {
		anchors[d.rel] = d.anchors()
	}
	checked := 0
	for _, d := range docs {
		for _, l := range d.links() {
			if err := checkLink(root, d.rel, l.dest, anchors); err != nil {
				t.Errorf("%s:%d: link %q: %v", d.rel, l.line, l.dest, err)
			}
			checked++
		}
	}
	if checked == 0 {
		t.Fatal("no link found in the repository's Markdown")
	}
}

// checkLink reports why dest, a link in the Markdown file from (relative to
// root), does not resolve; nil if it does or if it is not relative.
func checkLink(root, from, dest string, anchors map[string]map[string]bool) error {
	u, err := url.Parse(dest)
	if err != nil {
		return err
	}
	if u.Scheme != "" || u.Host != "" {
		return nil
	}
	target := from
	if u.Path != "" {
		if strings.HasPrefix(u.Path, "/") {
			target = path.Clean(strings.TrimPrefix(u.Path, "/"))
		} else {
			target = path.Join(path.Dir(from), u.Path)
		}
	}
	if target == ".." || strings.HasPrefix(target, "../") {
		return fmt.Errorf("points outside the repository (%s)", target)
	}
	if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(target))); err != nil {
		return fmt.Errorf("%s does not exist", target)
	}
	if u.Fragment == "" || !strings.HasSuffix(target, ".md") {
		return nil
	}
	a, ok := anchors[target]
	if !ok {
		return fmt.Errorf("%s is not one of the repository's Markdown files", target)
	}
	if !a[u.Fragment] {
		return fmt.Errorf("%s has no heading with anchor #%s", target, u.Fragment)
	}
	return nil
}

// goBlock is a ```go block of a Markdown file.
type goBlock struct {
	file string // Markdown file, relative to the repository root
	line int    // line of the block's first line of code
	code string
}

// goBlocks returns the ```go blocks of docs.
func goBlocks(docs []mdDoc) []goBlock {
	var out []goBlock
	for _, d := range docs {
		_ = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
			fb, ok := n.(*ast.FencedCodeBlock)
			if !entering || !ok || string(fb.Language(d.src)) != "go" || fb.Lines().Len() == 0 {
				return ast.WalkContinue, nil
			}
			out = append(out, goBlock{file: d.rel, line: d.line(fb.Lines().At(0).Start), code: blockText(fb, d.src)})
			return ast.WalkSkipChildren, nil
		})
	}
	return out
}

// blockText returns the text of a fenced code block.
func blockText(fb *ast.FencedCodeBlock, src []byte) string {
	var b strings.Builder
	lines := fb.Lines()
	for i := range lines.Len() {
		seg := lines.At(i)
		b.Write(seg.Value(src))
	}
	return b.String()
}

// docImports are the packages a ```go block without a package clause may
// use by these names; goFile imports those it names (docs/development.md,
// "Documentation").
var docImports = map[string]string{
	"context": "context", "errors": "errors", "fmt": "fmt", "io": "io", "log": "log", "os": "os",
	"strings": "strings", "time": "time",
	"fencepub":  "github.com/fencepub/fencepub",
	"authority": "github.com/fencepub/fencepub/authority",
	"publisher": "github.com/fencepub/fencepub/publisher",
	"reader":    "github.com/fencepub/fencepub/reader",
	"gc":        "github.com/fencepub/fencepub/gc",
	"config":    "github.com/fencepub/fencepub/config",
	"clientv3":  "go.etcd.io/etcd/client/v3",
}

// goFile returns the Go file block b stands for, and the number of lines
// that precede the block's first line in it. A block whose first token is
// `package` is a whole file as it is; any other block is the body of
// `func main` in package main, importing the docImports it names.
func (b goBlock) goFile() (src string, header int) {
	var s scanner.Scanner
	fset := token.NewFileSet()
	s.Init(fset.AddFile(b.file, -1, len(b.code)), []byte(b.code), nil, 0)
	var names []string
	prev := token.ILLEGAL
	var prevLit string
	first := true
	for {
		_, tok, lit := s.Scan()
		if tok == token.EOF {
			break
		}
		if first {
			if tok == token.PACKAGE {
				return b.code, 0
			}
			first = false
		}
		if tok == token.PERIOD && prev == token.IDENT {
			if _, ok := docImports[prevLit]; ok && !slices.Contains(names, prevLit) {
				names = append(names, prevLit)
			}
		}
		prev, prevLit = tok, lit
	}
	slices.Sort(names)
	var h strings.Builder
	h.WriteString("package main\n\nimport (\n")
	for _, n := range names {
		fmt.Fprintf(&h, "\t%s %q\n", n, docImports[n])
	}
	h.WriteString(")\n\nfunc main() {\n")
	return h.String() + b.code + "}\n", strings.Count(h.String(), "\n")
}

// docModule is a throwaway module that requires this checkout (through a
// replace, as `make examples-module` builds examples/), holding one package
// per ```go block: b00, b01, ...
type docModule struct {
	dir    string
	blocks []goBlock
	header []int
}

// newDocModule writes blocks into a new module in a temporary directory.
func newDocModule(t *testing.T, root string, blocks []goBlock) *docModule {
	t.Helper()
	m := &docModule{dir: t.TempDir(), blocks: blocks}
	goVersion, err := exec.Command("go", "-C", root, "list", "-m", "-f", "{{.GoVersion}}").Output()
	if err != nil {
		t.Fatalf("go list -m: %v", err)
	}
	mod := fmt.Sprintf("module example.com/fencepub-docs\n\ngo %s\n\nrequire github.com/fencepub/fencepub v0.0.0\n\nreplace github.com/fencepub/fencepub => %s\n",
		strings.TrimSpace(string(goVersion)), root)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"go.mod": []byte(mod), "go.sum": sum}
	for i, b := range blocks {
		src, header := b.goFile()
		files[filepath.Join(m.pkg(i), "main.go")] = []byte(src)
		m.header = append(m.header, header)
	}
	for name, body := range files {
		p := filepath.Join(m.dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

// pkg is the directory of block i.
func (m *docModule) pkg(i int) string { return fmt.Sprintf("b%02d", i) }

// goCmd runs go with args in the module; its output names the Markdown
// lines of the blocks instead of the generated files.
func (m *docModule) goCmd(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = m.dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	return blockLine.ReplaceAllStringFunc(string(out), func(s string) string {
		sub := blockLine.FindStringSubmatch(s)
		i, _ := strconv.Atoi(sub[1])
		n, _ := strconv.Atoi(sub[2])
		if i >= len(m.blocks) {
			return s
		}
		return fmt.Sprintf("%s:%d", m.blocks[i].file, m.blocks[i].line+n-1-m.header[i])
	}), err
}

// blockLine matches a position in a block's generated file, as go build
// prints it.
var blockLine = regexp.MustCompile(`b(\d+)/main\.go:(\d+)`)

// TestDocsGoBlocks builds every ```go block of the repository's Markdown
// in a module of its own that requires this checkout: the code the docs show
// compiles against the public API, as a user would copy it.
func TestDocsGoBlocks(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	blocks := goBlocks(markdownFiles(t, root))
	if !slices.ContainsFunc(blocks, func(b goBlock) bool { return b.file == "README.md" }) {
		t.Fatal("README.md shows no ```go block")
	}
	m := newDocModule(t, root, blocks)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"build", "./..."}, {"vet", "./..."}} {
		if out, err := m.goCmd(ctx, args...); err != nil {
			t.Fatalf("go %s of the docs' Go blocks: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// shellBlock returns the first ```sh block of the Markdown file d that
// contains substr.
func shellBlock(t *testing.T, d mdDoc, substr string) string {
	t.Helper()
	var found string
	_ = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		fb, ok := n.(*ast.FencedCodeBlock)
		if !entering || !ok || string(fb.Language(d.src)) != "sh" {
			return ast.WalkContinue, nil
		}
		if code := blockText(fb, d.src); strings.Contains(code, substr) {
			found = code
			return ast.WalkStop, nil
		}
		return ast.WalkSkipChildren, nil
	})
	if found == "" {
		t.Fatalf("%s has no ```sh block with %q", d.rel, substr)
	}
	return found
}

// docEnv is the environment of the README's commands: the test's, without
// FENCEPUB_* settings (they would override the file `dev up` writes), with
// a HOME of its own and the servers' directory.
func docEnv(t *testing.T, home string) []string {
	t.Helper()
	bin, err := devstack.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := devstack.Binary("etcd"); err != nil {
		t.Fatal(err)
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "FENCEPUB_") || strings.HasPrefix(kv, "HOME=")
	})
	return append(env, "FENCEPUB_BIN_DIR="+bin, "HOME="+home)
}

// docStack is a scratch directory where the docs' commands run as a reader
// types them: bin/fencepub built from this checkout (also first on PATH, for
// lines that say `fencepub`), README.md, the environment of docEnv, and a
// `fencepub dev up` stack once a command starts it, which the test's cleanup
// takes down.
type docStack struct {
	t        *testing.T
	ctx      context.Context
	work     string
	env      []string
	fencepub string
}

// newDocStack builds fencepub from the checkout at root into a new scratch
// directory with a copy of readme; commands run there until ctx ends.
func newDocStack(ctx context.Context, t *testing.T, root string, readme []byte) *docStack {
	t.Helper()
	s := &docStack{t: t, ctx: ctx, work: t.TempDir()}
	s.fencepub = filepath.Join(s.work, "bin", "fencepub")
	s.env = append(docEnv(t, t.TempDir()), "PATH="+filepath.Dir(s.fencepub)+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := exec.CommandContext(ctx, "go", "-C", root, "build", "-o", s.fencepub, "./cmd/fencepub").CombinedOutput(); err != nil {
		t.Fatalf("go build fencepub: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(s.work, "README.md"), readme, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(s.work, ".dev")); err != nil {
			return // no command started a stack
		}
		cmd := exec.Command(s.fencepub, "dev", "down")
		cmd.Dir, cmd.Env = s.work, s.env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("fencepub dev down: %v\n%s", err, out)
		}
	})
	return s
}

// exec runs name with args in the scratch directory and returns its output
// and exit status (-1 if it did not start or was killed).
func (s *docStack) exec(name string, args ...string) (stdout, stderr string, code int) {
	cmd := exec.CommandContext(s.ctx, name, args...)
	cmd.Dir, cmd.Env = s.work, s.env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = cmd.ProcessState.ExitCode()
	if err != nil && code == 0 {
		code = -1
	}
	if code < 0 {
		fmt.Fprintf(&e, "\n%v", err)
	}
	return o.String(), e.String(), code
}

// run is exec that fails the test unless the command exits 0.
func (s *docStack) run(name string, args ...string) string {
	s.t.Helper()
	stdout, stderr, code := s.exec(name, args...)
	if code != 0 {
		s.t.Fatalf("%s %q: exit %d\nstdout:\n%s\nstderr:\n%s", name, args, code, stdout, stderr)
	}
	return stdout
}

// TestReadmeOnDevStack follows the README in a fresh directory: its "Try
// it" commands as a shell script (`fencepub dev up`, publish, pointer,
// read, run), then its Go program, built against this checkout and run
// there as is. The program must publish into the domain the CLI uses: the
// version it prints is the pointer `fencepub pointer --resource report`
// shows afterwards, moved from the one the script's publish left.
func TestReadmeOnDevStack(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	var readme mdDoc
	docs := markdownFiles(t, root)
	for _, d := range docs {
		if d.rel == "README.md" {
			readme = d
		}
	}
	script := shellBlock(t, readme, "fencepub dev up")
	var program []goBlock
	for _, b := range goBlocks([]mdDoc{readme}) {
		if strings.Contains(b.code, "config.Connect") {
			program = append(program, b)
		}
	}
	if len(program) != 1 {
		t.Fatalf("README.md has %d ```go blocks calling config.Connect, want 1", len(program))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := newDocStack(ctx, t, root, readme.src)
	m := newDocModule(t, root, program)
	prog := filepath.Join(s.work, "readme-program")
	if out, err := m.goCmd(ctx, "build", "-o", prog, "./"+m.pkg(0)); err != nil {
		t.Fatalf("go build of the README's program: %v\n%s", err, out)
	}
	s.run("sh", "-eu", "-c", script)

	pointer := func() string {
		t.Helper()
		var ptr struct {
			Version struct{ Epoch, Fence, Seq uint64 } `json:"version"`
		}
		out := s.run(s.fencepub, "pointer", "--resource", "report", "-o", "json")
		if err := json.Unmarshal([]byte(out), &ptr); err != nil {
			t.Fatalf("pointer -o json: %v\n%s", err, out)
		}
		return fmt.Sprintf("%d.%d.%d", ptr.Version.Epoch, ptr.Version.Fence, ptr.Version.Seq)
	}
	before := pointer() // what the script's publish left
	fields := strings.Fields(s.run(prog))
	if len(fields) != 2 || fields[0] != "applied" {
		t.Fatalf("the README's program printed %q, want `applied <version>`", fields)
	}
	if after := pointer(); after != fields[1] || after == before {
		t.Fatalf("the program published %s; `fencepub pointer --resource report` shows %s (before the program: %s): the two use different domains",
			fields[1], after, before)
	}
}

// makeGoPackages returns the package arguments of every `$(GO) run` and
// `$(GO) build` in the Makefile text mk that name a directory of the
// checkout (./path, relative to the root, or to the directory of a `cd DIR &&`
// before it or of `-C DIR`; or an import path under the module's path), as
// ./paths from the root, by the make target whose recipe holds them.
func makeGoPackages(mk string) map[string][]string {
	mk = strings.ReplaceAll(mk, "\\\n", " ")
	out := map[string][]string{}
	target := ""
	goCmd := regexp.MustCompile(`\$\(GO\)\s+(?:-C\s+(\S+)\s+)?(?:run|build)\s`)
	end := regexp.MustCompile(`;|&&|\|\||\||>`)
	cd := regexp.MustCompile(`cd\s+(\S+)\s*&&\s*$`)
	for _, ln := range strings.Split(mk, "\n") {
		if t, _, ok := strings.Cut(ln, ":"); ok && t != "" && !strings.HasPrefix(ln, "\t") && !strings.ContainsAny(t, " =$#") {
			target = t
		}
		for _, loc := range goCmd.FindAllStringSubmatchIndex(ln, -1) {
			args := ln[loc[1]:]
			if e := end.FindStringIndex(args); e != nil {
				args = args[:e[0]]
			}
			for _, f := range strings.Fields(args) {
				f = strings.TrimRight(f, ")")
				if rel, ok := strings.CutPrefix(f, "github.com/fencepub/fencepub/"); ok {
					out[target] = append(out[target], "./"+rel)
					continue
				}
				if !strings.HasPrefix(f, "./") && !strings.HasPrefix(f, "../") {
					continue
				}
				if loc[2] >= 0 {
					f = "./" + path.Join(ln[loc[2]:loc[3]], f) // relative to -C DIR
				} else if c := cd.FindStringSubmatch(ln[:loc[0]]); c != nil {
					f = "./" + path.Join(c[1], f) // relative to the directory the recipe changed to
				}
				out[target] = append(out[target], f)
			}
		}
	}
	return out
}

// TestMakefileGoPaths checks that every directory the Makefile passes to
// `go run` or `go build` exists and holds a Go package, so `make demo`,
// `make build` and `make chaos` cannot name a path that moved.
func TestMakefileGoPaths(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	byTarget := makeGoPackages(string(mk))
	for _, target := range []string{"demo", "build", "chaos"} {
		if len(byTarget[target]) == 0 {
			t.Errorf("make %s: no `$(GO) run` or `$(GO) build` of a ./path found", target)
		}
	}
	for target, pkgs := range byTarget {
		for _, p := range pkgs {
			if tree, ok := strings.CutSuffix(p, "/..."); ok {
				// A pattern: its root must be a directory.
				if st, err := os.Stat(filepath.Join(root, filepath.FromSlash(tree))); err != nil || !st.IsDir() {
					t.Errorf("make %s: %s: %s is not a directory of the checkout", target, p, tree)
				}
				continue
			}
			goFiles, _ := filepath.Glob(filepath.Join(root, filepath.FromSlash(p), "*.go"))
			if len(goFiles) == 0 {
				t.Errorf("make %s: %s is not a Go package directory of the checkout", target, p)
			}
		}
	}
}

func TestMakeGoPackages(t *testing.T) {
	t.Parallel()
	got := makeGoPackages("x: y\n\t$(GO) build -o $(BIN)/a ./cmd/a && \\\n\t$(GO) run ./b/cmd --bin $(BIN)\n## z: doc\nz:\n\t(cd tools && $(GO) build -o x example.com/y)\n\t(cd x && $(GO) build ./c)\n\t$(GO) -C h build ./d\n\t$(GO) -C h run github.com/fencepub/fencepub/h/e --bin x\n")
	if !slices.Equal(got["x"], []string{"./cmd/a", "./b/cmd"}) || !slices.Equal(got["z"], []string{"./x/c", "./h/d", "./h/e"}) {
		t.Fatalf("makeGoPackages = %v", got)
	}
}

// repoRoot is the checkout's root: this package is harness/doctest.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestDatasetsDocOnDevStack runs the ```sh block of docs/datasets.md as a
// script in a fresh directory, with fencepub built from this checkout at
// ./bin/fencepub, on the `fencepub dev up` stack the script starts; then
// checks what it left: the copy it read equals the directory it published.
// Not parallel: one dev stack at a time.
func TestDatasetsDocOnDevStack(t *testing.T) {
	root := repoRoot(t)
	var doc mdDoc
	for _, d := range markdownFiles(t, root) {
		if d.rel == "docs/datasets.md" {
			doc = d
		}
	}
	if doc.rel == "" {
		t.Fatal("docs/datasets.md not found")
	}
	script := shellBlock(t, doc, scriptBlocks[doc.rel])
	work := t.TempDir()
	env := docEnv(t, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fencepub := filepath.Join(work, "bin", "fencepub")
	if out, err := exec.CommandContext(ctx, "go", "-C", root, "build", "-o", fencepub, "./cmd/fencepub").CombinedOutput(); err != nil {
		t.Fatalf("go build fencepub: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		cmd := exec.Command(fencepub, "dev", "down")
		cmd.Dir, cmd.Env = work, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("fencepub dev down: %v\n%s", err, out)
		}
	})
	cmd := exec.CommandContext(ctx, "sh", "-eu", "-c", script)
	cmd.Dir, cmd.Env = work, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("docs/datasets.md script: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), `"reused_files": 3`) {
		t.Fatalf("the second publish did not reuse 3 files, as the page says:\n%s", stdout.String())
	}
	for _, rel := range []string{"part/00000.csv", "part/00001.csv", "part/00002.csv", "schema.json"} {
		want, err := os.ReadFile(filepath.Join(work, "out", rel))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := os.ReadFile(filepath.Join(work, "copy", rel)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("copy/%s = %q, %v; want %q", rel, got, err, want)
		}
	}
}
