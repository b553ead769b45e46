//go:build !unit

package doctest

import (
	"context"
	"fmt"
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

	"github.com/yuin/goldmark/ast"
	"mvdan.cc/sh/v3/syntax"

	"github.com/fencepub/fencepub/internal/devstack"
)

// The shell blocks of the manuals under docs/ are held to the rule of
// docs/development.md, "Documentation": each command line is either run on a
// `fencepub dev up` stack or, where it cannot run here (a cluster, a restored
// etcd, /etc, a daemon), checked against the repository: commands and flags
// against the programs' own command trees, make targets against the
// Makefile, paths against the checkout and the deploy files. A line that is
// neither fails the test.

// shellLanguages are the info strings of the fenced blocks read as shell.
var shellLanguages = []string{"sh", "shell", "bash", "console"}

// placeholders are the names the manuals use for a value, and the value a
// line gets instead: the resource the stack's first publish creates, and a
// version (epoch E, fence F, seq S) so that the flags parse.
var placeholders = map[string]string{"R": "report", "E": "1", "F": "1", "S": "1"}

// notRunHere are the fencepub commands (by command path) that are checked,
// never run, with the reason.
var notRunHere = map[string]string{
	"dev up":            "starts a second, multi-node stack",
	"gc daemon":         "runs until it is stopped",
	"authority recover": "needs the etcd restored from a snapshot at the address shown",
}

// stackSetup are the commands run on the stack before the docs' lines: the
// resource the placeholders name exists.
var stackSetup = [][]string{
	{"dev", "up"},
	{"publish", "--resource", "report", "--owner", "docs", "--ttl", "10s", "--key", "setup", "--file", "README.md"},
}

// shellStmt is one command line of a shell block: a top-level statement with
// its continuation lines, and the comments on its lines.
// scriptBlocks names, per page, the text that marks a shell block which a
// test of its own runs whole as one script (TestDatasetsDocOnDevStack):
// its lines depend on each other, so they are not run one by one.
var scriptBlocks = map[string]string{"docs/datasets.md": "publish --resource nightly-export"}

type shellStmt struct {
	file     string
	line     int
	stmt     *syntax.Stmt
	comments []string
}

func (s shellStmt) String() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

// shellStmts returns the command lines of the shell blocks of docs; a block
// that does not parse as shell is an error of the test.
func shellStmts(t *testing.T, docs []mdDoc) []shellStmt {
	t.Helper()
	var out []shellStmt
	for _, d := range docs {
		_ = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
			fb, ok := n.(*ast.FencedCodeBlock)
			if !entering || !ok || !slices.Contains(shellLanguages, string(fb.Language(d.src))) || fb.Lines().Len() == 0 {
				return ast.WalkContinue, nil
			}
			if marker, ok := scriptBlocks[d.rel]; ok && strings.Contains(blockText(fb, d.src), marker) {
				return ast.WalkSkipChildren, nil // run whole, as a script, by the page's own test
			}
			first := d.line(fb.Lines().At(0).Start)
			f, err := syntax.NewParser(syntax.KeepComments(true)).Parse(strings.NewReader(blockText(fb, d.src)), d.rel)
			if err != nil {
				t.Errorf("%s:%d: the shell block does not parse: %v", d.rel, first, err)
				return ast.WalkSkipChildren, nil
			}
			for _, st := range f.Stmts {
				s := shellStmt{file: d.rel, line: first + int(st.Pos().Line()) - 1, stmt: st}
				for _, c := range st.Comments {
					if c.Hash.Line() >= st.Pos().Line() { // on its lines, not above it
						s.comments = append(s.comments, c.Text)
					}
				}
				out = append(out, s)
			}
			return ast.WalkSkipChildren, nil
		})
	}
	return out
}

// calls returns the simple commands of st, command substitutions' left out
// (they are values of the words that hold them).
func calls(st *syntax.Stmt) []*syntax.CallExpr {
	var out []*syntax.CallExpr
	syntax.Walk(st, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.CmdSubst:
			return false
		case *syntax.CallExpr:
			if len(n.Args) > 0 {
				out = append(out, n)
			}
		}
		return true
	})
	return out
}

