//go:build !unit

package gc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
)

// A stale worker's orphan is deleted on the first pass after it became
// unpublishable, with the default policy and the real clock: the decision
// comes from the fence, not from its age.
func TestStaleOrphanDeletedOnFirstPass(t *testing.T) {
	e := newEnv(t)
	const res = "logs"
	a, pa := e.worker(res, "worker-a")
	a1 := e.publish(pa, "a1", publisher.Applied)
	e.release(a) // A's lease ends (as if it expired while A was paused)
	b, pb := e.worker(res, "worker-b")
	b1 := e.publish(pb, "b1", publisher.Applied)
	b2 := e.publish(pb, "b2", publisher.Applied)
	// A resumes and publishes: stale, leaving an orphan.
	stale := e.publish(pa, "a2", publisher.Stale)
	if stale.Reason != publisher.ReasonPointer || !e.Exists(stale.Attempt.Object.Key) {
		t.Fatalf("stale publish %+v; want reason pointer and its object written", stale)
	}

	rep := e.run(e.collector(nil), res)
	mustDecide(t, rep, stale.Attempt.Object.Key, kindUnpublishable, "deleted", "<= pointer")
	mustDecide(t, rep, b2.Object.Key, kindPublished, "kept", "pointer")
	mustDecide(t, rep, b1.Object.Key, kindRetained, "kept", "last 2")
	// a1 is no longer among the last 2, but was superseded (by b1) just
	// now: within the reader grace.
	mustDecide(t, rep, a1.Object.Key, kindRetained, "kept", "reader grace")
	if e.Exists(stale.Attempt.Object.Key) || !e.Exists(b2.Object.Key) || !e.Exists(b1.Object.Key) || !e.Exists(a1.Object.Key) {
		t.Fatal("wrong objects deleted")
	}
	if rep.Scanned != 4 || rep.Deleted != 1 || rep.Kept.Published != 1 || rep.Kept.Retained != 2 || rep.ByDecision[kindUnpublishable] != 1 {
		t.Fatalf("report counts: %+v", rep)
	}
	// Grant record 1 (A) is below the pointer's fence 2: pruned at once.
	if rep.Records.Grants != 1 || e.get(e.NS.GrantKey(res, a.Generation)) != nil || e.get(e.NS.GrantKey(res, b.Generation)) == nil {
		t.Fatalf("grant records pruned wrongly: %+v", rep.Records)
	}

	// Past the grace (a clock 12 min ahead), a1 goes and its history entry
	// with it; the pointer and seal keys stay.
	rep = e.run(e.collector(later(12*time.Minute)), res)
	mustDecide(t, rep, a1.Object.Key, kindUnpublishable, "deleted", "<= pointer")
	if e.Exists(a1.Object.Key) || rep.Records.History != 1 {
		t.Fatalf("a1 not collected: %+v", rep.Records)
	}
	if e.get(e.NS.HistoryKey(res, a1.Version)) != nil || e.get(e.NS.HistoryKey(res, b1.Version)) == nil {
		t.Fatal("history pruned wrongly")
	}
	for _, k := range []string{e.NS.PointerKey(res), e.NS.SealKey(res), e.NS.GenerationKey(res), e.NS.EpochKey()} {
		if e.get(k) == nil {
			t.Fatalf("%s deleted", k)
		}
	}
}

