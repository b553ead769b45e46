package faultstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/faultstore"
	"github.com/fencepub/fencepub/internal/objstore/memstore"
	"github.com/fencepub/fencepub/storetest"
)

// With no fault queued the wrapper is the store it wraps.
func TestAcceptance(t *testing.T) {
	storetest.AcceptanceTest(t, func(*testing.T) objstore.Store { return faultstore.New(memstore.New("fencepub", nil)) })
}

func TestFaultsInOrder(t *testing.T) {
	mem := memstore.New("fencepub", nil)
	fs := faultstore.New(mem)
	ctx := context.Background()
	injected := fmt.Errorf("%w: injected", objstore.ErrUnavailable)
	put := func(key string) error {
		_, err := fs.PutCreateOnly(ctx, key, strings.NewReader("x"), 1, objstore.PutOptions{})
		return err
	}
	fs.Inject(faultstore.PutCreateOnly, 1, faultstore.Fault{Before: injected})
	fs.Inject(faultstore.PutCreateOnly, 1, faultstore.Fault{After: injected})
	if err := put("before"); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("Before: %v", err)
	}
	if _, err := mem.Stat(ctx, "before"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a call failed Before reached the store: %v", err)
	}
	if err := put("after"); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("After: %v", err)
	}
	if _, err := mem.Stat(ctx, "after"); err != nil {
		t.Fatalf("a call failed After was not applied: %v", err)
	}
	if err := put("clean"); err != nil {
		t.Fatalf("third call, no fault left: %v", err)
	}
	if n := fs.Calls(faultstore.PutCreateOnly); n != 3 {
		t.Fatalf("Calls = %d, want 3", n)
	}

	fs.Inject(faultstore.List, 1, faultstore.Fault{After: injected})
	var keys []string
	var listErr error
	for o, err := range fs.List(ctx, "", objstore.ListOptions{}) {
		if err != nil {
			listErr = err
			break
		}
		keys = append(keys, o.Key)
	}
	if len(keys) != 2 || !errors.Is(listErr, objstore.ErrUnavailable) {
		t.Fatalf("List with After: %q, %v; want the listing then the error", keys, listErr)
	}

	fs.Inject(faultstore.Stat, 1, faultstore.Fault{Delay: time.Hour})
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := fs.Stat(dctx, "after"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a delay past the deadline: %v, want DeadlineExceeded", err)
	}
}
