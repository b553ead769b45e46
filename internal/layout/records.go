package layout

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrCorruptRecord is returned (wrapped, naming the record) when a value
// read from etcd does not decode. Decoders never panic on any input.
var ErrCorruptRecord = errors.New("layout: corrupt record")

// GrantRecordValue is the exact value of a grant record grants/<fence>: the
// epoch (20 digits), one space, the owner. The publish transaction compares
// the stored value with this, so a fence of another resource, a fence never
// granted, a grant of another owner or of an older epoch all fail the compare
// (DESIGN.md invariant 2). Owners contain no spaces (ValidateOwner).
func GrantRecordValue(epoch uint64, owner string) string {
	return EncodeNumber(epoch) + " " + owner
}

// ParseGrantRecord splits a grant record value into epoch and owner.
func ParseGrantRecord(value string) (epoch uint64, owner string, err error) {
	num, owner, ok := strings.Cut(value, " ")
	if !ok {
		return 0, "", fmt.Errorf("%w: grant record %.80q", ErrCorruptRecord, value)
	}
	if epoch, err = DecodeNumber(num); err != nil {
		return 0, "", fmt.Errorf("%w: grant record %.80q: %v", ErrCorruptRecord, value, err)
	}
	return epoch, owner, nil
}

// Object names one immutable object in the store.
type Object struct {
	Bucket string `json:"bucket"`
	Key    string `json:"key"`
	SHA256 string `json:"sha256"`         // hex sha256 of the body
	ETag   string `json:"etag,omitempty"` // the store's ETag, for If-Match reads
	Size   int64  `json:"size"`           // bytes
}

