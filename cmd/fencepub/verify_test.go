//go:build !unit

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
)

// TestVerify publishes resources on a real stack, checks that verify finds
// them clean (and that GC's metrics then carry the clean verify's time),
// then corrupts each thing verify checks, one resource each, and sees
// every corruption reported with exit 1: an object's bytes, a missing
// object, a pointer's sha256, a history entry under another version's key,
// an op record that no longer matches its history entry, an op record
// above the pointer and a missing seal; an in-flight object is listed. A
// name never granted and a resource granted with nothing published are
// findings that say which.
func TestVerify(t *testing.T) {
	conn, e, m := testenv.CLIStack(t, "verify")
	ns, err := layout.NewNamespace("verify", "d1")
	if err != nil {
		t.Fatal(err)
	}
	cli, err := e.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	st, err := m.Store()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	body := filepath.Join(t.TempDir(), "body")
	names := []string{"bytes", "gone", "hash", "histkey", "opdigest", "opabove", "noseal", "inflight"}
	for _, res := range names {
		for _, k := range []string{"k1", "k2"} {
			if err := os.WriteFile(body, []byte(res+" "+k), 0o644); err != nil {
				t.Fatal(err)
			}
			runWant(t, 0, append([]string{"publish", "--resource", res, "--owner", "me", "--ttl", "10s", "--key", k, "--file", body}, conn...)...)
		}
	}
	verify := func(want int) verifyOutput {
		t.Helper()
		out, errs, code := runCLI(t, append([]string{"verify", "--all", "-o", "json"}, conn...)...)
		var o verifyOutput
		if err := json.Unmarshal([]byte(out), &o); err != nil || code != want {
			t.Fatalf("verify: exit %d (want %d), %v\n%s\n%s", code, want, err, out, errs)
		}
		return o
	}
	if o := verify(0); !o.Clean || len(o.Resources) != len(names) || o.Resources[0].Bytes == 0 || o.Resources[0].History != 2 {
		t.Fatalf("verify of a clean domain: %+v", o)
	}
	reg, _, err := newGCRegistry(time.Minute, cli, ns.VerifyKey())
	if err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var cleanAt float64
	for _, f := range fams {
		if f.GetName() == "fencepub_gc_last_clean_verify_timestamp_seconds" {
			cleanAt = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if cleanAt < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Fatalf("GC's last clean verify = %v, want about now", cleanAt)
	}

	ptr := func(res string) layout.Pointer {
		resp, err := cli.Get(ctx, ns.PointerKey(res))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("pointer of %s: %v", res, err)
		}
		p, err := layout.DecodePointer(resp.Kvs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	put := func(key string, val string, err error) {
		t.Helper()
		if err == nil {
			_, err = cli.Put(ctx, key, val)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// bytes: the object overwritten (another ETag).
	p := ptr("bytes")
	if _, err := st.Client.PutObject(ctx, st.Bucket, p.Object.Key, strings.NewReader("tampered"), 8, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	// gone: the object deleted.
	if err := st.Client.RemoveObject(ctx, st.Bucket, ptr("gone").Object.Key, minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	// hash: the pointer's sha256 changed.
	p = ptr("hash")
	p.Object.SHA256 = strings.Repeat("0", 64)
	v, err := layout.EncodePointer(p)
	put(ns.PointerKey("hash"), v, err)
	// histkey: a history entry under another version's key.
	p = ptr("histkey")
	wrong := p.Version
	wrong.Seq = 7
	v, err = layout.EncodePointer(p)
	put(ns.HistoryKey("histkey", wrong), v, err)
	// opdigest: the op record of k2 names another digest.
	p = ptr("opdigest")
	v, err = layout.EncodeOp(ns.OpKey("opdigest", "k2"), layout.OpRecord{Digest: strings.Repeat("1", 64), Version: p.Version, ObjectKey: p.Object.Key})
	put(ns.OpKey("opdigest", "k2"), v, err)
	// opabove: an op record above the pointer.
	p = ptr("opabove")
	above := p.Version
	above.Seq += 5
	v, err = layout.EncodeOp(ns.OpKey("opabove", "k9"), layout.OpRecord{Digest: strings.Repeat("2", 64), Version: above, ObjectKey: p.Object.Key})
	put(ns.OpKey("opabove", "k9"), v, err)
	// noseal: the seal deleted.
	if _, err := cli.Delete(ctx, ns.SealKey("noseal")); err != nil {
		t.Fatal(err)
	}
	// inflight: an object above the pointer and the seal, as a publish in
	// progress under the next grant leaves (the publish that wrote the
	// pointer released its grant, which sealed that grant's term).
	p = ptr("inflight")
	next := p.Version
	next.Fence, next.Seq = next.Fence+1, 1
	inflightKey := ns.ObjectKey("inflight", next, "0123456789abcdef")
	if _, err := st.Client.PutObject(ctx, st.Bucket, inflightKey, bytes.NewReader([]byte("x")), 1, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}

	o := verify(exitcode.Internal)
	want := map[string]string{
		"bytes": "replaced", "gone": "missing", "hash": "hash to sha256", "histkey": "another version's key",
		"opdigest": "does not match its op record", "opabove": "above the pointer", "noseal": "exist together",
	}
	for res, text := range want {
		found := false
		for _, f := range o.Findings {
			found = found || f.Resource == res && strings.Contains(f.Problem, text)
		}
		if !found {
			t.Errorf("no finding %q for %s in %+v", text, res, o.Findings)
		}
	}
	for _, f := range o.Findings {
		if _, ok := want[f.Resource]; !ok {
			t.Errorf("a finding for the intact %s: %+v", f.Resource, f)
		}
	}
	for _, r := range o.Resources {
		if r.Resource == "inflight" && (len(r.InFlight) != 1 || r.InFlight[0] != inflightKey) {
			t.Errorf("in-flight objects of inflight: %v, want [%s]", r.InFlight, inflightKey)
		}
	}
	if resp, err := cli.Get(ctx, ns.VerifyKey()); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("verify key: %v", err)
	} else if at, _ := time.Parse(time.RFC3339Nano, string(resp.Kvs[0].Value)); float64(at.Unix()) > cleanAt+1 {
		t.Fatalf("a verify with findings moved the clean verify time to %s", at)
	}
	runWant(t, exitcode.Usage, append([]string{"verify"}, conn...)...)

	// A name never granted (a typo) is told apart from a resource granted
	// with nothing published yet, as pointer and read tell them.
	runWant(t, 0, append([]string{"authority", "acquire", "--resource", "waiting", "--owner", "me", "--ttl", "30s"}, conn...)...)
	out, errs, code := runCLI(t, append([]string{"verify", "--resource", "nothing-here", "--resource", "waiting", "-o", "json"}, conn...)...)
	var u verifyOutput
	if err := json.Unmarshal([]byte(out), &u); err != nil || code != exitcode.Internal {
		t.Fatalf("verify of unpublished resources: exit %d (want %d), %v\n%s\n%s", code, exitcode.Internal, err, out, errs)
	}
	problems := map[string]string{}
	for _, f := range u.Findings {
		problems[f.Resource] = f.Problem
	}
	if !strings.HasSuffix(problems["nothing-here"], ": never granted or published") || !strings.HasSuffix(problems["waiting"], ": granted, nothing published yet") {
		t.Fatalf("verify of a name never granted and of a granted resource: %+v", u.Findings)
	}
}