// An in-flight object of a grant that is no longer live and older than the
// abandon period is sealed, then deleted; the worker's late publish of that
// version is stale with reason seal. While its grant is live, it is kept
// however old.
func TestAbandonedInFlightSealedThenDeleted(t *testing.T) {
	e := newEnv(t)
	const res = "jobs"
	g, p := e.worker(res, "worker")
	first := e.publish(p, "j1", publisher.Applied)
	lost := e.inFlight(g, "j2")
	key := lost.Attempt.Object.Key
	if !e.Exists(key) {
		t.Fatal("in-flight object missing")
	}

	aged := e.collector(later(3 * time.Hour))
	rep := e.run(aged, res)
	mustDecide(t, rep, key, kindInFlight, "kept", "is live")
	rep = e.run(e.collector(nil), res)
	mustDecide(t, rep, key, kindInFlight, "kept", "live")

	e.expire(g) // a grant that ends without a release (authority.Release would seal its term)
	rep = e.run(e.collector(nil), res)
	mustDecide(t, rep, key, kindInFlight, "kept", "younger than the abandon period")
	if s := e.seal(res); !s.Version.IsZero() {
		t.Fatalf("seal raised too early: %+v", s)
	}

	rep = e.run(aged, res)
	mustDecide(t, rep, key, kindAbandoned, "deleted", "not live")
	mustDecide(t, rep, first.Object.Key, kindPublished, "kept", "")
	if rep.Sealed != 1 || rep.SealRaises != 1 || rep.Deleted != 1 {
		t.Fatalf("report %+v", rep)
	}
	if s := e.seal(res); s.Version != lost.Version || s.Reason != sealReasonAbandoned {
		t.Fatalf("seal %+v; want %s", s, lost.Version)
	}
	if e.Exists(key) {
		t.Fatal("abandoned object not deleted")
	}

	// The paused worker resumes and publishes that version: stale (seal).
	late, err := p.PublishSeq(ctxT(t, 30*time.Second), lost.Version.Seq, op("j2", "in flight j2"))
	if late.Outcome != publisher.Stale || late.Reason != publisher.ReasonSeal || !errors.Is(err, publisher.ErrStale) {
		t.Fatalf("late publish: %q %q %v; want stale seal", late.Outcome, late.Reason, err)
	}
	if ptr := e.Pointer(res); ptr.Version != first.Version {
		t.Fatalf("pointer moved to %s", ptr.Version)
	}
	// Its new object is unpublishable now and goes on the next pass, even
	// with the real clock.
	rep = e.run(e.collector(nil), res)
	mustDecide(t, rep, late.Attempt.Object.Key, kindUnpublishable, "deleted", "<= seal")
}

