// Command reader-service is a fencepub example: an HTTP service that follows
// one or more resources by etcd watch and serves their current objects.
//
//	GET /v1/resources/{name}          the current object; ETag = its version;
//	                                  If-None-Match answers 304
//	GET /v1/resources/{name}/pointer  the pointer as JSON
//	GET /healthz, /readyz, /metrics   liveness, readiness (a pointer loaded for
//	                                  every resource), Prometheus metrics
//
// Objects up to --cache-bytes are held in memory, verified against the
// pointer's sha256 before they are served; larger ones are streamed from the
// store per request through the reader's verifying body. A version switch in
// the middle of a download never mixes two versions: each request serves one
// immutable object. SIGTERM or Ctrl-C shuts down gracefully.
//
//	go run ./examples/reader-service --resource goroot-src --listen 127.0.0.1:8080
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/config"
	"github.com/fencepub/fencepub/reader"
	"github.com/prometheus/client_golang/prometheus"
)

func main() {
	var (
		cfgPath, listen string
		resources       resourceList
		cacheBytes      int64
		stall           time.Duration
	)
	flag.StringVar(&cfgPath, "config", "", "fencepub config file (default ./fencepub.yaml)")
	flag.Var(&resources, "resource", "resource to follow; repeatable, or comma-separated (required)")
	flag.StringVar(&listen, "listen", "127.0.0.1:8080", "HTTP listen address")
	flag.Int64Var(&cacheBytes, "cache-bytes", 8<<20, "objects up to this size (bytes) are kept in memory")
	flag.DurationVar(&stall, "stall-timeout", time.Minute, "end a streamed response when the store sends no byte for this long (0: never)")
	flag.Parse()
	if len(resources) == 0 {
		fmt.Fprintln(os.Stderr, "reader-service: --resource is required")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfgPath, resources, listen, cacheBytes, stall); err != nil {
		fmt.Fprintln(os.Stderr, "reader-service:", err)
		os.Exit(1)
	}
}

// resourceList is the --resource flag: every use adds its comma-separated
// names.
type resourceList []string

func (l *resourceList) String() string { return strings.Join(*l, ",") }

func (l *resourceList) Set(v string) error {
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			*l = append(*l, name)
		}
	}
	return nil
}

func run(ctx context.Context, cfgPath string, resources []string, listen string, cacheBytes int64, stall time.Duration) error {
	env, err := config.Connect(cfgPath)
	if err != nil {
		return err
	}
	defer env.Etcd.Close()
	ns, cli, store := env.Namespace, env.Etcd, env.Store
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	reg := prometheus.NewRegistry()
	svc, err := newService(reader.Config{Env: fencepub.Env{Namespace: ns, Etcd: cli, Store: store}, Logger: log, StallTimeout: stall}, resources, cacheBytes, reg, log)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: svc.handler(reg), ReadHeaderTimeout: 10 * time.Second}
	follow, cancel := context.WithCancel(ctx)
	defer cancel()
	go svc.run(follow)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	log.Info("listening", "addr", l.Addr().String(), "resources", resources)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
