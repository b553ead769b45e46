// Package cli holds what the fencepub and fencepub-bench command trees
// share: the connection flags, configuration loading (flag > env > file >
// default; docs/configuration.md), the connection to etcd and the object
// store with its exit-code classification, and the conventions of their
// root commands (exit codes, README "Exit codes"). Nothing here keeps
// state between commands: each command owns its own viper and clients.
package cli

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/retry"
	"github.com/fencepub/fencepub/publisher"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// connFlags maps each connection flag to its configuration key. Secrets
// (etcd.password, s3.access_key, s3.secret_key) have no flag: they come from
// the environment or the config file, so they never appear in `ps`.
var connFlags = []struct{ flag, key, usage string }{
	{"etcd-endpoints", "etcd.endpoints", "etcd client URLs, comma-separated (etcd.endpoints)"},
	{"etcd-username", "etcd.username", "etcd user (etcd.username); the password comes from FENCEPUB_ETCD_PASSWORD or the file"},
	{"etcd-ca", "etcd.tls.ca", "PEM CA file for etcd TLS (etcd.tls.ca)"},
	{"etcd-cert", "etcd.tls.cert", "PEM client certificate for etcd TLS (etcd.tls.cert)"},
	{"etcd-key", "etcd.tls.key", "PEM client key for etcd TLS (etcd.tls.key)"},
	{"s3-endpoint", "s3.endpoint", "object store host:port, http://host[:port] or https://host[:port] (s3.endpoint)"},
	{"s3-bucket", "s3.bucket", "bucket (s3.bucket)"},
	{"s3-region", "s3.region", "bucket region (s3.region)"},
	{"prefix", "namespace.prefix", "key prefix in etcd and the bucket (namespace.prefix)"},
	{"domain", "namespace.domain", "authority domain under the prefix (namespace.domain)"},
}

// configKeyAnnotation marks a command's own flag as the override of a
// configuration key (KeyFlag); loadViperFile binds it.
const configKeyAnnotation = "fencepub_config_key"

// KeyFlag makes flag name of fs override configuration key (flag > env >
// file > default). The flag's default should be the key's.
func KeyFlag(fs *pflag.FlagSet, name, key string) {
	_ = fs.SetAnnotation(name, configKeyAnnotation, []string{key}) // the flag exists
}

// AddConnFlags registers --config and the connection flags on cmd's
// persistent flags, so every subcommand accepts them.
func AddConnFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.String("config", "", "config file (default ./fencepub.yaml, then $HOME/.config/fencepub/fencepub.yaml)")
	for _, c := range connFlags {
		f.String(c.flag, "", c.usage)
	}
	f.Bool("s3-secure", false, "use HTTPS for the object store (s3.secure)")
}

// LoadViper builds the command's own viper: defaults, FENCEPUB_* env, the
// config file and the flags the user set (flag > env > file > default).
func LoadViper(cmd *cobra.Command) (*viper.Viper, error) {
	v, _, err := loadViperFile(cmd)
	return v, err
}

// loadViperFile is LoadViper, also returning the config file read ("" when
// none was found).
func loadViperFile(cmd *cobra.Command) (*viper.Viper, string, error) {
	v := config.NewViper()
	flags := cmd.Flags()
	bind := func(name, key string) {
		if fl := flags.Lookup(name); fl != nil {
			_ = v.BindPFlag(key, fl) // only fails for a nil flag
		}
	}
	for _, c := range connFlags {
		bind(c.flag, c.key)
	}
	bind("s3-secure", "s3.secure")
	flags.VisitAll(func(fl *pflag.Flag) {
		if keys := fl.Annotations[configKeyAnnotation]; len(keys) == 1 {
			bind(fl.Name, keys[0])
		}
	})
	path := ""
	if fl := flags.Lookup("config"); fl != nil {
		path = fl.Value.String()
	}
	used, err := config.ReadFile(v, path)
	if err != nil {
		return nil, "", exitcode.With(exitcode.Usage, err)
	}
	return v, used, nil
}

