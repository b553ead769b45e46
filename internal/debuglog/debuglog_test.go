//go:build !unit

package debuglog_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/debuglog"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/memstore"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// records decodes the JSON records written to b.
func records(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// Each etcd request and transaction commit through KV, and each lease
// call through Lease, is one debug record with its key, outcome,
// duration_ms and the context's attributes; a logger above debug gets the
// client itself back.
func TestKVAndLease(t *testing.T) {
	cli := testenv.Get(t).EtcdClient(t)
	ns := testenv.Namespace(t)
	var b bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if kv := debuglog.KV(cli, slog.New(slog.NewJSONHandler(&b, nil))); kv != clientv3.KV(cli) {
		t.Fatal("KV wrapped the client for an info logger")
	}
	kv, lease := debuglog.KV(cli, log), debuglog.Lease(cli, log)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = debuglog.With(ctx, log, "resource", "r1")
	ctx = debuglog.With(ctx, log, "version", "1.2.3")
	key := ns.PointerKey("r1")
	if _, err := kv.Put(ctx, key, "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, key); err != nil {
		t.Fatal(err)
	}
	resp, err := kv.Txn(ctx).If(clientv3.Compare(clientv3.Value(key), "=", "v")).Then(clientv3.OpDelete(key)).Commit()
	if err != nil || !resp.Succeeded {
		t.Fatalf("txn: %v %v", resp, err)
	}
	g, err := lease.Grant(ctx, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lease.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	dead, dcancel := context.WithCancel(ctx)
	dcancel()
	if _, err := kv.Get(dead, key); err == nil {
		t.Fatal("a get on a cancelled context succeeded")
	}

	recs := records(t, &b)
	want := []string{"etcd put", "etcd get", "etcd txn", "etcd lease grant", "etcd lease revoke", "etcd get"}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %v", len(recs), len(want), recs)
	}
	for i, r := range recs {
		if r["msg"] != want[i] || r["level"] != "DEBUG" || r["resource"] != "r1" || r["version"] != "1.2.3" {
			t.Fatalf("record %d %v: want %q at DEBUG with the context's attributes", i, r, want[i])
		}
		if _, ok := r["duration_ms"].(float64); !ok {
			t.Fatalf("record %d %v: no duration_ms", i, r)
		}
		outcome := "ok"
		if i == len(recs)-1 {
			outcome = "error"
		}
		if r["outcome"] != outcome {
			t.Fatalf("record %d %v: outcome %v, want %s", i, r, r["outcome"], outcome)
		}
	}
	if recs[2]["etcd_key"] != key || recs[2]["succeeded"] != true || recs[2]["compares"] != 1.0 || recs[2]["then"] != 1.0 {
		t.Fatalf("txn record %v", recs[2])
	}
}

// Each Store call is one debug record; a listing is one when its loop
// ends, with the entries it yielded; the decorator keeps the store's
// other buckets and name, and passes a nil store and an info logger
// through.
func TestStore(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mem := memstore.New("bkt", nil)
	if debuglog.Store(nil, log) != nil {
		t.Fatal("a nil store is no longer nil")
	}
	if st := debuglog.Store(mem, slog.New(slog.NewJSONHandler(&b, nil))); st != objstore.Store(mem) {
		t.Fatal("Store wrapped the store for an info logger")
	}
	st := debuglog.Store(mem, log)
	ctx := debuglog.With(context.Background(), log, "resource", "r1")
	for _, k := range []string{"a/1", "a/2"} {
		if _, err := objstore.PutSmallCreateOnly(ctx, st, k, []byte("x"), ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := objstore.PutSmallCreateOnly(ctx, st, "a/1", []byte("x"), ""); err == nil {
		t.Fatal("a second create-only put succeeded")
	}
	for range st.List(ctx, "a/", objstore.ListOptions{}) {
	}
	if errs := st.Delete(ctx, []string{"a/1", "a/2"}); errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	recs := records(t, &b)
	want := []struct {
		msg, outcome string
	}{{"store put", "ok"}, {"store put", "ok"}, {"store put", "error"}, {"store list", "ok"}, {"store delete", "ok"}}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d: %v", len(recs), len(want), recs)
	}
	for i, w := range want {
		if r := recs[i]; r["msg"] != w.msg || r["outcome"] != w.outcome || r["resource"] != "r1" {
			t.Fatalf("record %d %v: want %s %s with resource r1", i, r, w.msg, w.outcome)
		}
	}
	if recs[0]["object"] != "a/1" || recs[3]["entries"] != 2.0 || recs[4]["objects"] != 2.0 {
		t.Fatalf("records %v", recs)
	}
	if _, err := objstore.InBucket(st, "bkt"); err != nil {
		t.Fatal(err)
	}
}