// Pointer is the published state of a resource: the version and the object
// it names. Its etcd value is the encoded version, '|', then the compact
// form of the rest (EncodePointer), so a byte-wise compare against an
// encoded version orders by version. History entries hold the same value.
// The zero Pointer (no object) is the state a resource init writes.
type Pointer struct {
	Version        Version `json:"version"`
	Object         Object  `json:"object"`
	IdempotencyKey string  `json:"idempotency_key,omitempty"`
	Digest         string  `json:"digest,omitempty"` // request digest, hex sha256
	ContentType    string  `json:"content_type,omitempty"`
	Owner          string  `json:"owner,omitempty"`
	// CommittedAt is the publisher's clock at prepare: informative only.
	// Retention measures supersession on GC's domain clock instead.
	CommittedAt time.Time `json:"committed_at,omitzero"`
	// Kind is KindDataset for a dataset version, whose Object is its
	// manifest index (DESIGN.md "Dataset versions"), with Files files of
	// Bytes bytes in all; "" for a single object (Files and Bytes zero).
	// Pointers written before datasets existed read as single objects.
	Kind  string `json:"kind,omitempty"`
	Files int64  `json:"files,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
}

// IsDataset reports whether p names a dataset version.
func (p Pointer) IsDataset() bool { return p.Kind == KindDataset }

// SealReasonDecommissioned is the Seal.Reason of a resource retired by
// `fencepub resource delete` (operator.Decommission): its seal is at
// (epoch, generation, MaxNumber) and GC collects its objects, the published
// one included, after the reader grace.
const SealReasonDecommissioned = "decommissioned"

// Seal is the highest version that can no longer be published, besides the
// pointer: it only ever rises (GC's abandon step, Resolve, decommission).
type Seal struct {
	Version Version `json:"version"`
	Reason  string  `json:"reason,omitempty"`
	// At is the writer's clock: informative only. A decommission's reader
	// grace is measured from the seal's ModRevision on GC's domain clock.
	At time.Time `json:"at,omitzero"`
	// Retired is the version the last decommission raised the seal to (zero:
	// never decommissioned), kept by every later raise (RaisedTo). Every op
	// record at or below it is of a retired life of the resource: GC prunes
	// it, so a re-created resource starts with no idempotency keys (DESIGN.md
	// "etcd layout"). Seals written without it (before it existed) read as
	// never decommissioned.
	Retired Version `json:"retired,omitzero"`
}

// OpRecord is the idempotency record of one applied operation: the request
// digest and the result it got (DESIGN.md invariant 5), kept for the op
// retention, longer than most history. It names the object by key only:
// the rest of the object is the history entry's while it is retained
// (Object). Its age is the record's ModRevision on GC's domain clock
// (DESIGN.md "Ages come from one clock").
type OpRecord struct {
	Digest    string
	Version   Version
	ObjectKey string
	Owner     string
}

// Object returns the object r names: ptr's when ptr is at r's version
// (every field), else one with the key only. ptr may be nil.
func (r OpRecord) Object(ptr *Pointer) Object {
	if ptr != nil && ptr.Version == r.Version && ptr.Object.Key == r.ObjectKey {
		return ptr.Object
	}
	return Object{Key: r.ObjectKey}
}

// opJSON is the JSON form op records had before the compact form; it still
// decodes (DecodeOp).
type opJSON struct {
	Digest  string  `json:"digest"`
	Version Version `json:"version"`
	Object  Object  `json:"object"`
	Owner   string  `json:"owner,omitempty"`
}

// EncodeVersioned returns EncodeVersion(v) + "|" + JSON(payload): the value
// form of seals (and of pointers and history entries before the compact
// form).
func EncodeVersioned(v Version, payload any) (string, error) {
	b, err := json.Marshal(payload)
	if err != nil {
		return "", err
	}
	return EncodeVersion(v) + "|" + string(b), nil
}

// DecodeVersioned parses a value written by EncodeVersioned into out and
// returns the version at its start. It returns ErrCorruptRecord (wrapped,
// naming what) when the prefix or JSON is malformed or the two versions
// disagree.
func DecodeVersioned(what, value string, out any, versionOf func() Version) (Version, error) {
	v, err := versionPrefix(what, value)
	if err != nil {
		return Version{}, err
	}
	if err := json.Unmarshal([]byte(value[VersionWidth+1:]), out); err != nil {
		return Version{}, fmt.Errorf("%w: %s JSON: %v", ErrCorruptRecord, what, err)
	}
	if versionOf() != v {
		return Version{}, fmt.Errorf("%w: %s prefix %s disagrees with body %s", ErrCorruptRecord, what, v, versionOf())
	}
	return v, nil
}

// versionPrefix parses the "<encoded version>|" start of a pointer, seal
// or history value. Errors: ErrCorruptRecord.
func versionPrefix(what, value string) (Version, error) {
	v, err := DecodeVersion(value)
	if err != nil || len(value) < VersionWidth+1 || value[VersionWidth] != '|' {
		return Version{}, fmt.Errorf("%w: %s value %.80q", ErrCorruptRecord, what, value)
	}
	return v, nil
}

// EncodePointer returns the etcd value of p (or of its history entry):
// EncodeVersion(p.Version), '|', then the compact form of the other fields.
// The error is always nil; it is kept for the callers' symmetry with the
// other encoders.
func EncodePointer(p Pointer) (string, error) {
	w := compactWriter{b: make([]byte, 0, 256)}
	w.b = append(append(append(w.b, EncodeVersion(p.Version)...), '|'), compactFormat)
	w.appendFields(p, "")
	return string(w.b), nil
}

// DecodePointer parses a pointer (or history) value in the compact form or
// the JSON form before it (detected by the byte after '|'). Errors:
// ErrCorruptRecord, also for a negative object size.
func DecodePointer(value []byte) (Pointer, error) {
	if len(value) > VersionWidth+1 && value[VersionWidth+1] == compactFormat {
		v, err := versionPrefix("pointer", string(value))
		if err != nil {
			return Pointer{}, err
		}
		p := Pointer{Version: v}
		r := compactReader{b: value[VersionWidth+2:]}
		if err := r.fields(&p, fAll, ""); err != nil {
			return Pointer{}, fmt.Errorf("%w: pointer: %v", ErrCorruptRecord, err)
		}
		return p, nil
	}
	var p Pointer
	if _, err := DecodeVersioned("pointer", string(value), &p, func() Version { return p.Version }); err != nil {
		return Pointer{}, err
	}
	if p.Object.Size < 0 || p.Files < 0 || p.Bytes < 0 || (p.Kind != "" && p.Kind != KindDataset) {
		return Pointer{}, fmt.Errorf("%w: pointer object size %d, kind %q, files %d, bytes %d", ErrCorruptRecord, p.Object.Size, p.Kind, p.Files, p.Bytes)
	}
	return p, nil
}

// EncodeSeal returns the etcd value of s.
func EncodeSeal(s Seal) (string, error) { return EncodeVersioned(s.Version, s) }

// DecodeSeal parses a seal value. Errors: ErrCorruptRecord.
func DecodeSeal(value []byte) (Seal, error) {
	var s Seal
	_, err := DecodeVersioned("seal", string(value), &s, func() Version { return s.Version })
	return s, err
}

// opObjectsPrefix returns ObjectsPrefix(res) of the namespace and resource
// of an op record's etcd key (Namespace.OpKey), or false when key is not of
// that form. Escaped components hold no '/', so the last two are the
// resource and the idempotency key.
func opObjectsPrefix(key string) (string, bool) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", false
	}
	j := strings.LastIndexByte(key[:i], '/')
	root, ok := strings.CutSuffix(key[:j+1], "ops/")
	if !ok || j+1 == i || !strings.HasSuffix(root, "/") {
		return "", false
	}
	return root + key[j+1:i+1], true
}

// EncodeOp returns the etcd value of op record r stored at key (an OpKey)
// in the compact form: compactFormat, the version as three uvarints, then
// the digest, object key and owner as the compact fields. An object key
// under the objects prefix of key's resource keeps only its nonce. The
// error is always nil.
func EncodeOp(key string, r OpRecord) (string, error) {
	w := compactWriter{b: make([]byte, 0, 64)}
	w.b = append(w.b, compactFormat)
	w.uvarint(r.Version.Epoch)
	w.uvarint(r.Version.Fence)
	w.uvarint(r.Version.Seq)
	known, _ := opObjectsPrefix(key)
	w.appendFields(Pointer{Version: r.Version, Object: Object{Key: r.ObjectKey}, Digest: r.Digest, Owner: r.Owner}, known)
	return string(w.b), nil
}

// DecodeOp parses the op record value stored at key in the compact form
// or the JSON form before it (detected by the first byte). Errors:
// ErrCorruptRecord when it is malformed, the digest is missing, a version
// number exceeds MaxNumber, (JSON form) the object size is negative, or it
// names its object by nonce under a key that is no OpKey.
func DecodeOp(key, value []byte) (OpRecord, error) {
	var r OpRecord
	if len(value) > 0 && value[0] == compactFormat {
		rd := compactReader{b: value[1:]}
		p := Pointer{Version: rd.version()}
		known, _ := opObjectsPrefix(string(key))
		if err := rd.fields(&p, opFields, known); err != nil {
			return OpRecord{}, fmt.Errorf("%w: op record: %v", ErrCorruptRecord, err)
		}
		r = OpRecord{Digest: p.Digest, Version: p.Version, ObjectKey: p.Object.Key, Owner: p.Owner}
	} else {
		var j opJSON
		if err := json.Unmarshal(value, &j); err != nil {
			return OpRecord{}, fmt.Errorf("%w: op record: %v", ErrCorruptRecord, err)
		}
		if j.Object.Size < 0 {
			return OpRecord{}, fmt.Errorf("%w: op record object size %d", ErrCorruptRecord, j.Object.Size)
		}
		r = OpRecord{Digest: j.Digest, Version: j.Version, ObjectKey: j.Object.Key, Owner: j.Owner}
	}
	if r.Digest == "" {
		return OpRecord{}, fmt.Errorf("%w: op record without digest", ErrCorruptRecord)
	}
	if err := r.Version.Validate(); err != nil {
		return OpRecord{}, fmt.Errorf("%w: op record: %v", ErrCorruptRecord, err)
	}
	return r, nil
}
