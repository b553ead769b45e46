// Package faultproxy is a small TCP proxy for tests that injects network
// faults between a client and one server: dropped bytes in either direction,
// added latency, refused connections, connection resets, and "drop the
// response of the next request" — the lost-response case that makes a
// publish outcome unknown (DESIGN.md invariant 8, "Publish, in one round trip
// to etcd" step 3).
//
// It works at the TCP level and knows nothing of the protocol it carries.
// A lossy link is modelled by what TCP makes of loss: a slow connection
// set-up (ConnectDelay) and late bytes (Latency); bytes are never lost. An
// etcd client multiplexes every RPC over one HTTP/2 connection, so "drop the
// response" is done as: forward the client's bytes, discard the server's
// bytes for a hold period, then reset every connection; the client sees a
// transport error after its request was delivered and applied. Dropping bytes
// in the middle of a stream desynchronises a framed protocol such as HTTP/2,
// so after clearing a drop fault call ResetAll to let clients reconnect
// cleanly.
//
// A Proxy is safe for concurrent use. Its goroutines end when Close returns.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Faults is the set of faults applied to every connection's bytes from the
// moment Set installs it. The zero value forwards everything unchanged.
type Faults struct {
	// DropUpstream discards client→server bytes; the connections stay open.
	DropUpstream bool
	// DropDownstream discards server→client bytes; the connections stay open.
	DropDownstream bool
	// StallDownstreamAfter, when positive, forwards that many server→client
	// bytes (counted from Set, whole chunks) and discards the rest: a
	// server that stops sending in the middle of a response.
	StallDownstreamAfter int64
	// Latency delays every forwarded chunk, in both directions.
	Latency time.Duration
	// ConnectDelay holds each newly accepted connection this long before
	// it is forwarded (the server is dialled, the client's first bytes
	// wait): the connection set-up of a lossy link, whose lost SYNs TCP
	// sends again after 1 s, then 2 s more.
	ConnectDelay time.Duration
	// Refuse closes newly accepted connections at once (with a reset).
	Refuse bool
}

// Stats counts what the proxy saw since Start. Byte counts include dropped
// bytes; Dropped* count only those discarded.
type Stats struct {
	Accepted       int   // connections accepted (including refused ones)
	Open           int   // connections currently forwarding
	Resets         int   // connections reset by ResetAll, Refuse or DropResponse
	BytesUp        int64 // client→server bytes read
	BytesDown      int64 // server→client bytes read
	DroppedUp      int64 // client→server bytes discarded
	DroppedDown    int64 // server→client bytes discarded
	UpstreamChunks int64 // client→server reads that returned data
}

// Proxy listens on a loopback port and forwards each connection to the
// target address.
type Proxy struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex
	faults Faults
	passed int64 // server→client bytes forwarded since Set (StallDownstreamAfter)
	conns  map[*link]struct{}
	stats  Stats
	drop   *dropPlan // armed by DropResponse; nil when idle
	closed bool
	done   chan struct{} // closed by Close
}

// dropPlan is an armed DropResponse: the n-th upstream chunk from now turns
// on downstream dropping; hold later every connection is reset.
type dropPlan struct {
	remaining int
	hold      time.Duration
	fired     bool
	done      chan struct{}
}

// link is one proxied connection pair.
type link struct {
	client, server net.Conn
	once           sync.Once
}

// Start listens on 127.0.0.1 (a free port) and forwards to target
// ("host:port"). It dials target lazily, once per accepted connection.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p := &Proxy{target: target, ln: ln, conns: map[*link]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's "127.0.0.1:port"; point the client here.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is "http://" + Addr(), the form etcd client endpoints take.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// Set installs f for every connection, open or new, from now on.
func (p *Proxy) Set(f Faults) {
	p.mu.Lock()
	p.faults, p.passed = f, 0
	p.mu.Unlock()
}

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Open = len(p.conns)
	return s
}

// ResetAll resets (TCP RST) every open connection on both sides and returns
// how many it reset. New connections are accepted as usual.
func (p *Proxy) ResetAll() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		p.reset(l)
	}
	return len(links)
}

