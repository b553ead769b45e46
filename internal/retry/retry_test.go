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

func TestEtcdUnavailable(t *testing.T) {
	for _, err := range []error{
		rpctypes.ErrLeaderChanged, rpctypes.ErrNoLeader, fmt.Errorf("x: %w", rpctypes.ErrTimeout),
		context.DeadlineExceeded, status.Error(codes.Unavailable, "connection refused"),
		status.Error(codes.DeadlineExceeded, "deadline"),
	} {
		if !EtcdUnavailable(err) {
			t.Errorf("EtcdUnavailable(%v) = false, want true", err)
		}
	}
	for _, err := range []error{
		nil, rpctypes.ErrLeaseNotFound, rpctypes.ErrPermissionDenied, context.Canceled,
		status.Error(codes.InvalidArgument, "bad"), errors.New("other"),
	} {
		if EtcdUnavailable(err) {
			t.Errorf("EtcdUnavailable(%v) = true, want false", err)
		}
	}
}
