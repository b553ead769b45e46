package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/exitcode"
)

// runCLI runs the fencepub command tree in-process with args and returns
// stdout, stderr and the exit code main would use.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return publishCLI(t, context.Background(), "", args...)
}

// publishCLI runs the fencepub command tree in-process with ctx, stdin and
// args, as main does (cli.Execute, cli.Report), and returns stdout, stderr
// (with the error line main logs) and the exit code main would use.
func publishCLI(t *testing.T, ctx context.Context, stdin string, args ...string) (string, string, int) {
	t.Helper()
	return cliIO(t, ctx, strings.NewReader(stdin), args...)
}

// cliIO is publishCLI with any stdin.
func cliIO(t *testing.T, ctx context.Context, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetIn(stdin)
	root.SetOut(&out)
	root.SetErr(&errb)
	c, code, err := cli.Execute(ctx, root, args)
	cli.Report(c, &errb, args, code, err)
	return out.String(), errb.String(), code
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.yaml")
	if err := os.WriteFile(file, []byte("s3:\n  bucket: from-file\n  endpoint: file:9000\n  secret_key: s3cr3t\nnamespace:\n  domain: filedom\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FENCEPUB_S3_ENDPOINT", "env:9000")
	t.Setenv("FENCEPUB_NAMESPACE_DOMAIN", "envdom")
	t.Setenv("FENCEPUB_ETCD_REQUEST_TIMEOUT", "7s")
	out, errs, code := runCLI(t, "config", "show", "-o", "json", "--config", file, "--domain", "flagdom")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"s3.bucket":            "from-file", // file > default
		"s3.endpoint":          "env:9000",  // env > file
		"namespace.domain":     "flagdom",   // flag > env
		"namespace.prefix":     "fencepub",  // default
		"s3.secret_key":        "<redacted>",
		"etcd.request_timeout": 7.0, // env > default, in seconds
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	for _, k := range []string{"etcd.dial_keepalive_time", "etcd.dial_keepalive_timeout"} {
		if got[k] == nil {
			t.Errorf("config show lacks %s", k)
		}
	}
	if strings.Contains(out, "s3cr3t") {
		t.Fatal("config show printed a secret")
	}

	// etcd.endpoints is a list whether it comes from the file or from a
	// comma-separated environment value.
	if err := os.WriteFile(file, []byte("etcd:\n  endpoints: [\"http://f1:2379\", \"http://f2:2379\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{"", "http://e1:2379,http://e2:2379"} {
		t.Setenv("FENCEPUB_ETCD_ENDPOINTS", env)
		out, errs, code := runCLI(t, "config", "show", "-o", "json", "--config", file)
		var shown struct {
			Endpoints []string `json:"etcd.endpoints"`
		}
		if err := json.Unmarshal([]byte(out), &shown); code != 0 || err != nil || len(shown.Endpoints) != 2 {
			t.Fatalf("FENCEPUB_ETCD_ENDPOINTS=%q: exit %d, %v, endpoints %q (%s); want a list of 2", env, code, err, shown.Endpoints, errs)
		}
	}
}

// TestConfigDurations: a bare number for a duration key is seconds, in
// the file and the environment (gc.interval: 5 is 5 s, not 5 ns), and
// `config show -o json` prints every duration as seconds, which reads back
// the same; the text form prints Go durations.
func TestConfigDurations(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f.yaml")
	if err := os.WriteFile(file, []byte("gc:\n  interval: 5\n  clock_skew: 2.5\netcd:\n  request_timeout: 1m30s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FENCEPUB_GC_GRACE", "90")
	cfg, err := config.FromFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GC.Interval != 5*time.Second || cfg.GC.ClockSkew != 2500*time.Millisecond || cfg.GC.Grace != 90*time.Second || cfg.Etcd.RequestTimeout != 90*time.Second {
		t.Fatalf("durations %v %v %v %v; want 5s 2.5s 1m30s 1m30s", cfg.GC.Interval, cfg.GC.ClockSkew, cfg.GC.Grace, cfg.Etcd.RequestTimeout)
	}
	out, errs, code := runCLI(t, "config", "show", "-o", "json", "--config", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"schema_version": 1.0, "gc.interval": 5.0, "gc.clock_skew": 2.5, "gc.grace": 90.0, "etcd.request_timeout": 90.0, "gc.lease_ttl": 15.0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if text, _, _ := runCLI(t, "config", "show", "--config", file); !regexp.MustCompile(`gc\.interval\s+5s\n`).MatchString(text) {
		t.Errorf("config show text: %s", text)
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("s3: [unclosed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	badGC := filepath.Join(dir, "bad-gc.yaml")
	if err := os.WriteFile(badGC, []byte("gc:\n  interval: abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	typo := filepath.Join(dir, "typo.yaml")
	if err := os.WriteFile(typo, []byte("gc:\n  intervall: 5m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	etcdFile := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("etcd:\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"keepalive below gRPC's floor", []string{"--config", etcdFile("ka.yaml", "  dial_keepalive_time: 2s\n")}, "etcd.dial_keepalive_time"},
		{"keepalive without timeout", []string{"--config", etcdFile("kat.yaml", "  dial_keepalive_timeout: 0s\n")}, "etcd.dial_keepalive_timeout"},
		{"zero request timeout", []string{"--config", etcdFile("rt.yaml", "  request_timeout: 0s\n")}, "etcd.request_timeout"},
		{"bad request timeout", []string{"--config", etcdFile("rtx.yaml", "  request_timeout: soon\n")}, `etcd.request_timeout = "soon": want a duration`},
		{"malformed file", []string{"--config", bad}, "config file"},
		{"bad duration", []string{"--config", badGC}, `gc.interval = "abc": want a duration`},
		{"unknown key", []string{"--config", typo}, "intervall (known keys: "},
		{"missing explicit file", []string{"--config", filepath.Join(dir, "nope.yaml")}, "config file"},
		{"bad bucket", []string{"--s3-bucket", "Bad_Bucket"}, "s3.bucket"},
		{"bad endpoint", []string{"--s3-endpoint", "ftp://x:9000"}, "s3.endpoint"},
		{"endpoint with a path", []string{"--s3-endpoint", "https://x:9000/bucket"}, "s3.endpoint"},
		{"bad etcd url", []string{"--etcd-endpoints", "127.0.0.1:2379"}, "etcd.endpoints"},
		{"bad domain", []string{"--domain", "a/b"}, "namespace.domain"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, errs, code := runCLI(t, append([]string{"config", "show"}, c.args...)...)
			if code != exitcode.Usage || !strings.Contains(errs, c.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 naming %q", code, errs, c.want)
			}
		})
	}
}