// DropResponse arms the lost-response fault: the n-th client→server chunk
// read from now on (n >= 1, counted over all connections) is forwarded, and
// from that moment server→client bytes are discarded; hold later every open
// connection is reset and downstream forwarding resumes. The returned channel
// is closed after the reset. A later call replaces an armed plan that has not
// fired yet.
//
// Arm it right before the request whose response must be lost, on a client
// that sends nothing else meanwhile; hold must be long enough for the server
// to apply the request (a few hundred milliseconds on loopback).
func (p *Proxy) DropResponse(n int, hold time.Duration) <-chan struct{} {
	plan := &dropPlan{remaining: max(n, 1), hold: hold, done: make(chan struct{})}
	p.mu.Lock()
	p.drop = plan
	p.mu.Unlock()
	return plan.done
}

// Close stops accepting, resets every connection and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	err := p.ln.Close()
	p.ResetAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // listener closed
		}
		p.mu.Lock()
		p.stats.Accepted++
		refuse := p.faults.Refuse || p.closed
		if refuse {
			p.stats.Resets++
		}
		p.mu.Unlock()
		if refuse {
			rst(c)
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	p.mu.Lock()
	delay := p.faults.ConnectDelay
	p.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-p.done:
			t.Stop()
			rst(client)
			return
		}
	}
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		rst(client)
		return
	}
	l := &link{client: client, server: server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		rst(client)
		rst(server)
		return
	}
	p.conns[l] = struct{}{}
	p.mu.Unlock()

	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(l, true) }()
	go func() { defer pumps.Done(); p.pump(l, false) }()
	pumps.Wait()
	l.close()
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// close closes both sides once (an orderly close unless reset came first).
func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// pump copies one direction of l. On EOF it half-closes the destination and
// returns, so the other direction can finish; on any other failure it closes
// both sides so the other pump ends too.
func (p *Proxy) pump(l *link, up bool) {
	src, dst := l.server, l.client
	if up {
		src, dst = l.client, l.server
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			drop, latency := p.account(up, n)
			if latency > 0 {
				time.Sleep(latency)
			}
			if !drop {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				break
			}
			// Half-close: pass the EOF on and let the other direction finish.
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
				return
			}
			break
		}
	}
	l.close()
}

// account records n bytes read in one direction and decides whether they
// are dropped and how long they wait; it fires an armed DropResponse plan.
func (p *Proxy) account(up bool, n int) (drop bool, latency time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.faults
	if up {
		p.stats.BytesUp += int64(n)
		p.stats.UpstreamChunks++
		if plan := p.drop; plan != nil && !plan.fired {
			plan.remaining--
			if plan.remaining == 0 {
				plan.fired = true
				p.wg.Add(1)
				go p.finishDrop(plan)
			}
		}
		drop = f.DropUpstream
		if drop {
			p.stats.DroppedUp += int64(n)
		}
	} else {
		p.stats.BytesDown += int64(n)
		drop = f.DropDownstream || p.drop != nil && p.drop.fired ||
			f.StallDownstreamAfter > 0 && p.passed >= f.StallDownstreamAfter
		if !drop {
			p.passed += int64(n)
		}
		if drop {
			p.stats.DroppedDown += int64(n)
		}
	}
	return drop, f.Latency
}

// finishDrop waits out the hold of a fired plan, resets every connection and
// disarms the plan.
func (p *Proxy) finishDrop(plan *dropPlan) {
	defer p.wg.Done()
	time.Sleep(plan.hold)
	p.ResetAll()
	p.mu.Lock()
	if p.drop == plan {
		p.drop = nil
	}
	p.mu.Unlock()
	close(plan.done)
}

func (p *Proxy) reset(l *link) {
	l.once.Do(func() {
		rst(l.client)
		rst(l.server)
	})
	p.mu.Lock()
	p.stats.Resets++
	p.mu.Unlock()
}

// rst closes c with SO_LINGER 0, so the peer gets a TCP RST rather than an
// orderly FIN.
func rst(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
