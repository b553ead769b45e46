package gc

import (
	"fmt"
	"strings"
	"time"

	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/operator"
)

// kind is GC's decision about one key (DESIGN.md "Garbage collection"), as
// decision.Kind and Report.ByDecision spell it.
type kind = string

// Decisions. kindUnpublishable and kindAbandoned delete (abort, for an
// upload); the others keep.
const (
	kindPublished     kind = "published"     // the key the pointer names
	kindRetained      kind = "retained"      // last N versions or within the reader grace
	kindUnpublishable kind = "unpublishable" // version <= max(pointer, seal) or an older epoch
	kindInFlight      kind = "in_flight"     // may still be published
	kindAbandoned     kind = "abandoned"     // in flight of a dead grant, older than the abandon period
	kindQuarantined   kind = "quarantined"   // old epoch, above the restored pointer `recover` recorded
	kindForeign       kind = "foreign"       // not an object key of the resource
)

// allKinds returns every decision in report order.
func allKinds() []kind {
	return []kind{kindPublished, kindRetained, kindUnpublishable, kindInFlight, kindAbandoned, kindQuarantined, kindForeign}
}

// deletes reports whether the decision removes the key.
func deletes(k kind) bool { return k == kindUnpublishable || k == kindAbandoned }

// entry is one key of a listing: an object (UploadID empty) or an
// incomplete multipart upload.
type entry struct {
	Key      string
	UploadID string
	Size     int64     // bytes; 0 for an upload
	Time     time.Time // LastModified, or an upload's Initiated (the store's clock)
}

// decision is the classification of one entry with its reason, and, once a
// pass acted on it, the action taken.
type decision = operator.GCDecision

// state is what GC knows about one resource, read at one etcd revision
// (readState), plus the retention computed from its history. Classify is a
// pure function of a state, an Entry and the time.
type state struct {
	NS       layout.Namespace
	Resource string
	// Revision is the etcd revision every field was read at.
	Revision   int64
	Epoch      uint64 // the domain's current epoch
	Deployment string // etcd's deployment id
	// Generation is the resource's durable generation counter: the newest
	// fence minted before Revision.
	Generation uint64
	// Holder is the live grant at Revision, nil when none. HolderUnknown is
	// true when a holder key exists but does not decode: every in-flight
	// object is then kept.
	Holder        *authority.Grant
	HolderUnknown bool
	// Pointer and Seal; the Has flags are false when the key is absent (a
	// resource never initialised reads as zero versions).
	Pointer    layout.Pointer
	HasPointer bool
	Seal       layout.Seal
	HasSeal    bool
	// Restored maps an old epoch to the pointer version `recover` recorded
	// for it (layout.RestoredKey); RestoredBad lists old epochs whose record
	// does not decode (everything of them is quarantined); RestoredUnreadable
	// is true when a record's key does not decode (every old epoch is
	// quarantined).
	Restored           map[uint64]layout.Version
	RestoredBad        map[uint64]bool
	RestoredUnreadable bool
	// Issued is the set of epochs this etcd issued (layout.EpochRecord,
	// written by init and recover). An older-epoch object of an epoch
	// neither issued nor restored belongs to another etcd history and is
	// quarantined (DESIGN.md invariant 9).
	Issued map[uint64]bool
	// Retained maps an object key to why history retains it (last N
	// versions, or superseded within the grace). For a dataset version,
	// the key is the version's own key (its manifest index), and every key
	// under it is retained with it.
	Retained map[string]string
	// Named holds each file a retained dataset manifest reuses from an
	// older version (so it lives under that version's key) with the index
	// in NamedBy of the first version naming it (readNamed); nil when there
	// is none. It holds a hash of each key, not the key (namedSet: a
	// collision can only keep an object). The reason is formatted only in
	// that file's decision.
	Named *namedSet
	// NamedBy are the dataset versions whose manifests Named's values
	// index.
	NamedBy []datasetRef
	// Decommissioned is true when the seal was raised by decommission above
	// the pointer more than Grace + ClockSkew ago on the domain clock (its
	// ModRevision before the grace cutoff): the published and retained
	// objects are then no longer kept.
	Decommissioned bool
	Policy         Policy

	// ModRevisions of the keys the seal transaction compares (0: absent).
	pointerMod, sealMod, epochMod int64
	// retainedHistory is the set of history keys retention keeps; the other
	// history entries read at Revision have expired.
	retainedHistory map[string]bool
	// retainedDatasets are the retained history entries of dataset
	// versions, whose manifests readNamed reads.
	retainedDatasets []datasetRef
	// The first pages of the resource's history, op, grant and request
	// records, read in the snapshot's transaction at Revision; the history
	// read and the pruning continue from them (scanFrom).
	historyPage, opsPage, grantsPage, requestsPage *page
}

// Top returns max(pointer, seal): no version at or below it can be
// published.
func (s *state) Top() layout.Version { return layout.MaxVersion(s.Pointer.Version, s.Seal.Version) }

