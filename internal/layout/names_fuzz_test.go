package layout

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

// FuzzNames feeds hostile names (traversal, separators, NUL, unicode
// confusables, 10 KB) to every name check: a refused name fails with
// ErrInvalidName naming its field; an accepted one builds keys that stay
// in their subtree of the domain and decode back to the name.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"", ".", "..", "../x", "a/b", "/", "a\x00b", "k\n", " k", "p\u0430yroll", "a\uff0fb",
		"a\u200db", "\u202egnp.exe", "\xff\xfe", strings.Repeat("x", 10<<10), "_gc", "ok-1.v2", "user@host:1", "%2e%2e", "a%2Fb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		refused := func(field string, err error) bool {
			t.Helper()
			if err == nil {
				return false
			}
			if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), field) {
				t.Fatalf("%s %q: %v; want ErrInvalidName naming %s", field, s, err, field)
			}
			if len(err.Error()) > 400 {
				t.Fatalf("%s: the error quotes %d bytes of the name", field, len(err.Error()))
			}
			return true
		}
		ns, err := NewNamespace("p", "d")
		if err != nil {
			t.Fatal(err)
		}
		if !refused("resource", ValidateResource(s, false)) {
			for _, k := range []struct{ key, prefix string }{
				{ns.PointerKey(s), ns.PointersPrefix()}, {ns.SealKey(s), ns.Root() + "seals/"},
				{ns.HistoryPrefix(s), ns.Root() + "history/"}, {ns.ObjectsPrefix(s), ns.Root()},
			} {
				rest, ok := strings.CutPrefix(k.key, k.prefix)
				if !ok {
					t.Fatalf("resource %q: key %q is outside %q", s, k.key, k.prefix)
				}
				seg, _, _ := strings.Cut(rest, "/")
				if name, err := url.PathUnescape(seg); err != nil || name != s {
					t.Fatalf("resource %q: key %q decodes to %q, %v", s, k.key, name, err)
				}
			}
		}
		refused("owner", ValidateOwner(s))
		if !refused("idempotency key", ValidateKey("idempotency key", s)) {
			rest, _ := strings.CutPrefix(ns.OpKey("r", s), ns.OpsPrefix("r"))
			if strings.Contains(rest, "/") {
				t.Fatalf("idempotency key %q: op key %q has another level", s, ns.OpKey("r", s))
			}
		}
		if _, err := NewNamespace("p", s); !refused("namespace.domain", err) && (s == "." || s == ".." || strings.ContainsAny(s, "/\x00")) {
			t.Fatalf("domain %q accepted", s)
		}
		if _, err := NewNamespace(s, "d"); err != nil {
			refused("namespace.prefix", err)
		}
	})
}
