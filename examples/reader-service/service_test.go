package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/testenv"
	"github.com/fencepub/fencepub/publisher"
	"github.com/fencepub/fencepub/reader"
	"github.com/prometheus/client_golang/prometheus"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type fixture struct {
	t    *testing.T
	ns   fencepub.Namespace
	auth *authority.Authority
	pub  *publisher.Client
	srv  *httptest.Server
}

func start(t *testing.T, maxCache int64, resources ...string) *fixture {
	env := testenv.Get(t)
	ns := testenv.Namespace(t)
	cli, store := env.EtcdClient(t), env.Store(t)
	auth, err := authority.New(authority.Config{Namespace: ns, Etcd: cli, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := publisher.New(publisher.Config{Namespace: ns, Etcd: cli, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	svc, err := newService(reader.Config{Namespace: ns, Etcd: cli, Store: store}, resources, maxCache, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { svc.run(ctx); close(done) }()
	srv := httptest.NewServer(svc.handler(reg))
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return &fixture{t: t, ns: ns, auth: auth, pub: pub, srv: srv}
}

// publish acquires a fresh grant for resource, publishes body and releases.
func (f *fixture) publish(resource string, body []byte) fencepub.Version {
	ctx := context.Background()
	g, err := f.auth.Acquire(ctx, authority.AcquireRequest{Resource: resource, Owner: "tester", TTL: 5 * time.Second, Wait: true})
	if err != nil {
		f.t.Fatal(err)
	}
	defer f.auth.Release(ctx, g)
	p, err := f.pub.BindGrant(ctx, g, false)
	if err != nil {
		f.t.Fatal(err)
	}
	res, err := p.Publish(ctx, publisher.Operation{IdempotencyKey: fmt.Sprintf("k-%d", time.Now().UnixNano()), Body: bytes.NewReader(body)})
	if err != nil {
		f.t.Fatal(err)
	}
	return res.Version
}

func (f *fixture) get(path string, hdr ...string) *http.Response {
	req, _ := http.NewRequest("GET", f.srv.URL+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	return resp
}

// awaitVersion polls the service until it serves v (the watch is
// asynchronous; the wait is bounded).
func (f *fixture) awaitVersion(resource string, v fencepub.Version) []byte {
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp := f.get("/v1/resources/" + resource)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode == 200 && resp.Header.Get("ETag") == etag(v) {
			return b
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("service never served %s: last status %d ETag %s", v, resp.StatusCode, resp.Header.Get("ETag"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestServiceFollowsPublishes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		maxCache int64
	}{{"cached", 1 << 20}, {"streamed", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			f := start(t, tc.maxCache, "res", "other")
			if r := f.get("/readyz"); r.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("readyz before any publish: %d", r.StatusCode)
			}
			if r := f.get("/v1/resources/nope"); r.StatusCode != http.StatusNotFound {
				t.Fatalf("unfollowed resource: %d", r.StatusCode)
			}
			one := bytes.Repeat([]byte("one"), 1000)
			v1 := f.publish("res", one)
			if got := f.awaitVersion("res", v1); !bytes.Equal(got, one) {
				t.Fatalf("served %d bytes, want version 1's", len(got))
			}
			if r := f.get("/v1/resources/res", "If-None-Match", etag(v1)); r.StatusCode != http.StatusNotModified {
				t.Fatalf("If-None-Match current: %d", r.StatusCode)
			}
			two := make([]byte, 100_000)
			_, _ = rand.Read(two)
			v2 := f.publish("res", two)
			if got := f.awaitVersion("res", v2); !bytes.Equal(got, two) {
				t.Fatal("version 2 bytes differ")
			}
			if r := f.get("/v1/resources/res", "If-None-Match", etag(v1)); r.StatusCode != http.StatusOK {
				t.Fatalf("If-None-Match old version: %d", r.StatusCode)
			}
			r := f.get("/v1/resources/res/pointer")
			var ptr fencepub.Pointer
			if err := json.NewDecoder(r.Body).Decode(&ptr); err != nil || ptr.Version != v2 {
				t.Fatalf("pointer %+v %v", ptr, err)
			}
			f.publish("other", []byte("x"))
			f.awaitVersionReady()
		})
	}
}

func (f *fixture) awaitVersionReady() {
	deadline := time.Now().Add(10 * time.Second)
	for f.get("/readyz").StatusCode != http.StatusOK {
		if time.Now().After(deadline) {
			f.t.Fatal("never ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// --resource adds names, whether repeated or comma-separated.
func TestResourceListFlag(t *testing.T) {
	var l resourceList
	for _, v := range []string{"a", "b,c", " d , ", ""} {
		if err := l.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.String(); got != "a,b,c,d" {
		t.Fatalf("resources %q; want a,b,c,d", got)
	}
}
