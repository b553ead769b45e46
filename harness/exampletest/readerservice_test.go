//go:build !unit

package exampletest

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/sysproc"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"github.com/fencepub/fencepub/publisher"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// service is a running examples/reader-service process.
type service struct {
	t      *testing.T
	ns     fencepub.Namespace
	auth   *authority.Authority
	pub    *publisher.Client
	url    string
	addr   string       // host:port
	client *http.Client // trusts the service's certificate, if any
	token  string       // sent as a bearer token, if set
}

// launch is how a test starts the service: its flags, and how to reach it.
type launch struct {
	cacheBytes int64
	resources  []string
	args       []string    // further flags
	tls        *tls.Config // the service serves HTTPS; nil: HTTP
}

// build compiles examples/reader-service into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "reader-service")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/fencepub/fencepub/examples/reader-service").CombinedOutput()
	if err != nil {
		t.Fatalf("go build examples/reader-service: %v\n%s", err, out)
	}
	return bin
}

// start runs the service against the shared servers, in a fresh domain,
// configured by FENCEPUB_* variables only (no config file), and waits until
// it answers /healthz.
func start(t *testing.T, bin string, cacheBytes int64, resources ...string) *service {
	t.Helper()
	return startWith(t, bin, launch{cacheBytes: cacheBytes, resources: resources})
}

// startWith is start with l's flags and transport.
func startWith(t *testing.T, bin string, l launch) *service {
	t.Helper()
	cacheBytes, resources := l.cacheBytes, l.resources
	env := testenv.Get(t)
	ns := testenv.Namespace(t)
	cli, store := env.EtcdClient(t), env.Store(t)
	auth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(ns), Etcd: cli, Store: store}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := publisher.New(publisher.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(ns), Etcd: cli, Store: store}})
	if err != nil {
		t.Fatal(err)
	}
	port, err := devstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s3 := env.S3.S3Config()
	args := []string{"--listen", "127.0.0.1:" + strconv.Itoa(port),
		"--cache-bytes", strconv.FormatInt(cacheBytes, 10), "--resource", strings.Join(resources, ",")}
	cmd := exec.Command(bin, append(args, l.args...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FENCEPUB_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"FENCEPUB_ETCD_ENDPOINTS="+env.Etcd.Endpoints()[0],
		"FENCEPUB_S3_ENDPOINT="+s3.Endpoint, "FENCEPUB_S3_BUCKET="+s3.Bucket,
		"FENCEPUB_S3_ACCESS_KEY="+s3.AccessKey, "FENCEPUB_S3_SECRET_KEY="+s3.SecretKey,
		"FENCEPUB_NAMESPACE_PREFIX="+ns.Prefix, "FENCEPUB_NAMESPACE_DOMAIN="+ns.Domain)
	logs := &testenv.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = sysproc.Tied()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("reader-service output:\n%s", logs.String())
		}
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := &service{t: t, ns: fencepub.Namespace(ns), auth: auth, pub: pub, url: "http://" + addr, addr: addr, client: http.DefaultClient}
	if l.tls != nil {
		s.url = "https://" + addr
		s.client = &http.Client{Transport: &http.Transport{TLSClientConfig: l.tls}}
	}
	testenv.Eventually(t, "reader-service answers /healthz", 30*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("reader-service exited: %v\n%s", waitErr, logs.String())
		default:
		}
		resp, err := s.client.Get(s.url + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

// publish acquires a fresh grant for resource, publishes body and releases.
func (s *service) publish(resource string, body []byte) fencepub.Version {
	ctx := context.Background()
	g, err := s.auth.Acquire(ctx, authority.AcquireRequest{Resource: resource, Owner: "tester", TTL: 5 * time.Second, Wait: true})
	if err != nil {
		s.t.Fatal(err)
	}
	defer s.auth.Release(ctx, g)
	p, err := s.pub.Bind(ctx, publisher.GrantTerm(g, false))
	if err != nil {
		s.t.Fatal(err)
	}
	res, err := p.Publish(ctx, publisher.Operation{IdempotencyKey: fmt.Sprintf("k-%d", time.Now().UnixNano()), Body: bytes.NewReader(body)})
	if err != nil {
		s.t.Fatal(err)
	}
	return res.Version
}

func (s *service) get(path string, hdr ...string) *http.Response {
	req, _ := http.NewRequest("GET", s.url+path, nil)
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	return resp
}

// etag is the ETag the service serves for version v (examples/reader-service).
func etag(v fencepub.Version) string { return `"` + v.String() + `"` }

// awaitVersion polls the service until it serves v (its watch is
// asynchronous) and returns the body.
func (s *service) awaitVersion(resource string, v fencepub.Version) []byte {
	var body []byte
	testenv.Eventually(s.t, "the service serves "+v.String(), 10*time.Second, func() bool {
		resp := s.get("/v1/resources/" + resource)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = b
		return err == nil && resp.StatusCode == http.StatusOK && resp.Header.Get("ETag") == etag(v)
	})
	return body
}

func TestReaderServiceFollowsPublishes(t *testing.T) {
	bin := build(t)
	for _, tc := range []struct {
		name       string
		cacheBytes int64
	}{{"cached", 1 << 20}, {"streamed", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, bin, tc.cacheBytes, "res", "other")
			if r := s.get("/readyz"); r.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("readyz before any publish: %d", r.StatusCode)
			}
			if r := s.get("/v1/resources/nope"); r.StatusCode != http.StatusNotFound {
				t.Fatalf("unfollowed resource: %d", r.StatusCode)
			}
			one := bytes.Repeat([]byte("one"), 1000)
			v1 := s.publish("res", one)
			if got := s.awaitVersion("res", v1); !bytes.Equal(got, one) {
				t.Fatalf("served %d bytes, want version 1's", len(got))
			}
			if r := s.get("/v1/resources/res", "If-None-Match", etag(v1)); r.StatusCode != http.StatusNotModified {
				t.Fatalf("If-None-Match current: %d", r.StatusCode)
			}
			two := make([]byte, 100_000)
			_, _ = rand.Read(two)
			v2 := s.publish("res", two)
			if got := s.awaitVersion("res", v2); !bytes.Equal(got, two) {
				t.Fatal("version 2 bytes differ")
			}
			if r := s.get("/v1/resources/res", "If-None-Match", etag(v1)); r.StatusCode != http.StatusOK {
				t.Fatalf("If-None-Match old version: %d", r.StatusCode)
			}
			r := s.get("/v1/resources/res/pointer")
			var ptr fencepub.Pointer
			if err := json.NewDecoder(r.Body).Decode(&ptr); err != nil || ptr.Version != v2 {
				t.Fatalf("pointer %+v %v", ptr, err)
			}
			s.publish("other", []byte("x"))
			testenv.Eventually(t, "readyz once every resource is published", 10*time.Second, func() bool {
				resp := s.get("/readyz")
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			})
		})
	}
}