// classify decides what to do with e, given s and the time now (this
// process's clock). It is a pure function; the order of its rules is the
// order of DESIGN.md "Garbage collection":
//
//  1. not an object key of s.Resource: Foreign;
//  2. an object the pointer names (any key of its dataset version):
//     Published; one history retains (likewise): Retained; a file a
//     retained manifest reuses: Retained (none of these applies to
//     uploads, nor to a decommissioned resource);
//  3. older epoch: Quarantined if above the restored pointer of that epoch,
//     or if that epoch has neither a restored pointer nor an epoch record
//     (this etcd never issued it: another history's object, invariant 9),
//     else Unpublishable;
//  4. version <= max(pointer, seal): Unpublishable;
//  5. newer epoch than the snapshot's: InFlight (a recover after the
//     snapshot may have made it publishable);
//  6. current epoch above max(pointer, seal): InFlight while its grant is
//     live at the snapshot, its fence is newer than the snapshot's
//     generation, it is younger than AbandonAfter + ClockSkew, or the
//     pointer and seal are not both present; else Abandoned.
func classify(s *state, e entry, now time.Time) decision {
	d := decision{Key: e.Key, UploadID: e.UploadID, Size: e.Size}
	v, own, ok := s.NS.ParseVersionKey(s.Resource, e.Key)
	if !ok {
		return decide(d, kindForeign, "not an object key of resource %q (<epoch>-<fence>-<seq>-<nonce> under %s)", s.Resource, s.NS.ObjectsPrefix(s.Resource))
	}
	d.Version = &v
	if e.UploadID == "" && !s.Decommissioned {
		if s.HasPointer && s.Pointer.Object.Key == own {
			if own != e.Key {
				return decide(d, kindPublished, "of the pointer's dataset version %s", s.Pointer.Version)
			}
			return decide(d, kindPublished, "named by the pointer (version %s)", s.Pointer.Version)
		}
		if why, ok := s.Retained[own]; ok {
			return decide(d, kindRetained, "%s", why)
		}
		if i, ok := s.Named.lookup(e.Key); ok {
			r := s.NamedBy[i]
			return decide(d, kindRetained, "file %q of the manifest of version %s (%s), reused from an older version",
				strings.TrimPrefix(e.Key, own+layout.FilesSep), r.pointer.Version, r.why)
		}
	}
	switch top := s.Top(); {
	case v.Epoch < s.Epoch:
		if s.RestoredBad[v.Epoch] || s.RestoredUnreadable {
			return decide(d, kindQuarantined, "epoch %d has an unreadable restored-pointer record", v.Epoch)
		}
		r, restored := s.Restored[v.Epoch]
		switch {
		case restored && r.Compare(v) < 0:
			return decide(d, kindQuarantined, "above the pointer %s that recover recorded for restored epoch %d: may be the only copy of a lost publish", r, v.Epoch)
		case !restored && !s.Issued[v.Epoch]:
			return decide(d, kindQuarantined, "epoch %d was never issued by this etcd: another history's object (recover --from-bucket takes it over)", v.Epoch)
		}
		return decide(d, kindUnpublishable, "epoch %d is older than the current epoch %d", v.Epoch, s.Epoch)
	case v.Compare(top) <= 0:
		if v.Compare(s.Pointer.Version) <= 0 {
			return decide(d, kindUnpublishable, "version %s <= pointer %s", v, s.Pointer.Version)
		}
		return decide(d, kindUnpublishable, "version %s <= seal %s", v, s.Seal.Version)
	case v.Epoch > s.Epoch:
		return decide(d, kindInFlight, "epoch %d is newer than the snapshot's epoch %d", v.Epoch, s.Epoch)
	}
	age := now.Sub(e.Time)
	abandon := s.Policy.AbandonAfter + s.Policy.ClockSkew
	switch {
	case s.HolderUnknown:
		return decide(d, kindInFlight, "above %s; the holder record does not decode, so the grant may be live", s.Top())
	case s.Holder != nil && s.Holder.Epoch == v.Epoch && s.Holder.Generation == v.Fence:
		return decide(d, kindInFlight, "above %s; grant %d is live", s.Top(), v.Fence)
	case v.Fence > s.Generation:
		return decide(d, kindInFlight, "above %s; fence %d is newer than the snapshot's generation %d", s.Top(), v.Fence, s.Generation)
	case age < abandon:
		return decide(d, kindInFlight, "above %s; %s old, younger than the abandon period %s (abandon-after %s + clock skew %s)",
			s.Top(), age.Round(time.Second), abandon, s.Policy.AbandonAfter, s.Policy.ClockSkew)
	case s.HasPointer != s.HasSeal:
		return decide(d, kindInFlight, "above %s; the resource has a pointer or a seal but not both, so it cannot be sealed", s.Top())
	}
	return decide(d, kindAbandoned, "above %s; grant %d is not live and the object is %s old (abandon period %s)", s.Top(), v.Fence, age.Round(time.Second), abandon)
}

// decide returns d with the decision k and its reason.
func decide(d decision, k kind, format string, args ...any) decision {
	d.Kind = k
	d.Reason = fmt.Sprintf(format, args...)
	return d
}