// Env holds the live clients a command built from its configuration.
type Env struct {
	Config config.Config
	Etcd   *clientv3.Client
	Store  objstore.Store
	NS     layout.Namespace
	Log    *slog.Logger
	Stdout io.Writer
	Stderr io.Writer
}

// OpenEnv loads the configuration and connects (Connect), for a command
// without a deadline of its own. Configuration errors exit with code 2
// naming the key, and so do etcd refusing the credentials or the probe
// read's permission, and TLS failures (etcdConnectError); an etcd client
// that cannot be built otherwise exits with 115 (unavailable), and so does
// an etcd that does not answer the probe read in time (probeEtcd).
func OpenEnv(cmd *cobra.Command) (*Env, error) {
	lc, err := LoadConfig(cmd)
	if err != nil {
		return nil, err
	}
	return Connect(cmd, lc)
}

// OpenEnvContext is OpenEnv for a command with a deadline of its own
// (--timeout): ctx carries it, and connecting counts against it
// (ConnectContext).
func OpenEnvContext(ctx context.Context, cmd *cobra.Command) (*Env, error) {
	lc, err := LoadConfig(cmd)
	if err != nil {
		return nil, err
	}
	return ConnectContext(ctx, cmd, lc)
}

// LoadedConfig is a command's validated configuration and the config file
// it came from ("" when none was found).
type LoadedConfig struct {
	Config config.Config
	File   string
}

// LoadConfig reads and validates cmd's configuration without contacting
// any server. Errors carry exit code 2.
func LoadConfig(cmd *cobra.Command) (LoadedConfig, error) {
	v, used, err := loadViperFile(cmd)
	if err != nil {
		return LoadedConfig{}, err
	}
	cfg, err := config.Load(v)
	if err != nil {
		return LoadedConfig{}, exitcode.With(exitcode.Usage, err)
	}
	return LoadedConfig{cfg, used}, nil
}

// Connect is OpenEnv's second half, for a command without a deadline of
// its own: ConnectContext with cmd's context, the probe retried for
// probeBudget.
func Connect(cmd *cobra.Command, lc LoadedConfig) (*Env, error) {
	ctx, cancel := context.WithTimeout(cmd.Context(), probeBudget(lc.Config))
	defer cancel() // the clients do not keep ctx
	return ConnectContext(ctx, cmd, lc)
}

// ConnectContext is OpenEnvContext's second half: the clients of a loaded
// configuration, and one probe read of etcd (probeEtcd), retried until
// ctx's deadline, so that an unreachable etcd fails with the endpoints and
// a hint rather than a bare "context deadline exceeded" later. The clients
// do not keep ctx. Errors: as OpenEnv; ctx's error when ctx is cancelled.
func ConnectContext(ctx context.Context, cmd *cobra.Command, lc LoadedConfig) (*Env, error) {
	cfg, used := lc.Config, lc.File
	log := Logger(cmd)
	if used == "" && !cmd.Flags().Changed("domain") && os.Getenv("FENCEPUB_NAMESPACE_DOMAIN") == "" {
		// A command run away from its config file would otherwise look at
		// the default domain and report, say, "nothing published".
		log.Info("no config file (./fencepub.yaml, ~/.config/fencepub/fencepub.yaml; --config): using the default domain",
			"domain", cfg.Namespace.Domain, "prefix", cfg.Namespace.Prefix, "etcd", strings.Join(cfg.Etcd.Endpoints, ","))
	}
	ns, _ := cfg.NS() // validated by Load
	cli, err := cfg.EtcdClient()
	if err != nil {
		if errors.Is(err, config.ErrInvalid) {
			return nil, exitcode.With(exitcode.Usage, err)
		}
		return nil, etcdConnectError(ctx, cfg, err, 0)
	}
	store, err := s3store.New(cfg.S3)
	if err != nil {
		_ = cli.Close()
		return nil, exitcode.With(exitcode.Usage, err)
	}
	if err := probeEtcd(ctx, log, cfg, cli, ns.EpochKey()); err != nil {
		_ = cli.Close()
		return nil, err
	}
	return &Env{
		Config: cfg, Etcd: cli, Store: store, NS: ns,
		Log:    log,
		Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(),
	}, nil
}