// words returns the words of call as the shell source spells them.
func words(call *syntax.CallExpr) []string {
	out := make([]string, len(call.Args))
	for i, w := range call.Args {
		var b strings.Builder
		_ = syntax.NewPrinter().Print(&b, w)
		out[i] = b.String()
	}
	return out
}

// synopsisWord matches a word that stands for a value or for more words: a
// placeholder in capitals (K, PATH, CMD), an optional part in brackets, or an
// ellipsis.
var synopsisWord = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$|^\[|\]$|\.\.\.`)

// substitute replaces each word of st that is a key of placeholders (in
// brackets or not: "[--epoch E]") by its value, in place.
func substitute(st *syntax.Stmt) {
	for _, call := range calls(st) {
		for _, w := range call.Args {
			lit := w.Lit()
			if v, ok := placeholders[strings.Trim(lit, "[]")]; ok {
				w.Parts = []syntax.WordPart{&syntax.Lit{Value: strings.Replace(lit, strings.Trim(lit, "[]"), v, 1)}}
			}
		}
	}
}

var exitComment = regexp.MustCompile(`\(exit (\d+)\)`)

// expectedExit is the exit status a line's comment states as "(exit N)", 0
// if it states none.
func expectedExit(comments []string) int {
	for _, c := range comments {
		if m := exitComment.FindStringSubmatch(c); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n
		}
	}
	return 0
}

// cobraCLI checks command lines of a cobra program against what its --help
// shows: each command of the path exists, each flag is a visible one (cobra
// and Deprecate hide deprecated flags), and the line's flags and values parse
// (the line with --help appended exits 0 without doing anything).
type cobraCLI struct {
	name, bin string
	env       []string
	helps     map[string]cobraHelp // by command path
}

// cobraHelp is what `<command> --help` lists.
type cobraHelp struct {
	subcommands map[string]bool
	flags       map[string]bool // "--name" and "-n"
}

var (
	helpFlag    = regexp.MustCompile(`(?m)^\s+(?:(-\w), )?(--[\w-]+)`)
	helpCommand = regexp.MustCompile(`^\s+(\S+)\s`)
)

// help returns what `<c> <path> --help` lists.
func (c *cobraCLI) help(ctx context.Context, path []string) (cobraHelp, error) {
	key := strings.Join(path, " ")
	if h, ok := c.helps[key]; ok {
		return h, nil
	}
	out, err := c.command(ctx, append(slices.Clone(path), "--help")).CombinedOutput()
	if err != nil {
		return cobraHelp{}, fmt.Errorf("%s %s --help: %v\n%s", c.name, key, err, out)
	}
	h := cobraHelp{subcommands: map[string]bool{}, flags: map[string]bool{}}
	_, commands, _ := strings.Cut(string(out), "\nAvailable Commands:\n")
	for ln := range strings.Lines(commands) {
		m := helpCommand.FindStringSubmatch(ln)
		if m == nil {
			break
		}
		h.subcommands[m[1]] = true
	}
	for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
		h.flags[m[2]] = true
		if m[1] != "" {
			h.flags[m[1]] = true
		}
	}
	c.helps[key] = h
	return h, nil
}

func (c *cobraCLI) command(ctx context.Context, args []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	cmd.Dir = os.TempDir()
	return cmd
}

// check reports why args (the words after the program's name) are not a
// command line of c; it returns the command path.
func (c *cobraCLI) check(ctx context.Context, args []string) (string, error) {
	var path []string
	h, err := c.help(ctx, nil)
	for err == nil && len(path) < len(args) && len(h.subcommands) > 0 && !strings.HasPrefix(args[len(path)], "-") {
		sub := args[len(path)]
		if !h.subcommands[sub] {
			return "", fmt.Errorf("%q is not a command of `%s`", sub, strings.Join(append([]string{c.name}, path...), " "))
		}
		path = append(path, sub)
		h, err = c.help(ctx, path)
	}
	if err != nil {
		return "", err
	}
	full := strings.Join(append([]string{c.name}, path...), " ")
	flags := args
	if i := slices.Index(args, "--"); i >= 0 {
		flags = args[:i] // after "--": the arguments of the command it runs
	}
	var parse []string
	for _, a := range flags {
		a = strings.Trim(a, "[]")
		if a == "..." || a == "" {
			continue
		}
		parse = append(parse, a)
		if name, _, _ := strings.Cut(a, "="); strings.HasPrefix(a, "-") && !h.flags[name] {
			return "", fmt.Errorf("%s is not a flag `%s --help` shows (unknown, or hidden as deprecated)", name, full)
		}
	}
	if out, err := c.command(ctx, append(parse, "--help")).CombinedOutput(); err != nil {
		return "", fmt.Errorf("`%s %s --help` does not parse: %v\n%s", c.name, strings.Join(parse, " "), err, out)
	}
	return strings.Join(path, " "), nil
}

// repoChecker checks the command lines that cannot run here against the
// checkout.
type repoChecker struct {
	root     string
	clis     map[string]*cobraCLI // by the name a line calls
	makefile string
	deploy   string // the text of every file under deploy/
	config   string // docs/configuration.md
}

// repoPath reports whether the glob p, relative to the root, names a file
// or directory of the checkout.
func (r *repoChecker) repoPath(p string) error {
	m, err := filepath.Glob(filepath.Join(r.root, filepath.FromSlash(p)))
	if err != nil || len(m) == 0 {
		return fmt.Errorf("%s does not exist in the repository", p)
	}
	return nil
}

// deployed reports whether the deploy files name the installed path p, or
// its directory's entries as a systemd instance (/etc/fencepub/jobs/%i).
func (r *repoChecker) deployed(p string) error {
	if strings.Contains(r.deploy, p) || strings.Contains(r.deploy, path.Dir(p)+"/%i") {
		return nil
	}
	return fmt.Errorf("no file under deploy/ uses %s", p)
}

// operands returns the words of args that are not flags, nor a value of a
// flag in valued.
func operands(args []string, valued ...string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch {
		case slices.Contains(valued, args[i]):
			i++
		case !strings.HasPrefix(args[i], "-"):
			out = append(out, args[i])
		}
	}
	return out
}

// check reports why the simple command w (its words), run in the checkout's
// directory *cwd, does not match the repository; it sets *cwd for `cd`. The
// programs of clis are checked by their cobraCLI instead.
func (r *repoChecker) check(w []string, cwd *string) error {
	name, args := w[0], w[1:]
	switch name {
	case "cd":
		*cwd = path.Join(*cwd, args[0])
		return r.repoPath(*cwd)
	case "make":
		for _, a := range args {
			if v, _, ok := strings.Cut(a, "="); ok {
				if !regexp.MustCompile(`(?m)^` + v + `\s*[?:]?=`).MatchString(r.makefile) {
					return fmt.Errorf("the Makefile has no variable %s", v)
				}
			} else if !regexp.MustCompile(`(?m)^(?:[\w.-]+ )*` + regexp.QuoteMeta(a) + `(?: [\w.-]+)*:`).MatchString(r.makefile) {
				return fmt.Errorf("the Makefile has no target %s", a)
			}
		}
		return nil
	case "go":
		if len(args) == 0 || args[0] != "test" {
			return fmt.Errorf("no check for `go %s`", strings.Join(args, " "))
		}
		var dirs []string
		for _, a := range operands(args[1:], "-run", "-bench", "-count", "-timeout") {
			dirs = append(dirs, path.Join(*cwd, a))
		}
		for i, a := range args {
			if a != "-run" || i+1 == len(args) {
				continue
			}
			found := false
			for _, d := range dirs {
				files, _ := filepath.Glob(filepath.Join(r.root, filepath.FromSlash(d), "*_test.go"))
				for _, f := range files {
					src, _ := os.ReadFile(f)
					found = found || strings.Contains(string(src), "func "+args[i+1]+"(")
				}
			}
			if !found {
				return fmt.Errorf("no test %s in %v", args[i+1], dirs)
			}
		}
		for _, d := range dirs {
			if err := r.repoPath(path.Join(d, "*_test.go")); err != nil {
				return fmt.Errorf("%s holds no test", d)
			}
		}
		return nil
	case "docker":
		if len(args) == 0 || args[0] != "build" {
			return fmt.Errorf("no check for `docker %s`", strings.Join(args, " "))
		}
		dockerfile, err := os.ReadFile(filepath.Join(r.root, "Dockerfile"))
		if err != nil {
			return err
		}
		for i, a := range args {
			if a != "--build-arg" || i+1 == len(args) {
				continue
			}
			v, _, _ := strings.Cut(args[i+1], "=")
			if !regexp.MustCompile(`(?m)^ARG ` + v + `\b`).Match(dockerfile) {
				return fmt.Errorf("the Dockerfile has no ARG %s", v)
			}
		}
		ops := operands(args[1:], "--build-arg", "-t", "--tag", "-f", "--file")
		if len(ops) != 1 {
			return fmt.Errorf("docker build: want one context directory, got %q", ops)
		}
		return r.repoPath(path.Join(ops[0], "Dockerfile"))
	case "kubectl":
		switch {
		case len(args) > 2 && args[0] == "apply" && args[1] == "-f":
			return r.repoPath(args[2])
		case len(args) > 3 && args[0] == "create" && args[1] == "secret" && args[2] == "generic":
			names := []string{args[3]}
			for _, a := range args[4:] {
				if lit, ok := strings.CutPrefix(a, "--from-literal="); ok {
					k, _, _ := strings.Cut(lit, "=")
					names = append(names, k)
				}
			}
			for _, n := range names {
				if !strings.Contains(r.deploy, n) {
					return fmt.Errorf("no manifest under deploy/ uses the secret's %s", n)
				}
			}
			return nil
		}
		return fmt.Errorf("no check for `kubectl %s`", strings.Join(args, " "))
	case "install":
		ops := operands(args, "-m", "--mode")
		if len(ops) < 2 {
			return fmt.Errorf("install: want a source and a destination, got %q", ops)
		}
		for _, src := range ops[:len(ops)-1] {
			if strings.Contains(src, "/") {
				if err := r.repoPath(src); err != nil {
					return err
				}
			}
		}
		if dest := ops[len(ops)-1]; !strings.HasSuffix(dest, "/") {
			return r.deployed(dest)
		}
		return nil
	case "systemctl":
		if len(args) == 1 && args[0] == "daemon-reload" {
			return nil
		}
		if len(args) == 0 || args[0] != "enable" {
			return fmt.Errorf("no check for `systemctl %s`", strings.Join(args, " "))
		}
		for _, unit := range operands(args[1:]) {
			if at, suffix, ok := strings.Cut(unit, "@"); ok { // an instance of a template unit
				unit = at + "@" + path.Ext(suffix)
			}
			if err := r.repoPath(path.Join("deploy/systemd", unit)); err != nil {
				return err
			}
		}
		return nil
	case "printf":
		for _, v := range regexp.MustCompile(`FENCEPUB_[A-Z0-9_]+`).FindAllString(strings.Join(args, " "), -1) {
			if !strings.Contains(r.config, v) {
				return fmt.Errorf("docs/configuration.md does not document %s", v)
			}
		}
		return nil
	case "umask":
		if len(args) != 1 || !regexp.MustCompile(`^0?[0-7]{3}$`).MatchString(args[0]) {
			return fmt.Errorf("umask %q: want an octal mask", args)
		}
		return nil
	}
	return fmt.Errorf("%s: the line is neither run nor checked (no check for %s)", name, name)
}

// checkRedirects reports a redirection of st to an absolute path that no
// deploy file uses.
func (r *repoChecker) checkRedirects(st *syntax.Stmt) error {
	var err error
	syntax.Walk(st, func(n syntax.Node) bool {
		if rd, ok := n.(*syntax.Redirect); ok && rd.Word != nil && strings.HasPrefix(rd.Word.Lit(), "/") && err == nil {
			err = r.deployed(rd.Word.Lit())
		}
		return true
	})
	return err
}

// TestDocsShellLines covers every command line of every shell block of the
// manuals under docs/: a line whose commands are all fencepub commands that
// can run here is run, in order, on one `fencepub dev up` stack (after
// stackSetup, placeholders replaced) and must exit as its comment's
// "(exit N)" says, else 0; every other line is checked against the
// repository (repoChecker), and so is each run line's command line. A line
// that is neither fails, naming its file and line.
func TestDocsShellLines(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	docs := slices.DeleteFunc(markdownFiles(t, root), func(d mdDoc) bool { return !strings.HasPrefix(d.rel, "docs/") })
	stmts := shellStmts(t, docs)
	if len(stmts) == 0 {
		t.Fatal("no shell block under docs/")
	}
	var readme []byte
	var config string
	for _, d := range markdownFiles(t, root) {
		switch d.rel {
		case "README.md":
			readme = d.src
		case "docs/configuration.md":
			config = string(d.src)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := newDocStack(ctx, t, root, readme)
	bench := filepath.Join(s.work, "bin", "fencepub-bench")
	if out, err := exec.CommandContext(ctx, "go", "-C", filepath.Join(root, "harness"), "build", "-o", bench, "./cmd/fencepub-bench").CombinedOutput(); err != nil {
		t.Fatalf("go build fencepub-bench: %v\n%s", err, out)
	}
	etcdutl, err := devstack.Binary("etcdutl")
	if err != nil {
		t.Fatal(err)
	}
	fencepub := &cobraCLI{name: "fencepub", bin: s.fencepub, env: s.env, helps: map[string]cobraHelp{}}
	r := &repoChecker{root: root, config: config, clis: map[string]*cobraCLI{
		"fencepub":       fencepub,
		"./bin/fencepub": fencepub,
		"fencepub-bench": {name: "fencepub-bench", bin: bench, env: s.env, helps: map[string]cobraHelp{}},
		"etcdutl":        {name: "etcdutl", bin: etcdutl, env: s.env, helps: map[string]cobraHelp{}},
	}}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	r.makefile = strings.ReplaceAll(string(mk), "\\\n", " ")
	var deploy strings.Builder
	err = filepath.WalkDir(filepath.Join(root, "deploy"), func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			b, err := os.ReadFile(p)
			deploy.Write(b)
			return err
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	r.deploy = deploy.String()

	var toRun []shellStmt
	for _, st := range stmts {
		substitute(st.stmt)
		why := "" // why the line is not run; "" to run it
		cwd := "."
		for _, call := range calls(st.stmt) {
			w := words(call)
			var path string
			var err error
			if c, ok := r.clis[w[0]]; ok {
				path, err = c.check(ctx, w[1:])
			} else {
				err = r.check(w, &cwd)
			}
			if err != nil {
				t.Errorf("%s: %v", st, err)
			}
			switch {
			case why != "":
			case r.clis[w[0]] != fencepub:
				why = w[0] + " does not run here"
			case notRunHere[path] != "":
				why = "fencepub " + path + " " + notRunHere[path]
			case slices.ContainsFunc(w, synopsisWord.MatchString):
				why = "a synopsis, with placeholders"
			}
		}
		if why == "" {
			toRun = append(toRun, st)
			continue
		}
		if err := r.checkRedirects(st.stmt); err != nil {
			t.Errorf("%s: %v", st, err)
		}
		t.Logf("%s: not run (%s)", st, why)
	}
	if t.Failed() {
		return
	}
	if len(toRun) == 0 {
		t.Fatal("no line under docs/ can run on the stack")
	}
	for _, args := range stackSetup {
		s.run(s.fencepub, args...)
	}
	for _, st := range toRun {
		var b strings.Builder
		if err := syntax.NewPrinter().Print(&b, st.stmt); err != nil {
			t.Fatal(err)
		}
		want := expectedExit(st.comments)
		stdout, stderr, code := s.exec("sh", "-c", b.String())
		if code != want {
			t.Errorf("%s: `%s` exited %d, want %d\nstdout:\n%s\nstderr:\n%s", st, b.String(), code, want, stdout, stderr)
		}
		t.Logf("%s: run, exit %d", st, code)
	}
}
