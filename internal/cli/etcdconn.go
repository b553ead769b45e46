package cli

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// tlsProbeTimeout bounds each handshake of diagnoseEtcdTLS.
const tlsProbeTimeout = 2 * time.Second

// etcdConnectError classifies an error of Connect's first contact with
// etcd (the client's login, or the probe read after waited): refused credentials, a
// missing permission and TLS failures are configuration problems, exit 2
// naming the key to fix (etcd.username, etcd.tls.ca, etcd.tls.cert); any
// other error is the service being unavailable, exit 115. TLS failures
// come back from gRPC as text only, so when TLS is in use and the cause is
// not an etcd error, one handshake per endpoint (diagnoseEtcdTLS) finds
// the typed x509 error.
func etcdConnectError(ctx context.Context, cfg config.Config, err error, waited time.Duration) error {
	if cls := etcdAuthError(cfg, err); cls != nil {
		return cls
	}
	if usesTLS(cfg) {
		if terr := diagnoseEtcdTLS(ctx, cfg); terr != nil {
			return exitcode.With(exitcode.Usage, terr)
		}
	}
	within := ""
	if waited > 0 {
		within = " within " + waited.Round(100*time.Millisecond).String()
	}
	return exitcode.With(exitcode.Unavailable, fmt.Errorf("etcd at %s did not answer%s (%v); is the stack up ('fencepub dev up' writes ./fencepub.yaml) and is etcd.endpoints / --etcd-endpoints right?",
		strings.Join(cfg.Etcd.Endpoints, ","), within, err))
}

// etcdAuthError returns the exit-2 error for etcd's authentication and
// permission errors in err's chain, or nil.
func etcdAuthError(cfg config.Config, err error) error {
	switch {
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return exitcode.With(exitcode.Usage, fmt.Errorf("etcd refused the credentials of etcd.username %q: wrong user name or etcd.password (FENCEPUB_ETCD_PASSWORD): %w", cfg.Etcd.Username, err))
	case errors.Is(err, rpctypes.ErrUserEmpty):
		return exitcode.With(exitcode.Usage, fmt.Errorf("etcd requires authentication: set etcd.username (--etcd-username) and etcd.password (FENCEPUB_ETCD_PASSWORD): %w", err))
	case errors.Is(err, rpctypes.ErrPermissionDenied):
		return exitcode.With(exitcode.Usage, fmt.Errorf("%w: etcd user %q has no role granting these keys under %s/%s/ (roles: 'fencepub authority setup-roles --dry-run')",
			err, cfg.Etcd.Username, cfg.Namespace.Prefix, cfg.Namespace.Domain))
	}
	return nil
}

// usesTLS reports whether the client talks TLS to etcd: a TLS file is
// configured or an endpoint is https.
func usesTLS(cfg config.Config) bool {
	if cfg.Etcd.TLS.CA != "" || cfg.Etcd.TLS.Cert != "" {
		return true
	}
	for _, e := range cfg.Etcd.Endpoints {
		if strings.HasPrefix(e, "https://") {
			return true
		}
	}
	return false
}

// diagnoseEtcdTLS makes one TLS handshake with each endpoint and returns an
// error naming the configuration key behind the first TLS failure: the
// server's certificate not verified by etcd.tls.ca, or etcd rejecting the
// client certificate etcd.tls.cert (seen as the server's alert, which TLS
// 1.3 delivers on the first read). It returns nil when no handshake shows a
// TLS problem (the endpoint is down, or TLS is fine).
func diagnoseEtcdTLS(ctx context.Context, cfg config.Config) error {
	tcfg, err := cfg.EtcdTLS()
	if err != nil {
		return err
	}
	if tcfg == nil {
		tcfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	for _, ep := range cfg.Etcd.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Scheme != "https" {
			continue
		}
		c := tcfg.Clone()
		c.ServerName = u.Hostname()
		c.NextProtos = []string{"h2"}
		if err := handshake(ctx, u.Host, c); err != nil {
			return tlsConfigError(ep, cfg.Etcd.TLS, err)
		}
	}
	return nil
}

// handshake dials addr, completes a TLS handshake and reads briefly, so a
// rejection of the client certificate arrives. It returns nil for a
// connection that cannot be made (not a TLS problem) or that stays open.
func handshake(ctx context.Context, addr string, c *tls.Config) error {
	dctx, cancel := context.WithTimeout(ctx, tlsProbeTimeout)
	defer cancel()
	d := tls.Dialer{Config: c}
	conn, err := d.DialContext(dctx, "tcp", addr)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil
		}
		return err
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(tlsProbeTimeout / 2))
	_, err = conn.Read(make([]byte, 1))
	if objstore.IsTLSAlert(err) {
		return err
	}
	return nil
}

// tlsConfigError names the key behind a failed handshake with endpoint
// (objstore.TLSProblem, shared with the object store's TLS).
func tlsConfigError(endpoint string, t config.TLS, err error) error {
	files := fmt.Sprintf("etcd.tls.ca %s --etcd-ca, etcd.tls.cert %s --etcd-cert", orNone(t.CA), orNone(t.Cert))
	if hint, ok := objstore.TLSProblem(err, "etcd.tls", "etcd.endpoints"); ok {
		return fmt.Errorf("%w: etcd at %s: %s (%s): %w", config.ErrInvalid, endpoint, hint, files, err)
	}
	return fmt.Errorf("%w: etcd at %s: TLS handshake failed (etcd.tls.ca, etcd.tls.cert, etcd.tls.key): %w", config.ErrInvalid, endpoint, err)
}

// orNone is s, or "(none set)" when empty.
func orNone(s string) string {
	if s == "" {
		return "(none set)"
	}
	return s
}

// explainPermissions makes an etcd permission error anywhere in a
// command's error chain (explainErrors) exit 2 with "permission denied",
// the user and the setup-roles hint (DESIGN.md "Security"), rather than as
// an internal or unknown outcome: etcd checks permissions before it
// applies a request, so nothing was written.
func explainPermissions(cmd *cobra.Command) {
	explainErrors(cmd, func(c *cobra.Command, err error) error {
		if !errors.Is(err, rpctypes.ErrPermissionDenied) {
			return err
		}
		lc, _ := LoadConfig(c) // it loaded before the command could reach etcd
		return etcdAuthError(lc.Config, err)
	})
}

// explainErrors wraps the RunE of cmd and every subcommand so that the
// error it returns, when not nil, goes through explain, which may replace
// it with one that says more.
func explainErrors(cmd *cobra.Command, explain func(c *cobra.Command, err error) error) {
	for _, c := range cmd.Commands() {
		explainErrors(c, explain)
	}
	run := cmd.RunE
	if run == nil {
		return
	}
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if err := run(c, args); err != nil {
			return explain(c, err)
		}
		return nil
	}
}
