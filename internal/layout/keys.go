package layout

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
)

// Domain-wide etcd keys (DESIGN.md "etcd layout"). Epoch and deployment are
// never deleted; GC thins the clock's checkpoints.

// EpochKey holds the current epoch as 20 digits (EncodeNumber).
func (n Namespace) EpochKey() string { return n.Root() + "epoch" }

// RollbackKey is the domain's sticky "rollback detected" alarm: an acquire
// that finds a grant marker etcd does not know writes it (create-only),
// every grant transaction requires it absent, and only recover deletes it
// (DESIGN.md invariant 3). Workers need write access to it (DESIGN.md
// "Security").
func (n Namespace) RollbackKey() string { return n.Root() + "authority-rollback" }

// DeploymentKey holds the deployment id created by domain init.
func (n Namespace) DeploymentKey() string { return n.Root() + "deployment" }

// EpochRecordsPrefix ends with '/'; one durable record per epoch this etcd
// issued (by init or recover) lives under it. GC deletes an older-epoch
// object only when its epoch has a record here or a restored-pointer record
// (DESIGN.md invariant 9).
func (n Namespace) EpochRecordsPrefix() string { return n.Root() + "epochs/" }

// EpochRecord is the record of epoch (20 digits, EncodeNumber), written in
// the transaction that makes epoch the current one.
func (n Namespace) EpochRecord(epoch uint64) string {
	return n.EpochRecordsPrefix() + EncodeNumber(epoch)
}

// ClockHeadKey holds the head of the domain's revision clock (gc's clock):
// the clock time, the advancing collector's wall time and the witness lease
// (DESIGN.md "Ages come from one clock").
func (n Namespace) ClockHeadKey() string { return n.Root() + "clock/head" }

// ClockPointsPrefix ends with '/'; the clock's checkpoints live under it,
// sorted by clock time.
func (n Namespace) ClockPointsPrefix() string { return n.Root() + "clock/points/" }

// ClockPointKey is the checkpoint of clock time t (unix nanoseconds, 20
// digits; t must not be negative).
func (n Namespace) ClockPointKey(t int64) string {
	return n.ClockPointsPrefix() + EncodeNumber(uint64(t))
}

// Authority keys, per resource.

// AuthorityPrefix is "<root>authority/", the prefix of every resource's
// authority keys.
func (n Namespace) AuthorityPrefix() string { return n.Root() + "authority/" }

func (n Namespace) authority(res string) string { return n.AuthorityPrefix() + esc(res) + "/" }

// GenerationKey is the resource's durable generation counter (20 digits). It
// is never attached to a lease and never deleted (DESIGN.md invariant 3).
func (n Namespace) GenerationKey(res string) string { return n.authority(res) + "generation" }

// HolderKey is the resource's holder record, attached to the grant's lease.
func (n Namespace) HolderKey(res string) string { return n.authority(res) + "holder" }

// GrantsPrefix ends with '/'; the grant records of res live under it.
func (n Namespace) GrantsPrefix(res string) string { return n.authority(res) + "grants/" }

// GrantKey is the durable grant record of fence (generation) for res. Its
// value is GrantRecordValue(epoch, owner); the publish transaction compares it.
func (n Namespace) GrantKey(res string, fence uint64) string {
	return n.GrantsPrefix(res) + EncodeNumber(fence)
}

// RequestsPrefix ends with '/'; acquire request records of res live under it.
func (n Namespace) RequestsPrefix(res string) string { return n.authority(res) + "requests/" }

// RequestKey is the record of the grant an acquire request got.
func (n Namespace) RequestKey(res, requestID string) string {
	return n.RequestsPrefix(res) + esc(requestID)
}

// Publication keys, per resource.

// PointersPrefix ends with '/'; every resource's pointer lives under it.
func (n Namespace) PointersPrefix() string { return n.Root() + "pointers/" }

// PointerKey is the published pointer of res (EncodeVersioned value).
func (n Namespace) PointerKey(res string) string { return n.PointersPrefix() + esc(res) }

