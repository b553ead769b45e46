package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/config"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
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
// configuration key (keyFlag); loadViperFile binds it.
const configKeyAnnotation = "fencepub_config_key"

// keyFlag makes flag name of fs override configuration key (flag > env >
// file > default). The flag's default should be the key's.
func keyFlag(fs *pflag.FlagSet, name, key string) {
	_ = fs.SetAnnotation(name, configKeyAnnotation, []string{key}) // the flag exists
}

// addConnFlags registers --config and the connection flags on cmd's
// persistent flags, so every subcommand accepts them.
func addConnFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.String("config", "", "config file (default ./fencepub.yaml, then $HOME/.config/fencepub/fencepub.yaml)")
	for _, c := range connFlags {
		f.String(c.flag, "", c.usage)
	}
	f.Bool("s3-secure", false, "use HTTPS for the object store (s3.secure)")
}

// loadViper builds the command's own viper: defaults, FENCEPUB_* env, the
// config file and the flags the user set (flag > env > file > default).
func loadViper(cmd *cobra.Command) (*viper.Viper, error) {
	v, _, err := loadViperFile(cmd)
	return v, err
}

// loadViperFile is loadViper, also returning the config file read ("" when
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

// cliEnv holds the live clients a command built from its configuration.
type cliEnv struct {
	Config config.Config
	Etcd   *clientv3.Client
	Store  *objstore.Store
	NS     layout.Namespace
	Log    *slog.Logger
	Stdout io.Writer
	Stderr io.Writer
}

// etcdProbeTimeout bounds openEnv's first read.
const etcdProbeTimeout = 3 * time.Second

// openEnv loads the configuration and connects. Configuration errors exit
// with code 2 naming the key, and so do etcd refusing the credentials or
// the probe read's permission, and TLS failures (etcdConnectError); an
// etcd client that cannot be built otherwise exits with 115 (unavailable),
// and so does an etcd that does not answer a serializable read within
// etcdProbeTimeout.
func openEnv(cmd *cobra.Command) (*cliEnv, error) {
	lc, err := loadConfig(cmd)
	if err != nil {
		return nil, err
	}
	return connect(cmd, lc)
}

// loadedConfig is a command's validated configuration and the config file
// it came from ("" when none was found).
type loadedConfig struct {
	cfg  config.Config
	file string
}

// loadConfig reads and validates cmd's configuration without contacting
// any server. Errors carry exit code 2.
func loadConfig(cmd *cobra.Command) (loadedConfig, error) {
	v, used, err := loadViperFile(cmd)
	if err != nil {
		return loadedConfig{}, err
	}
	cfg, err := config.Load(v)
	if err != nil {
		return loadedConfig{}, exitcode.With(exitcode.Usage, err)
	}
	return loadedConfig{cfg, used}, nil
}

// connect is openEnv's second half: the clients of a loaded configuration.
func connect(cmd *cobra.Command, lc loadedConfig) (*cliEnv, error) {
	cfg, used := lc.cfg, lc.file
	if used == "" && !cmd.Flags().Changed("domain") && os.Getenv("FENCEPUB_NAMESPACE_DOMAIN") == "" {
		// A command run away from its config file would otherwise look at
		// the default domain and report, say, "nothing published".
		fmt.Fprintf(cmd.ErrOrStderr(), "fencepub: no config file (./fencepub.yaml, ~/.config/fencepub/fencepub.yaml; --config); using domain %q of prefix %q at %s\n",
			cfg.Namespace.Domain, cfg.Namespace.Prefix, strings.Join(cfg.Etcd.Endpoints, ","))
	}
	ns, _ := cfg.NS() // validated by Load
	cli, err := cfg.EtcdClient()
	if err != nil {
		if errors.Is(err, config.ErrInvalid) {
			return nil, exitcode.With(exitcode.Usage, err)
		}
		return nil, etcdConnectError(cmd.Context(), cfg, err)
	}
	store, err := objstore.New(cfg.S3)
	if err != nil {
		_ = cli.Close()
		return nil, exitcode.With(exitcode.Usage, err)
	}
	// Fail fast, with the endpoint and a hint, rather than hang or time out
	// later with a bare "context deadline exceeded".
	pctx, cancel := context.WithTimeout(cmd.Context(), etcdProbeTimeout)
	_, err = cli.Get(pctx, ns.EpochKey(), clientv3.WithSerializable(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		_ = cli.Close()
		if cmd.Context().Err() != nil {
			return nil, cmd.Context().Err()
		}
		return nil, etcdConnectError(cmd.Context(), cfg, err)
	}
	return &cliEnv{
		Config: cfg, Etcd: cli, Store: store, NS: ns,
		Log:    slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo})),
		Stdout: cmd.OutOrStdout(), Stderr: cmd.ErrOrStderr(),
	}, nil
}

