package layout

import "time"

// Retires reports whether s retires its resource: raised by decommission
// (reason SealReasonDecommissioned) and above ptr, the pointer's version, so
// nothing was published since (DESIGN.md "etcd layout": decommissioning).
func (s Seal) Retires(ptr Version) bool {
	return s.Reason == SealReasonDecommissioned && ptr.Compare(s.Version) < 0
}

// RaisedTo returns the seal that raising s to v writes, with reason and
// time at, for a resource whose pointer is at ptr. While s retires the
// resource (Retires), the raised seal keeps the decommission reason and its
// time, so readers still see a retired resource (reader.ErrDecommissioned,
// not a missing object) and GC keeps collecting it after the reader grace
// counted from the retirement. It always keeps s.Retired. It does not check
// that v is above s: the caller's transaction does.
func (s Seal) RaisedTo(v Version, reason string, at time.Time, ptr Version) Seal {
	if s.Retires(ptr) {
		return Seal{Version: v, Reason: SealReasonDecommissioned, At: s.At, Retired: s.Retired}
	}
	return Seal{Version: v, Reason: reason, At: at, Retired: s.Retired}
}
