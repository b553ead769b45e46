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

// secureServers starts an etcd serving TLS with --client-cert-auth and
// authentication enabled (user root, password "root-pw"), and a MinIO whose
// root secret key is random (secretValue). It returns the CA, a valid
// client certificate and both servers.
func secureServers(t *testing.T) (*testenv.CA, testenv.CertPair, *devstack.Etcd, *devstack.MinIO) {
	t.Helper()
	ca := testenv.NewCA(t, "etcd")
	srv := ca.Server(t, "etcd-server")
	client := ca.Client(t, "fencepub-client", time.Now().Add(24*time.Hour))
	e := testenv.StartEtcd(t, devstack.EtcdOptions{
		TLS: &devstack.EtcdTLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.CertFile,
			ClientCertAuth: true, Client: ca.ClientTLS(t, client)},
		RootPassword: "root-pw",
	})
	if !strings.HasPrefix(e.Endpoints()[0], "https://") {
		t.Fatalf("etcd endpoint %s is not https", e.Endpoints()[0])
	}
	return ca, client, e, testenv.StartMinIO(t, devstack.MinIOOptions{AccessKey: "fencepub", SecretKey: secretValue(t, "s3-secret")})
}

// secureStack is secureServers that puts the store's credentials and
// root's password in the environment and returns the CA, the client
// certificate and the connection flags (without the TLS files and the
// user, which each case chooses).
func secureStack(t *testing.T) (*testenv.CA, testenv.CertPair, []string) {
	t.Helper()
	ca, client, e, m := secureServers(t)
	t.Setenv("FENCEPUB_S3_ACCESS_KEY", m.Config.AccessKey)
	t.Setenv("FENCEPUB_S3_SECRET_KEY", m.Config.SecretKey)
	t.Setenv("FENCEPUB_ETCD_PASSWORD", "root-pw")
	return ca, client, []string{"--etcd-endpoints", e.Endpoints()[0], "--s3-endpoint", m.Config.Endpoint,
		"--s3-bucket", m.Config.Bucket, "--prefix", "sectest", "--domain", "d1"}
}

// tlsFlags are the etcd TLS flags for CA file ca and client pair.
func tlsFlags(ca string, pair testenv.CertPair) []string {
	return []string{"--etcd-ca", ca, "--etcd-cert", pair.CertFile, "--etcd-key", pair.KeyFile}
}

// TestEtcdTLSAndAuth runs the whole flow against an etcd that requires
// client certificates and a password, and shows that each misconfiguration
// exits 2 naming the key to fix, promptly, instead of 115 after a timeout.
func TestEtcdTLSAndAuth(t *testing.T) {
	ca, client, conn := secureStack(t)
	good := append(append(conn, tlsFlags(ca.CertFile, client)...), "--etcd-username", "root")
	body := filepath.Join(t.TempDir(), "body.txt")
	if err := os.WriteFile(body, []byte("over tls"), 0o644); err != nil {
		t.Fatal(err)
	}
	run := runWant

	run(t, 0, append([]string{"publish", "--resource", "job", "--owner", "alice", "--ttl", "10s", "--key", "k1", "--file", body}, good...)...)
	if out := run(t, 0, append([]string{"read", "--resource", "job"}, good...)...); !strings.Contains(out, "over tls") {
		t.Fatalf("read over TLS: %q", out)
	}
	run(t, 0, append([]string{"authority", "acquire", "--resource", "job2", "--owner", "bob", "--ttl", "10s"}, good...)...)

	other := testenv.NewCA(t, "other")
	cases := []struct {
		name, want string
		flags      []string
	}{
		{"wrong CA", "etcd.tls.ca", append(append(conn, tlsFlags(other.CertFile, client)...), "--etcd-username", "root")},
		{"expired client certificate", "etcd.tls.cert", append(append(conn, tlsFlags(ca.CertFile, ca.Client(t, "old", time.Now().Add(-time.Hour)))...), "--etcd-username", "root")},
		{"client certificate of another CA", "etcd.tls.cert", append(append(conn, tlsFlags(ca.CertFile, other.Client(t, "stranger", time.Now().Add(time.Hour)))...), "--etcd-username", "root")},
		{"no client certificate", "etcd.tls.cert", append(conn, "--etcd-ca", ca.CertFile, "--etcd-username", "root")},
		{"unknown user", "etcd.username", append(append(conn, tlsFlags(ca.CertFile, client)...), "--etcd-username", "mallory")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if msg := run(t, exitcode.Usage, append([]string{"pointer", "--resource", "job"}, c.flags...)...); !strings.Contains(msg, c.want) {
				t.Fatalf("%s: message does not name %s: %s", c.name, c.want, msg)
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		t.Setenv("FENCEPUB_ETCD_PASSWORD", "not-the-password")
		if msg := run(t, exitcode.Usage, append([]string{"pointer", "--resource", "job"}, good...)...); !strings.Contains(msg, "etcd.username") {
			t.Fatalf("wrong password: message does not name etcd.username: %s", msg)
		}
	})
}
