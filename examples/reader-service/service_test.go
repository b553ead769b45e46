package main

import "testing"

// The service itself is tested from outside, as a user runs it, by
// harness/exampletest (real etcd and MinIO), so this example imports only
// public packages and can be copied into another module.

// --resource adds names, whether repeated or comma-separated.
func TestResourceListFlag(t *testing.T) {
	var l resourceList
	for _, v := range []string{"a", "b,c", " d , ", ""} {
		if err := l.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	if got := l.String(); got != "a,b,c,d" {
		t.Fatalf("resources %q; want a,b,c,d", got)
	}
}