// probeEtcd makes one serializable count-only read of key, each attempt
// bounded by etcd.request_timeout, and sends it again (jittered backoff,
// usually to another member) while etcd does not answer, until ctx's
// deadline, or for probeBudget when ctx has none: a slow or lossy link that
// a quorum is reachable over costs attempts, not the command (DESIGN.md
// invariant 12). After the first unanswered attempt it logs a warning with
// the endpoints, so an etcd that is down is reported at once while the
// probe keeps trying. It stops at the first answer that is not "no
// answer": etcd refusing the credentials or the permission, and a TLS
// problem (diagnosed once, after the first failure) exit 2 naming the key.
// Errors: etcdConnectError's (exit 115 once the time is up), ctx's error
// when ctx is cancelled.
func probeEtcd(ctx context.Context, log *slog.Logger, cfg config.Config, cli *clientv3.Client, key string) error {
	bctx, cancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		bctx, cancel = context.WithTimeout(ctx, probeBudget(cfg))
	}
	defer cancel()
	start, attempts := time.Now(), 0
	var permanent error // a configuration problem found by diagnoseEtcdTLS
	err := retry.Do(bctx, func(bctx context.Context) error {
		attempts++
		actx, cancel := context.WithTimeout(bctx, cfg.Etcd.RequestTimeout)
		defer cancel()
		_, err := cli.Get(actx, key, clientv3.WithSerializable(), clientv3.WithCountOnly())
		if err == nil || attempts > 1 || bctx.Err() != nil || !retry.EtcdUnavailable(err) {
			return err
		}
		if usesTLS(cfg) {
			if permanent = diagnoseEtcdTLS(bctx, cfg); permanent != nil {
				return permanent
			}
		}
		dl, _ := bctx.Deadline() // bctx has one
		log.Warn("etcd did not answer; retrying until the command's deadline (is it up, and is etcd.endpoints / --etcd-endpoints right?)",
			"etcd", strings.Join(cfg.Etcd.Endpoints, ","), "waited", cfg.Etcd.RequestTimeout, "retry_for", time.Until(dl).Round(100*time.Millisecond), "err", err)
		return err
	}, func(err error) bool { return err != permanent && retry.EtcdUnavailable(err) })
	switch {
	case err == nil:
		return nil
	case permanent != nil && errors.Is(err, permanent):
		return exitcode.With(exitcode.Usage, permanent)
	case ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ctx.Err() // cancelled (Ctrl-C): the command's own error
	}
	return etcdConnectError(ctx, cfg, err, time.Since(start))
}

// probeBudget is how long the probe tries for a command without a
// deadline of its own (Connect): two attempts of etcd.request_timeout.
func probeBudget(cfg config.Config) time.Duration { return 2 * cfg.Etcd.RequestTimeout }

// Domain is e's clients and namespace as the library's Configs take them.
func (e *Env) Domain() fencepub.Env {
	return fencepub.Env{Namespace: fencepub.Namespace(e.NS), Etcd: e.Etcd, Store: e.Store}
}

// Close closes the etcd client.
func (e *Env) Close() { _ = e.Etcd.Close() }

// AuthorityConfig is the authority's runtime configuration over e's clients,
// each etcd attempt bounded by etcd.request_timeout.
func (e *Env) AuthorityConfig() authority.Config {
	return authority.Config{Env: e.Domain(), Logger: e.Log, RequestTimeout: e.Config.Etcd.RequestTimeout, MaxTxnOps: e.Config.Etcd.MaxTxnOps}
}

// PublisherConfig is the publisher's runtime configuration over e's
// clients, each etcd attempt bounded by etcd.request_timeout.
func (e *Env) PublisherConfig() publisher.Config {
	return publisher.Config{Env: e.Domain(), Logger: e.Log, RequestTimeout: e.Config.Etcd.RequestTimeout, MaxTxnOps: e.Config.Etcd.MaxTxnOps}
}
