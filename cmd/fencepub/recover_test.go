//go:build !unit

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestRestoreRecoverRepublish restores etcd from a snapshot taken before a
// publish, then: the rolled-back authority refuses to grant (116) before
// recover; `authority recover --republish` moves to a new epoch and brings
// back the lost newest state; a publish carrying the old epoch is rejected
// (stale, reason epoch); and later grants compare above every earlier one.
func TestRestoreRecoverRepublish(t *testing.T) {
	conn, e, _ := testenv.CLIStack(t, "rtest")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	fp := func(wantCode int, args ...string) string {
		t.Helper()
		out, errs, code := publishCLI(t, ctx, "", append(args, conn...)...)
		if code != wantCode {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, out, errs)
		}
		return out
	}
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var grant struct {
		Epoch, Generation uint64
		Owner             string
	}
	decode := func(s string, v any) {
		t.Helper()
		if err := json.Unmarshal([]byte(s), v); err != nil {
			t.Fatalf("%v: %s", err, s)
		}
	}

	fp(0, "publish", "--resource", "r", "--owner", "w1", "--ttl", "2s", "--key", "k1", "--file", file("v1", "version one"))
	snap := filepath.Join(dir, "snap.db")
	if err := e.Members[0].SaveSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	// After the snapshot: a grant held by an old-epoch worker, and its
	// publish of version two — both lost by the restore.
	decode(fp(0, "authority", "acquire", "--resource", "r", "--owner", "old", "--ttl", "60s", "-o", "json"), &grant)
	fp(0, "publish", "--resource", "r", "--owner", "old", "--epoch", itoa(grant.Epoch), "--fence", itoa(grant.Generation), "--seq", "1",
		"--key", "k2", "--file", file("v2", "version two"))
	if err := e.RestoreSnapshot(ctx, snap, devstack.RestoreOptions{BumpRevision: 1_000_000}); err != nil {
		t.Fatal(err)
	}

	// Before recover the rolled-back counter is detected: no token.
	fp(exitcode.NeedRecover, "authority", "acquire", "--resource", "r", "--owner", "new", "--ttl", "2s")
	var rec struct {
		OldEpoch    uint64 `json:"old_epoch"`
		NewEpoch    uint64 `json:"new_epoch"`
		Republished []struct {
			Resource string
			Result   struct{ Outcome string }
		}
	}
	decode(fp(0, "authority", "recover", "-o", "json"), &rec)
	if rec.NewEpoch <= rec.OldEpoch || len(rec.Republished) != 0 {
		t.Fatalf("recover: %+v", rec)
	}
	// The old-epoch holder's next publish (above the restored pointer) is
	// rejected by the resource for its epoch.
	var res struct{ Outcome, Reason string }
	decode(fp(exitcode.Stale, "publish", "--resource", "r", "--owner", "old", "--epoch", itoa(grant.Epoch), "--fence", itoa(grant.Generation), "--seq", "2",
		"--key", "k3", "--file", file("v3", "late"), "-o", "json"), &res)
	if res.Outcome != "stale" || res.Reason != "epoch" {
		t.Fatalf("old-epoch publish: %+v", res)
	}
	// --republish brings back the lost version two, not the rejected late
	// attempt that now lies above it.
	decode(fp(0, "authority", "recover", "--republish", "-o", "json"), &rec)
	if len(rec.Republished) != 1 || rec.Republished[0].Result.Outcome != "applied" {
		t.Fatalf("recover --republish: %+v", rec)
	}
	out := filepath.Join(dir, "read")
	fp(0, "read", "--resource", "r", "--out", out)
	if b, _ := os.ReadFile(out); string(b) != "version two" {
		t.Fatalf("after republish the resource holds %q, want the lost version two", b)
	}
	var ptr struct{ Version struct{ Epoch uint64 } }
	decode(fp(0, "pointer", "--resource", "r", "-o", "json"), &ptr)
	if ptr.Version.Epoch != rec.NewEpoch {
		t.Fatalf("pointer epoch %d, want the new epoch %d", ptr.Version.Epoch, rec.NewEpoch)
	}
	// Once republished, nothing is lost any more: running recover again
	// republishes nothing.
	var again struct {
		Republished []json.RawMessage `json:"republished"`
	}
	decode(fp(0, "authority", "recover", "--republish", "-o", "json"), &again)
	if len(again.Republished) != 0 {
		t.Fatalf("second recover --republish republished %s", again.Republished)
	}
	// A new grant compares above every grant before the restore.
	var g2 struct{ Epoch, Generation uint64 }
	decode(fp(0, "authority", "acquire", "--resource", "r", "--owner", "new", "--ttl", "2s", "-o", "json"), &g2)
	if g2.Epoch <= grant.Epoch {
		t.Fatalf("grant after recover %+v does not compare above %+v", g2, grant)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
