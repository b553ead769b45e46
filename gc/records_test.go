//go:build !unit

package gc

import (
	"context"
	"errors"
	"github.com/fencepub/fencepub/internal/recovery"
	"io"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/publisher"
	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus"
)

// etcd stays bounded: history entries past retention, op records past their
// retention, request records past RequestRetention and grant
// records below the pointer's fence are pruned; the generation, epoch,
// pointer and seal never are.
func TestRecordsPruned(t *testing.T) {
	e := newEnv(t)
	const res = "bounded"
	a, pa := e.worker(res, "a")
	for _, k := range []string{"k1", "k2", "k3"} {
		e.publish(pa, k, publisher.Applied)
	}
	e.release(a)
	b := e.acquire(res, "b", 0)
	last := e.publish(e.bind(e.pub, b), "k4", publisher.Applied)

	// A collector that keeps request records for 1 ns.
	shortRequests := func(c *Config) { c.RequestRetention = time.Nanosecond }
	// The first pass starts the domain clock: no record is old on it yet.
	rep := e.run(e.collector(shortRequests), res)
	if rep.Records.Ops != 0 || rep.Records.History != 0 || rep.Records.Grants != 1 || rep.Records.Requests != 0 {
		t.Fatalf("first pass records %+v; want the grant record of A only", rep.Records)
	}
	rep = e.run(e.collector(func(c *Config) { shortRequests(c); later(time.Minute)(c) }), res)
	if rep.Records.Ops != 0 || rep.Records.History != 0 || rep.Records.Requests != 1 {
		t.Fatalf("a minute later records %+v; want the request record of A only", rep.Records)
	}
	if e.Count(e.NS.RequestsPrefix(res)) != 1 || e.get(e.NS.RequestKey(res, b.RequestID)) == nil {
		t.Fatal("the live holder's request record was pruned")
	}
	if n := e.Count(e.NS.OpsPrefix(res)); n != 4 {
		t.Fatalf("%d op records; want 4", n)
	}

	// Eight days later: every op record is past the 7-day window; history
	// keeps the last 2 versions.
	rep = e.run(e.collector(func(c *Config) { shortRequests(c); later(8 * 24 * time.Hour)(c) }), res)
	if rep.Records.Ops != 4 || rep.Records.History != 2 || e.Count(e.NS.OpsPrefix(res)) != 0 || e.Count(e.NS.HistoryPrefix(res)) != 2 {
		t.Fatalf("records %+v, ops left %d, history left %d", rep.Records, e.Count(e.NS.OpsPrefix(res)), e.Count(e.NS.HistoryPrefix(res)))
	}
	if p := e.Pointer(res); p.Version != last.Version {
		t.Fatalf("pointer changed: %s", p.Version)
	}
	for _, k := range []string{e.NS.GenerationKey(res), e.NS.SealKey(res), e.NS.PointerKey(res), e.NS.EpochKey(), e.NS.DeploymentKey(), e.NS.GrantKey(res, b.Generation)} {
		if e.get(k) == nil {
			t.Fatalf("%s was deleted", k)
		}
	}
	// A dry run counts but deletes nothing. k5's op record is newer than
	// every checkpoint of the clock, so it is not old whatever the time.
	e.publish(e.bind(e.pub, b), "k5", publisher.Applied)
	dry, err := e.collector(func(c *Config) { shortRequests(c); later(16 * 24 * time.Hour)(c) }).runPass(ctxT(t, time.Minute), RunOptions{Resources: []string{res}, DryRun: true}, false)
	if err != nil || dry.Records.Ops != 0 || dry.Records.History != 1 || e.Count(e.NS.OpsPrefix(res)) != 1 || e.Count(e.NS.HistoryPrefix(res)) != 3 {
		t.Fatalf("dry run: %v %+v", err, dry.Records)
	}
}

