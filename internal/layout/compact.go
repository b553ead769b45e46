package layout

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"strings"
	"time"
)

// The compact record form (DESIGN.md "etcd layout": record encodings). A
// record body is compactFormat, then a uvarint of field flags, then each
// present field in flag order, with no names: strings as a uvarint length
// and the bytes, hex digests and ETags as raw bytes, the size as a uvarint
// and a time as a varint of Unix seconds and a uvarint of nanoseconds. An
// object key of the form ObjectKey writes keeps only the part before the
// version and the nonce's 8 bytes, or the nonce alone where the record's
// own etcd key gives the part before (op records). The JSON form written
// before it starts with '{' and still decodes.
const compactFormat byte = 0x01

// Field flags of the compact form, in the order fields are written.
const (
	fBucket      uint64 = 1 << iota // string
	fKey                            // string, verbatim
	fKeyNonce                       // string before the version, then the nonce's 8 bytes
	fNonce                          // the nonce's 8 bytes; the part before the version is known
	fSHA256                         // 32 raw bytes of a 64-digit lowercase hex sha256
	fSHA256Text                     // string
	fETag                           // 16 raw bytes of a 32-digit lowercase hex ETag
	fETagText                       // string
	fSize                           // uvarint
	fIdemKey                        // string
	fDigest                         // 32 raw bytes
	fDigestText                     // string
	fContentType                    // string
	fOwner                          // string
	fCommitted                      // varint seconds, uvarint nanoseconds
	fDataset                        // Kind dataset: uvarint files, uvarint bytes
	fAll         = fDataset<<1 - 1
)

// opFields are the flags an op record may carry: the digest, the object
// key and the owner (the rest is the history entry's).
const opFields = fKey | fKeyNonce | fNonce | fDigest | fDigestText | fOwner

// rawHex returns the bytes of s when s is exactly 2n lowercase hex digits,
// the form hex.EncodeToString gives back.
func rawHex(s string, n int) ([]byte, bool) {
	if len(s) != 2*n || strings.ToLower(s) != s {
		return nil, false
	}
	b, err := hex.DecodeString(s)
	return b, err == nil
}

// keyNonce splits an object key of version v as ObjectKey writes it into
// the part before the version and the nonce's bytes.
func keyNonce(key string, v Version) (string, []byte, bool) {
	cut := len(key) - (VersionWidth + 1 + NonceLen)
	if cut < 0 || key[cut:cut+VersionWidth] != EncodeVersion(v) || key[cut+VersionWidth] != '-' {
		return "", nil, false
	}
	nonce, ok := rawHex(key[cut+VersionWidth+1:], NonceLen/2)
	return key[:cut], nonce, ok
}

// compactWriter appends a compact record body.
type compactWriter struct{ b []byte }

func (w *compactWriter) uvarint(n uint64) { w.b = binary.AppendUvarint(w.b, n) }

func (w *compactWriter) str(s string) {
	w.uvarint(uint64(len(s)))
	w.b = append(w.b, s...)
}

// hexOrText picks the raw flag when s is 2n lowercase hex digits, the text
// flag when it is another non-empty string; it returns 0 for "".
func hexOrText(s string, n int, raw, text uint64) (uint64, []byte) {
	if s == "" {
		return 0, nil
	}
	if b, ok := rawHex(s, n); ok {
		return raw, b
	}
	return text, nil
}

// appendFields appends the flags and fields of p, whose version is
// written elsewhere, to w. known is the part of an object key before the
// version that the decoder knows ("" for none).
func (w *compactWriter) appendFields(p Pointer, known string) {
	var flags uint64
	set := func(f uint64, present bool) {
		if present {
			flags |= f
		}
	}
	prefix, nonce, derived := keyNonce(p.Object.Key, p.Version)
	set(fBucket, p.Object.Bucket != "")
	set(fNonce, derived && known != "" && prefix == known)
	set(fKeyNonce, derived && flags&fNonce == 0)
	set(fKey, !derived && p.Object.Key != "")
	shaFlag, sha := hexOrText(p.Object.SHA256, 32, fSHA256, fSHA256Text)
	etagFlag, etag := hexOrText(p.Object.ETag, 16, fETag, fETagText)
	digestFlag, digest := hexOrText(p.Digest, 32, fDigest, fDigestText)
	flags |= shaFlag | etagFlag | digestFlag
	set(fSize, p.Object.Size != 0)
	set(fIdemKey, p.IdempotencyKey != "")
	set(fContentType, p.ContentType != "")
	set(fOwner, p.Owner != "")
	set(fCommitted, !p.CommittedAt.IsZero())
	set(fDataset, p.Kind == KindDataset)
	w.uvarint(flags)
	for f := uint64(1); f <= fAll; f <<= 1 {
		switch flags & f {
		case fBucket:
			w.str(p.Object.Bucket)
		case fKey:
			w.str(p.Object.Key)
		case fKeyNonce:
			w.str(prefix)
			w.b = append(w.b, nonce...)
		case fNonce:
			w.b = append(w.b, nonce...)
		case fSHA256:
			w.b = append(w.b, sha...)
		case fSHA256Text:
			w.str(p.Object.SHA256)
		case fETag:
			w.b = append(w.b, etag...)
		case fETagText:
			w.str(p.Object.ETag)
		case fSize:
			w.uvarint(uint64(p.Object.Size))
		case fIdemKey:
			w.str(p.IdempotencyKey)
		case fDigest:
			w.b = append(w.b, digest...)
		case fDigestText:
			w.str(p.Digest)
		case fContentType:
			w.str(p.ContentType)
		case fOwner:
			w.str(p.Owner)
		case fCommitted:
			w.b = binary.AppendVarint(w.b, p.CommittedAt.Unix())
			w.uvarint(uint64(p.CommittedAt.Nanosecond()))
		case fDataset:
			w.uvarint(uint64(p.Files))
			w.uvarint(uint64(p.Bytes))
		}
	}
}

