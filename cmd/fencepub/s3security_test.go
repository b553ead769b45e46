//go:build !unit

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// clearS3Env removes every credential source of s3.credentials: auto from
// the environment, so that each case names its own.
func clearS3Env(t *testing.T) {
	t.Helper()
	for _, k := range []string{"FENCEPUB_S3_ACCESS_KEY", "FENCEPUB_S3_SECRET_KEY", "FENCEPUB_S3_CREDENTIALS",
		"AWS_ACCESS_KEY_ID", "AWS_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SECRET_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "MINIO_ACCESS_KEY", "MINIO_SECRET_KEY",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"} {
		t.Setenv(k, "")
	}
	none := filepath.Join(t.TempDir(), "absent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	t.Setenv("AWS_CONFIG_FILE", none)
}

// tlsMinIO starts an etcd and a MinIO serving HTTPS with a certificate of
// a new CA, and returns the CA, the MinIO and the etcd connection flags
// with bucket and namespace (no s3 endpoint, which each case chooses).
// The store's keys are in no source yet.
func tlsMinIO(t *testing.T) (*testenv.CA, *devstack.MinIO, []string) {
	t.Helper()
	clearS3Env(t)
	ca := testenv.NewCA(t, "s3")
	srv := ca.Server(t, "minio-server")
	m := testenv.StartMinIO(t, devstack.MinIOOptions{TLS: &devstack.MinIOTLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile, CAFile: ca.CertFile}})
	if !strings.HasPrefix(m.Config.Endpoint, "https://") || m.Config.TLS.CA != ca.CertFile {
		t.Fatalf("MinIO config %+v does not serve TLS with the CA", m.Config)
	}
	e := testenv.StartEtcd(t, devstack.EtcdOptions{})
	return ca, m, []string{"--etcd-endpoints", e.Endpoints()[0], "--s3-bucket", m.Config.Bucket, "--prefix", "s3sec", "--domain", "d1"}
}

