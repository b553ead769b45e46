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

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// historyCLI drives the CLI against one etcd of a two-etcd, one-bucket
// setup (DESIGN.md invariant 9).
type historyCLI struct {
	t    *testing.T
	ctx  context.Context
	conn []string // connection flags of this etcd
	dir  string
}

// newHistoryCLI returns the CLI of etcd endpoint on the bucket of conn
// (cliStack's flags; the --etcd-endpoints value is replaced).
func newHistoryCLI(t *testing.T, ctx context.Context, conn []string, endpoint string) *historyCLI {
	c := slices.Clone(conn)
	c[slices.Index(c, "--etcd-endpoints")+1] = endpoint
	return &historyCLI{t: t, ctx: ctx, conn: c, dir: t.TempDir()}
}

// fp runs fencepub with args and this etcd's flags, failing t unless it
// exits wantCode; it returns stdout, plus stderr when the code is not 0.
func (h *historyCLI) fp(wantCode int, args ...string) string {
	h.t.Helper()
	out, errs, code := publishCLI(h.t, h.ctx, "", append(args, h.conn...)...)
	if code != wantCode {
		h.t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, out, errs)
	}
	if code != 0 {
		return out + errs
	}
	return out
}

// publish publishes body as the new state of res (a fresh grant).
func (h *historyCLI) publish(wantCode int, res, body string) string {
	h.t.Helper()
	f := filepath.Join(h.dir, "body-"+res)
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		h.t.Fatal(err)
	}
	return h.fp(wantCode, "publish", "--resource", res, "--owner", "w-"+res, "--ttl", "2s", "--key", "k-"+body, "--file", f)
}

// read returns what a reader of res gets: the bytes, or "" and the error
// output when nothing is published.
func (h *historyCLI) read(res string) (string, string) {
	h.t.Helper()
	out := filepath.Join(h.dir, "read-"+res)
	_ = os.Remove(out)
	stdout, errs, code := publishCLI(h.t, h.ctx, "", append([]string{"read", "--resource", res, "--out", out}, h.conn...)...)
	if code != 0 {
		return "", stdout + errs
	}
	b, err := os.ReadFile(out)
	if err != nil {
		h.t.Fatal(err)
	}
	return string(b), ""
}

// mustRead fails t unless a reader of res gets want.
func (h *historyCLI) mustRead(res, want string) {
	h.t.Helper()
	if got, errs := h.read(res); got != want {
		h.t.Fatalf("read %s = %q (%s); want %q", res, got, errs, want)
	}
}

// bucketKeys lists every key of the bucket.
func bucketKeys(t *testing.T, m *devstack.MinIO) []string {
	t.Helper()
	st, err := m.Store()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for o := range st.Client.ListObjectsIter(context.Background(), st.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		keys = append(keys, o.Key)
	}
	return keys
}

