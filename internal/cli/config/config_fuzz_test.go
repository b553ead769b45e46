package config

import (
	"errors"
	"strings"
	"testing"
)

// FuzzConfigValue sets one configuration key (chosen by k, as the
// environment or a file would) to a hostile string and loads: the load
// either succeeds or fails with ErrInvalid naming a configuration key, and
// a secret's value never appears in the error. `make fuzz` runs it for
// FUZZTIME inputs; the seeds are below plus testdata/fuzz/FuzzConfigValue.
func FuzzConfigValue(f *testing.F) {
	for i := range Keys {
		for _, s := range []string{"", "..", "../../etc/passwd", "a/b", "\x00", "p\u0430yroll", strings.Repeat("x", 10<<10),
			"-1s", "1e400", "99999999999999999999", "http://", "https://h:1/p", "true", "[]", "{}", "secret-value-4711"} {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, k uint8, value string) {
		key := Keys[int(k)%len(Keys)]
		v := NewViper()
		v.Set("etcd.endpoints", []string{"http://127.0.0.1:2379"})
		v.Set("s3.endpoint", "127.0.0.1:9000")
		v.Set("s3.bucket", "results")
		v.Set(key, value)
		c, err := Load(v)
		if err == nil {
			err = c.GC.Validate()
		}
		if err == nil {
			return
		}
		msg := err.Error()
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("%s = %q: %v is not ErrInvalid", key, value, err)
		}
		named := false
		for _, other := range Keys {
			named = named || strings.Contains(msg, other)
		}
		if !named {
			t.Fatalf("%s = %q: %q names no configuration key", key, value, msg)
		}
		if SecretKeys[key] && len(value) >= 4 && strings.Contains(msg, value) {
			t.Fatalf("%s: the error shows the secret: %q", key, msg)
		}
	})
}
