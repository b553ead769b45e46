// Package config is fencepub's serializable configuration: what viper fills
// from a config file, FENCEPUB_* environment variables and flags (precedence
// flag > env > file > default). It holds no live clients; the CLI builds
// those from a validated Config.
package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/viper"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// ErrInvalid is returned (wrapped, naming the key and the expected form) for
// a configuration value that cannot be used.
var ErrInvalid = errors.New("config: invalid")

// Config is the whole serializable configuration.
type Config struct {
	Etcd      Etcd           `mapstructure:"etcd"`
	S3        s3store.Config `mapstructure:"s3"`
	Namespace Namespace      `mapstructure:"namespace"`
	GC        GC             `mapstructure:"gc"`
	Log       Log            `mapstructure:"log"`
}

// Log holds the CLI's logging settings (log.format, log.level; flags
// --log-format, --log-level): every message of every command goes through
// log/slog on stderr (docs/cli.md "Logs").
type Log struct {
	// Format is "text" (one human line per message) or "json" (one JSON
	// object per line, nothing else on stderr).
	Format string `mapstructure:"format"`
	// Level is the least severe level printed: debug, info, warn or error.
	Level string `mapstructure:"level"`
}

// Log formats (log.format).
const (
	LogText = "text"
	LogJSON = "json"
)

// DefaultLog is the log.* defaults.
var DefaultLog = Log{Format: LogText, Level: "info"}

// SlogLevel returns the slog level of l.Level. Errors are ErrInvalid naming
// log.level and the accepted values.
func (l Log) SlogLevel() (slog.Level, error) {
	var lv slog.Level
	switch l.Level {
	case "debug", "info", "warn", "error":
		_ = lv.UnmarshalText([]byte(l.Level)) // the four names always parse
		return lv, nil
	}
	return 0, invalid("log.level", l.Level, "debug, info, warn or error")
}

// Validate checks log.format and log.level; errors are ErrInvalid naming
// the key.
func (l Log) Validate() error {
	if l.Format != LogText && l.Format != LogJSON {
		return invalid("log.format", l.Format, "text or json")
	}
	_, err := l.SlogLevel()
	return err
}

// GC holds the settings of `fencepub gc run` and `gc daemon` (DESIGN.md
// "Garbage collection"). Each key has a flag of those commands named like
// it with '-' for '_' (gc.abandon_after is --abandon-after), which
// overrides it; only those commands read and validate them (GC.Validate).
type GC struct {
	// Retain is how many published versions are kept per resource, the
	// current one included.
	Retain int `mapstructure:"retain"`
	// Grace keeps versions superseded less than this (plus ClockSkew) ago:
	// the reader grace.
	Grace time.Duration `mapstructure:"grace"`
	// ClockSkew is the allowance for clock differences between publishers,
	// the store and GC.
	ClockSkew time.Duration `mapstructure:"clock_skew"`
	// AbandonAfter is the age after which in-flight objects of dead grants
	// are sealed out and deleted.
	AbandonAfter time.Duration `mapstructure:"abandon_after"`
	// OpRetention and RequestRetention keep op (idempotency) records and
	// acquire request records this long.
	OpRetention      time.Duration `mapstructure:"op_retention"`
	RequestRetention time.Duration `mapstructure:"request_retention"`
	// DeleteBatch is the keys per multi-object delete (1-1000);
	// DeleteConcurrency the deletes in flight.
	DeleteBatch       int `mapstructure:"delete_batch"`
	DeleteConcurrency int `mapstructure:"delete_concurrency"`
	// Interval (between passes), LeaseTTL (of the GC lease, whole seconds)
	// and Listen (the /healthz and /metrics address, "" for none) are the
	// daemon's.
	Interval time.Duration `mapstructure:"interval"`
	LeaseTTL time.Duration `mapstructure:"lease_ttl"`
	Listen   string        `mapstructure:"listen"`
}