// runWant runs the CLI and fails t unless it exits with want; it returns
// stdout and stderr together.
func runWant(t *testing.T, want int, args ...string) string {
	t.Helper()
	start := time.Now()
	out, errs, code := runCLI(t, args...)
	if code != want {
		t.Fatalf("fencepub %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, want, out, errs)
	}
	if took := time.Since(start); want == exitcode.Usage && took > 8*time.Second {
		t.Fatalf("fencepub %s: the configuration error took %s", strings.Join(args, " "), took)
	}
	return out + errs
}

// TestS3TLS publishes and reads through a MinIO serving HTTPS with a
// private CA (s3.tls.ca, an https:// s3.endpoint that sets secure), and
// shows that a wrong CA exits 2 naming s3.tls.ca rather than 115.
func TestS3TLS(t *testing.T) {
	_, m, conn := tlsMinIO(t)
	t.Setenv("FENCEPUB_S3_ACCESS_KEY", m.Config.AccessKey)
	t.Setenv("FENCEPUB_S3_SECRET_KEY", m.Config.SecretKey)
	body := filepath.Join(t.TempDir(), "body.txt")
	if err := os.WriteFile(body, []byte("over s3 tls"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := append([]string{"--s3-endpoint", m.Config.Endpoint}, conn...)
	t.Setenv("FENCEPUB_S3_TLS_CA", m.Config.TLS.CA)
	runWant(t, 0, append([]string{"publish", "--resource", "job", "--owner", "alice", "--ttl", "10s", "--key", "k1", "--file", body}, good...)...)
	if out := runWant(t, 0, append([]string{"read", "--resource", "job"}, good...)...); !strings.Contains(out, "over s3 tls") {
		t.Fatalf("read over TLS: %q", out)
	}
	t.Run("host:port with s3.secure", func(t *testing.T) {
		hostPort := strings.TrimPrefix(m.Config.Endpoint, "https://")
		if out := runWant(t, 0, append([]string{"read", "--resource", "job", "--s3-endpoint", hostPort, "--s3-secure"}, conn...)...); !strings.Contains(out, "over s3 tls") {
			t.Fatalf("read over TLS: %q", out)
		}
	})
	t.Run("wrong CA", func(t *testing.T) {
		t.Setenv("FENCEPUB_S3_TLS_CA", testenv.NewCA(t, "other").CertFile)
		for _, args := range [][]string{
			{"read", "--resource", "job"},
			{"publish", "--resource", "job", "--owner", "alice", "--ttl", "10s", "--key", "k2", "--file", body},
		} {
			if msg := runWant(t, exitcode.Usage, append(args, good...)...); !strings.Contains(msg, "s3.tls.ca") {
				t.Fatalf("%s: message does not name s3.tls.ca: %s", args[0], msg)
			}
		}
	})
	t.Run("contradicting s3.secure", func(t *testing.T) {
		msg := runWant(t, exitcode.Usage, append([]string{"read", "--resource", "job", "--s3-secure=false"}, good...)...)
		if !strings.Contains(msg, "s3.endpoint") || !strings.Contains(msg, "s3.secure") {
			t.Fatalf("message does not name s3.endpoint and s3.secure: %s", msg)
		}
		plain := "http://" + strings.TrimPrefix(m.Config.Endpoint, "https://")
		msg = runWant(t, exitcode.Usage, append([]string{"read", "--resource", "job", "--s3-secure", "--s3-endpoint", plain}, conn...)...)
		if !strings.Contains(msg, "s3.endpoint") || !strings.Contains(msg, "s3.secure") {
			t.Fatalf("message does not name s3.endpoint and s3.secure: %s", msg)
		}
	})
}

// TestS3Credentials reaches MinIO with s3.credentials: auto and no keys in
// the configuration: from AWS environment variables, and from a profile of
// a shared credentials file; `config show` names the source and never a
// key; static without keys is refused naming the keys.
func TestS3Credentials(t *testing.T) {
	_, m, conn := tlsMinIO(t)
	t.Setenv("FENCEPUB_S3_TLS_CA", m.Config.TLS.CA)
	args := append([]string{"--s3-endpoint", m.Config.Endpoint}, conn...)
	body := filepath.Join(t.TempDir(), "body.txt")
	if err := os.WriteFile(body, []byte("with found keys"), 0o644); err != nil {
		t.Fatal(err)
	}
	show := func(t *testing.T, want string) {
		t.Helper()
		out := runWant(t, 0, append([]string{"config", "show"}, args...)...)
		if !strings.Contains(out, want) {
			t.Fatalf("config show does not say %q:\n%s", want, out)
		}
		if strings.Contains(out, m.Config.SecretKey) {
			t.Fatalf("config show prints a key:\n%s", out)
		}
	}
	t.Run("environment", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", m.Config.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", m.Config.SecretKey)
		show(t, "auto (from environment AWS_ACCESS_KEY_ID)")
		runWant(t, 0, append([]string{"publish", "--resource", "env", "--owner", "alice", "--ttl", "10s", "--key", "k1", "--file", body}, args...)...)
		if out := runWant(t, 0, append([]string{"read", "--resource", "env"}, args...)...); !strings.Contains(out, "with found keys") {
			t.Fatalf("read: %q", out)
		}
	})
	t.Run("shared credentials file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "credentials")
		ini := "[default]\naws_access_key_id = nobody\naws_secret_access_key = wrong-secret\n\n[fencepub]\naws_access_key_id = " +
			m.Config.AccessKey + "\naws_secret_access_key = " + m.Config.SecretKey + "\n"
		if err := os.WriteFile(file, []byte(ini), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", file)
		t.Setenv("AWS_PROFILE", "fencepub")
		show(t, "auto (from shared credentials file "+file+" profile fencepub)")
		if out := runWant(t, 0, append([]string{"read", "--resource", "env"}, args...)...); !strings.Contains(out, "with found keys") {
			t.Fatalf("read: %q", out)
		}
		t.Setenv("AWS_PROFILE", "default") // the wrong keys: refused, exit 2
		if msg := runWant(t, exitcode.Usage, append([]string{"read", "--resource", "env"}, args...)...); strings.Contains(msg, "wrong-secret") {
			t.Fatalf("the error prints the secret: %s", msg)
		}
	})
	t.Run("static without keys", func(t *testing.T) {
		t.Setenv("AWS_ACCESS_KEY_ID", m.Config.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", m.Config.SecretKey)
		t.Setenv("FENCEPUB_S3_CREDENTIALS", "static")
		msg := runWant(t, exitcode.Usage, append([]string{"read", "--resource", "env"}, args...)...)
		if !strings.Contains(msg, "s3.access_key") || !strings.Contains(msg, "s3.secret_key") {
			t.Fatalf("message does not name the keys: %s", msg)
		}
	})
}