// Close closes the etcd client.
func (e *cliEnv) Close() { _ = e.Etcd.Close() }

// authorityConfig is the authority's runtime configuration over e's clients,
// each etcd attempt bounded by etcd.request_timeout.
func (e *cliEnv) authorityConfig() authority.Config {
	return authority.Config{Namespace: e.NS, Etcd: e.Etcd, Store: e.Store, Logger: e.Log, RequestTimeout: e.Config.Etcd.RequestTimeout}
}

// publisherConfig is the publisher's runtime configuration over e's
// clients, each etcd attempt bounded by etcd.request_timeout.
func (e *cliEnv) publisherConfig() publisher.Config {
	return publisher.Config{Namespace: e.NS, Etcd: e.Etcd, Store: e.Store, Logger: e.Log, AttemptTimeout: e.Config.Etcd.RequestTimeout}
}

// addOutputFlag registers -o/--output (text or json) and returns its value.
func addOutputFlag(cmd *cobra.Command) *string { return addFormatFlag(cmd, "output") }

// addFormatFlag registers the text|json format flag as -o/--<long> and
// returns its value; `run` uses --format because its --output names a file.
func addFormatFlag(cmd *cobra.Command, long string) *string {
	o := new(string)
	cmd.Flags().VarP(&choice{value: o, allowed: []string{"text", "json"}, def: "text"}, long, "o", "output format: text or json")
	*o = "text"
	return o
}

// choice is a pflag.Value accepting one of a fixed set of words.
type choice struct {
	value   *string
	allowed []string
	def     string
}

var _ pflag.Value = (*choice)(nil)

func (c *choice) String() string {
	if c.value == nil || *c.value == "" {
		return c.def
	}
	return *c.value
}

func (c *choice) Set(s string) error {
	for _, a := range c.allowed {
		if s == a {
			*c.value = s
			return nil
		}
	}
	return fmt.Errorf("must be one of %v", c.allowed)
}

func (c *choice) Type() string { return "string" }

// printJSON writes v as one indented JSON document and a newline.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newConfigCmd builds `fencepub config show`.
func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Inspect the effective configuration"}
	show := &cobra.Command{
		Use:   "show",
		Short: "Print the effective configuration with secrets redacted",
		Long: `Print every configuration key with its effective value after applying
defaults, the config file, FENCEPUB_* environment variables and flags
(precedence: flag > env > file > default). Secrets are printed as <redacted>;
s3.credentials also names the source that supplies the object store's keys
(config, environment, shared credentials file or IAM), never the keys.`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(show)
	show.RunE = func(c *cobra.Command, _ []string) error {
		v, err := loadViper(c)
		if err != nil {
			return err
		}
		cfg, err := config.Load(v)
		if err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		red := config.Redacted(v)
		red["config_file"] = v.ConfigFileUsed()
		red["s3.credentials"] = fmt.Sprintf("%s (from %s)", cfg.S3.Credentials, objstore.CredentialSource(cfg.S3))
		if *out == "json" {
			return printJSON(c.OutOrStdout(), red)
		}
		keys := make([]string, 0, len(red))
		for k := range red {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 0, 2, ' ', 0)
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%v\n", k, red[k])
		}
		return tw.Flush()
	}
	cmd.AddCommand(show)
	addConnFlags(cmd)
	return cmd
}