// DefaultGC holds the gc.* defaults: the gc package's own
// (gc.DefaultConfig, operator.DefaultDaemonConfig; the CLI's flags show the
// same values).
var DefaultGC = func() GC {
	c, d := gc.DefaultConfig(), operator.DefaultDaemonConfig()
	return GC{
		Retain: c.Policy.Retain, Grace: c.Policy.Grace, ClockSkew: c.Policy.ClockSkew, AbandonAfter: c.Policy.AbandonAfter,
		OpRetention: c.OpRetention, RequestRetention: c.RequestRetention,
		DeleteBatch: c.DeleteBatch, DeleteConcurrency: c.DeleteConcurrency,
		Interval: d.Interval, LeaseTTL: d.LeaseTTL, Listen: "127.0.0.1:9464",
	}
}()

// Validate checks the GC settings; errors are ErrInvalid naming the key and
// its flag.
func (g GC) Validate() error {
	bad := func(key string, v any, want string) error {
		return fmt.Errorf("%w: %s (--%s) = %v: want %s", ErrInvalid, key, strings.ReplaceAll(strings.TrimPrefix(key, "gc."), "_", "-"), v, want)
	}
	switch {
	case g.Retain < 1:
		return bad("gc.retain", g.Retain, "at least 1 (the current version)")
	case g.Grace <= 0:
		return bad("gc.grace", g.Grace, "a positive duration")
	case g.ClockSkew < 0:
		return bad("gc.clock_skew", g.ClockSkew, "a duration of 0 or more")
	case g.AbandonAfter <= 0:
		return bad("gc.abandon_after", g.AbandonAfter, "a positive duration")
	case g.OpRetention <= 0:
		return bad("gc.op_retention", g.OpRetention, "a positive duration")
	case g.RequestRetention <= 0:
		return bad("gc.request_retention", g.RequestRetention, "a positive duration")
	case g.DeleteBatch < 1 || g.DeleteBatch > DefaultGC.DeleteBatch: // the default is S3's limit
		return bad("gc.delete_batch", g.DeleteBatch, fmt.Sprintf("1-%d", DefaultGC.DeleteBatch))
	case g.DeleteConcurrency < 1:
		return bad("gc.delete_concurrency", g.DeleteConcurrency, "at least 1")
	case g.Interval <= 0:
		return bad("gc.interval", g.Interval, "a positive duration")
	}
	return nil
}

// Etcd describes how to reach etcd and how long to wait for it.
type Etcd struct {
	Endpoints []string `mapstructure:"endpoints"` // URLs, e.g. http://127.0.0.1:2379
	Username  string   `mapstructure:"username"`
	Password  string   `mapstructure:"password"` // secret: never printed or logged
	TLS       TLS      `mapstructure:"tls"`
	// DialKeepAliveTime is how long a connection to a member may stay
	// silent while a request or watch is open before the client pings it
	// (gRPC keepalive); DialKeepAliveTimeout how long the ping may go
	// unanswered before the connection is closed and its requests move to
	// another member. 0 turns keepalive off; gRPC raises any time below
	// 10 s to 10 s, so shorter ones are refused.
	DialKeepAliveTime    time.Duration `mapstructure:"dial_keepalive_time"`
	DialKeepAliveTimeout time.Duration `mapstructure:"dial_keepalive_timeout"`
	// RequestTimeout bounds one attempt of one etcd request (the
	// authority's and the publisher's; a reader's pointer read gets it for
	// all its attempts, a third each); an attempt that gets no answer in
	// time is sent again, usually to another member, within the caller's
	// deadline (DESIGN.md invariant 12).
	RequestTimeout time.Duration `mapstructure:"request_timeout"`
	// MaxTxnOps is etcd's limit on the operations of one transaction and
	// must equal the server's --max-txn-ops: a group acquire or publish
	// that would not fit is refused before anything is written.
	MaxTxnOps int `mapstructure:"max_txn_ops"`
}

