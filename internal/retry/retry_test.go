package retry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var errFlaky = errors.New("flaky")

func isFlaky(err error) bool { return errors.Is(err, errFlaky) }

func TestDoRetriesUntilSuccess(t *testing.T) {
	calls := 0
	err := Do(context.Background(), func(context.Context) error {
		if calls++; calls < 4 {
			return errFlaky
		}
		return nil
	}, isFlaky)
	if err != nil || calls != 4 {
		t.Fatalf("Do: %v after %d calls, want nil after 4", err, calls)
	}
}

func TestDoStopsAtPermanentError(t *testing.T) {
	permanent := errors.New("permanent")
	calls := 0
	err := Do(context.Background(), func(context.Context) error {
		calls++
		return fmt.Errorf("wrapped: %w", permanent)
	}, isFlaky)
	if !errors.Is(err, permanent) || calls != 1 {
		t.Fatalf("Do: %v after %d calls, want the permanent error after 1", err, calls)
	}
}

// When the caller's deadline ends the retries, Do returns the last
// attempt's error, not a bare context error.
func TestDoReturnsLastErrorAtDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	calls := 0
	start := time.Now()
	err := Do(ctx, func(context.Context) error {
		calls++
		return fmt.Errorf("attempt %d: %w", calls, errFlaky)
	}, isFlaky)
	if !errors.Is(err, errFlaky) || calls < 3 {
		t.Fatalf("Do: %v after %d calls, want the last flaky error after several", err, calls)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Do returned %s after a 300 ms deadline", d)
	}
}

// Each error of etcd's client, classified by both questions: may another
// attempt succeed, and is it certain that etcd did not apply the request.
func TestEtcdClassifiers(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		err                     error
		unavailable, notApplied bool
	}{
		{"nil", nil, false, false},
		{"no leader", rpctypes.ErrNoLeader, true, false},
		{"leader changed", rpctypes.ErrLeaderChanged, true, false},
		{"server timeout, wrapped", fmt.Errorf("txn: %w", rpctypes.ErrTimeout), true, false},
		{"not leader", rpctypes.ErrNotLeader, true, true},
		{"too many requests", rpctypes.ErrTooManyRequests, true, true},
		{"request deadline", context.DeadlineExceeded, true, false},
		{"gRPC unavailable", status.Error(codes.Unavailable, "connection refused"), true, false},
		{"gRPC deadline", status.Error(codes.DeadlineExceeded, "deadline"), true, false},
		{"request too large", rpctypes.ErrRequestTooLarge, false, true},
		{"no space", rpctypes.ErrNoSpace, false, true},
		{"lease not found", rpctypes.ErrLeaseNotFound, false, true},
		{"permission denied", rpctypes.ErrPermissionDenied, false, true},
		{"raw gRPC invalid argument", status.Error(codes.InvalidArgument, "bad"), false, true},
		{"wrapped gRPC not found", fmt.Errorf("x: %w", status.Error(codes.NotFound, "gone")), false, true},
		{"canceled", context.Canceled, false, false},
		{"gRPC canceled", status.Error(codes.Canceled, "canceled"), false, false},
		{"gRPC unknown", status.Error(codes.Unknown, "?"), false, false},
		{"plain error", errors.New("other"), false, false},
	} {
		if got := EtcdUnavailable(tc.err); got != tc.unavailable {
			t.Errorf("%s: EtcdUnavailable(%v) = %v, want %v", tc.name, tc.err, got, tc.unavailable)
		}
		if got := EtcdNotApplied(tc.err); got != tc.notApplied {
			t.Errorf("%s: EtcdNotApplied(%v) = %v, want %v", tc.name, tc.err, got, tc.notApplied)
		}
	}
}