// etcdKeys counts the keys of etcd e.
func etcdKeys(t *testing.T, e *devstack.Etcd) int64 {
	t.Helper()
	cli := testenv.EtcdClient(t, e)
	resp, err := cli.Get(context.Background(), "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count
}

// refusesForeignHistory checks that an etcd without the bucket's history
// refuses to publish, run, acquire, collect and read (exit 116, naming the way out)
// and writes nothing to itself or the bucket.
func refusesForeignHistory(t *testing.T, h *historyCLI, e *devstack.Etcd, m *devstack.MinIO) {
	t.Helper()
	before, etcdBefore := bucketKeys(t, m), etcdKeys(t, e)
	for _, args := range [][]string{
		{"authority", "acquire", "--resource", "r", "--owner", "w2", "--ttl", "2s"},
		{"authority", "acquire", "--resource", "new", "--owner", "w2", "--ttl", "2s"},
		{"gc", "run", "--all"},
		{"gc", "run", "--resource", "r"},
		{"authority", "recover"},
		// Readers are not told "nothing published" about data in the bucket.
		{"pointer", "--resource", "r"},
		{"read", "--resource", "r"},
	} {
		if out := h.fp(exitcode.NeedRecover, args...); !strings.Contains(out, "recover --from-bucket") {
			t.Fatalf("fencepub %s: %s; want the --from-bucket hint", strings.Join(args, " "), out)
		}
	}
	h.publish(exitcode.NeedRecover, "r", "from the second etcd")
	ran := filepath.Join(h.dir, "ran")
	runArgs := append(append([]string{"run", "--resource", "r", "--ttl", "2s"}, h.conn...), "--", "touch", ran)
	if out, errs, code := publishCLI(t, h.ctx, "", runArgs...); code != exitcode.NeedRecover {
		t.Fatalf("fencepub run: exit %d, want 116\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if _, err := os.Stat(ran); err == nil {
		t.Fatal("fencepub run ran its command without a grant")
	}
	if after := bucketKeys(t, m); !slices.Equal(before, after) {
		t.Fatalf("the refused commands changed the bucket:\nbefore %v\nafter  %v", before, after)
	}
	if n := etcdKeys(t, e); n != etcdBefore {
		t.Fatalf("the refused commands wrote %d keys to etcd", n-etcdBefore)
	}
}

// TestSecondEtcdSameBucket: a second, empty etcd configured with the bucket,
// prefix and domain of a live one publishes, runs, acquires and collects nothing
// (exit 116) and writes nothing; the first etcd's reader still reads its
// object.
func TestSecondEtcdSameBucket(t *testing.T) {
	conn, e1, m := testenv.CLIStack(t, "hist")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e2 := testenv.StartEtcd(t, devstack.EtcdOptions{})
	h1 := newHistoryCLI(t, ctx, conn, e1.Endpoints()[0])
	h2 := newHistoryCLI(t, ctx, conn, e2.Endpoints()[0])
	h1.publish(0, "r", "one")
	refusesForeignHistory(t, h2, e2, m)
	if etcdKeys(t, e2) != 0 {
		t.Fatal("the second etcd holds keys")
	}
	h1.fp(0, "gc", "run", "--all")
	h1.mustRead("r", "one")
}

// TestReplacementEtcdRecoverFromBucket: etcd is replaced by an empty one
// (stopped, data wiped, started again on the same URL). It refuses like a
// second etcd; `recover --from-bucket --dry-run` changes nothing; `recover
// --from-bucket` takes the bucket over: readers get nothing until a publish,
// GC keeps the quarantined objects, and the next publish applies in the new
// epoch. With --republish the readers get the old bytes at the new epoch.
func TestReplacementEtcdRecoverFromBucket(t *testing.T) {
	for _, republish := range []bool{false, true} {
		name := "plain"
		if republish {
			name = "republish"
		}
		t.Run(name, func(t *testing.T) { testReplacementEtcd(t, republish) })
	}
}

func testReplacementEtcd(t *testing.T, republish bool) {
	conn, e, m := testenv.CLIStack(t, "hist")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := newHistoryCLI(t, ctx, conn, e.Endpoints()[0])
	h.publish(0, "r", "r one")
	h.publish(0, "r", "r two")
	h.publish(0, "q", "q one")
	objects := bucketKeys(t, m)

	mem := e.Members[0]
	mem.Stop()
	if err := os.RemoveAll(mem.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := mem.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if etcdKeys(t, e) != 0 {
		t.Fatal("the replacement etcd is not empty")
	}
	refusesForeignHistory(t, h, e, m)

	var rec struct {
		DryRun       bool   `json:"dry_run"`
		FromBucket   bool   `json:"from_bucket"`
		DeploymentID string `json:"deployment_id"`
		NewEpoch     uint64 `json:"new_epoch"`
		Resources    []struct {
			Resource string
			Above    []struct{ Key string }
			Recorded []uint64 `json:"recorded_epochs"`
		}
		Republished []struct {
			Resource string
			Result   struct{ Outcome string }
		}
	}
	decode := func(s string) {
		t.Helper()
		rec.Republished = nil
		if err := json.Unmarshal([]byte(s), &rec); err != nil {
			t.Fatalf("%v: %s", err, s)
		}
	}
	decode(h.fp(0, "authority", "recover", "--from-bucket", "--dry-run", "-o", "json"))
	if !rec.DryRun || !rec.FromBucket || rec.NewEpoch != 2 || len(rec.Resources) != 2 {
		t.Fatalf("dry run: %+v", rec)
	}
	if etcdKeys(t, e) != 0 || !slices.Equal(bucketKeys(t, m), objects) {
		t.Fatal("recover --from-bucket --dry-run changed something")
	}
	args := []string{"authority", "recover", "--from-bucket", "-o", "json"}
	if republish {
		args = append(args, "--republish")
	}
	decode(h.fp(0, args...))
	if rec.DryRun || !rec.FromBucket || rec.NewEpoch != 2 || rec.DeploymentID == "" || len(rec.Resources) != 2 {
		t.Fatalf("recover --from-bucket: %+v", rec)
	}
	for _, r := range rec.Resources {
		if want := map[string]int{"r": 2, "q": 1}[r.Resource]; len(r.Above) != want || !slices.Equal(r.Recorded, []uint64{1}) {
			t.Fatalf("resource %+v; want its %d objects quarantined for epoch 1", r, want)
		}
	}
	// A second take-over is refused: etcd holds the history now.
	h.fp(exitcode.Usage, "authority", "recover", "--from-bucket")

	if republish {
		if len(rec.Republished) != 2 {
			t.Fatalf("republished %+v; want r and q", rec.Republished)
		}
		h.mustRead("r", "r two")
		h.mustRead("q", "q one")
		var ptr struct{ Version struct{ Epoch uint64 } }
		if err := json.Unmarshal([]byte(h.fp(0, "pointer", "--resource", "r", "-o", "json")), &ptr); err != nil || ptr.Version.Epoch != rec.NewEpoch {
			t.Fatalf("pointer of r in epoch %d (%v); want the new epoch %d", ptr.Version.Epoch, err, rec.NewEpoch)
		}
	} else {
		for _, res := range []string{"r", "q"} {
			if got, errs := h.read(res); got != "" || !strings.Contains(errs, "nothing published") {
				t.Fatalf("read %s after the take-over = %q (%s); want nothing published", res, got, errs)
			}
		}
	}
	var gcRep struct {
		Kept    map[string]int64 `json:"kept"`
		Deleted int64            `json:"deleted"`
	}
	out := h.fp(0, "gc", "run", "--resource", "r", "--resource", "q", "--retain", "1", "--grace", "1ns", "--clock-skew", "1ns", "-o", "json")
	if err := json.Unmarshal([]byte(out), &gcRep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if gcRep.Kept["quarantined"] != 3 {
		t.Fatalf("gc report %s; want the 3 taken-over objects quarantined", out)
	}
	for _, k := range objects {
		if !slices.Contains(bucketKeys(t, m), k) {
			t.Fatalf("GC deleted %s, an object of the taken-over history", k)
		}
	}
	h.publish(0, "r", "r three")
	h.mustRead("r", "r three")

	// The operator decides r's taken-over objects are not needed and
	// releases them: the next pass deletes them; q's stay quarantined and
	// r's published state is untouched.
	var rel struct {
		DryRun  bool     `json:"dry_run"`
		Epochs  []uint64 `json:"epochs"`
		Objects []string `json:"objects"`
	}
	release := func(args ...string) {
		t.Helper()
		out := h.fp(0, append([]string{"resource", "release-quarantine", "r", "-o", "json"}, args...)...)
		if err := json.Unmarshal([]byte(out), &rel); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	release("--dry-run")
	if !rel.DryRun || !slices.Equal(rel.Epochs, []uint64{1}) || len(rel.Objects) != 2 {
		t.Fatalf("release-quarantine --dry-run: %+v; want r's 2 objects of epoch 1", rel)
	}
	release("--epoch", "7")
	if len(rel.Objects) != 0 {
		t.Fatalf("release-quarantine --epoch 7: %+v; want nothing", rel)
	}
	release()
	if rel.DryRun || len(rel.Objects) != 2 {
		t.Fatalf("release-quarantine: %+v", rel)
	}
	out = h.fp(0, "gc", "run", "--resource", "r", "--resource", "q", "--retain", "1", "--grace", "1ns", "--clock-skew", "1ns", "-o", "json")
	if err := json.Unmarshal([]byte(out), &gcRep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	left := bucketKeys(t, m)
	for _, k := range rel.Objects {
		if slices.Contains(left, k) {
			t.Fatalf("GC kept %s after its quarantine was released (report %s)", k, out)
		}
	}
	if gcRep.Kept["quarantined"] != 1 {
		t.Fatalf("gc report %s; want only q's object still quarantined", out)
	}
	h.mustRead("r", "r three")
}

// TestSplitBrainAfterFromBucket: an operator runs `recover --from-bucket` on
// a second etcd while the first still serves. Both sides publish and
// collect; neither side's GC deletes an object the other published.
func TestSplitBrainAfterFromBucket(t *testing.T) {
	conn, e1, _ := testenv.CLIStack(t, "hist")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e2 := testenv.StartEtcd(t, devstack.EtcdOptions{})
	h1 := newHistoryCLI(t, ctx, conn, e1.Endpoints()[0])
	h2 := newHistoryCLI(t, ctx, conn, e2.Endpoints()[0])
	h1.publish(0, "a", "a by 1")
	h2.fp(0, "authority", "recover", "--from-bucket")
	h1.publish(0, "c", "c by 1") // a resource the take-over never saw
	h2.publish(0, "c", "c by 2")
	h2.publish(0, "b", "b by 2")
	h1.publish(0, "a", "a again by 1")
	gc := []string{"gc", "run", "--retain", "1", "--grace", "1ns", "--clock-skew", "1ns"}
	for range 2 {
		h1.fp(0, append(gc, "--all")...)
		h2.fp(0, append(gc, "--all")...)
		h2.fp(0, append(gc, "--resource", "a")...)
	}
	h1.mustRead("a", "a again by 1")
	h1.mustRead("c", "c by 1")
	h2.mustRead("b", "b by 2")
	h2.mustRead("c", "c by 2")
}