// Etcd timing defaults (etcd.dial_keepalive_time, etcd.dial_keepalive_timeout,
// etcd.request_timeout). A member stalled for 10 s costs a request one
// RequestTimeout before its retry reaches another member, and a watch on
// it is moved after at most DialKeepAliveTime + DialKeepAliveTimeout.
const (
	DefaultDialKeepAliveTime    = 10 * time.Second
	DefaultDialKeepAliveTimeout = 3 * time.Second
	DefaultRequestTimeout       = 5 * time.Second
	// DefaultMaxTxnOps is etcd's default --max-txn-ops.
	DefaultMaxTxnOps = 128
	// MinDialKeepAliveTime is gRPC's floor for client keepalive pings.
	MinDialKeepAliveTime = 10 * time.Second
	// ReconnectMaxDelay bounds the wait between two attempts to reconnect
	// to a member that refused or dropped the connection (gRPC's own bound
	// is 120 s): once etcd serves again after an outage, the client is back
	// within about this long instead of minutes later (DESIGN.md invariant
	// 12).
	ReconnectMaxDelay = 2 * time.Second
)

// TLS names PEM files for client TLS (etcd.tls.*, s3.tls.*); all empty
// means no client certificate and the system roots (etcd: plain TCP unless
// an endpoint is https).
type TLS = objstore.TLSFiles

// Namespace is the etcd key prefix and object key prefix of one domain.
type Namespace struct {
	Prefix string `mapstructure:"prefix"`
	Domain string `mapstructure:"domain"`
}

// Defaults are set on every viper instance by SetDefaults.
var defaults = map[string]any{
	"etcd.endpoints":              []string{"http://127.0.0.1:2379"},
	"etcd.dial_keepalive_time":    DefaultDialKeepAliveTime,
	"etcd.dial_keepalive_timeout": DefaultDialKeepAliveTimeout,
	"etcd.request_timeout":        DefaultRequestTimeout,
	"etcd.max_txn_ops":            DefaultMaxTxnOps,
	"s3.endpoint":                 "127.0.0.1:9000",
	"s3.bucket":                   "fencepub",
	"s3.region":                   "",
	"s3.credentials":              s3store.CredentialsAuto,
	"s3.tls.ca":                   "",
	"s3.tls.cert":                 "",
	"s3.tls.key":                  "",
	"namespace.prefix":            "fencepub",
	"namespace.domain":            "default",

	"gc.retain":             DefaultGC.Retain,
	"gc.grace":              DefaultGC.Grace,
	"gc.clock_skew":         DefaultGC.ClockSkew,
	"gc.abandon_after":      DefaultGC.AbandonAfter,
	"gc.op_retention":       DefaultGC.OpRetention,
	"gc.request_retention":  DefaultGC.RequestRetention,
	"gc.delete_batch":       DefaultGC.DeleteBatch,
	"gc.delete_concurrency": DefaultGC.DeleteConcurrency,
	"gc.interval":           DefaultGC.Interval,
	"gc.lease_ttl":          DefaultGC.LeaseTTL,
	"gc.listen":             DefaultGC.Listen,

	"log.format": DefaultLog.Format,
	"log.level":  DefaultLog.Level,
}

// Keys lists every configuration key, in the order `config show` prints them.
var Keys = []string{
	"etcd.endpoints", "etcd.username", "etcd.password", "etcd.tls.ca", "etcd.tls.cert", "etcd.tls.key",
	"etcd.dial_keepalive_time", "etcd.dial_keepalive_timeout", "etcd.request_timeout", "etcd.max_txn_ops",
	"s3.endpoint", "s3.credentials", "s3.access_key", "s3.secret_key", "s3.bucket", "s3.secure", "s3.region",
	"s3.tls.ca", "s3.tls.cert", "s3.tls.key",
	"namespace.prefix", "namespace.domain",
	"gc.retain", "gc.grace", "gc.clock_skew", "gc.abandon_after", "gc.op_retention", "gc.request_retention",
	"gc.delete_batch", "gc.delete_concurrency", "gc.interval", "gc.lease_ttl", "gc.listen",
	"log.format", "log.level",
}

// SecretKeys are redacted by Redacted.
var SecretKeys = map[string]bool{"etcd.password": true, "s3.secret_key": true, "s3.access_key": true}

// NewViper returns a viper instance (never the global one) with fencepub's
// defaults and environment binding: key a.b_c is read from FENCEPUB_A_B_C.
func NewViper() *viper.Viper {
	v := viper.New()
	for k, val := range defaults {
		v.SetDefault(k, val)
	}
	v.SetEnvPrefix("FENCEPUB")
	v.SetEnvKeyReplacer(strings.NewReplacer(".", "_"))
	for _, k := range Keys {
		_ = v.BindEnv(k) // cannot fail for a non-empty key
	}
	return v
}

