//go:build !unit

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestJSONLogs runs the fencepub binary in JSON log mode (flag, environment
// and config file) through succeeding and failing commands and decodes
// every stderr line as JSON: fencepub's own messages, a wrapped command's
// stderr under `run`, and the final error with its exit code. Stdout keeps
// the command's result. --log-level warn drops the info messages.
func TestJSONLogs(t *testing.T) {
	bin := buildCLI(t)
	conn, _, _ := testenv.CLIStack(t, "jsonlogs")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	body := filepath.Join(dir, "body.txt")
	if err := os.WriteFile(body, []byte("logged"), 0o644); err != nil {
		t.Fatal(err)
	}
	badConfig := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(badConfig, []byte("etcd:\n  endpoint: [x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	jsonConfig := filepath.Join(dir, "json.yaml")
	if err := os.WriteFile(jsonConfig, []byte("log:\n  format: json\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	publish := []string{"publish", "--resource", "job", "--owner", "me", "--ttl", "10s", "--file", body}
	cases := []struct {
		name string
		args []string
		code int
		// msgs must each be a substring of some record's msg.
		msgs []string
		// stdout must contain this.
		stdout string
	}{
		{"publish", append(append([]string{"--log-format", "json"}, publish...), append([]string{"--key", "k1"}, conn...)...), 0, []string{"publish applied"}, "applied job"},
		{"duplicate", append(append([]string{"--log-format=json"}, publish...), append([]string{"--key", "k1"}, conn...)...), 0, []string{"duplicate"}, "duplicate job"},
		{"read", append([]string{"read", "--resource", "job", "--log-format", "json"}, conn...), 0, []string{"sha256"}, "logged"},
		{"run", append([]string{"run", "--log-format", "json", "--resource", "job2", "--owner", "me", "--ttl", "10s"}, append(conn, "--", "sh", "-c", "echo result; echo from-the-command >&2; printf unterminated >&2")...), 0,
			[]string{"run: granted", "run: applied", "command output"}, ""},
		{"unknown flag", append([]string{"--log-format", "json", "publish", "--bogus"}, conn...), exitcode.Usage, []string{"unknown flag: --bogus"}, ""},
		{"bad config file", []string{"pointer", "--resource", "job", "--log-format", "json", "--config", badConfig}, exitcode.Usage, []string{"config file"}, ""},
		{"etcd down", []string{"pointer", "--resource", "job", "--log-format", "json", "--etcd-endpoints", "http://127.0.0.1:1"}, exitcode.Unavailable, []string{"no config file", "did not answer"}, ""},
		{"from the config file", append([]string{"publish", "--resource", "job", "--owner", "me", "--ttl", "10s", "--key", "k3", "--file", filepath.Join(dir, "missing"), "--config", jsonConfig}, conn...), exitcode.Usage, []string{"missing"}, ""},
		{"bad level", []string{"version", "--log-format", "json", "--log-level", "loud"}, exitcode.Usage, []string{"log.level"}, ""},
	}
	for _, tc := range cases {
		out, errs, code := child(t, ctx, bin, nil, tc.args...)
		if code != tc.code {
			t.Fatalf("%s: exit %d, want %d\nstdout: %s\nstderr: %s", tc.name, code, tc.code, out, errs)
		}
		if !strings.Contains(out, tc.stdout) {
			t.Fatalf("%s: stdout %q lacks %q", tc.name, out, tc.stdout)
		}
		recs := testenv.JSONLines(t, tc.name, errs)
		for _, want := range tc.msgs {
			found := false
			for _, r := range recs {
				found = found || strings.Contains(r["msg"].(string), want)
			}
			if !found {
				t.Fatalf("%s: no record with %q:\n%s", tc.name, want, errs)
			}
		}
		for _, r := range recs {
			msg := r["msg"].(string)
			for _, m := range []string{"publish applied", "run: applied", "run: granted"} {
				// The values are attributes, never in the message.
				if strings.HasPrefix(msg, m) && (msg != m || r["resource"] == nil || (r["fence"] == nil && r["version"] == nil)) {
					t.Fatalf("%s: record %v: want message %q with resource and version or fence attributes", tc.name, r, m)
				}
			}
		}
		last := recs[len(recs)-1]
		if tc.code != 0 && (last["level"] != "ERROR" || last["exit_code"] != float64(tc.code)) {
			t.Fatalf("%s: last record %v is not the error with exit_code %d", tc.name, last, tc.code)
		}
		if tc.name == "run" {
			var lines []string
			for _, r := range recs {
				if r["msg"] == "command output" {
					lines = append(lines, r["line"].(string))
				}
			}
			if strings.Join(lines, "|") != "from-the-command|unterminated" {
				t.Fatalf("run: the command's stderr lines are %q", lines)
			}
		}
	}

	t.Setenv("FENCEPUB_LOG_FORMAT", "json")
	t.Setenv("FENCEPUB_LOG_LEVEL", "warn")
	out, errs, code := child(t, ctx, bin, nil, append(append([]string{}, publish...), append([]string{"--key", "k2"}, conn...)...)...)
	if code != 0 || !strings.Contains(out, "applied job") || errs != "" {
		t.Fatalf("publish at warn level: exit %d, stdout %q, stderr %q (want nothing)", code, out, errs)
	}
}

// TestTextLogs shows the text format keeps fencepub's one-line messages
// and prints attributes as key=value.
func TestTextLogs(t *testing.T) {
	_, errs, code := runCLI(t, "pointer", "--resource", "r", "--etcd-endpoints", "http://127.0.0.1:1", "--log-level", "debug")
	if code != exitcode.Unavailable || !strings.HasPrefix(errs, "fencepub: no config file") {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	if _, errs, code := runCLI(t, "version", "--log-format", "xml"); code != exitcode.Usage || !strings.Contains(errs, "log.format") {
		t.Fatalf("--log-format xml: exit %d, stderr %q", code, errs)
	}
}

// --log-level debug adds one record per etcd and object-store round trip
// of publish, read and gc run ("etcd txn", "store put", ...), each with
// duration_ms and outcome, and, on publish's, the resource, version and
// idempotency key it serves; at the default level there are none.
func TestDebugLogs(t *testing.T) {
	conn, _, _ := testenv.CLIStack(t, "debuglogs")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body := filepath.Join(t.TempDir(), "body.txt")
	if err := os.WriteFile(body, []byte("debugged"), 0o644); err != nil {
		t.Fatal(err)
	}
	commands := map[string][]string{
		"publish": {"publish", "--resource", "job", "--owner", "me", "--ttl", "10s", "--key", "k1", "--file", body},
		"read":    {"read", "--resource", "job"},
		"gc run":  {"gc", "run", "--resource", "job"},
	}
	for _, name := range []string{"publish", "read", "gc run"} {
		for _, level := range []string{"info", "debug"} {
			args := append(append(append([]string{}, commands[name]...), "--log-format", "json", "--log-level", level), conn...)
			out, errs, code := publishCLI(t, ctx, "", args...)
			if code != 0 {
				t.Fatalf("%s at %s: exit %d\nstdout: %s\nstderr: %s", name, level, code, out, errs)
			}
			trips := map[string]int{}
			for _, r := range testenv.JSONLines(t, name, errs) {
				if r["level"] != "DEBUG" {
					continue
				}
				msg, _ := r["msg"].(string)
				kind, _, _ := strings.Cut(msg, " ")
				if kind != "etcd" && kind != "store" {
					continue
				}
				if _, ok := r["duration_ms"].(float64); !ok || (r["outcome"] != "ok" && r["outcome"] != "error") {
					t.Fatalf("%s: round trip record %v lacks duration_ms or outcome", name, r)
				}
				trips[kind]++
				if msg == "etcd txn" && r["resource"] == "job" && r["key"] == "k1" && r["version"] != nil {
					trips["publish txn"]++
				}
			}
			switch {
			case level == "info" && len(trips) > 0:
				t.Fatalf("%s at info: round trip records %v\n%s", name, trips, errs)
			case level == "debug" && (trips["etcd"] == 0 || trips["store"] == 0):
				t.Fatalf("%s at debug: round trip records %v, want etcd and store ones\n%s", name, trips, errs)
			case level == "debug" && name == "publish" && trips["publish txn"] == 0:
				t.Fatalf("publish at debug: no etcd txn record with the resource, version and key\n%s", errs)
			}
		}
	}
}
