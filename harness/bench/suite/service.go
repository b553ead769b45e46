package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/fencepub/fencepub/harness/bench"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"

	"github.com/fencepub/fencepub/internal/sysproc"
)

// Service workload settings: the small object is served from the
// service's memory; the large one is above the --cache-bytes the service is
// started with, so every request streams it through reader.Open.
const (
	serviceSmall = 1 << 10
	serviceLarge = 4 << 20
	serviceCache = 1 << 20 // --cache-bytes
)

// service runs examples/reader-service (its binary, in its own process)
// and a plain Go HTTP server in this process, and drives both with wrk in
// alternating rounds: the small object vs the same bytes served from
// memory, the large one vs a bare GET proxied from the store.
func (s *runner) service(ctx context.Context, st *stack) error {
	const workload = WorkloadReader
	configs := []struct {
		name, resource string
		size, conns    int
		baseline       string
	}{
		{fmt.Sprintf("service, %s (cached), wrk -c32", sizeName(serviceSmall)), "svc-small", serviceSmall, 32, "plain Go server, bytes in memory"},
		{fmt.Sprintf("service, %s (streamed), wrk -c8", sizeName(serviceLarge)), "svc-large", serviceLarge, 8, "plain Go server proxying a bare GET"},
	}
	target := "throughput >= 0.9x"
	skip := func(why string) error {
		for _, c := range configs {
			s.add(bench.SkippedRow(workload, c.name, c.baseline, target, why))
		}
		return nil
	}
	wrk := s.opts.Wrk
	if wrk == "" {
		var err error
		if wrk, err = exec.LookPath("wrk"); err != nil {
			return skip("wrk not installed (Debian package wrk; `make bench` installs it)")
		}
	}
	svcBin := s.opts.ReaderService
	if svcBin == "" {
		var err error
		if svcBin, err = devstack.Binary("reader-service"); err != nil {
			return skip("reader-service binary not found (run `make build`, or pass its path)")
		}
	}
	keys := map[string]string{}
	for _, c := range configs {
		p, g, err := st.bind(ctx, c.resource)
		if err != nil {
			return err
		}
		r, err := p.Publish(ctx, publisher.Operation{IdempotencyKey: "v1", Body: bytes.NewReader(body(c.size))})
		_ = st.auth.Release(context.WithoutCancel(ctx), g)
		if err != nil {
			return err
		}
		keys[c.resource] = r.Object.Key
	}
	dir, err := os.MkdirTemp("", "fencepub-bench-service-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	svcAddr, stop, err := s.startService(ctx, st, svcBin, dir, configs[0].resource+","+configs[1].resource)
	if err != nil {
		return err
	}
	defer stop()
	plainAddr, stopPlain, err := startPlain(st, body(serviceSmall), keys["svc-large"])
	if err != nil {
		return err
	}
	defer stopPlain()
	rounds := s.slowRounds()
	for _, c := range configs {
		urls := []string{
			"http://" + svcAddr + "/v1/resources/" + c.resource,
			"http://" + plainAddr + "/" + c.resource,
		}
		results := make([][]wrkResult, 2)
		for r := range rounds {
			for k := range urls {
				j := (r + k) % 2
				res, err := runWrk(ctx, wrk, urls[j], c.conns, s.opts.WrkDuration)
				if err != nil {
					return err
				}
				results[j] = append(results[j], res)
			}
		}
		row := bench.NewRow(workload, c.name, c.size, c.conns, wrkStats(results[0]), c.baseline, wrkStats(results[1]))
		row.Unit = "req/s"
		s.add(row.WithTarget(target, func(x bench.Row) bool { return x.RatioThroughput >= 0.9 }).
			WithNote("wrk -t2; p50/p99 are wrk's, averaged over rounds"))
	}
	return nil
}

// startService starts the reader-service binary following resources, with
// a JSON config file in dir naming st's servers and namespace, and blocks
// until its /readyz answers 200. It returns its address and a stop
// function (SIGTERM, then SIGKILL after 10 s).
func (s *runner) startService(ctx context.Context, st *stack, bin, dir, resources string) (string, func(), error) {
	cfgPath, err := s.writeConfig(dir, st.NS)
	if err != nil {
		return "", nil, err
	}
	port, err := devstack.FreePort()
	if err != nil {
		return "", nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(dir, "reader-service.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return "", nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config", cfgPath, "--resource", resources, "--listen", addr, "--cache-bytes", strconv.Itoa(serviceCache))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysproc.Tied()
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start reader-service: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return addr, stop, nil
			}
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			return "", nil, fmt.Errorf("reader-service exited before it was ready: %s", log)
		case <-rctx.Done():
			stop()
			log, _ := os.ReadFile(logPath)
			return "", nil, fmt.Errorf("reader-service not ready: %w: %s", rctx.Err(), log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startPlain serves, on a free loopback port, /svc-small from small (in
// memory, with the headers the service sets) and /svc-large by proxying a
// bare GET of largeKey. It returns the address and a stop function.
func startPlain(st *stack, small []byte, largeKey string) (string, func(), error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /svc-small", func(w http.ResponseWriter, _ *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("ETag", `"1.1.1"`)
		h.Set("Content-Length", strconv.Itoa(len(small)))
		_, _ = w.Write(small)
	})
	mux.HandleFunc("GET /svc-large", func(w http.ResponseWriter, r *http.Request) {
		_, err := st.BareGet(r.Context(), largeKey, w, func(size int64) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		})
		if err != nil {
			panic(http.ErrAbortHandler)
		}
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		// Serve returns ErrServerClosed after Shutdown; a broken listener
		// shows up as wrk's socket errors.
		_ = srv.Serve(l)
	}()
	return l.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// writeConfig writes a JSON config file (the form every fencepub binary
// reads with --config) into dir, made if missing, naming the suite's
// servers and namespace ns, and returns its path.
func (s *runner) writeConfig(dir string, ns layout.Namespace) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	c := s.env.Config
	cfg := map[string]any{
		"etcd": map[string]any{
			"endpoints": c.Etcd.Endpoints, "username": c.Etcd.Username, "password": c.Etcd.Password,
			"tls": map[string]string{"ca": c.Etcd.TLS.CA, "cert": c.Etcd.TLS.Cert, "key": c.Etcd.TLS.Key},
		},
		"s3": map[string]any{
			"endpoint": c.S3.Endpoint, "access_key": c.S3.AccessKey, "secret_key": c.S3.SecretKey,
			"bucket": c.S3.Bucket, "secure": c.S3.Secure, "region": c.S3.Region,
		},
		"namespace": map[string]string{"prefix": ns.Prefix, "domain": ns.Domain},
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	cfgPath := filepath.Join(dir, "fencepub.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return "", err
	}
	return cfgPath, nil
}
