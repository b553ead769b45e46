//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
)

// TestGroupCLI drives publish --set, pointer with several --resource and
// resolve --from of a group against real etcd and MinIO: a file and a
// directory published as one group, read at one revision, duplicate and
// conflict by the group's key, the usage refusals before anything is
// acquired, and a group's unknown JSON settled by resolve.
func TestGroupCLI(t *testing.T) {
	conn, _, _ := testenv.CLIStack(t, "groupcli")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := func(wantCode int, stdin string, args ...string) string {
		t.Helper()
		out, errs, code := publishCLI(t, ctx, stdin, append(args, conn...)...)
		if code != wantCode {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, out, errs)
		}
		return out
	}
	root := t.TempDir()
	report := filepath.Join(root, "report.csv")
	byCountry := filepath.Join(root, "by-country")
	if err := os.MkdirAll(byCountry, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{report: "total,3\n", filepath.Join(byCountry, "de.csv"): "de,1\n", filepath.Join(byCountry, "fr.csv"): "fr,2\n"} {
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(want int, key string, extra ...string) publisher.GroupResult {
		t.Helper()
		out := run(want, "", append([]string{"publish", "--key", key, "--set", "report=" + report, "--set", "breakdown=" + byCountry,
			"--owner", "job", "--ttl", "10s", "-o", "json"}, extra...)...)
		var r publisher.GroupResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("publish --set JSON: %v\n%s", err, out)
		}
		return r
	}
	r := publish(0, "day-1")
	if r.Outcome != publisher.Applied || len(r.Members) != 2 || r.Members[0].Resource != "breakdown" || r.Members[1].Resource != "report" {
		t.Fatalf("publish --set: %+v", r)
	}

	var cut struct {
		Revision int64 `json:"revision"`
		Pointers []struct {
			Resource  string         `json:"resource"`
			Published bool           `json:"published"`
			Version   layout.Version `json:"version"`
			Kind      string         `json:"kind"`
		} `json:"pointers"`
	}
	if err := json.Unmarshal([]byte(run(0, "", "pointer", "--resource", "report", "--resource", "breakdown", "-o", "json")), &cut); err != nil {
		t.Fatal(err)
	}
	if len(cut.Pointers) != 2 || cut.Pointers[0].Resource != "report" || cut.Pointers[0].Version != r.Members[1].Version ||
		cut.Pointers[1].Version != r.Members[0].Version || cut.Revision < r.Revision {
		t.Fatalf("pointer of two resources: %+v; want the group's versions %s, %s at revision >= %d", cut, r.Members[1].Version, r.Members[0].Version, r.Revision)
	}
	if text := run(0, "", "pointer", "--resource", "report", "--resource", "breakdown"); strings.Count(text, "\n") != 2 || !strings.Contains(text, `key="day-1"`) {
		t.Fatalf("pointer text of two resources:\n%s", text)
	}
	run(1, "", "pointer", "--resource", "report", "--resource", "never-granted")

	if again := publish(0, "day-1"); again.Outcome != publisher.Duplicate {
		t.Fatalf("same group again: %+v", again)
	}
	if err := os.WriteFile(report, []byte("total,4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if other := publish(111, "day-1"); other.Outcome != publisher.Conflict {
		t.Fatalf("other content, same key: %+v", other)
	}

	for _, bad := range [][]string{
		{"publish", "--key", "k", "--set", "report=" + report, "--owner", "job"},                                              // no --ttl
		{"publish", "--key", "k", "--set", "report=" + report, "--resource", "report", "--owner", "job", "--ttl", "10s"},      // --resource too
		{"publish", "--key", "k", "--set", "report=" + report, "--set", "report=" + report, "--owner", "job", "--ttl", "10s"}, // twice
		{"publish", "--key", "k", "--set", "report=" + filepath.Join(root, "missing"), "--owner", "job", "--ttl", "10s"},
		{"publish", "--key", "k", "--owner", "job", "--ttl", "10s", "--file", report}, // neither --resource nor --set
		{"publish", "--key", "k", "--set", "report=" + report, "--owner", "job", "--ttl", "10s", "--request-id", ""},
	} {
		run(2, "", bad...)
	}
	if h, ok, err := holderOf(ctx, t, conn, "report"); err != nil || ok {
		t.Fatalf("a refused group left a holder: %+v, %v", h, err)
	}

	// The JSON of an unknown group: this applied group's settles applied;
	// one with a key never applied settles stale, sealing its first member.
	unknown := r
	unknown.Outcome = publisher.Unknown
	b, _ := json.Marshal(unknown)
	var settled publisher.GroupResult
	if err := json.Unmarshal([]byte(run(0, string(b), "resolve", "--from", "-", "-o", "json")), &settled); err != nil || settled.Outcome != publisher.Applied {
		t.Fatalf("resolve of an applied group: %+v, %v", settled, err)
	}
	never := unknown
	never.IdempotencyKey = "never-sent"
	never.Members = append([]publisher.Result(nil), unknown.Members...)
	for i := range never.Members {
		a := *never.Members[i].Attempt
		a.Version.Seq += 5
		a.Object.Key = ""
		never.Members[i].Attempt = &a
	}
	b, _ = json.Marshal(never)
	if err := json.Unmarshal([]byte(run(110, string(b), "resolve", "--from", "-", "-o", "json")), &settled); err != nil ||
		settled.Outcome != publisher.Stale || settled.Reason != publisher.ReasonSeal || settled.Member != "breakdown" {
		t.Fatalf("resolve of a group never sent: %+v, %v", settled, err)
	}
}

// holderOf reads res's live holder through the CLI's authority show.
func holderOf(ctx context.Context, t *testing.T, conn []string, res string) (map[string]any, bool, error) {
	t.Helper()
	out, errs, code := publishCLI(t, ctx, "", append([]string{"authority", "show", "--resource", res, "-o", "json"}, conn...)...)
	if code != 0 {
		t.Fatalf("authority inspect: exit %d: %s", code, errs)
	}
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, false, err
	}
	h, ok := st["holder"].(map[string]any)
	return h, ok, nil
}