// compactReader consumes a compact record body; the first malformed read
// sets err and every later read returns zero values.
type compactReader struct {
	b   []byte
	err error
}

func (r *compactReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *compactReader) uvarint() uint64 { return readNumber(r, "uvarint", binary.Uvarint) }

func (r *compactReader) varint() int64 { return readNumber(r, "varint", binary.Varint) }

// readNumber reads one number of r with decode (binary.Uvarint or
// binary.Varint); what names its encoding in the error.
func readNumber[T uint64 | int64](r *compactReader, what string, decode func([]byte) (T, int)) T {
	if r.err != nil {
		return 0
	}
	n, k := decode(r.b)
	if k <= 0 {
		r.fail("bad %s", what)
		return 0
	}
	r.b = r.b[k:]
	return n
}

func (r *compactReader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.fail("field of %d bytes, %d left", n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *compactReader) str() string { return string(r.bytes(r.uvarint())) }

func (r *compactReader) hex(n uint64) string { return hex.EncodeToString(r.bytes(n)) }

// version reads three uvarints, each at most MaxNumber.
func (r *compactReader) version() Version {
	v := Version{Epoch: r.uvarint(), Fence: r.uvarint(), Seq: r.uvarint()}
	if err := v.Validate(); err != nil {
		r.fail("%v", err)
	}
	return v
}

// fields reads what appendFields wrote into p, whose Version is set, with
// known the part of an object key before the version ("" for none); a flag
// outside allowed, two forms of one field, a nonce alone without known or
// trailing bytes fail.
func (r *compactReader) fields(p *Pointer, allowed uint64, known string) error {
	flags := r.uvarint()
	if n := flags & (fKey | fKeyNonce | fNonce); n&(n-1) != 0 {
		r.fail("flags %#x hold two forms of the object key", flags)
	}
	for _, pair := range [][2]uint64{{fSHA256, fSHA256Text}, {fETag, fETagText}, {fDigest, fDigestText}} {
		if flags&pair[0] != 0 && flags&pair[1] != 0 {
			r.fail("flags %#x hold two forms of one field", flags)
		}
	}
	if flags&fNonce != 0 && known == "" {
		r.fail("an object nonce without the key it belongs under")
	}
	if flags&^allowed != 0 {
		r.fail("unknown flags %#x", flags&^allowed)
	}
	for f := uint64(1); f <= fAll && r.err == nil; f <<= 1 {
		switch flags & f {
		case fBucket:
			p.Object.Bucket = r.str()
		case fKey:
			p.Object.Key = r.str()
		case fKeyNonce:
			p.Object.Key = r.str() + EncodeVersion(p.Version) + "-" + r.hex(NonceLen/2)
		case fNonce:
			p.Object.Key = known + EncodeVersion(p.Version) + "-" + r.hex(NonceLen/2)
		case fSHA256:
			p.Object.SHA256 = r.hex(32)
		case fSHA256Text:
			p.Object.SHA256 = r.str()
		case fETag:
			p.Object.ETag = r.hex(16)
		case fETagText:
			p.Object.ETag = r.str()
		case fSize:
			if n := r.uvarint(); n > math.MaxInt64 {
				r.fail("size %d out of range", n)
			} else {
				p.Object.Size = int64(n)
			}
		case fIdemKey:
			p.IdempotencyKey = r.str()
		case fDigest:
			p.Digest = r.hex(32)
		case fDigestText:
			p.Digest = r.str()
		case fContentType:
			p.ContentType = r.str()
		case fOwner:
			p.Owner = r.str()
		case fCommitted:
			sec, nsec := r.varint(), r.uvarint()
			if nsec >= uint64(time.Second) {
				r.fail("nanoseconds %d out of range", nsec)
			}
			p.CommittedAt = time.Unix(sec, int64(nsec)).UTC()
		case fDataset:
			files, bytes := r.uvarint(), r.uvarint()
			if files > math.MaxInt64 || bytes > math.MaxInt64 {
				r.fail("dataset of %d files, %d bytes out of range", files, bytes)
			}
			p.Kind, p.Files, p.Bytes = KindDataset, int64(files), int64(bytes)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}
