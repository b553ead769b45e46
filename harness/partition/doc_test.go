package partition

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPartitionsDoc checks what docs/partitions.md tells a reader to run:
// every `make` target it names is one of the Makefile's, the partitions
// target runs this package's full suite (FullEnv=full), the smoke suite
// target runs this package, and every FENCEPUB_ variable it names is one
// this package reads. The page shows no other command.
func TestPartitionsDoc(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "partitions.md"))
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	recipes := map[string]string{} // target → its recipe lines
	var cur string
	for _, ln := range strings.Split(string(mk), "\n") {
		switch {
		case strings.HasPrefix(ln, "\t") && cur != "":
			recipes[cur] += ln + "\n"
		case regexp.MustCompile(`^[a-z][a-z0-9-]*:`).MatchString(ln):
			cur = ln[:strings.IndexByte(ln, ':')]
			recipes[cur] += ""
		default:
			cur = ""
		}
	}
	makes := regexp.MustCompile("`make ([a-z][a-z0-9-]*)").FindAllStringSubmatch(string(doc), -1)
	if len(makes) == 0 {
		t.Fatal("docs/partitions.md names no make target")
	}
	for _, m := range makes {
		if _, ok := recipes[m[1]]; !ok {
			t.Errorf("docs/partitions.md names `make %s`, which the Makefile does not define", m[1])
		}
	}
	if r := recipes["partitions"]; !strings.Contains(r, FullEnv+"=full") || !strings.Contains(r, "./partition") {
		t.Errorf("make partitions does not run ./partition with %s=full:\n%s", FullEnv, r)
	}
	if r := recipes["suite-partitions"]; !strings.Contains(r, "./partition") || strings.Contains(r, FullEnv) {
		t.Errorf("make suite-partitions does not run the smoke subset of ./partition:\n%s", r)
	}
	for _, v := range regexp.MustCompile(`FENCEPUB_[A-Z_]+`).FindAllString(string(doc), -1) {
		if v != DeselectEnv && v != FullEnv {
			t.Errorf("docs/partitions.md names %s, which the partition suite does not read", v)
		}
	}
	if strings.Contains(string(doc), "```sh") || strings.Contains(string(doc), "```console") {
		t.Error("docs/partitions.md shows a shell block: show only make targets and variables, which this test checks")
	}
}
