// Package layout is fencepub's single definition of where things live: etcd
// keys, object keys, the fixed-width encodings compared inside transactions,
// and the validation of every name that becomes a key component
// (DESIGN.md "etcd layout" and "Object layout"). authority, publisher, reader
// and gc all build keys here and nowhere else.
//
// Every key component is escaped by one rule (url.PathEscape), and every
// prefix used in a range read or delete ends with '/', so resource "logs"
// never matches "logs2" or "logs/x".
package layout

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/fencepub/fencepub/internal/errkind"
)

// Name limits, in bytes.
const (
	MaxResourceLen = 200
	MaxOwnerLen    = 128
	MaxKeyLen      = 256 // idempotency keys and request ids
)

// ErrInvalidName is returned (wrapped, naming the field) for a resource,
// owner, domain, prefix, request id or idempotency key that cannot be used.
// It is a fencepub.ErrInvalid (errkind.ErrInvalid): bad input.
var ErrInvalidName = errkind.New("layout: invalid name", errkind.ErrInvalid)

func nameErr(field, value, why string) error {
	return fmt.Errorf("%w: %s %.60q %s", ErrInvalidName, field, value, why)
}

// isNameByte reports whether c may appear in a resource, domain or owner:
// ASCII letters, digits, '.', '_', '-'; owners may also use ':' and '@'.
func isNameByte(c byte, owner bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		return true
	case owner && (c == ':' || c == '@'):
		return true
	}
	return false
}

func checkName(field, s string, maxLen int, owner bool) error {
	if s == "" {
		return nameErr(field, s, "is empty")
	}
	if len(s) > maxLen {
		return nameErr(field, s, fmt.Sprintf("is %d bytes; the limit is %d", len(s), maxLen))
	}
	if s == "." || s == ".." {
		return nameErr(field, s, "is not allowed")
	}
	for i := 0; i < len(s); i++ {
		if !isNameByte(s[i], owner) {
			allowed := "letters, digits, '.', '_' and '-'"
			if owner {
				allowed = "letters, digits, '.', '_', '-', ':' and '@'"
			}
			return nameErr(field, s, fmt.Sprintf("has byte %q at %d; use %s", s[i], i, allowed))
		}
	}
	return nil
}

// reservedKey is the context key of WithReservedNames.
type reservedKey struct{}

// WithReservedNames returns a child of ctx under which the authority
// accepts reserved resource names (starting with '_'): only fencepub's own
// components (the GC's lease) use it, so a user of the public API cannot
// take a reserved lease.
func WithReservedNames(ctx context.Context) context.Context {
	return context.WithValue(ctx, reservedKey{}, true)
}

// ReservedNames reports whether ctx came from WithReservedNames.
func ReservedNames(ctx context.Context) bool {
	ok, _ := ctx.Value(reservedKey{}).(bool)
	return ok
}

// ValidateResource checks a resource name: 1–200 bytes of letters, digits,
// '.', '_' and '-'. Names starting with '_' are reserved for fencepub itself
// (the GC's own lease); pass reserved=true only for those.
func ValidateResource(name string, reserved bool) error {
	if err := checkName("resource", name, MaxResourceLen, false); err != nil {
		return err
	}
	if strings.HasPrefix(name, "_") != reserved {
		if reserved {
			return nameErr("resource", name, "must start with '_' (reserved names only)")
		}
		return nameErr("resource", name, "starts with '_', which is reserved for fencepub")
	}
	return nil
}

// ValidateOwner checks an owner id: 1–128 bytes of letters, digits, '.', '_',
// '-', ':' and '@'.
func ValidateOwner(owner string) error { return checkName("owner", owner, MaxOwnerLen, true) }

// ValidateKey checks an idempotency key or request id: 1–256 bytes of valid
// UTF-8 with no '/' and no control bytes (DESIGN.md invariant 5).
func ValidateKey(field, key string) error {
	switch {
	case key == "":
		return nameErr(field, key, "is empty")
	case len(key) > MaxKeyLen:
		return nameErr(field, key, fmt.Sprintf("is %d bytes; the limit is %d", len(key), MaxKeyLen))
	case !utf8.ValidString(key):
		return nameErr(field, key, "is not valid UTF-8")
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f {
			return nameErr(field, key, fmt.Sprintf("has control byte 0x%02x at %d", c, i))
		} else if c == '/' {
			return nameErr(field, key, "contains '/'")
		}
	}
	return nil
}

// Namespace locates one fencepub domain: every etcd key lives under
// "<Prefix>/<Domain>/" and every object key too, but the create-only probe
// beside it (CreateOnlyProbeObject). The zero value is not valid; use
// NewNamespace.
type Namespace struct {
	Prefix string
	Domain string
}

// subtrees are the first key components under a domain's root that its
// range reads and deletes cover (authority/, pointers/, seals/, ops/,
// history/, restored/, epochs/, clock/ in etcd; _fencepub/ in the bucket).
// Neither a prefix nor a domain may be one of them, so a root never reads
// as a key subtree; for the domain, "_fencepub" is also where the
// create-only probe sits beside the roots of a prefix.
var subtrees = map[string]bool{
	"authority": true, "pointers": true, "seals": true, "ops": true, "history": true, "restored": true,
	"epochs": true, "clock": true, strings.TrimSuffix(metaDir, "/"): true,
}

// NewNamespace validates prefix and domain, each one name (letters,
// digits, '.', '_', '-'; no '/'), neither naming one of a domain's key
// subtrees ("authority", "pointers", "seals", "ops", "history",
// "restored", "epochs", "clock", "_fencepub"), and returns the Namespace.
//
// So every root is exactly two components, "<prefix>/<domain>/", and no
// two namespaces nest: their roots are equal or neither is a prefix of the
// other, and every key of a namespace — etcd key, object key, marker —
// starts with its root, except the create-only probe, which sits beside
// the roots under "<prefix>/_fencepub/" where no root can be (DESIGN.md
// "etcd layout", "Object layout"). A prefix of several components was
// refused for that reason: prefix "results/prod" put its domains' keys,
// probe included, inside domain "prod" of prefix "results", whose init then
// found another history there (ErrForeignHistory) for good. Errors:
// ErrInvalidName naming the field.
func NewNamespace(prefix, domain string) (Namespace, error) {
	if strings.Contains(prefix, "/") {
		return Namespace{}, nameErr("namespace.prefix", prefix,
			"has several components; it must be one name, so that no domain's keys can lie inside another domain's")
	}
	for _, f := range []struct{ field, name string }{{"namespace.prefix", prefix}, {"namespace.domain", domain}} {
		if err := checkName(f.field, f.name, MaxResourceLen, false); err != nil {
			return Namespace{}, err
		}
		if subtrees[f.name] {
			return Namespace{}, nameErr(f.field, f.name, "is reserved: it names a key subtree of a domain")
		}
	}
	return Namespace{Prefix: prefix, Domain: domain}, nil
}

func esc(s string) string { return url.PathEscape(s) }

// Root is "<prefix>/<domain>/", the prefix of every key of the domain.
func (n Namespace) Root() string { return n.Prefix + "/" + esc(n.Domain) + "/" }