// DefaultFiles are the config files searched, in order, when no --config is
// given: exactly these paths, nothing else (no other extension, so a binary
// named ./fencepub is never read as configuration).
func DefaultFiles() []string {
	files := []string{"fencepub.yaml"}
	if home, err := os.UserHomeDir(); err == nil {
		files = append(files, filepath.Join(home, ".config", "fencepub", "fencepub.yaml"))
	}
	return files
}

// ReadFile reads the config file: path if non-empty (a missing file is then
// an error), else the first of DefaultFiles that exists (none is fine). A
// malformed file is an error naming it. It returns the file used, or "".
func ReadFile(v *viper.Viper, path string) (string, error) {
	if path == "" {
		for _, f := range DefaultFiles() {
			if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() {
				path = f
				break
			}
		}
		if path == "" {
			return "", nil
		}
	}
	v.SetConfigFile(path)
	if filepath.Ext(path) == "" {
		v.SetConfigType("yaml")
	}
	if err := v.ReadInConfig(); err != nil {
		return "", fmt.Errorf("%w: config file %s: %s", ErrInvalid, path, oneLine(err))
	}
	return path, nil
}

// oneLine flattens a multi-line decoder error into one line.
func oneLine(err error) string { return strings.Join(strings.Fields(err.Error()), " ") }

// Load decodes v into a Config and validates it. Unknown keys in the file
// are errors (a typo such as etcd.endpoint must not silently fall back to a
// default), and so are values of the wrong type, named by their key, and
// an s3.secure set to false with an https:// s3.endpoint (s3.secure has no
// default, so that Load can tell it was set).
func Load(v *viper.Viper) (Config, error) {
	if raw := v.GetString("s3.secure"); raw != "" {
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return Config{}, invalid("s3.secure", raw, "true or false")
		}
		if ep := v.GetString("s3.endpoint"); !b && v.IsSet("s3.secure") && strings.HasPrefix(ep, "https://") {
			return Config{}, fmt.Errorf("%w: s3.endpoint %q is https:// but s3.secure is false: drop one", ErrInvalid, ep)
		}
	}
	if err := checkTypes(v); err != nil {
		return Config{}, err
	}
	var c Config
	hook := viper.DecodeHook(mapstructure.ComposeDecodeHookFunc(durationHook, mapstructure.StringToSliceHookFunc(",")))
	if err := v.UnmarshalExact(&c, hook); err != nil {
		msg := oneLine(err)
		if strings.Contains(msg, "invalid keys") {
			msg += " (known keys: " + strings.Join(Keys, ", ") + ")"
		}
		if f := v.ConfigFileUsed(); f != "" {
			msg += " in " + f
		}
		return Config{}, fmt.Errorf("%w: %s", ErrInvalid, msg)
	}
	c.Etcd.Endpoints = splitEndpoints(c.Etcd.Endpoints)
	return c, c.Validate()
}

// durationKeys and intKeys are the keys whose string values (from the
// environment, or quoted in the file) must parse; checkTypes names a bad one
// with the expected form, instead of the decoder's generic message.
var (
	durationKeys = []string{"etcd.dial_keepalive_time", "etcd.dial_keepalive_timeout", "etcd.request_timeout", "gc.grace", "gc.clock_skew", "gc.abandon_after", "gc.op_retention", "gc.request_retention", "gc.interval", "gc.lease_ttl"}
	intKeys      = []string{"gc.retain", "gc.delete_batch", "gc.delete_concurrency"}
)

// checkTypes returns ErrInvalid naming the first of durationKeys or intKeys
// whose value does not parse.
func checkTypes(v *viper.Viper) error {
	for _, k := range durationKeys {
		if _, err := ParseDuration(v.Get(k)); err != nil {
			return invalid(k, fmt.Sprint(v.Get(k)), "a duration like 90s, 10m or 1h, or a number of seconds")
		}
	}
	for _, k := range intKeys {
		if raw, ok := v.Get(k).(string); ok {
			if _, err := strconv.Atoi(raw); err != nil {
				return invalid(k, raw, "a whole number")
			}
		}
	}
	return nil
}

