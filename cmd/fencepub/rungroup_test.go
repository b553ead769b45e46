//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
)

// TestRunGroupCLI drives run --set against real etcd and MinIO: CMD writes
// a file and a directory and both are published as one group (one
// revision, read back as one cut); a CMD that fails, or that leaves a
// member unwritten, publishes nothing and leaves no holder; flag conflicts
// and a path already there are refused before anything is acquired.
func TestRunGroupCLI(t *testing.T) {
	conn, etcd, _ := testenv.CLIStack(t, "rungroup")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli, err := etcd.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ns, err := layout.NewNamespace("rungroup", "d1")
	if err != nil {
		t.Fatal(err)
	}
	// modRevision is the etcd revision that last wrote res's pointer.
	modRevision := func(res string) int64 {
		t.Helper()
		kv, err := cli.Get(ctx, ns.PointerKey(res))
		if err != nil || len(kv.Kvs) != 1 {
			t.Fatalf("pointer of %s: %v", res, err)
		}
		return kv.Kvs[0].ModRevision
	}
	run := func(wantCode int, args ...string) (string, string) {
		t.Helper()
		if i := slices.Index(args, "--"); i >= 0 { // the connection flags go before CMD
			args = slices.Concat(args[:i], conn, args[i:])
		} else {
			args = append(args, conn...)
		}
		out, errs, code := publishCLI(t, ctx, "", args...)
		if code != wantCode {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, out, errs)
		}
		return out, errs
	}
	type runJSON struct {
		publisher.GroupResult
		CommandExit int    `json:"command_exit"`
		ExitCode    int    `json:"exit_code"`
		Error       string `json:"error"`
	}
	// group runs script (sh -c; $1 is the report file, $2 the breakdown
	// directory, both under a fresh directory) with run --set.
	group := func(want int, key, script string) runJSON {
		t.Helper()
		root := t.TempDir()
		report, byCountry := filepath.Join(root, "report.csv"), filepath.Join(root, "by-country")
		out, _ := run(want, "run", "--set", "report="+report, "--set", "breakdown="+byCountry, "--key", key, "--owner", "job", "--ttl", "5s",
			"-o", "json", "--", "sh", "-c", script, "sh", report, byCountry)
		var r runJSON
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("run --set JSON: %v\n%s", err, out)
		}
		if r.ExitCode != want {
			t.Fatalf("run --set JSON exit_code %d, want %d: %+v", r.ExitCode, want, r)
		}
		return r
	}
	type cutJSON struct {
		Revision int64 `json:"revision"`
		Pointers []struct {
			Resource  string         `json:"resource"`
			Published bool           `json:"published"`
			Version   layout.Version `json:"version"`
		} `json:"pointers"`
	}
	cut := func() cutJSON {
		t.Helper()
		out, _ := run(0, "pointer", "--resource", "breakdown", "--resource", "report", "-o", "json")
		var c cutJSON
		if err := json.Unmarshal([]byte(out), &c); err != nil || len(c.Pointers) != 2 {
			t.Fatalf("pointer of two resources: %v\n%s", err, out)
		}
		return c
	}
	noHolder := func() {
		t.Helper()
		for _, res := range []string{"report", "breakdown"} {
			if h, ok, err := holderOf(ctx, t, conn, res); err != nil || ok {
				t.Fatalf("%s still held after run --set: %+v, %v", res, h, err)
			}
		}
	}

	const write = `printf 'total,3\n' > "$1" && mkdir "$2" && printf 'de,1\n' > "$2/de.csv" && printf 'fr,2\n' > "$2/fr.csv"`
	r := group(0, "day-1", `test "$FENCEPUB_RESOURCES" = "breakdown report" && `+write)
	if r.Outcome != publisher.Applied || r.CommandExit != 0 || len(r.Members) != 2 || r.Members[0].Resource != "breakdown" || r.Members[1].Resource != "report" {
		t.Fatalf("run --set: %+v", r)
	}
	c := cut()
	if c.Pointers[0].Version != r.Members[0].Version || c.Pointers[1].Version != r.Members[1].Version || c.Revision < r.Revision {
		t.Fatalf("cut after run --set: %+v; want the group's versions %s, %s at revision >= %d", c, r.Members[0].Version, r.Members[1].Version, r.Revision)
	}
	if b, rp := modRevision("breakdown"), modRevision("report"); b != rp || b != r.Revision {
		t.Fatalf("pointers written at revisions %d (breakdown) and %d (report); want both at the group's %d", b, rp, r.Revision)
	}
	noHolder()
	if again := group(0, "day-1", write); again.Outcome != publisher.Duplicate {
		t.Fatalf("the same run again: %+v", again)
	}

	// CMD fails after writing both members: its exit code, nothing moves.
	if failed := group(3, "day-2", write+" && exit 3"); failed.CommandExit != 3 || failed.Outcome != "not_published" {
		t.Fatalf("failing CMD: %+v", failed)
	}
	// CMD leaves the directory member unwritten: exit 2, nothing moves.
	missing := group(2, "day-3", `printf 'total,9\n' > "$1"`)
	if missing.Outcome != "not_published" || !strings.Contains(missing.Error, "wrote nothing at --set breakdown=") {
		t.Fatalf("a member CMD did not write: %+v", missing)
	}
	if after := cut(); after.Pointers[0].Version != r.Members[0].Version || after.Pointers[1].Version != r.Members[1].Version {
		t.Fatalf("a run that published nothing moved a pointer: %+v, want the versions of %+v", after, r)
	}
	noHolder()

	// Refused before anything is acquired.
	exists := filepath.Join(t.TempDir(), "report.csv")
	if err := os.WriteFile(exists, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := filepath.Join(t.TempDir(), "x")
	for _, bad := range [][]string{
		{"run", "--set", "report=" + fresh, "--resource", "report", "--", "true"},
		{"run", "--set", "report=" + fresh, "--file", exists, "--", "true"},
		{"run", "--set", "report=" + fresh, "--output-dir", fresh, "--", "true"},
		{"run", "--set", "report=" + fresh, "--set", "report=" + exists, "--", "true"},
		{"run", "--set", "report=" + exists, "--", "true"},
		{"run", "--set", "report", "--", "true"},
	} {
		run(2, bad...)
	}
	noHolder()
}
