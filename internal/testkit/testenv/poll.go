package testenv

import (
	"testing"
	"time"
)

// Slack is the margin a test adds to a deadline derived from a configured
// timeout, so that the deadline holds on 2 cores shared by several test
// binaries running under the race detector: a step the product bounds by d
// is awaited for d + Slack. It stays below etcd's minimum lease TTL (2 s),
// so a step that takes one lease TTL too many still fails.
const Slack = 1500 * time.Millisecond

// pollEvery is how often Eventually re-evaluates its condition.
const pollEvery = 10 * time.Millisecond

// Eventually polls cond every 10 ms until it holds and returns how long
// that took (0 when it held at once). When timeout passes first it fails t
// with Fatalf naming what. Call it from the test's goroutine.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > timeout {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(pollEvery)
	}
	return time.Since(start)
}