// ParseDuration returns the duration of a duration key's raw value: a
// time.Duration as is; a string in Go's form ("90s", "1h30m"); a bare
// number, in a string or not ("300", 300, 2.5), as seconds, the unit in
// which the CLI prints durations (docs/cli.md "JSON output"), so a value `config
// show -o json` printed reads back the same. Errors: a string that is
// neither, or another type.
func ParseDuration(raw any) (time.Duration, error) {
	secs := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	switch x := raw.(type) {
	case nil:
		return 0, nil
	case time.Duration:
		return x, nil
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
			return secs(f), nil
		}
		return time.ParseDuration(strings.TrimSpace(x))
	case int:
		return secs(float64(x)), nil
	case int64:
		return secs(float64(x)), nil
	case uint64:
		return secs(float64(x)), nil
	case float64:
		return secs(x), nil
	}
	return 0, fmt.Errorf("%T is not a duration", raw)
}

// durationHook decodes every time.Duration field with ParseDuration.
func durationHook(_ reflect.Type, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[time.Duration]() {
		return data, nil
	}
	return ParseDuration(data)
}

// splitEndpoints splits the comma-separated values in which env and flags
// give etcd.endpoints (one string) into one URL each, dropping empties.
func splitEndpoints(vals []string) []string {
	var eps []string
	for _, e := range vals {
		for _, p := range strings.Split(e, ",") {
			if p = strings.TrimSpace(p); p != "" {
				eps = append(eps, p)
			}
		}
	}
	return eps
}

func invalid(key, value, want string) error {
	return fmt.Errorf("%w: %s = %q: want %s", ErrInvalid, key, value, want)
}

// Validate checks every key and returns the first problem as ErrInvalid
// naming the key and the expected form.
func (c Config) Validate() error {
	if len(c.Etcd.Endpoints) == 0 {
		return invalid("etcd.endpoints", "", "one or more URLs like http://127.0.0.1:2379")
	}
	for _, e := range c.Etcd.Endpoints {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return invalid("etcd.endpoints", e, "a URL like http://127.0.0.1:2379")
		}
	}
	if t := c.Etcd.DialKeepAliveTime; t != 0 && t < MinDialKeepAliveTime {
		return invalid("etcd.dial_keepalive_time", t.String(), fmt.Sprintf("0 (off) or at least %s (gRPC raises shorter keepalive times to it)", MinDialKeepAliveTime))
	}
	if c.Etcd.DialKeepAliveTime != 0 && c.Etcd.DialKeepAliveTimeout <= 0 {
		return invalid("etcd.dial_keepalive_timeout", c.Etcd.DialKeepAliveTimeout.String(), "a positive duration while etcd.dial_keepalive_time is on")
	}
	if c.Etcd.RequestTimeout <= 0 {
		return invalid("etcd.request_timeout", c.Etcd.RequestTimeout.String(), "a positive duration like 5s")
	}
	if c.Etcd.MaxTxnOps <= 0 {
		return invalid("etcd.max_txn_ops", fmt.Sprint(c.Etcd.MaxTxnOps), "a positive number, etcd's --max-txn-ops (default 128)")
	}
	if (c.Etcd.TLS.Cert == "") != (c.Etcd.TLS.Key == "") {
		return invalid("etcd.tls.cert", c.Etcd.TLS.Cert, "etcd.tls.cert and etcd.tls.key set together")
	}
	if (c.S3.TLS.Cert == "") != (c.S3.TLS.Key == "") {
		return invalid("s3.tls.cert", c.S3.TLS.Cert, "s3.tls.cert and s3.tls.key set together")
	}
	if err := c.S3.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if l := len(c.S3.Bucket); l < 3 || l > 63 || strings.ToLower(c.S3.Bucket) != c.S3.Bucket || strings.ContainsAny(c.S3.Bucket, "_/ ") {
		return invalid("s3.bucket", c.S3.Bucket, "an S3 bucket name: 3-63 lowercase letters, digits, '.' or '-'")
	}
	if _, err := c.NS(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return c.Log.Validate()
}

