package operator

import (
	"time"

	"github.com/fencepub/fencepub"
)

// GCReport is the detailed outcome of one GC pass, as `fencepub gc run -o
// json` prints it (RunGC). Counts are of objects unless named otherwise. In
// a dry run nothing is changed and Deleted, Sealed, Uploads.Aborted and
// Records count what the pass would have done (except acquire request
// records, which a dry run does not count).
type GCReport struct {
	DryRun    bool      `json:"dry_run"`
	StartedAt time.Time `json:"started_at"`
	// Duration is the pass's wall time in seconds.
	Duration  float64 `json:"duration_seconds"`
	Resources int     `json:"resources"`
	// Scanned counts the listed objects (not uploads).
	Scanned int64 `json:"scanned"`
	// Deleted counts objects removed (unpublishable, and abandoned ones after
	// their seal).
	Deleted int64  `json:"deleted"`
	Kept    GCKept `json:"kept"`
	// Sealed counts abandoned objects made unpublishable by a seal raise;
	// SealRaises counts the seal transactions that succeeded.
	Sealed     int64 `json:"sealed"`
	SealRaises int64 `json:"seal_raises"`
	// ByDecision counts every classified object by its decision.
	ByDecision map[string]int64 `json:"by_decision"`
	Uploads    GCUploadCounts   `json:"uploads"`
	Records    GCRecordCounts   `json:"records"`
	// Clock is the domain clock as the pass read it; nil when the pass
	// stopped before.
	Clock    *GCClock `json:"clock,omitempty"`
	Warnings []string `json:"warnings"`
	Errors   []string `json:"errors"`
	// Decisions lists every object and upload with its decision, reason and
	// action, only for a verbose pass.
	Decisions []GCDecision `json:"decisions,omitempty"`
}

// GCKept counts the objects a pass kept, by decision. An abandoned object
// whose seal transaction lost a race is counted as in flight.
type GCKept struct {
	Published   int64 `json:"published"`
	Retained    int64 `json:"retained"`
	InFlight    int64 `json:"in_flight"`
	Quarantined int64 `json:"quarantined"`
	Foreign     int64 `json:"foreign"`
}

// GCUploadCounts counts incomplete multipart uploads under the scanned
// resources' prefixes.
type GCUploadCounts struct {
	Scanned int64 `json:"scanned"`
	Aborted int64 `json:"aborted"`
	Kept    int64 `json:"kept"`
}

// GCClock is the domain clock a pass measured ages on (DESIGN.md "Ages
// come from one clock"). A cutoff is an etcd revision: a record last
// modified before it is at least that old; 0 means nothing is yet.
type GCClock struct {
	// Time is the clock time: a lower bound of real time elapsed since the
	// clock started, counted from the first collector's wall time.
	Time time.Time `json:"time"`
	// Advanced is true when the pass wrote a checkpoint.
	Advanced    bool `json:"advanced"`
	Checkpoints int  `json:"checkpoints"`
	// GraceCutoff ages history supersession and decommission seals
	// (Policy.Grace + Policy.ClockSkew); OpCutoff op records (OpRetention);
	// RequestCutoff acquire request records (RequestRetention).
	GraceCutoff   int64 `json:"grace_cutoff_revision"`
	OpCutoff      int64 `json:"op_cutoff_revision"`
	RequestCutoff int64 `json:"request_cutoff_revision"`
}

// GCRecordCounts counts the etcd records a pass deleted.
type GCRecordCounts struct {
	History  int64 `json:"history"`
	Ops      int64 `json:"ops"`
	Requests int64 `json:"requests"`
	Grants   int64 `json:"grants"`
}

// GCDecision is the classification of one listed key with its reason, and,
// once a pass acted on it, the action taken.
type GCDecision struct {
	Key      string `json:"key"`
	UploadID string `json:"upload_id,omitempty"`
	// Kind is the decision: "published", "retained", "unpublishable",
	// "in_flight", "abandoned", "quarantined" or "foreign"; the
	// unpublishable and abandoned ones delete (abort, for an upload).
	Kind    string            `json:"decision"`
	Reason  string            `json:"reason"`
	Version *fencepub.Version `json:"version,omitempty"` // nil for a foreign key
	Size    int64             `json:"size"`
	// Action is what the pass did: "kept", "deleted", "aborted", "sealed",
	// "would_delete" (dry run), "skipped" (an abandoned object whose seal
	// transaction lost a race: kept until the next pass) or "failed".
	Action string `json:"action,omitempty"`
	Error  string `json:"error,omitempty"`
}
