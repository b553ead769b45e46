//go:build !unit

package fencepub_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/internal/pubhook"
	"github.com/fencepub/fencepub/internal/recovery"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/faultstore"
	"github.com/fencepub/fencepub/internal/objstore/memstore"
	"github.com/fencepub/fencepub/internal/testkit/faultproxy"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Short timeouts, so that an unreachable etcd or store ends each call in
// a few seconds: the packages retry within the caller's deadline
// (callTimeout) and, when that ends them, say what they met.
const (
	requestTimeout = 300 * time.Millisecond
	retryTimeout   = time.Second
	callTimeout    = 3 * time.Second
	setupTimeout   = 30 * time.Second
)

// world is one domain on the shared etcd, reached through a fault proxy, and
// an in-memory bucket behind a fault injector, with a client of every
// package. setup brings it to the state an entry point needs; the faults
// are injected after it.
type world struct {
	t     *testing.T
	env   fencepub.Env
	px    *faultproxy.Proxy
	fs    *faultstore.Store
	auth  *authority.Authority
	grant authority.Grant
	pub   *publisher.Client
	p     *publisher.Publisher
	first publisher.Result // a published version of resource "r"
	// dataset is, in state dataset, the version of "r" after first: a
	// dataset of one file, "a.txt".
	dataset publisher.DatasetResult
	rd      *reader.Reader
	col     *gc.Collector
}

// The states setup brings a world to.
const (
	fresh       = iota // clients only: the domain is not initialised
	initialised        // Init ran
	published          // "r" is granted, bound and has one published version
	dataset            // and then a dataset version (world.dataset)
)

