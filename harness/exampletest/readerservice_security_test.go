//go:build !unit

package exampletest

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// TestReaderServiceTLSAndToken runs the service with a certificate and a
// bearer token: it serves HTTPS only, refuses requests without the token or
// with a wrong one (401) but answers the probes, serves the object with
// it, and answers oversized headers with 431.
func TestReaderServiceTLSAndToken(t *testing.T) {
	ca := testenv.NewCA(t, "reader-service")
	srv := ca.Server(t, "reader-service")
	token := "tok-" + strings.Repeat("7", 32)
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startWith(t, build(t), launch{cacheBytes: 1 << 20, resources: []string{"res"}, tls: ca.ClientTLS(t, testenv.CertPair{}),
		args: []string{"--tls-cert", srv.CertFile, "--tls-key", srv.KeyFile, "--token-file", tokenFile, "--max-header-bytes", "4096"}})
	v := s.publish("res", []byte("behind a token"))

	status := func(auth string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", s.url+"/v1/resources/res", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") {
			t.Fatalf("401 without a Bearer challenge: %q", resp.Header.Get("WWW-Authenticate"))
		}
		return resp.StatusCode
	}
	for _, auth := range []string{"", "Bearer ", "Bearer " + token[:len(token)-1], "Bearer " + token + "x", "Basic " + token, token} {
		if code := status(auth); code != http.StatusUnauthorized {
			t.Fatalf("Authorization %q: %d, want 401", auth, code)
		}
	}
	for _, path := range []string{"/metrics", "/v1/resources/res/pointer"} {
		resp, err := s.client.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s without the token: %d, want 401", path, resp.StatusCode)
		}
	}
	s.token = token
	if got := string(s.awaitVersion("res", v)); got != "behind a token" {
		t.Fatalf("served %q", got)
	}
	if resp, err := s.client.Get(s.url + "/readyz"); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz without the token: %v %v", resp, err)
	}
	if resp := s.get("/v1/resources/res", "X-Padding", strings.Repeat("p", 8192)); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("8 KiB header over --max-header-bytes 4096: %d, want 431", resp.StatusCode)
	}
	// Plain HTTP to the HTTPS port gets no object.
	if resp, err := http.Get("http://" + s.addr + "/v1/resources/res"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served the object")
		}
	}
}

// TestReaderServiceCutsOffSlowHeaders is a slowloris client: it sends a
// request line and then one header byte every 100 ms, never finishing the
// headers. The service (--read-header-timeout 1s) closes the connection,
// long before the client would have finished; a client that sends its
// headers at once is served meanwhile.
func TestReaderServiceCutsOffSlowHeaders(t *testing.T) {
	ca := testenv.NewCA(t, "reader-service")
	srv := ca.Server(t, "reader-service")
	cfg := ca.ClientTLS(t, testenv.CertPair{})
	s := startWith(t, build(t), launch{cacheBytes: 1 << 20, resources: []string{"res"}, tls: cfg,
		args: []string{"--tls-cert", srv.CertFile, "--tls-key", srv.KeyFile, "--read-header-timeout", "1s"}})
	conn, err := tls.Dial("tcp", s.addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, bufio.NewReader(conn))
		closed <- err
	}()
	start := time.Now()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for sent := 0; ; sent++ {
		select {
		case <-closed:
			took := time.Since(start)
			if took > 5*time.Second {
				t.Fatalf("cut off after %s; want about the 1s read header timeout", took)
			}
			t.Logf("slow client cut off after %s and %d header bytes", took.Round(time.Millisecond), sent)
			return
		case <-tick.C:
			if sent == 1 {
				if resp := s.get("/healthz"); resp.StatusCode != http.StatusOK {
					t.Fatalf("a prompt client during the slowloris: %d", resp.StatusCode)
				}
			}
			if sent > 300 {
				t.Fatal("the service kept a connection open for 30s of trickled headers")
			}
			if _, err := io.WriteString(conn, "X"); err != nil {
				t.Logf("slow client cut off after %s (write: %v)", time.Since(start).Round(time.Millisecond), err)
				return
			}
		}
	}
}