// Foreign keys, another resource whose name extends this one (logs vs
// logs2), other domains and the bucket's marker objects are never touched;
// foreign keys are reported.
func TestForeignAndOtherPrefixesUntouched(t *testing.T) {
	e := newEnv(t)
	mk := func(res string) (publisher.Result, publisher.Result) {
		a, pa := e.worker(res, "a")
		e.publish(pa, res+"-1", publisher.Applied)
		e.release(a)
		_, pb := e.worker(res, "b")
		pub := e.publish(pb, res+"-2", publisher.Applied)
		orphan := e.publish(pa, res+"-3", publisher.Stale)
		return pub, orphan
	}
	_, logsOrphan := mk("logs")
	_, logs2Orphan := mk("logs2")
	foreign := []string{
		e.NS.ObjectsPrefix("logs") + "README.txt",
		e.NS.ObjectsPrefix("logs") + "sub/" + layout.EncodeVersion(layout.Version{Epoch: 1, Fence: 1, Seq: 1}) + "-" + nonce,
		e.NS.ObjectsPrefix("logs") + layout.EncodeVersion(layout.Version{Epoch: 1, Fence: 1, Seq: 1}) + "-" + strings.ToUpper(nonce),
		e.NS.ObjectsPrefix("logs") + layout.EncodeVersion(layout.Version{Epoch: 1, Fence: 1, Seq: 1}),
		e.NS.Root() + "logs.txt", // beside the resource's prefix
	}
	for _, k := range foreign {
		e.put(k, "not fencepub's")
	}
	// The same resource in another domain of the same prefix.
	otherNS, err := layout.NewNamespace(e.NS.Prefix, e.NS.Domain+"x")
	if err != nil {
		t.Fatal(err)
	}
	other := otherNS.ObjectKey("logs", layout.Version{Epoch: 1, Fence: 1, Seq: 1}, nonce)
	e.put(other, "another domain")
	before2 := e.Keys(e.NS.ObjectsPrefix("logs2"))
	beforeMeta := e.Keys(e.NS.MetaPrefix())

	rep := e.run(e.collector(later(time.Hour)), "logs")
	for _, k := range foreign[:4] {
		mustDecide(t, rep, k, kindForeign, "kept", "not an object key")
		if !e.Exists(k) {
			t.Fatalf("foreign key %s deleted", k)
		}
	}
	if !e.Exists(foreign[4]) || !e.Exists(other) {
		t.Fatal("a key outside the resource's prefix was deleted")
	}
	if rep.Kept.Foreign != 4 || e.Exists(logsOrphan.Attempt.Object.Key) {
		t.Fatalf("report %+v", rep.Kept)
	}
	if got := e.Keys(e.NS.ObjectsPrefix("logs2")); strings.Join(got, ",") != strings.Join(before2, ",") || !e.Exists(logs2Orphan.Attempt.Object.Key) {
		t.Fatalf("logs2 changed: %v -> %v", before2, got)
	}
	if got := e.Keys(e.NS.MetaPrefix()); strings.Join(got, ",") != strings.Join(beforeMeta, ",") {
		t.Fatalf("marker objects changed: %v -> %v", beforeMeta, got)
	}
	// --all covers logs2 as well, and still no foreign key.
	rep = e.run(e.collector(later(time.Hour)))
	if rep.Resources != 2 || e.Exists(logs2Orphan.Attempt.Object.Key) || rep.Kept.Foreign != 4 {
		t.Fatalf("--all: %+v", rep)
	}
	for _, k := range append(foreign, other) {
		if !e.Exists(k) {
			t.Fatalf("%s deleted", k)
		}
	}
}