// PointerResource returns the resource whose pointer key is key: the rest
// of key after PointersPrefix, unescaped. Errors: ErrInvalidName when key
// is not under PointersPrefix or the rest is not a valid resource name
// (ValidateResource; reserved names included).
func (n Namespace) PointerResource(key string) (string, error) {
	rest, ok := strings.CutPrefix(key, n.PointersPrefix())
	if !ok {
		return "", fmt.Errorf("%w: key %.80q is not under %q", ErrInvalidName, key, n.PointersPrefix())
	}
	res, err := url.PathUnescape(rest)
	if err != nil {
		return "", fmt.Errorf("%w: pointer key %.80q: %w", ErrInvalidName, key, err)
	}
	if err := ValidateResource(res, false); err != nil {
		return "", fmt.Errorf("pointer key %.80q: %w", key, err)
	}
	return res, nil
}

// SealsPrefix ends with '/'; every resource's seal lives under it.
func (n Namespace) SealsPrefix() string { return n.Root() + "seals/" }

// SealKey is the seal of res: no version at or below it can be published.
func (n Namespace) SealKey(res string) string { return n.SealsPrefix() + esc(res) }

// OpsPrefix ends with '/'; the idempotency records of res live under it.
func (n Namespace) OpsPrefix(res string) string { return n.Root() + "ops/" + esc(res) + "/" }

// OpKey is the idempotency record of key for res.
func (n Namespace) OpKey(res, key string) string { return n.OpsPrefix(res) + esc(key) }

// HistoryPrefix ends with '/'; the published versions of res live under it,
// sorted by version.
func (n Namespace) HistoryPrefix(res string) string { return n.Root() + "history/" + esc(res) + "/" }

// HistoryKey is the history entry of version v of res.
func (n Namespace) HistoryKey(res string, v Version) string {
	return n.HistoryPrefix(res) + EncodeVersion(v)
}

// RestoredRecordsPrefix ends with '/'; every resource's restored-pointer
// records live under it (RestoredPrefix).
func (n Namespace) RestoredRecordsPrefix() string { return n.Root() + "restored/" }

// RestoredPrefix ends with '/'; `recover` records under it, per old epoch, the
// pointer a restore left for res, so GC quarantines old-epoch objects above it.
func (n Namespace) RestoredPrefix(res string) string {
	return n.RestoredRecordsPrefix() + esc(res) + "/"
}

// RestoredKey is the restored-pointer record of res for epoch.
func (n Namespace) RestoredKey(res string, epoch uint64) string {
	return n.RestoredPrefix(res) + EncodeNumber(epoch)
}

// Object keys (DESIGN.md "Object layout").

// metaDir is the reserved object directory of the domain; resource names
// cannot start with '_', so it never collides with a resource.
const metaDir = "_fencepub/"

// MetaPrefix is "<root>_fencepub/", the prefix of fencepub's own marker
// objects (ownership, epochs, grant high-water marks). GC never touches it.
func (n Namespace) MetaPrefix() string { return n.Root() + metaDir }

// OwnershipObject names the bucket ownership marker holding the deployment id.
func (n Namespace) OwnershipObject() string { return n.MetaPrefix() + "deployment" }

// EpochMarkersPrefix ends with '/'; one create-only marker per epoch lives
// under it, so an epoch's number survives an etcd restore.
func (n Namespace) EpochMarkersPrefix() string { return n.MetaPrefix() + "epochs/" }

// EpochMarker names the create-only marker object reserving epoch.
func (n Namespace) EpochMarker(epoch uint64) string {
	return n.EpochMarkersPrefix() + EncodeNumber(epoch)
}

// GrantMarkersPrefix ends with '/'; the create-only grant high-water marks of
// res live under it.
func (n Namespace) GrantMarkersPrefix(res string) string {
	return n.MetaPrefix() + "grants/" + esc(res) + "/"
}

// GrantMarker names the create-only object recording the grant of
// (epoch, generation) for res. Finding one from another request id means the
// authority's counter went back (DESIGN.md invariant 3).
func (n Namespace) GrantMarker(res string, epoch, generation uint64) string {
	return n.GrantMarkersPrefix(res) + EncodeNumber(epoch) + "-" + EncodeNumber(generation)
}

