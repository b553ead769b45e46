package wallclock

import (
	"testing"
	"time"
)

type fakeConfig struct {
	name string
	now  func() time.Time
}

// TestWith sets the clock of a registered config type, leaves its other
// fields alone, and panics for a type nobody registered.
func TestWith(t *testing.T) {
	Register(func(c *fakeConfig, now func() time.Time) { c.now = now })
	at := time.Unix(42, 0)
	c := With(fakeConfig{name: "a"}, func() time.Time { return at })
	if c.name != "a" || c.now == nil || !c.now().Equal(at) {
		t.Fatalf("With: %+v", c)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("With of an unregistered type did not panic")
		}
	}()
	With(struct{}{}, time.Now)
}