// GC refuses to touch a prefix whose bucket ownership marker names another
// deployment, or that has no marker at all.
func TestOtherDeploymentRefused(t *testing.T) {
	e := newEnv(t)
	const res = "shared"
	a, pa := e.worker(res, "a")
	e.publish(pa, "1", publisher.Applied)
	e.release(a)
	b := e.acquire(res, "b", 0)
	e.publish(e.bind(e.pub, b), "2", publisher.Applied)
	orphan := e.publish(pa, "3", publisher.Stale)
	marker, err := objstore.GetSmall(ctxT(t, 10*time.Second), e.Store, e.NS.OwnershipObject(), 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	// Another deployment took the prefix (a fresh etcd, a second cluster).
	e.put(e.NS.OwnershipObject(), `{"deployment_id":"someone-else","created_at":"2030-01-01T00:00:00Z"}`)
	c := e.collector(later(time.Hour))
	rep, err := c.Run(ctxT(t, time.Minute), RunOptions{All: true})
	if !errors.Is(err, authority.ErrForeignDeployment) || len(rep.Errors) == 0 || !strings.Contains(err.Error(), "someone-else") {
		t.Fatalf("err %v, report %+v; want authority.ErrForeignDeployment", err, rep)
	}
	if !e.Exists(orphan.Attempt.Object.Key) || rep.Scanned != 0 {
		t.Fatal("GC touched another deployment's prefix")
	}
	if _, err := e.Store.Client.StatObject(ctxT(t, 10*time.Second), e.Store.Bucket, e.NS.OwnershipObject(), minio.StatObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	e.rm(e.NS.OwnershipObject())
	if _, err := c.Run(ctxT(t, time.Minute), RunOptions{All: true}); !errors.Is(err, ErrNoOwnership) || !e.Exists(orphan.Attempt.Object.Key) {
		t.Fatalf("without a marker: %v", err)
	}
	e.put(e.NS.OwnershipObject(), string(marker))
	e.run(c)
	if e.Exists(orphan.Attempt.Object.Key) {
		t.Fatal("orphan kept once the marker is ours again")
	}
}

// A pass warns when bucket versioning (deletes only add delete markers) or
// lifecycle rules acting on current objects (which bypass GC's rules) are
// on, and still runs. Versioning with a rule that only expires the
// noncurrent versions under the domain root does not warn; one for another
// prefix does.
func TestBucketWarnings(t *testing.T) {
	e := newEnv(t)
	cfg := testenv.Get(t).S3.S3Config()
	cfg.Bucket = "gc-warn-" + strings.ToLower(e.NS.Domain)
	st, err := s3store.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, time.Minute)
	if err := st.EnsureBucket(ctx); err != nil {
		t.Fatal(err)
	}
	e.Store, e.st, e.NS = st, st, testenv.Namespace(t) // a fresh domain in the new bucket
	e.auth = e.authority(e.Etcd)
	if _, err := operator.Init(ctx, e.auth); err != nil {
		t.Fatal(err)
	}
	e.pub = e.publisher(e.Etcd, nil)
	g := e.acquire("v", "a", 0)
	e.publish(e.bind(e.pub, g), "1", publisher.Applied)

	rep := e.run(e.collector(nil), "v")
	if len(rep.Warnings) != 0 {
		t.Fatalf("warnings on a plain bucket: %v", rep.Warnings)
	}
	// A resource named but never granted (a typo) gets a warning.
	rep = e.run(e.collector(nil), "v-typo")
	if len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], `"v-typo" was never granted`) {
		t.Fatalf("warnings for a resource never granted: %v", rep.Warnings)
	}
	if err := st.Client.EnableVersioning(ctx, st.Bucket); err != nil {
		t.Fatal(err)
	}
	lc := lifecycle.NewConfiguration()
	lc.Rules = []lifecycle.Rule{{ID: "expire-old", Status: "Enabled", RuleFilter: lifecycle.Filter{Prefix: "tmp/"}, Expiration: lifecycle.Expiration{Days: 30}}}
	if err := st.Client.SetBucketLifecycle(ctx, st.Bucket, lc); err != nil {
		t.Fatal(err)
	}
	rep = e.run(e.collector(nil), "v")
	all := strings.Join(rep.Warnings, "\n")
	if len(rep.Warnings) != 2 || !strings.Contains(all, "versioning Enabled") || !strings.Contains(all, "1 lifecycle rule") {
		t.Fatalf("warnings: %v", rep.Warnings)
	}
	if rep.Scanned != 1 || rep.Kept.Published != 1 {
		t.Fatalf("the pass did not run: %+v", rep)
	}

	noncurrent := func(prefix string) lifecycle.Rule {
		return lifecycle.Rule{ID: "expire-noncurrent", Status: "Enabled", RuleFilter: lifecycle.Filter{Prefix: prefix},
			NoncurrentVersionExpiration: lifecycle.NoncurrentVersionExpiration{NoncurrentDays: 30},
			Expiration:                  lifecycle.Expiration{DeleteMarker: true}}
	}
	lc.Rules = []lifecycle.Rule{noncurrent(e.NS.Prefix + "/")}
	if err := st.Client.SetBucketLifecycle(ctx, st.Bucket, lc); err != nil {
		t.Fatal(err)
	}
	if rep = e.run(e.collector(nil), "v"); len(rep.Warnings) != 0 {
		t.Fatalf("warnings with versioning and a noncurrent expiry rule: %v", rep.Warnings)
	}
	lc.Rules = []lifecycle.Rule{noncurrent("elsewhere/")}
	if err := st.Client.SetBucketLifecycle(ctx, st.Bucket, lc); err != nil {
		t.Fatal(err)
	}
	if rep = e.run(e.collector(nil), "v"); len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "versioning Enabled") {
		t.Fatalf("warnings with a noncurrent expiry rule for another prefix: %v", rep.Warnings)
	}
}
