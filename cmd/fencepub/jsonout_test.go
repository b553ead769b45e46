//go:build !unit

package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// decodeDoc decodes out as one JSON object that starts with schema_version
// cli.SchemaVersion, using json.Number so that large integers are seen as
// printed.
func decodeDoc(t *testing.T, what, out string) map[string]any {
	t.Helper()
	if !strings.HasPrefix(strings.TrimSpace(out), "{\n  \"schema_version\": 1,") && !strings.HasPrefix(out, `{"schema_version":1,`) {
		t.Fatalf("%s: document does not start with schema_version 1:\n%s", what, out)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, out)
	}
	return m
}

// TestJSONOutputStability runs every kind of JSON document the CLI prints
// on a real stack: each carries schema_version, lease IDs (above 2^53) are
// decimal strings, and durations are seconds in fields named *_seconds.
func TestJSONOutputStability(t *testing.T) {
	conn, _, _ := testenv.CLIStack(t, "jsonout")
	body := filepath.Join(t.TempDir(), "body.txt")
	if err := os.WriteFile(body, []byte("stable"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) map[string]any {
		t.Helper()
		argv := append([]string{}, args...)
		if i := slices.Index(argv, "--"); i >= 0 { // the connection flags go before a wrapped command
			argv = append(append(argv[:i:i], conn...), args[i:]...)
		} else {
			argv = append(argv, conn...)
		}
		out := runWant(t, 0, argv...)
		end := strings.LastIndex(out, "}\n")
		return decodeDoc(t, args[0], out[:end+2])
	}

	acq := run("authority", "acquire", "--resource", "job", "--owner", "alice", "--ttl", "30s", "-o", "json")
	id, ok := acq["lease_id"].(string)
	if !ok {
		t.Fatalf("lease_id %v (%T) is not a string", acq["lease_id"], acq["lease_id"])
	}
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		t.Fatalf("lease_id %q: %v", id, err)
	}
	if acq["ttl_seconds"] != json.Number("30") {
		t.Fatalf("ttl_seconds = %v, want 30", acq["ttl_seconds"])
	}
	show := run("authority", "show", "--resource", "job", "-o", "json")
	holder := show["holder"].(map[string]any)
	if holder["lease_id"] != id || holder["remaining_seconds"] == nil {
		t.Fatalf("authority show holder %v: want lease_id %q and remaining_seconds", holder, id)
	}
	run("authority", "release", "--resource", "job", "--owner", "alice", "--generation", acq["generation"].(json.Number).String(), "-o", "json")
	if pub := run("publish", "--resource", "doc", "--owner", "me", "--ttl", "10s", "--key", "k1", "--file", body, "-o", "json"); pub["exit_code"] != json.Number("0") {
		t.Fatalf("publish JSON exit_code %v, want 0", pub["exit_code"])
	}
	ran := run("run", "--resource", "ran", "--owner", "me", "--ttl", "10s", "-o", "json", "--", "echo", "hi")
	if _, err := ran["duration_seconds"].(json.Number).Float64(); err != nil || ran["exit_code"] != json.Number("0") {
		t.Fatalf("run duration_seconds %v (%v), exit_code %v", ran["duration_seconds"], err, ran["exit_code"])
	}
	// A former spelling (run --format) warns on stderr; stdout stays the
	// document alone.
	if old := run("run", "--resource", "ran2", "--owner", "me", "--ttl", "10s", "--format", "json", "--", "echo", "hi"); old["outcome"] != "applied" {
		t.Fatalf("run --format json: %v", old)
	}
	read := run("read", "--resource", "doc", "--out", filepath.Join(t.TempDir(), "doc.out"), "-o", "json")
	if v, ok := read["version"].(map[string]any); read["bytes"] != json.Number("6") || !ok || v["seq"] != json.Number("1") || read["resource"] != "doc" {
		t.Fatalf("read -o json: %v; want resource doc, 6 bytes at seq 1", read)
	}
	run("pointer", "--resource", "doc", "-o", "json")
	run("ls", "-o", "json")
	run("history", "--resource", "doc", "-o", "json")
	gcRep := run("gc", "run", "--all", "-o", "json")
	if gcRep["duration_seconds"] == nil {
		t.Fatalf("gc run JSON lacks duration_seconds: %v", gcRep)
	}
	if out := runWant(t, 0, "version", "-o", "json"); decodeDoc(t, "version", out)["go_version"] == nil {
		t.Fatalf("version -o json: %s", out)
	}
	run("config", "show", "-o", "json")
	watched := runWant(t, 0, append([]string{"watch", "--resource", "doc", "--count", "1"}, conn...)...)
	line, _, _ := bytes.Cut([]byte(watched), []byte("\n"))
	decodeDoc(t, "watch", string(line)+"\n")
}
