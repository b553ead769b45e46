//go:build !unit

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// secretValue is a random secret that no output could contain by chance.
func secretValue(t *testing.T, what string) string {
	t.Helper()
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return what + "-" + hex.EncodeToString(b)
}

// TestSecretsStayOutOfOutput runs a whole CLI session on etcd with TLS,
// client certificates and a password, with S3 keys in the config file and
// then temporary STS keys with a session token in the environment, and
// checks that no output carries a secret: every command's stdout and stderr
// (text and JSON), what `run` hands its command, the published bodies, the
// GC daemon's log, /metrics, /readyz and /healthz, `config show` in text and
// JSON, and the errors of commands given wrong credentials (which must not
// echo the wrong values either).
func TestSecretsStayOutOfOutput(t *testing.T) {
	ca, client, e, m := secureServers(t)
	clearS3Env(t)
	t.Setenv("FENCEPUB_ETCD_PASSWORD", "")
	os.Unsetenv("FENCEPUB_ETCD_PASSWORD")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	etcdPassword := secretValue(t, "etcd-pw")
	root := testenv.EtcdClient(t, e)
	if _, err := root.UserAdd(ctx, "session", etcdPassword); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserGrantRole(ctx, "session", "root"); err != nil {
		t.Fatal(err)
	}
	tmp := assumeRole(t, m, "")
	secrets := map[string]string{"etcd password": etcdPassword, "s3 secret key": m.Config.SecretKey,
		"temporary secret key": tmp.SecretAccessKey, "session token": tmp.SessionToken}

	dir := t.TempDir()
	writeConfig := func(name, s3Keys string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		yaml := fmt.Sprintf(`etcd:
  endpoints: [%s]
  username: session
  password: %s
  tls: {ca: %s, cert: %s, key: %s}
s3:
  endpoint: %s
  bucket: %s
%snamespace: {prefix: secrets, domain: d1}
`, e.Endpoints()[0], etcdPassword, ca.CertFile, client.CertFile, client.KeyFile, m.Config.Endpoint, m.Config.Bucket, s3Keys)
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	static := writeConfig("static.yaml", fmt.Sprintf("  access_key: %s\n  secret_key: %s\n", m.Config.AccessKey, m.Config.SecretKey))
	auto := writeConfig("auto.yaml", "  credentials: auto\n")
	body := filepath.Join(dir, "body.txt")
	if err := os.WriteFile(body, []byte("session results"), 0o644); err != nil {
		t.Fatal(err)
	}

	var outputs []string // every output of the session, labelled
	check := func(label, out string, extra ...string) {
		t.Helper()
		outputs = append(outputs, label)
		for what, s := range secrets {
			if strings.Contains(out, s) {
				t.Errorf("%s: output contains the %s:\n%s", label, what, out)
			}
		}
		for _, s := range extra {
			if strings.Contains(out, s) {
				t.Errorf("%s: output contains the wrong credential it was given:\n%s", label, out)
			}
		}
	}
	// fp runs the CLI with config file cfg and checks its exit code and
	// its output.
	fp := func(cfg string, want int, args ...string) string {
		t.Helper()
		i := len(args)
		for j, a := range args {
			if a == "--" {
				i = j
				break
			}
		}
		full := append(append(append([]string{}, args[:i]...), "--config", cfg), args[i:]...)
		out, errs, code := publishCLI(t, ctx, "", full...)
		check("fencepub "+strings.Join(args, " "), out+errs)
		if code != want {
			t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errs)
		}
		return out + errs
	}

	// The session with the keys in the config file.
	for _, cfg := range []string{static, auto} {
		if out := fp(cfg, 0, "config", "show"); !strings.Contains(out, "etcd.password") {
			t.Fatalf("config show does not list etcd.password:\n%s", out)
		}
		fp(cfg, 0, "config", "show", "-o", "json")
	}
	fp(static, 0, "authority", "acquire", "--resource", "job", "--owner", "o1", "--ttl", "10s", "-o", "json")
	fp(static, 0, "authority", "renew", "--resource", "job", "--owner", "o1")
	fp(static, 0, "authority", "show", "--resource", "job", "-o", "json")
	fp(static, 0, "authority", "release", "--resource", "job", "--owner", "o1", "--generation", "1")
	fp(static, 0, "publish", "--resource", "job", "--owner", "o2", "--ttl", "10s", "--key", "k1", "--file", body, "-o", "json")
	fp(static, 0, "resolve", "--resource", "job", "--key", "k1", "--epoch", "1", "--fence", "2", "--seq", "1", "--file", body, "-o", "json")
	// What run hands its command is its environment: the published body.
	fp(static, 0, "run", "--resource", "job", "--owner", "o3", "--ttl", "10s", "--run-id", "r1", "-o", "json", "--", "env")
	if out := fp(static, 0, "read", "--resource", "job"); !strings.Contains(out, "FENCEPUB_FENCE=") {
		t.Fatalf("read: the run's environment was not published:\n%s", out)
	}
	fp(static, 0, "pointer", "--resource", "job", "-o", "json")
	fp(static, 0, "watch", "--resource", "job", "--count", "1")
	fp(static, 0, "gc", "run", "--all", "--verbose", "-o", "json")
	fp(static, 0, "gc", "run", "--all", "--dry-run")
	get, stop := gcDaemon(t, ctx, "--config", static)
	for _, path := range []string{"/metrics", "/readyz", "/healthz"} {
		// /readyz may answer 503 for a moment (a dependency check slower
		// than its bound); every page it serves is checked for the keys.
		code, page := get(path)
		for deadline := time.Now().Add(30 * time.Second); code != 200 && time.Now().Before(deadline); code, page = get(path) {
			check("gc daemon "+path, page)
			time.Sleep(100 * time.Millisecond)
		}
		check("gc daemon "+path, page)
		if code != 200 {
			t.Fatalf("gc daemon %s: %d %s", path, code, page)
		}
	}
	out, code := stop()
	check("gc daemon log", out)
	if code != 0 {
		t.Fatalf("gc daemon: exit %d: %s", code, out)
	}

	// The session with temporary keys and their token in the environment.
	t.Setenv("AWS_ACCESS_KEY_ID", tmp.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", tmp.SecretAccessKey)
	t.Setenv("AWS_SESSION_TOKEN", tmp.SessionToken)
	if out := fp(auto, 0, "config", "show"); !strings.Contains(out, "environment AWS_ACCESS_KEY_ID") {
		t.Fatalf("config show does not name the environment:\n%s", out)
	}
	fp(auto, 0, "config", "show", "-o", "json")
	fp(auto, 0, "publish", "--resource", "job", "--owner", "o4", "--ttl", "10s", "--key", "k2", "--file", body, "-o", "json")
	fp(auto, 0, "read", "--resource", "job")

	// Wrong credentials: refused, and neither the right nor the wrong
	// value appears.
	wrong := func(what, env, value, cfg string, args ...string) {
		t.Helper()
		t.Setenv(env, value)
		full := append(append([]string{}, args...), "--config", cfg)
		out, errs, code := publishCLI(t, ctx, "", full...)
		check(what+": fencepub "+strings.Join(args, " "), out+errs, value)
		if code != exitcode.Usage {
			t.Fatalf("%s: exit %d, want 2: %s%s", what, code, out, errs)
		}
	}
	wrong("a wrong session token", "AWS_SESSION_TOKEN", secretValue(t, "bad-token"), auto, "read", "--resource", "job")
	t.Setenv("AWS_SESSION_TOKEN", tmp.SessionToken)
	wrong("a wrong temporary secret", "AWS_SECRET_ACCESS_KEY", secretValue(t, "bad-secret"), auto, "publish", "--resource", "job", "--owner", "o5", "--ttl", "10s", "--key", "k3", "--file", body)
	wrong("a wrong s3 secret key", "FENCEPUB_S3_SECRET_KEY", secretValue(t, "bad-s3"), static, "gc", "run", "--all")
	os.Unsetenv("FENCEPUB_S3_SECRET_KEY")
	wrong("a wrong etcd password", "FENCEPUB_ETCD_PASSWORD", secretValue(t, "bad-etcd"), static, "pointer", "--resource", "job")
	t.Logf("checked %d outputs", len(outputs))
}
