package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends line and waits up to d for its echo.
func roundTrip(c net.Conn, r *bufio.Reader, line string, d time.Duration) (string, error) {
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(d))
	got, err := r.ReadString('\n')
	return got, err
}

func TestForwardDropDelayReset(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, r := dial(t, p)
	if got, err := roundTrip(c, r, "hello", time.Second); err != nil || got != "hello\n" {
		t.Fatalf("plain forward: %q, %v", got, err)
	}

	p.Set(Faults{DropDownstream: true})
	if _, err := roundTrip(c, r, "lost", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("dropped downstream: %v, want a timeout", err)
	}
	p.Set(Faults{Latency: 150 * time.Millisecond})
	start := time.Now()
	c2, r2 := dial(t, p)
	if got, err := roundTrip(c2, r2, "slow", 2*time.Second); err != nil || got != "slow\n" || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("latency: %q, %v after %s", got, err, time.Since(start))
	}
	p.Set(Faults{})
	if n := p.ResetAll(); n != 2 {
		t.Fatalf("reset %d connections, want 2", n)
	}
	if _, err := roundTrip(c2, r2, "after reset", time.Second); err == nil {
		t.Fatal("a reset connection still answered")
	}
	p.Set(Faults{Refuse: true})
	// The reset may reach the client during the dial or at its first read.
	if c3, err := net.Dial("tcp", p.Addr()); err == nil {
		defer c3.Close()
		if _, err := roundTrip(c3, bufio.NewReader(c3), "refused", time.Second); err == nil || isTimeout(err) {
			t.Fatalf("refused connection: %v, want a reset or EOF", err)
		}
	}
	if st := p.Stats(); st.Accepted != 3 || st.DroppedDown == 0 || st.Resets < 3 {
		t.Fatalf("stats %+v", st)
	}
}

// DropResponse forwards the n-th request, loses its answer, then resets.
func TestDropResponse(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, r := dial(t, p)
	fired := p.DropResponse(2, 100*time.Millisecond)
	if got, err := roundTrip(c, r, "first", time.Second); err != nil || got != "first\n" {
		t.Fatalf("request 1: %q, %v", got, err)
	}
	if _, err := roundTrip(c, r, "second", 2*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("request 2: %v, want the connection reset", err)
	}
	<-fired
	if st := p.Stats(); st.DroppedDown != int64(len("second\n")) || st.BytesUp != int64(len("first\nsecond\n")) {
		t.Fatalf("stats %+v: the request must be delivered and only its answer dropped", st)
	}
	c2, r2 := dial(t, p)
	if got, err := roundTrip(c2, r2, "again", time.Second); err != nil || got != "again\n" {
		t.Fatalf("after the plan: %q, %v", got, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestConnectDelay: a connection accepted while ConnectDelay is set
// carries nothing until the delay has passed, then forwards as usual; one
// still held when the proxy closes is reset, not left hanging.
func TestConnectDelay(t *testing.T) {
	p, err := Start(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const delay = 700 * time.Millisecond
	p.Set(Faults{ConnectDelay: delay})
	c, r := dial(t, p)
	start := time.Now()
	got, err := roundTrip(c, r, "late", 10*time.Second)
	if err != nil || got != "late\n" {
		t.Fatalf("round trip through a delayed connection: %q, %v", got, err)
	}
	if took := time.Since(start); took < delay {
		t.Fatalf("the echo came back after %s, before the connect delay of %s", took, delay)
	}
	held, hr := dial(t, p)
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	var ne net.Error
	if _, err := roundTrip(held, hr, "never", 10*time.Second); err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("a connection still held at Close: %v; want it reset", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