// NS returns the validated layout.Namespace.
func (c Config) NS() (layout.Namespace, error) {
	return layout.NewNamespace(c.Namespace.Prefix, c.Namespace.Domain)
}

// EtcdTLS returns the client TLS configuration, or nil when no TLS file is
// configured. Errors (ErrInvalid) name the key of a file that could not be
// read, and etcd.tls.cert for a client certificate outside its validity
// period (expired), which a server would refuse (objstore.TLSFiles).
func (c Config) EtcdTLS() (*tls.Config, error) {
	out, err := c.Etcd.TLS.ClientConfig("etcd.tls")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return out, nil
}

// Redacted returns every key with its effective value, secrets replaced by
// "<redacted>" (or "" when unset) and durations as time.Duration, for
// `fencepub config show`.
func Redacted(v *viper.Viper) map[string]any {
	out := make(map[string]any, len(Keys))
	for _, k := range Keys {
		val := v.Get(k)
		switch k {
		case "etcd.endpoints": // a list, whether from the file or env/flags
			val = splitEndpoints(v.GetStringSlice(k))
		case "s3.secure": // no default (Load)
			val = v.GetBool(k)
		}
		if slices.Contains(durationKeys, k) {
			val, _ = ParseDuration(val) // checked by Load
		}
		if SecretKeys[k] {
			if s := v.GetString(k); s != "" {
				val = "<redacted>"
			} else {
				val = ""
			}
		}
		out[k] = val
	}
	return out
}

// EtcdClient builds an etcd client from c (endpoints, credentials, TLS,
// keepalive) with a 5 s dial timeout and the client's own logging silenced.
// It does not wait for a server to answer. The caller closes it.
//
// Keepalive pings go out only while a request or watch is open
// (PermitWithoutStream off): etcd's server refuses pings on idle
// connections by default (--grpc-keepalive-min-time enforcement, without
// permit-without-stream) and would answer them by closing the connection.
// An idle connection to a stalled member is left by the next request's
// retry instead.
//
// A member that refuses or drops connections is dialed again with jittered
// exponential backoff from 250 ms up to ReconnectMaxDelay; each dial may
// take up to gRPC's default 20 s.
//
// Errors: ErrInvalid for unreadable TLS files, or the client's own
// construction error.
func (c Config) EtcdClient() (*clientv3.Client, error) {
	tlsCfg, err := c.EtcdTLS()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{
		Endpoints:            c.Etcd.Endpoints,
		Username:             c.Etcd.Username,
		Password:             c.Etcd.Password,
		TLS:                  tlsCfg,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    c.Etcd.DialKeepAliveTime,
		DialKeepAliveTimeout: c.Etcd.DialKeepAliveTimeout,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: ReconnectMaxDelay},
			MinConnectTimeout: 20 * time.Second,
		})},
		Logger: zap.NewNop(),
	})
}

// FromFile loads and validates the configuration from defaults, FENCEPUB_*
// environment variables and the config file at path ("" searches the default
// locations), for programs that have no flags of their own to bind (the
// examples). The CLI binds its flags on top of the same steps.
func FromFile(path string) (Config, error) {
	v := NewViper()
	if _, err := ReadFile(v, path); err != nil {
		return Config{}, err
	}
	return Load(v)
}

// Conn is a domain's live clients, built from a Config.
type Conn struct {
	NS    layout.Namespace
	Etcd  *clientv3.Client
	Store objstore.Store
}

// Close closes the etcd client.
func (c *Conn) Close() error { return c.Etcd.Close() }

// Connect loads the configuration like FromFile and builds the clients. It
// does not wait for a server to answer. The caller closes the Conn.
func Connect(path string) (*Conn, error) {
	cfg, err := FromFile(path)
	if err != nil {
		return nil, err
	}
	ns, _ := cfg.NS() // validated by Load
	store, err := s3store.New(cfg.S3)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	cli, err := cfg.EtcdClient()
	if err != nil {
		return nil, err
	}
	return &Conn{NS: ns, Etcd: cli, Store: store}, nil
}