func newWorld(t *testing.T, state int) *world {
	t.Helper()
	px, cli := testenv.Get(t).EtcdProxy(t)
	fs := faultstore.New(memstore.New("fencepub", nil))
	w := &world{t: t, px: px, fs: fs, env: fencepub.Env{Namespace: fencepub.Namespace(testenv.Namespace(t)), Etcd: cli, Store: fs}}
	var err error
	if w.auth, err = authority.New(authority.Config{Env: w.env, RequestTimeout: requestTimeout, RetryTimeout: retryTimeout}); err != nil {
		t.Fatal(err)
	}
	if w.pub, err = publisher.New(publisher.Config{Env: w.env, RequestTimeout: requestTimeout, ResendTimeout: retryTimeout}); err != nil {
		t.Fatal(err)
	}
	if w.rd, err = reader.New(reader.Config{Env: w.env, RequestTimeout: retryTimeout}, "r"); err != nil {
		t.Fatal(err)
	}
	if w.col, err = gc.New(gc.Config{Env: w.env, Authority: w.auth, RequestTimeout: requestTimeout}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, setupTimeout)
	if state >= initialised {
		if _, err := operator.Init(ctx, w.auth); err != nil {
			t.Fatal(err)
		}
	}
	if state >= published {
		if w.grant, err = w.auth.Acquire(ctx, authority.AcquireRequest{Resource: "r", Owner: "worker", TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if w.p, err = w.pub.Bind(ctx, publisher.GrantTerm(w.grant, false)); err != nil {
			t.Fatal(err)
		}
		if w.first, err = w.p.Publish(ctx, op("first")); err != nil {
			t.Fatal(err)
		}
	}
	if state >= dataset {
		if w.dataset, err = w.p.PublishDataset(ctx, datasetOf("dataset")); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func op(key string) publisher.Operation {
	return publisher.Operation{IdempotencyKey: key, Body: strings.NewReader("body of " + key)}
}

// datasetOf is a dataset of one file, a.txt, published with key.
func datasetOf(key string) publisher.Dataset {
	return publisher.Dataset{IdempotencyKey: key, Files: publisher.FileList([]publisher.File{
		publisher.BytesFile("a.txt", []byte("a file of "+key), "text/plain")})}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// A failure is what a world's servers do to every call from now on.
type failure struct {
	name   string
	store  bool // an object-store failure (else an etcd one)
	inject func(*world)
	want   error // the public sentinel every entry point's error matches
}

// storeFault fails every store call of w with err before it reaches the
// store.
func storeFault(err error) func(*world) {
	return func(w *world) {
		for _, m := range []faultstore.Method{faultstore.CheckBucket, faultstore.EnsureBucket, faultstore.Settings,
			faultstore.PutCreateOnly, faultstore.CreateUpload, faultstore.UploadPart, faultstore.CopyPart,
			faultstore.CompleteUpload, faultstore.AbortUpload, faultstore.ListUploads, faultstore.Stat,
			faultstore.Get, faultstore.List, faultstore.Delete} {
			w.fs.Inject(m, 1000, faultstore.Fault{Before: fmt.Errorf("%w (injected)", err)})
		}
	}
}

var failures = []failure{
	// The store's answers, as s3store classifies them (its own tests check
	// the classification against real servers).
	{"store unavailable", true, storeFault(objstore.ErrUnavailable), fencepub.ErrUnavailable},
	{"store refuses the credentials", true, storeFault(objstore.ErrAccessDenied), fencepub.ErrInvalid},
	{"store TLS handshake fails", true, storeFault(objstore.ErrTLS), fencepub.ErrInvalid},
	{"bucket missing", true, storeFault(objstore.ErrNoBucket), fencepub.ErrInvalid},
	// A real etcd that stops answering: every connection refused and reset.
	{"etcd unreachable", false, func(w *world) {
		w.px.Set(faultproxy.Faults{Refuse: true})
		w.px.ResetAll()
	}, fencepub.ErrUnavailable},
}

// An entry is one public entry point: the state it needs, the failures it
// can meet (store, etcd), and the call.
type entry struct {
	name         string
	state        int
	store, etcd  bool
	call         func(ctx context.Context, w *world) error
	wantOnEtcd   error // when not the failure's own sentinel
	wantOnStores error // ditto, for every store failure
}

var entries = []entry{
	{name: "operator.Init", state: fresh, store: true, etcd: true, call: func(ctx context.Context, w *world) error {
		_, err := operator.Init(ctx, w.auth)
		return err
	}},
	{name: "authority.Acquire", state: initialised, store: true, etcd: true, call: func(ctx context.Context, w *world) error {
		_, err := w.auth.Acquire(ctx, authority.AcquireRequest{Resource: "other", Owner: "worker", TTL: time.Minute})
		return err
	}},
	{name: "authority.AcquireGroup", state: initialised, store: true, etcd: true, call: func(ctx context.Context, w *world) error {
		_, err := w.auth.AcquireGroup(ctx, authority.GroupRequest{Resources: []string{"g1", "g2"}, Owner: "worker", TTL: time.Minute})
		return err
	}},
	{name: "operator.CheckHistory", state: fresh, store: true, call: func(ctx context.Context, w *world) error {
		return operator.CheckHistory(ctx, w.auth)
	}},
	{name: "recovery.Recover", state: published, store: true, etcd: true, call: func(ctx context.Context, w *world) error {
		_, err := recovery.Recover(ctx, w.auth, recovery.Options{})
		return err
	}},
	{name: "authority.Renew", state: published, etcd: true, call: func(ctx context.Context, w *world) error {
		return w.auth.Renew(ctx, w.grant)
	}},
	{name: "authority.Release", state: published, etcd: true, call: func(ctx context.Context, w *world) error {
		return w.auth.Release(ctx, w.grant)
	}},
	{name: "authority.ReleaseGroup", state: published, etcd: true, call: func(ctx context.Context, w *world) error {
		return w.auth.ReleaseGroup(ctx, []authority.Grant{w.grant})
	}},
	{name: "operator.Epoch", state: initialised, etcd: true, call: func(ctx context.Context, w *world) error {
		_, err := operator.Epoch(ctx, w.auth)
		return err
	}},
	{name: "authority.Holder", state: published, etcd: true, call: func(ctx context.Context, w *world) error {
		_, _, err := w.auth.Holder(ctx, "r")
		return err
	}},
	{name: "operator.Inspect", state: published, etcd: true, call: func(ctx context.Context, w *world) error {
		_, err := operator.Inspect(ctx, w.auth, "r")
		return err
	}},
	{name: "publisher.Bind", state: published, etcd: true, call: func(ctx context.Context, w *world) error {
		_, err := w.pub.Bind(ctx, publisher.GrantTerm(w.grant, false))
		return err
	}},
	// A publish whose transaction got no answer may have been applied: its
	// outcome is unknown, whatever kept etcd from answering.
	{name: "publisher.Publish", state: published, store: true, etcd: true, wantOnEtcd: publisher.ErrUnknown, call: func(ctx context.Context, w *world) error {
		_, err := w.p.Publish(ctx, op("second"))
		return err
	}},
	{name: "publisher.PublishSeq", state: published, store: true, etcd: true, wantOnEtcd: publisher.ErrUnknown, call: func(ctx context.Context, w *world) error {
		_, err := w.p.PublishSeq(ctx, w.first.Version.Seq+5, op("second"))
		return err
	}},
	{name: "publisher.Pipeline", state: published, store: true, etcd: true, wantOnEtcd: publisher.ErrUnknown, call: func(ctx context.Context, w *world) error {
		pl := w.p.Pipeline(ctx, 2)
		defer pl.Close()
		return (<-pl.Submit(op("second"))).Err
	}},
	{name: "publisher.PublishDataset", state: published, store: true, etcd: true, wantOnEtcd: publisher.ErrUnknown, call: func(ctx context.Context, w *world) error {
		ds := datasetOf("second")
		ds.Base = publisher.BaseNone // no pointer read before the transaction
		_, err := w.p.PublishDataset(ctx, ds)
		return err
	}},
	{name: "publisher.PublishGroup", state: published, store: true, etcd: true, wantOnEtcd: publisher.ErrUnknown, call: func(ctx context.Context, w *world) error {
		o := op("group")
		_, err := w.pub.PublishGroup(ctx, "group", []publisher.GroupMember{{Publisher: w.p, Operation: &o}})
		return err
	}},
	{name: "publisher.Rollback", state: published, store: true, etcd: true, call: func(ctx context.Context, w *world) error {
		_, err := w.p.Rollback(ctx, w.first.Version, "rollback")
		return err
	}},
	{name: "publisher.Republish", state: published, store: true, etcd: true, wantOnEtcd: publisher.ErrUnknown, call: func(ctx context.Context, w *world) error {
		_, err := pubhook.Republish(ctx, w.p, w.first.Object.Key, "republish")
		return err
	}},
	// Resolve of an attempt never sent seals its version in etcd and then
	// writes a settled marker to the bucket.
	{name: "publisher.Resolve", state: published, store: true, etcd: true, call: func(ctx context.Context, w *world) error {
		v := w.grant.Version(w.first.Version.Seq + 1)
		digest, err := pubhook.RequestDigest(ctx, op("never-sent"))
		if err != nil {
			return fmt.Errorf("digest: %w", err)
		}
		_, err = w.pub.Resolve(ctx, "r", "never-sent", v, publisher.AttemptID{Digest: digest})
		return err
	}},
	// A group's unknown outcome is its first member's op record and seal.
	{name: "publisher.ResolveGroup", state: published, store: true, etcd: true, call: func(ctx context.Context, w *world) error {
		v := w.grant.Version(w.first.Version.Seq + 1)
		_, err := w.pub.ResolveGroup(ctx, publisher.GroupResult{
			Outcome: publisher.Unknown, IdempotencyKey: "never-sent-group", Digest: strings.Repeat("0", 64),
			Members: []publisher.Result{{Resource: "r", Attempt: &publisher.Attempt{Version: v}}},
		})
		return err
	}},
	{name: "reader.Current", state: published, etcd: true, call: func(ctx context.Context, w *world) error {
		_, err := w.rd.Current(ctx)
		return err
	}},
	{name: "reader.Open", state: published, store: true, etcd: true, call: func(ctx context.Context, w *world) error {
		return readAll(w.rd.Open(ctx))
	}},
	{name: "reader.OpenPointer", state: published, store: true, call: func(ctx context.Context, w *world) error {
		return readAll(w.rd.OpenPointer(ctx, *w.first.Pointer))
	}},
	{name: "reader.OpenFile", state: dataset, store: true, etcd: true, call: func(ctx context.Context, w *world) error {
		return readAll(w.rd.OpenFile(ctx, "a.txt"))
	}},
	{name: "reader.Files", state: dataset, store: true, call: func(ctx context.Context, w *world) error {
		for _, err := range w.rd.Files(ctx, *w.dataset.Pointer) {
			if err != nil {
				return err
			}
		}
		return nil
	}},
	{name: "reader.Watch", state: published, etcd: true, call: func(ctx context.Context, w *world) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for u := range w.rd.Watch(ctx) {
			if u.Err != nil {
				return u.Err
			}
		}
		return ctx.Err()
	}},
	{name: "reader.ReadCut", state: published, etcd: true, call: func(ctx context.Context, w *world) error {
		_, err := reader.ReadCut(ctx, reader.Config{Env: w.env, RequestTimeout: retryTimeout}, "r")
		return err
	}},
	{name: "reader.WatchCut", state: published, etcd: true, call: func(ctx context.Context, w *world) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		for u := range reader.WatchCut(ctx, reader.Config{Env: w.env, RequestTimeout: retryTimeout}, "r") {
			if u.Err != nil {
				return u.Err
			}
		}
		return ctx.Err()
	}},
	{name: "gc.Collector.Run", state: published, store: true, etcd: true, call: func(ctx context.Context, w *world) error {
		_, err := w.col.Run(ctx, gc.RunOptions{All: true})
		return err
	}},
	{name: "operator.Decommission", state: published, etcd: true, call: func(ctx context.Context, w *world) error {
		_, err := operator.Decommission(ctx, w.col, "r", true)
		return err
	}},
}

// readAll reads a Body to its end and closes it.
func readAll(b *reader.Body, err error) error {
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, b)
	return errors.Join(err, b.Close())
}

// kinds are the public error kinds a failure is classified into; an error
// of a failure matches no other kind than the one it is.
var kinds = []error{fencepub.ErrUnavailable, fencepub.ErrInvalid}

// TestErrorContract drives every public entry point into each failure its
// servers can give it, on a domain of its own, and checks that the error
// matches the public sentinel the contract names (errors.go): an
// unreachable server is fencepub.ErrUnavailable (or, for a publish whose
// transaction went unanswered, publisher.ErrUnknown), a configuration the
// store refuses is fencepub.ErrInvalid, and never both.
func TestErrorContract(t *testing.T) {
	ran := 0
	for _, e := range entries {
		for _, f := range failures {
			if f.store && !e.store || !f.store && !e.etcd {
				continue
			}
			want := f.want
			switch {
			case f.store && e.wantOnStores != nil:
				want = e.wantOnStores
			case !f.store && e.wantOnEtcd != nil:
				want = e.wantOnEtcd
			}
			ran++
			t.Run(e.name+"/"+f.name, func(t *testing.T) {
				t.Parallel() // each case has a domain, a proxy and a bucket of its own
				w := newWorld(t, e.state)
				f.inject(w)
				err := e.call(ctxT(t, callTimeout), w)
				if !errors.Is(err, want) {
					t.Fatalf("error %v; want one that errors.Is %v", err, want)
				}
				for _, k := range kinds {
					if k != want && errors.Is(err, k) {
						t.Fatalf("error %v is %v as well as %v", err, k, want)
					}
				}
			})
		}
	}
	if ran < len(entries) {
		t.Fatalf("%d cases for %d entry points", ran, len(entries))
	}
}

// The constructors and Validate methods: a zero or bad value is
// fencepub.ErrInvalid, and the message names the field.
func TestConfigErrors(t *testing.T) {
	d := testenv.NewDomain(t)
	env := fencepub.Env{Namespace: fencepub.Namespace(d.NS), Etcd: d.Etcd, Store: d.Store}
	daemonCollector, err := gc.New(gc.Config{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, field string
		err         error
	}{
		{"NewStore without a bucket", "s3.bucket", func() error {
			cfg := testenv.Get(t).S3.S3Config()
			cfg.Bucket = ""
			_, err := fencepub.NewStore(cfg)
			return err
		}()},
		{"NewStore with a path endpoint", "s3.endpoint", func() error {
			cfg := testenv.Get(t).S3.S3Config()
			cfg.Endpoint = "host/with/path"
			_, err := fencepub.NewStore(cfg)
			return err
		}()},
		{"NewNamespace with an empty domain", "domain", func() error { _, err := fencepub.NewNamespace("fencepub", ""); return err }()},
		{"ParseVersion of a word", "epoch.fence.seq", func() error { _, err := fencepub.ParseVersion("one.two.three"); return err }()},

		{"authority without etcd", "authority.Config.Etcd", authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(d.NS), Store: d.Store}}.Validate()},
		{"authority without a store", "authority.Config.Store", authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(d.NS), Etcd: d.Etcd}}.Validate()},
		{"authority without a namespace", "authority.Config.Namespace", authority.Config{Env: fencepub.Env{Etcd: d.Etcd, Store: d.Store}}.Validate()},
		{"authority negative RequestTimeout", "authority.Config.RequestTimeout", authority.Config{Env: env, RequestTimeout: -1}.Validate()},
		{"authority negative RetryTimeout", "authority.Config.RetryTimeout", authority.Config{Env: env, RetryTimeout: -1}.Validate()},
		{"authority negative MarkerKeep", "authority.Config.MarkerKeep", authority.Config{Env: env, MarkerKeep: -1}.Validate()},
		{"authority negative MaxTxnOps", "authority.Config.MaxTxnOps", authority.Config{Env: env, MaxTxnOps: -1}.Validate()},
		{"authority.New", "authority.Config.Namespace", func() error { _, err := authority.New(authority.Config{}); return err }()},

		{"publisher without etcd", "publisher.Config.Etcd", publisher.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(d.NS), Store: d.Store}}.Validate()},
		{"publisher without a store", "publisher.Config.Store", publisher.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(d.NS), Etcd: d.Etcd}}.Validate()},
		{"publisher small PartSize", "publisher.Config.PartSize", publisher.Config{Env: env, PartSize: 1 << 20}.Validate()},
		{"publisher negative RequestTimeout", "publisher.Config.RequestTimeout", publisher.Config{Env: env, RequestTimeout: -1}.Validate()},
		{"publisher negative ResendTimeout", "publisher.Config.ResendTimeout", publisher.Config{Env: env, ResendTimeout: -1}.Validate()},
		{"publisher negative MaxTxnOps", "publisher.Config.MaxTxnOps", publisher.Config{Env: env, MaxTxnOps: -1}.Validate()},
		{"publisher.New", "publisher.Config.Namespace", func() error { _, err := publisher.New(publisher.Config{}); return err }()},

		{"reader without etcd", "reader.Config.Etcd", reader.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(d.NS)}}.Validate()},
		{"reader negative OpenRetries", "reader.Config.OpenRetries", reader.Config{Env: env, OpenRetries: -1}.Validate()},
		{"reader negative RequestTimeout", "reader.Config.RequestTimeout", reader.Config{Env: env, RequestTimeout: -1}.Validate()},
		{"reader negative StallTimeout", "reader.Config.StallTimeout", reader.Config{Env: env, StallTimeout: -1}.Validate()},
		{"reader.New with a bad resource", "resource", func() error { _, err := reader.New(reader.Config{Env: env}, "a/b"); return err }()},

		{"gc without a store", "gc.Config.Store", gc.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(d.NS), Etcd: d.Etcd}}.Validate()},
		{"gc negative OpRetention", "gc.Config.OpRetention", gc.Config{Env: env, OpRetention: -1}.Validate()},
		{"gc DeleteBatch too large", "gc.Config.DeleteBatch", gc.Config{Env: env, DeleteBatch: 1001}.Validate()},
		{"gc negative Policy.Grace", "gc.Config.Policy.Grace", gc.Config{Env: env, Policy: gc.Policy{Grace: -1}}.Validate()},
		{"gc.New", "gc.Config.Namespace", func() error { _, err := gc.New(gc.Config{}); return err }()},
		{"gc daemon without a collector", "operator.DaemonConfig.Collector", newDaemon(operator.DaemonConfig{})},
		{"gc daemon negative Interval", "operator.DaemonConfig.Interval", newDaemon(operator.DaemonConfig{Collector: daemonCollector, Interval: -1})},
		{"gc daemon resources and all", "operator.DaemonConfig names Resources and All", newDaemon(operator.DaemonConfig{Collector: daemonCollector, Resources: []string{"r"}, All: true})},
		{"operator.NewDaemon", "operator.DaemonConfig.Owner", newDaemon(operator.DaemonConfig{Collector: daemonCollector, Owner: "an owner"})},
	} {
		if !errors.Is(c.err, fencepub.ErrInvalid) || !strings.Contains(fmt.Sprint(c.err), c.field) {
			t.Errorf("%s: %v; want fencepub.ErrInvalid naming %s", c.name, c.err, c.field)
		}
	}
	// The defaults with a complete Env are valid.
	for name, err := range map[string]error{
		"authority": withEnv(authority.DefaultConfig(), env, func(c *authority.Config, e fencepub.Env) { c.Env = e }).Validate(),
		"publisher": withEnv(publisher.DefaultConfig(), env, func(c *publisher.Config, e fencepub.Env) { c.Env = e }).Validate(),
		"reader":    withEnv(reader.DefaultConfig(), env, func(c *reader.Config, e fencepub.Env) { c.Env = e }).Validate(),
		"gc":        withEnv(gc.DefaultConfig(), env, func(c *gc.Config, e fencepub.Env) { c.Env = e }).Validate(),
		"gc daemon": newDaemon(withEnv(operator.DefaultDaemonConfig(), daemonCollector, func(c *operator.DaemonConfig, col *gc.Collector) { c.Collector = col })),
	} {
		if err != nil {
			t.Errorf("%s: DefaultConfig with an Env: %v", name, err)
		}
	}
}