// After recover moves the domain to a new epoch, an old-epoch object above
// the pointer recover recorded for that epoch is quarantined (kept and
// reported), however old; old-epoch objects at or below it are deleted.
func TestQuarantineAfterRecover(t *testing.T) {
	e := newEnv(t)
	const res = "restored"
	a, pa := e.worker(res, "a")
	first := e.publish(pa, "r1", publisher.Applied)
	lost := e.inFlight(a, "r2")
	e.release(a)
	rrep, err := recovery.Recover(ctxT(t, time.Minute), e.auth, recovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rrep.NewEpoch <= first.Version.Epoch {
		t.Fatalf("recover: %+v", rrep)
	}
	_, pb := e.worker(res, "b")
	e.publish(pb, "r3", publisher.Applied)
	e.publish(pb, "r4", publisher.Applied)
	e.run(e.collector(nil), res) // the clock's checkpoint after r4
	rep := e.run(e.collector(later(3*time.Hour)), res)
	mustDecide(t, rep, lost.Attempt.Object.Key, kindQuarantined, "kept", "recover recorded")
	mustDecide(t, rep, first.Object.Key, kindUnpublishable, "deleted", "older than the current epoch")
	if rep.Kept.Quarantined != 1 || !e.Exists(lost.Attempt.Object.Key) {
		t.Fatalf("report %+v", rep.Kept)
	}
}

// A resource whose creation a restore lost has no pointer, only the
// restored-pointer records recover wrote (as every resource has after
// recover --from-bucket). An --all pass, the daemon's, still classifies its
// objects: the quarantined one is kept, counted, reported and exported.
func TestQuarantineWithoutPointer(t *testing.T) {
	e := newEnv(t)
	const res = "creation-lost"
	// The only copy of a publish of epoch 1 that the restore took from etcd,
	// with the grant, pointer and seal of the resource.
	lost := e.NS.ObjectKey(res, layout.Version{Epoch: 1, Fence: 1, Seq: 1}, layout.NewNonce())
	e.put(lost, "the only copy of a lost publish")
	_, p := e.worker("known", "a")
	e.publish(p, "k1", publisher.Applied)
	rrep, err := recovery.Recover(ctxT(t, time.Minute), e.auth, recovery.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, r := range rrep.Resources {
		found = found || r.Resource == res && !r.HasPointer && len(r.Recorded) == 1
	}
	if !found || e.get(e.NS.PointerKey(res)) != nil || e.get(e.NS.RestoredKey(res, 1)) == nil {
		t.Fatalf("recover %+v: want %q recorded as restored for epoch 1, with no pointer", rrep.Resources, res)
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := e.collector(func(c *Config) { later(3 * time.Hour)(c); c.Metrics = m })
	d, err := newDaemon(daemonConfig{Collector: c, Owner: "gc-quarantine"})
	if err != nil {
		t.Fatal(err)
	}
	rep := e.run(c) // every resource
	mustDecide(t, rep, lost, kindQuarantined, "kept", "recover recorded")
	if rep.Kept.Quarantined != 1 || rep.Resources != 2 || !e.Exists(lost) {
		t.Fatalf("report: %d resources, kept %+v; want 2 resources and the lost publish quarantined", rep.Resources, rep.Kept)
	}
	got := scrape(t, d.Handler(reg))
	if q := got["fencepub_gc_quarantined_objects"]; q != 1 {
		t.Fatalf("fencepub_gc_quarantined_objects = %v; want 1", q)
	}
}

// `resource delete`: refused while a lease is live unless forced; the seal
// goes to (epoch, generation, max), so the holder's next publish is stale;
// GC removes the objects (the published one after the reader grace) and the
// history, never the pointer, seal or generation; a later grant re-creates
// the resource above them.
func TestDecommission(t *testing.T) {
	e := newEnv(t)
	const res = "retired"
	a, pa := e.worker(res, "a")
	p1 := e.publish(pa, "d1", publisher.Applied)
	p2 := e.publish(pa, "d2", publisher.Applied)
	c := e.collector(nil)
	ctx := ctxT(t, time.Minute)
	if _, err := c.decommission(ctx, res, false); !errors.Is(err, authority.ErrHeld) {
		t.Fatalf("decommission of a held resource: %v; want authority.ErrHeld", err)
	}
	d, err := c.decommission(ctx, res, true)
	want := layout.Version{Epoch: a.Epoch, Fence: a.Generation, Seq: layout.MaxNumber}
	if err != nil || d.Seal != want || d.Already || d.Holder == nil || d.Holder.(*authority.Grant).Generation != a.Generation || d.Previous != p2.Version {
		t.Fatalf("decommission: %+v %v", d, err)
	}
	if s := e.seal(res); s.Version != want || s.Reason != sealReasonDecommissioned {
		t.Fatalf("seal %+v", s)
	}
	late := e.publish(pa, "d3", publisher.Stale)
	if late.Reason != publisher.ReasonSeal {
		t.Fatalf("holder's publish after decommission: %+v", late)
	}
	for _, force := range []bool{true, false} { // the holder's lease still runs
		again, err := c.decommission(ctx, res, force)
		if err != nil || !again.Already || again.Seal != want {
			t.Fatalf("second decommission (force %v): %+v %v", force, again, err)
		}
	}

	rep := e.run(c, res)
	mustDecide(t, rep, p2.Object.Key, kindPublished, "kept", "")
	mustDecide(t, rep, p1.Object.Key, kindRetained, "kept", "")
	mustDecide(t, rep, late.Attempt.Object.Key, kindUnpublishable, "deleted", "<= seal")

	rep = e.run(e.collector(later(12*time.Minute)), res)
	mustDecide(t, rep, p2.Object.Key, kindUnpublishable, "deleted", "")
	mustDecide(t, rep, p1.Object.Key, kindUnpublishable, "deleted", "")
	if left := e.Keys(e.NS.ObjectsPrefix(res)); len(left) != 0 {
		t.Fatalf("objects left: %v", left)
	}
	if e.Count(e.NS.HistoryPrefix(res)) != 0 || rep.Records.History != 2 {
		t.Fatalf("history left: %d (%+v)", e.Count(e.NS.HistoryPrefix(res)), rep.Records)
	}
	for _, k := range []string{e.NS.GenerationKey(res), e.NS.SealKey(res), e.NS.PointerKey(res)} {
		if e.get(k) == nil {
			t.Fatalf("%s deleted", k)
		}
	}
	// A grant after the retirement that never publishes is abandoned: the
	// seal rises over its object and still says decommissioned, with the
	// retirement's time (readers then report ErrDecommissioned, not a loss).
	e.release(a)
	ghost := e.acquire(res, "ghost", 0)
	stray := e.inFlight(ghost, "ghost")
	e.expire(ghost) // no release: a release would seal its term at once
	rep = e.run(e.collector(later(3*time.Hour)), res)
	mustDecide(t, rep, stray.Attempt.Object.Key, kindAbandoned, "deleted", "")
	if s := e.seal(res); s.Reason != sealReasonDecommissioned || s.Version.Compare(layout.Version{Epoch: ghost.Epoch, Fence: ghost.Generation + 1}) >= 0 || s.Version.Compare(stray.Attempt.Version) < 0 {
		t.Fatalf("seal after abandoning a grant of a retired resource: %+v", s)
	}
	// Re-created: the next grant is above the seal.
	b := e.acquire(res, "b", 0)
	back := e.publish(e.bind(e.pub, b), "d4", publisher.Applied)
	rep = e.run(e.collector(later(12*time.Minute)), res)
	mustDecide(t, rep, back.Object.Key, kindPublished, "kept", "")

	if _, err := c.decommission(ctx, "_gc", true); !errors.Is(err, fencepub.ErrInvalid) {
		t.Fatalf("decommission of a reserved name: %v", err)
	}
	// A name never granted (a typo) is refused and nothing is written.
	if _, err := c.decommission(ctx, res+"-typo", true); !errors.Is(err, ErrUnknownResource) {
		t.Fatalf("decommission of a resource never granted: %v; want ErrUnknownResource", err)
	}
	if n := e.Count(e.NS.SealKey(res + "-typo")); n != 0 {
		t.Fatalf("a refused decommission wrote %d seal keys", n)
	}
}

// `resource delete` ends the resource's idempotency keys: GC prunes every
// op record at or below the decommission (the seal's Retired, which later
// seals keep) at its next pass, whatever its age, so a re-created resource
// publishes under an old key anew instead of answering duplicate with a
// version whose object GC collected. Until that pass an old key is still
// duplicate; the keys of the new life are kept for the op retention.
func TestRecreatedResourceStartsWithNoKeys(t *testing.T) {
	e := newEnv(t)
	const res = "reborn"
	a, pa := e.worker(res, "a")
	old := e.publish(pa, "k1", publisher.Applied)
	e.publish(pa, "k2", publisher.Applied)
	e.release(a)
	c := e.collector(nil)
	e.run(c, res) // starts the domain clock: k1 superseded before its first checkpoint
	d, err := c.decommission(ctxT(t, time.Minute), res, false)
	if err != nil || e.seal(res).Retired != d.Seal {
		t.Fatalf("decommission: %+v, %v; seal %+v: want Retired at the decommission", d, err, e.seal(res))
	}
	// Re-created before GC's pass: the old key is still answered.
	b, pb := e.worker(res, "b")
	if r := e.publish(pb, "k1", publisher.Duplicate); r.Version != old.Version {
		t.Fatalf("k1 before the pass: duplicate of %s; want %s", r.Version, old.Version)
	}
	reborn := e.publish(pb, "k3", publisher.Applied)
	e.release(b) // its seal replaces the decommission's reason, not Retired
	if s := e.seal(res); s.Reason == sealReasonDecommissioned || s.Retired != d.Seal {
		t.Fatalf("seal after the new life's release %+v; want its own reason, Retired %s", s, d.Seal)
	}

	rep := e.run(e.collector(later(12*time.Minute)), res)
	if rep.Records.Ops != 2 || e.get(e.NS.OpKey(res, "k1")) != nil || e.get(e.NS.OpKey(res, "k3")) == nil {
		t.Fatalf("ops pruned %d; want the 2 of the retired life, k3's kept", rep.Records.Ops)
	}
	if e.Exists(old.Object.Key) {
		t.Fatalf("%s not collected", old.Object.Key)
	}
	_, pc := e.worker(res, "c")
	if r := e.publish(pc, "k1", publisher.Applied); reborn.Version.Compare(r.Version) >= 0 {
		t.Fatalf("k1 applied at %s; want above %s", r.Version, reborn.Version)
	}
	if r := e.publish(pc, "k3", publisher.Duplicate); r.Version != reborn.Version || !e.Exists(r.Object.Key) {
		t.Fatalf("k3: duplicate of %s (object there: %v); want %s", r.Version, e.Exists(r.Object.Key), reborn.Version)
	}
}

// blockingBody yields left zero bytes, then blocks until release is closed
// and fails (io.ErrUnexpectedEOF), or ends (io.EOF) when ends is set: a
// worker paused in the middle of a multipart upload.
type blockingBody struct {
	left    int
	ends    bool
	release chan struct{}
	started chan struct{}
	once    sync.Once
}

func (b *blockingBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		b.once.Do(func() { close(b.started) })
		<-b.release
		if b.ends {
			return 0, io.EOF
		}
		return 0, io.ErrUnexpectedEOF
	}
	n := min(len(p), b.left)
	clear(p[:n])
	b.left -= n
	return n, nil
}

// minPartSize is S3's minimum part size, the smallest
// publisher.Config.PartSize.
const minPartSize = 5 << 20

// pausedUpload starts a Publish with p of a body of unknown length
// (p's client must have minPartSize parts) that pauses after its
// first part, so its multipart upload is open. resume lets the body go on
// — it ends when ends is set, else it fails — and returns the publish's
// answer; it is safe to call more than once.
func (e *env) pausedUpload(p *publisher.Publisher, ends bool) (resume func() (publisher.Result, error)) {
	e.t.Helper()
	body := &blockingBody{left: minPartSize + 1, ends: ends, release: make(chan struct{}), started: make(chan struct{})}
	var (
		res  publisher.Result
		err  error
		once sync.Once
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		res, err = p.Publish(context.Background(), publisher.Operation{IdempotencyKey: "big-" + layout.NewNonce(), Body: body})
	}()
	select {
	case <-body.started:
	case <-done:
		e.t.Fatalf("the multipart publish ended before its upload paused: %v", err)
	case <-time.After(30 * time.Second):
		e.t.Fatal("the multipart upload did not start")
	}
	return func() (publisher.Result, error) {
		once.Do(func() { close(body.release) })
		<-done
		return res, err
	}
}

// uploadsOf returns the incomplete multipart uploads of res, read from the
// store directly, sorted by key.
func (e *env) uploadsOf(res string) []minio.ObjectMultipartInfo {
	e.t.Helper()
	var out []minio.ObjectMultipartInfo
	for u := range e.Store.Client.ListIncompleteUploads(ctxT(e.t, 10*time.Second), e.Store.Bucket, "", true) {
		if u.Err != nil {
			e.t.Fatal(u.Err)
		}
		if strings.HasPrefix(u.Key, e.NS.ObjectsPrefix(res)) {
			out = append(out, u)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Incomplete multipart uploads follow the object rules: an upload of a live
// grant is in flight however old; once its version is below the pointer it
// is aborted; an old upload of a dead grant is abandoned and aborted. A
// publisher whose upload GC aborted is told so (ErrUploadAborted).
func TestUploadsAborted(t *testing.T) {
	e := newEnv(t)
	const res = "big"
	pc := e.publisher(e.Etcd, func(c *publisher.Config) { c.PartSize = minPartSize })
	uploads := func() []string {
		var out []string
		for _, u := range e.uploadsOf(res) {
			out = append(out, u.Key)
		}
		return out
	}
	aged := e.collector(later(3 * time.Hour))

	a := e.acquire(res, "a", 0)
	pa := e.bind(pc, a)
	e.publish(pa, "small", publisher.Applied)
	stopA := e.pausedUpload(pa, false)
	defer stopA()
	ua := uploads()
	if len(ua) != 1 {
		t.Fatalf("uploads %v", ua)
	}
	rep := e.run(aged, res)
	if rep.Uploads.Scanned != 1 || rep.Uploads.Kept != 1 || len(uploads()) != 1 {
		t.Fatalf("upload of a live grant: %+v", rep.Uploads)
	}

	// B takes over and publishes: A's upload is now below the pointer.
	e.release(a)
	b := e.acquire(res, "b", 0)
	pb := e.bind(pc, b)
	e.publish(pb, "b-small", publisher.Applied)
	stopB := e.pausedUpload(pb, true)
	defer stopB()
	e.expire(b) // no release: a release would seal B's term, its upload with it
	rep = e.run(e.collector(nil), res)
	if rep.Uploads.Scanned != 2 || rep.Uploads.Aborted != 1 || rep.Uploads.Kept != 1 {
		t.Fatalf("after B: %+v", rep.Uploads)
	}
	if got := uploads(); len(got) != 1 || got[0] == ua[0] {
		t.Fatalf("uploads left %v; want only B's", got)
	}
	// B's upload: dead grant, 3 h old by the aged clock: abandoned.
	rep = e.run(aged, res)
	if rep.Uploads.Aborted != 1 || len(uploads()) != 0 {
		t.Fatalf("abandoned upload: %+v, left %v", rep.Uploads, uploads())
	}
	// The paused worker resumes: its next part finds the upload gone.
	if r, err := stopB(); !errors.Is(err, publisher.ErrUploadAborted) || r.Outcome != "" {
		t.Fatalf("publish after GC aborted its upload: %q, %v; want publisher.ErrUploadAborted", r.Outcome, err)
	}
}

// A young incomplete upload of a dead grant counts as a kept in-flight
// version, as a young object does: an old abandoned object of the same
// grant at or above it is kept, not sealed (the seal would make the upload
// unpublishable although the pass reports it kept), and the upload's
// publish applies once the worker resumes. This arises when a seq is given
// back after a failed write and taken again.
func TestYoungUploadBlocksAbandonSeal(t *testing.T) {
	e := newEnv(t)
	const res = "reused"
	pc := e.publisher(e.Etcd, func(c *publisher.Config) { c.PartSize = minPartSize })
	g := e.acquire(res, "a", 0)
	p := e.bind(pc, g)
	first := e.publish(p, "first", publisher.Applied)
	// An earlier attempt at the next seq wrote its object and failed (its
	// seq was given back): an orphan at the version the upload takes.
	next := layout.Version{Epoch: g.Epoch, Fence: g.Generation, Seq: first.Version.Seq + 1}
	orphan := e.NS.ObjectKey(res, next, layout.NewNonce())
	e.put(orphan, "an attempt whose write failed")
	var orphanTime time.Time
	for o, err := range e.st.List(ctxT(t, 10*time.Second), e.NS.ObjectsPrefix(res), objstore.ListOptions{}) {
		if err != nil {
			t.Fatal(err)
		}
		if o.Key == orphan {
			orphanTime = o.LastModified // as GC's listing sees it
		}
	}
	// Some stores keep times to the second: start the upload in a later
	// second than the orphan, so that it is younger on every store.
	time.Sleep(time.Until(orphanTime.Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
	resume := e.pausedUpload(p, true)
	defer resume()
	e.expire(g) // the worker is paused past its lease

	ups := e.uploadsOf(res)
	if len(ups) != 1 || orphanTime.IsZero() || !ups[0].Initiated.After(orphanTime) {
		t.Fatalf("uploads %+v, orphan written at %v: want one upload started after the orphan", ups, orphanTime)
	}
	if v, _, _ := e.NS.ParseObjectKey(res, ups[0].Key); v != next {
		t.Fatalf("the upload is at %s; want %s", v, next)
	}
	// GC's clock: the orphan is exactly the abandon period old, the upload
	// younger.
	pol := DefaultConfig().Policy
	at := orphanTime.Add(pol.AbandonAfter + pol.ClockSkew)
	rep := e.run(e.collector(func(c *Config) { c.now = func() time.Time { return at } }), res)
	mustDecide(t, rep, orphan, kindInFlight, "kept", "not below the kept in-flight version")
	var up *decision
	for i, d := range rep.Decisions {
		if d.UploadID != "" {
			up = &rep.Decisions[i]
		}
	}
	if up == nil || up.Kind != kindInFlight || up.Action != "kept" || !strings.Contains(up.Reason, "younger than the abandon period") {
		t.Fatalf("upload decision %+v; want in_flight, kept, younger than the abandon period", up)
	}
	if rep.SealRaises != 0 || e.seal(res).Version.Compare(next) >= 0 {
		t.Fatalf("seal raised to %s (%d raises) over the kept upload at %s", e.seal(res).Version, rep.SealRaises, next)
	}
	if r, err := resume(); r.Outcome != publisher.Applied || err != nil || r.Version != next {
		t.Fatalf("the kept upload's publish: %q %q at %s, %v; want applied at %s", r.Outcome, r.Reason, r.Version, err, next)
	}
}

// A dry run makes the same decisions as the real pass that follows it and
// changes nothing.
func TestDryRunSameDecisions(t *testing.T) {
	e := newEnv(t)
	const res = "dry"
	a, pa := e.worker(res, "a")
	e.publish(pa, "1", publisher.Applied)
	lost := e.inFlight(a, "2")
	e.release(a)
	_, pb := e.worker(res, "b")
	e.publish(pb, "3", publisher.Applied)
	stale := e.publish(pa, "4", publisher.Stale)
	e.put(e.NS.ObjectsPrefix(res)+"notes", "foreign")
	c := e.collector(later(3 * time.Hour))
	sealBefore := e.get(e.NS.SealKey(res)).ModRevision
	dry, err := c.runPass(ctxT(t, time.Minute), RunOptions{Resources: []string{res}, DryRun: true}, true)
	if err != nil {
		t.Fatal(err)
	}
	if !e.Exists(stale.Attempt.Object.Key) || !e.Exists(lost.Attempt.Object.Key) || e.get(e.NS.SealKey(res)).ModRevision != sealBefore {
		t.Fatal("the dry run changed something")
	}
	real := e.run(c, res)
	if len(dry.Decisions) != len(real.Decisions) || dry.Deleted != real.Deleted || dry.Kept != real.Kept {
		t.Fatalf("dry %+v\nreal %+v", dry, real)
	}
	for _, d := range dry.Decisions {
		r := decisionOf(t, real, d.Key)
		wantAction := map[string]string{"would_delete": "deleted", "kept": "kept"}[d.Action]
		if r.Kind != d.Kind || r.Action != wantAction {
			t.Fatalf("%s: dry %s/%s, real %s/%s", d.Key, d.Kind, d.Action, r.Kind, r.Action)
		}
	}
	if e.Exists(stale.Attempt.Object.Key) || e.Exists(lost.Attempt.Object.Key) {
		t.Fatal("the real pass did not delete")
	}
}

// pruneRequests deletes the request records modified before the revision it
// is given (the domain clock's cutoff), never a later one nor the live
// holder's, whose retried acquire still gets its grant.
func TestPruneRequests(t *testing.T) {
	e := newEnv(t)
	c := e.collector(nil)
	ctx := ctxT(t, 30*time.Second)
	const res = "p"
	for range 3 {
		e.release(e.acquire(res, "o", 0))
	}
	rev := func() int64 {
		resp, err := e.Etcd.Get(ctx, e.NS.EpochKey())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	cutoff := rev() + 1
	e.release(e.acquire(res, "o", 0)) // after the cutoff
	live := e.acquire(res, "o", 0)
	if n, err := c.pruneRequests(ctx, res, nil, 0, 0); err != nil || n != 0 {
		t.Fatalf("pruneRequests without a cutoff = %d, %v; want 0", n, err)
	}
	if n, err := c.pruneRequests(ctx, res, nil, 0, cutoff); err != nil || n != 3 {
		t.Fatalf("pruneRequests = %d, %v; want 3 (the records before the cutoff)", n, err)
	}
	if n, err := c.pruneRequests(ctx, res, nil, 0, rev()+1); err != nil || n != 1 {
		t.Fatalf("pruneRequests = %d, %v; want 1 (the live holder's record stays)", n, err)
	}
	if n := e.Count(e.NS.RequestsPrefix(res)); n != 1 {
		t.Fatalf("%d request records left; want 1", n)
	}
	again, err := e.auth.Acquire(ctx, authority.AcquireRequest{Resource: res, Owner: live.Owner, RequestID: live.RequestID, TTL: live.TTL})
	if err != nil || again.Generation != live.Generation || again.HolderRevision != live.HolderRevision {
		t.Fatalf("the live holder's retry got %+v, %v; want its grant %+v", again, err, live)
	}
}
