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
// Exposed beyond localhost, give it a certificate (--tls-cert, --tls-key:
// it then serves HTTPS only) and a bearer token (--token-file: every
// request but /healthz and /readyz needs "Authorization: Bearer <token>",
// compared in constant time). Request headers are bounded in time
// (--read-header-timeout: a client that trickles its headers is cut off)
// and size (--max-header-bytes, 431 above it); idle keep-alive connections
// close after --idle-timeout.
//
//	go run ./examples/reader-service --resource goroot-src --listen 127.0.0.1:8080
package main

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
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
		cfgPath, tokenFile string
		resources          resourceList
		opts               options
	)
	flag.StringVar(&cfgPath, "config", "", "fencepub config file (default ./fencepub.yaml)")
	flag.Var(&resources, "resource", "resource to follow; repeatable, or comma-separated (required)")
	flag.StringVar(&opts.listen, "listen", "127.0.0.1:8080", "HTTP listen address")
	flag.Int64Var(&opts.cacheBytes, "cache-bytes", 8<<20, "objects up to this size (bytes) are kept in memory")
	flag.DurationVar(&opts.stall, "stall-timeout", time.Minute, "end a streamed response when the store sends no byte for this long (0: never)")
	flag.StringVar(&opts.tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM; with --tls-key)")
	flag.StringVar(&opts.tlsKey, "tls-key", "", "private key of --tls-cert (PEM)")
	flag.StringVar(&tokenFile, "token-file", "", "require this file's bearer token (one line) on every request but /healthz and /readyz")
	flag.DurationVar(&opts.readHeaderTimeout, "read-header-timeout", 10*time.Second, "close a connection whose request headers take longer than this")
	flag.IntVar(&opts.maxHeaderBytes, "max-header-bytes", 16<<10, "refuse requests whose headers exceed this many bytes (431)")
	flag.DurationVar(&opts.idleTimeout, "idle-timeout", 2*time.Minute, "close keep-alive connections idle this long")
	flag.Parse()
	if len(resources) == 0 {
		fmt.Fprintln(os.Stderr, "reader-service: --resource is required")
		os.Exit(2)
	}
	if (opts.tlsCert == "") != (opts.tlsKey == "") {
		fmt.Fprintln(os.Stderr, "reader-service: --tls-cert and --tls-key go together")
		os.Exit(2)
	}
	if tokenFile != "" {
		b, err := os.ReadFile(tokenFile)
		if err != nil || strings.TrimSpace(string(b)) == "" {
			fmt.Fprintf(os.Stderr, "reader-service: --token-file %s: no token (%v)\n", tokenFile, err)
			os.Exit(2)
		}
		opts.token = strings.TrimSpace(string(b))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfgPath, resources, opts); err != nil {
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

// options are the service's flags.
type options struct {
	listen            string
	cacheBytes        int64         // bytes
	stall             time.Duration // 0: never
	tlsCert, tlsKey   string        // PEM files; both empty: plain HTTP
	token             string        // required bearer token; empty: none
	readHeaderTimeout time.Duration
	maxHeaderBytes    int
	idleTimeout       time.Duration
}

// requireToken wraps next so that a request needs "Authorization: Bearer
// <token>" (401 otherwise), except the probes, which carry no credentials.
// The comparison is over SHA-256 digests in constant time, so its duration
// tells nothing about the token, not even its length.
func requireToken(token string, next http.Handler) http.Handler {
	want := sha256.Sum256([]byte("Bearer " + token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && r.URL.Path != "/readyz" {
			got := sha256.Sum256([]byte(r.Header.Get("Authorization")))
			if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="reader-service"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func run(ctx context.Context, cfgPath string, resources []string, opts options) error {
	env, err := config.Connect(cfgPath)
	if err != nil {
		return err
	}
	defer env.Etcd.Close()
	ns, cli, store := env.Namespace, env.Etcd, env.Store
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	reg := prometheus.NewRegistry()
	svc, err := newService(reader.Config{Env: fencepub.Env{Namespace: ns, Etcd: cli, Store: store}, Logger: log, StallTimeout: opts.stall}, resources, opts.cacheBytes, reg, log)
	if err != nil {
		return err
	}
	var h http.Handler = svc.handler(reg)
	if opts.token != "" {
		h = requireToken(opts.token, h)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: opts.readHeaderTimeout, MaxHeaderBytes: opts.maxHeaderBytes,
		IdleTimeout: opts.idleTimeout, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	l, err := net.Listen("tcp", opts.listen)
	if err != nil {
		return err
	}
	follow, cancel := context.WithCancel(ctx)
	defer cancel()
	go svc.run(follow)
	errc := make(chan error, 1)
	go func() {
		if opts.tlsCert != "" {
			errc <- srv.ServeTLS(l, opts.tlsCert, opts.tlsKey)
			return
		}
		errc <- srv.Serve(l)
	}()
	log.Info("listening", "addr", l.Addr().String(), "resources", resources, "tls", opts.tlsCert != "", "token", opts.token != "")
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