// newDaemon is operator.NewDaemon's error.
func newDaemon(cfg operator.DaemonConfig) error {
	_, err := operator.NewDaemon(cfg)
	return err
}

func withEnv[C, E any](c C, e E, set func(*C, E)) C {
	set(&c, e)
	return c
}

// The S3 store's own failures, against real servers, carry the public
// sentinels, and a publish meets them as they are.
func TestStoreErrorsFromRealServers(t *testing.T) {
	sh := testenv.Get(t)
	ctx := ctxT(t, time.Minute)
	good := sh.S3.S3Config()
	storeOf := func(change func(*fencepub.StoreConfig)) fencepub.Store {
		cfg := good
		change(&cfg)
		st, err := fencepub.NewStore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	px, proxied := sh.StoreProxy(t)
	for _, c := range []struct {
		name string
		st   fencepub.Store
		want []error
	}{
		{"wrong secret key", storeOf(func(c *fencepub.StoreConfig) { c.SecretKey += "-wrong" }), []error{fencepub.ErrInvalid}},
		{"missing bucket", storeOf(func(c *fencepub.StoreConfig) { c.Bucket = "no-such-bucket-fencepub" }), []error{fencepub.ErrInvalid, fencepub.ErrObjectNotFound}},
		{"connection refused", proxied, []error{fencepub.ErrUnavailable, fencepub.ErrStoreUnavailable}},
	} {
		if c.st == fencepub.Store(proxied) {
			px.Set(faultproxy.Faults{Refuse: true})
		}
		err := c.st.CheckBucket(ctx)
		for _, want := range c.want {
			if !errors.Is(err, want) {
				t.Errorf("%s: CheckBucket: %v; want one that errors.Is %v", c.name, err, want)
			}
		}
	}
	px.Set(faultproxy.Faults{})

	st := sh.Store(t)
	key := "fencepub-test/errors/" + time.Now().Format("20060102T150405.000000000")
	put := func() error {
		_, err := st.PutCreateOnly(ctx, key, bytes.NewReader([]byte("x")), 1, fencepub.PutOptions{})
		return err
	}
	if err := put(); err != nil {
		t.Fatal(err)
	}
	if err := put(); !errors.Is(err, fencepub.ErrObjectExists) {
		t.Errorf("second create-only PUT: %v; want fencepub.ErrObjectExists", err)
	}
	if _, _, err := st.Get(ctx, key, strings.Repeat("0", 32)); !errors.Is(err, fencepub.ErrConditionFailed) {
		t.Errorf("GET with another ETag: %v; want fencepub.ErrConditionFailed", err)
	}
	if _, err := st.Stat(ctx, key+"-absent"); !errors.Is(err, fencepub.ErrObjectNotFound) {
		t.Errorf("Stat of a missing key: %v; want fencepub.ErrObjectNotFound", err)
	}

	// A publish whose object write cannot reach the store.
	d := testenv.NewDomain(t)
	env := fencepub.Env{Namespace: fencepub.Namespace(d.NS), Etcd: d.Etcd, Store: proxied}
	a, err := authority.New(authority.Config{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operator.Init(ctx, a); err != nil {
		t.Fatal(err)
	}
	g, err := a.Acquire(ctx, authority.AcquireRequest{Resource: "r", Owner: "worker", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := publisher.New(publisher.Config{Env: env})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pc.Bind(ctx, publisher.GrantTerm(g, false))
	if err != nil {
		t.Fatal(err)
	}
	px.Set(faultproxy.Faults{Refuse: true})
	px.ResetAll()
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := p.Publish(pctx, op("unreachable")); !errors.Is(err, fencepub.ErrUnavailable) {
		t.Errorf("publish to an unreachable store: %v; want fencepub.ErrUnavailable", err)
	}
}