// A dataset resource's files are served by path, each verified, with the
// file's sha256 as ETag (unchanged across versions for an unchanged file)
// and the version in a header.
func TestReaderServiceServesDatasetFiles(t *testing.T) {
	s := start(t, build(t), 1<<20, "export")
	publishDataset := func(key string, pairs ...string) fencepub.Version {
		t.Helper()
		ctx := context.Background()
		g, err := s.auth.Acquire(ctx, authority.AcquireRequest{Resource: "export", Owner: "tester", TTL: 5 * time.Second, Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		defer s.auth.Release(ctx, g)
		p, err := s.pub.Bind(ctx, publisher.GrantTerm(g, false))
		if err != nil {
			t.Fatal(err)
		}
		var fs []publisher.File
		for i := 0; i+1 < len(pairs); i += 2 {
			fs = append(fs, publisher.BytesFile(pairs[i], []byte(pairs[i+1]), "text/csv"))
		}
		r, err := p.PublishDataset(ctx, publisher.Dataset{IdempotencyKey: key, Files: publisher.FileList(fs)})
		if err != nil || r.Outcome != publisher.Applied {
			t.Fatalf("publish dataset: %+v %v", r.Result, err)
		}
		return r.Version
	}
	// await returns the response for path once it comes from version v.
	await := func(path string, v fencepub.Version) (*http.Response, []byte) {
		t.Helper()
		var (
			resp *http.Response
			body []byte
		)
		testenv.Eventually(t, "the service serves "+v.String(), 10*time.Second, func() bool {
			resp = s.get("/v1/resources/export/files/" + path)
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK && resp.Header.Get("X-Fencepub-Version") == v.String()
		})
		return resp, body
	}
	v1 := publishDataset("d1", "part/0.csv", "a,b\n1,2\n", "part/1.csv", "a,b\n3,4\n")
	resp, body := await("part/1.csv", v1)
	tag := resp.Header.Get("ETag")
	if string(body) != "a,b\n3,4\n" || resp.Header.Get("Content-Type") != "text/csv" || len(tag) != 66 {
		t.Fatalf("part/1.csv: %q, %s, ETag %s", body, resp.Header.Get("Content-Type"), tag)
	}
	if r := s.get("/v1/resources/export/files/part/1.csv", "If-None-Match", tag); r.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d", r.StatusCode)
	}
	if r := s.get("/v1/resources/export/files/part/9.csv"); r.StatusCode != http.StatusNotFound {
		t.Fatalf("a path the manifest lacks: %d", r.StatusCode)
	}
	v2 := publishDataset("d2", "part/0.csv", "a,b\n1,2\n", "part/1.csv", "a,b\n3,5\n")
	resp, body = await("part/1.csv", v2)
	if string(body) != "a,b\n3,5\n" || resp.Header.Get("ETag") == tag {
		t.Fatalf("version 2's part/1.csv: %q, ETag %s", body, resp.Header.Get("ETag"))
	}
}