// SettledMarkersPrefix ends with '/'; the create-only markers of res's
// attempts that Resolve settled as never applied live under it, so that a
// recover from the bucket (etcd lost, its seals with it) never republishes
// one (DESIGN.md invariants 8 and 9).
func (n Namespace) SettledMarkersPrefix(res string) string {
	return n.MetaPrefix() + "settled/" + esc(res) + "/"
}

// SettledMarker names the create-only marker recording that the attempt at
// version v of res was never applied and never will be: a Resolve found it
// not applied and sealed it (or found its epoch superseded).
func (n Namespace) SettledMarker(res string, v Version) string {
	return n.SettledMarkersPrefix(res) + EncodeVersion(v)
}

// ObjectsPrefix ends with '/'; the immutable objects of res live under it.
func (n Namespace) ObjectsPrefix(res string) string { return n.Root() + esc(res) + "/" }

// NonceLen is the length of an object key's nonce: 16 lowercase hex digits.
const NonceLen = 16

// NewNonce returns a fresh random nonce for one publish attempt; its retries
// reuse it, so a 412 on the same key is certainly the attempt's own object.
func NewNonce() string {
	var b [NonceLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("layout: crypto/rand failed: %v", err)) // never happens on Linux
	}
	return hex.EncodeToString(b[:])
}

// ObjectKey is "<root><resource>/<epoch>-<fence>-<seq>-<nonce>", so a listing
// is sorted by version and two writers never collide.
func (n Namespace) ObjectKey(res string, v Version, nonce string) string {
	return n.ObjectsPrefix(res) + EncodeVersion(v) + "-" + nonce
}

// ParseObjectKey splits an object key of res, produced by ObjectKey, into its
// version and nonce. ok is false for any key that is not exactly of that form
// (a foreign key, which GC never deletes).
func (n Namespace) ParseObjectKey(res, key string) (v Version, nonce string, ok bool) {
	rest, found := strings.CutPrefix(key, n.ObjectsPrefix(res))
	if !found {
		return Version{}, "", false
	}
	return parseVersionNonce(rest)
}

// versionNonceLen is the length of an object key's last part,
// "<version>-<nonce>".
const versionNonceLen = VersionWidth + 1 + NonceLen

// parseVersionNonce parses an object key's last part, "<version>-<nonce>".
func parseVersionNonce(rest string) (v Version, nonce string, ok bool) {
	if len(rest) != versionNonceLen || rest[VersionWidth] != '-' {
		return Version{}, "", false
	}
	v, err := DecodeVersion(rest[:VersionWidth])
	if err != nil {
		return Version{}, "", false
	}
	nonce = rest[VersionWidth+1:]
	for i := 0; i < len(nonce); i++ {
		if c := nonce[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return Version{}, "", false
		}
	}
	return v, nonce, true
}

// SiblingVersionKey reports whether key is the own key (ObjectKey's form)
// of a version of the same resource as own, itself such a key: the same
// resource prefix, then a version and a nonce. It needs no Namespace, so
// a manifest can check the keys it names against its own.
func SiblingVersionKey(own, key string) bool {
	if len(key) != len(own) || len(own) <= versionNonceLen {
		return false
	}
	cut := len(own) - versionNonceLen
	if key[:cut] != own[:cut] {
		return false
	}
	_, _, ok := parseVersionNonce(own[cut:])
	if ok {
		_, _, ok = parseVersionNonce(key[cut:])
	}
	return ok
}

// CreateOnlyProbeObject names the object the create-only probe writes
// (objstore.ProbeCreateOnly): "<prefix>/_fencepub/probe/create-only",
// beside the domains of the prefix rather than in one (no domain may be
// named _fencepub), so probing a bucket never makes it look used to a
// domain's first init.
func (n Namespace) CreateOnlyProbeObject() string {
	return n.Prefix + "/" + metaDir + "probe/create-only"
}

// VerifyKey holds the time (RFC 3339, UTC) of the last `fencepub verify
// --all` that found nothing; the GC daemon exports it. It sits in the
// domain's clock/ subtree, with the other times GC reads.
func (n Namespace) VerifyKey() string { return n.Root() + "clock/last-clean-verify" }
