package authority

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ErrSessionClosed is the Session's Err after Close.
var ErrSessionClosed = errors.New("authority: session closed")

// minRenewEvery bounds how often a Session renews and retries.
const minRenewEvery = 200 * time.Millisecond

// lostMargin is how long before the local deadline Lost closes: room for
// timer latency and clock-rate drift, TTL/20 capped at 1 s (100 ms for a
// 2 s lease).
func lostMargin(ttl time.Duration) time.Duration { return min(ttl/20, time.Second) }

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Session keeps one grant alive in the background: it renews the lease every
// TTL/3 and closes Lost as soon as it can no longer vouch that etcd still
// holds the lease, a small margin before Deadline; once lost, it never
// recovers: acquire again (DESIGN.md invariant 12; the package doc, "How a
// Session counts its deadline"). Worker code stops publishing when Lost
// closes; fencing still protects the resource if it does not (DESIGN.md
// "Words"). A Session's methods are safe for concurrent use.
type Session struct {
	a      *Authority
	g      Grant
	cancel context.CancelFunc
	lost   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	deadline time.Time
	err      error
	closed   bool
}

// NewSession starts renewing g in the background until ctx ends, Close is
// called or the lease is lost. The first deadline is g.GrantedAt + g.TTL
// (the lease request's send time plus TTL). It makes no request itself.
//
// Errors: ErrInvalidGrant, fencepub.ErrInvalidName, ErrLeaseLost when g's
// deadline has already passed.
func (a *Authority) NewSession(ctx context.Context, g Grant) (*Session, error) {
	if err := checkGrant(g); err != nil {
		return nil, err
	}
	if g.TTL < minTTL {
		return nil, fmt.Errorf("%w: grant of %q has TTL %s", ErrInvalidGrant, g.Resource, g.TTL)
	}
	if !time.Now().Before(g.expiresAt()) {
		return nil, fmt.Errorf("%w: %q generation %d: its deadline %s has passed", ErrLeaseLost, g.Resource, g.Generation, g.expiresAt().Format(time.RFC3339Nano))
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Session{a: a, g: g, cancel: cancel, lost: make(chan struct{}), done: make(chan struct{}), deadline: g.expiresAt()}
	go s.run(ctx)
	return s, nil
}

// Grant returns the session's grant.
func (s *Session) Grant() Grant { return s.g }

// Lost is closed when the session can no longer vouch that the lease is
// live: a renewal failed with ErrLeaseLost, the local deadline passed, or
// the session ended (Close, or the NewSession ctx ended).
func (s *Session) Lost() <-chan struct{} { return s.lost }

// Done is closed when the session's goroutine has exited.
func (s *Session) Done() <-chan struct{} { return s.done }

// Deadline returns the local deadline: the send time of the last confirmed
// renewal (or of the lease grant) plus the TTL. The lease cannot expire on
// the server before it. A worker checks it before a long step.
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// Err returns why Lost closed: an error wrapping ErrLeaseLost,
// ErrSessionClosed, or the NewSession ctx's error; nil while live.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Close is CloseContext with a fresh context: the release is retried for
// up to Config.RetryTimeout while etcd cannot serve it, like etcd's
// concurrency.Session.Close revokes its lease.
func (s *Session) Close() error { return s.CloseContext(context.Background()) }

// CloseContext stops renewing and releases the grant (Release) within ctx:
// its deadline bounds the release's retries (Config.RetryTimeout when it
// has none), so a caller with a deadline of its own gives up when it
// passes; the lease then expires by itself within its TTL (renewal stops
// here), and GC seals the term's leftovers later. It waits for the
// session's goroutine to exit. It returns Release's error (ErrLeaseLost if
// the grant was already lost, ctx's error or fencepub.ErrUnavailable when
// the release did not complete); later calls return nil.
func (s *Session) CloseContext(ctx context.Context) error {
	s.mu.Lock()
	already := s.closed
	s.closed = true
	s.mu.Unlock()
	if already {
		return nil
	}
	s.cancel()
	<-s.done
	return s.a.Release(ctx, s.g)
}

// lose records err (first one wins) and closes Lost.
func (s *Session) lose(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.lost)
	}
}

func (s *Session) run(ctx context.Context) {
	defer close(s.done)
	every := max(s.g.TTL/3, minRenewEvery)
	margin := lostMargin(s.g.TTL)
	next := earlier(time.Now().Add(every), s.g.GrantedAt.Add(every))
	for {
		deadline := s.Deadline().Add(-margin)
		wait := time.NewTimer(time.Until(earlier(next, deadline)))
		select {
		case <-ctx.Done():
			wait.Stop()
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed {
				s.lose(ErrSessionClosed)
			} else {
				s.lose(fmt.Errorf("authority: session of %q ended: %w", s.g.Resource, context.Cause(ctx)))
			}
			return
		case <-wait.C:
		}
		sent := time.Now()
		if !sent.Before(deadline) {
			s.lose(fmt.Errorf("%w: %q generation %d: no renewal confirmed before the local deadline %s",
				ErrLeaseLost, s.g.Resource, s.g.Generation, s.Deadline().Format(time.RFC3339Nano)))
			return
		}
		// The renewal may use the time left before the deadline; each
		// keepalive attempt at most half a renew interval, so an attempt
		// stuck on a stalled member (or on a follower forwarding to a
		// stalled leader) gives way to several that reach another. The
		// deadline counts from this send time, before any attempt: never
		// later than etcd's.
		rctx, cancel := context.WithDeadline(ctx, deadline)
		ttl, err := s.a.renew(rctx, s.g, min(s.a.cfg.RequestTimeout, every/2))
		cancel()
		switch {
		case err == nil:
			s.mu.Lock()
			// A renewal confirmed after the deadline does not revive the
			// session: Lost may already have been observed.
			if sent.Add(ttl).After(s.deadline) && s.err == nil {
				s.deadline = sent.Add(ttl)
			}
			s.mu.Unlock()
			next = sent.Add(every)
		case errors.Is(err, ErrLeaseLost):
			s.lose(err)
			return
		default:
			// Transient (etcd unavailable): retry soon, until the deadline.
			s.a.log.Warn("authority: session renew failed; retrying", "resource", s.g.Resource, "err", err)
			next = time.Now().Add(max(every/4, minRenewEvery))
		}
	}
}
