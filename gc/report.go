package gc

import (
	"sync"
	"time"
)

// Report is the outcome of one pass (Collector.Run), shaped for `fencepub
// gc run -o json`. Counts are of objects unless named otherwise. In a dry
// run nothing is changed and Deleted, Sealed, Uploads.Aborted and Records
// count what the pass would have done (except acquire request records,
// which a dry run does not count).
type Report struct {
	DryRun    bool      `json:"dry_run"`
	StartedAt time.Time `json:"started_at"`
	// Duration is the pass's wall time in seconds.
	Duration  float64 `json:"duration_seconds"`
	Resources int     `json:"resources"`
	// Scanned counts the listed objects (not uploads).
	Scanned int64 `json:"scanned"`
	// Deleted counts objects removed (unpublishable, and abandoned ones after
	// their seal).
	Deleted int64 `json:"deleted"`
	Kept    Kept  `json:"kept"`
	// Sealed counts abandoned objects made unpublishable by a seal raise;
	// SealRaises counts the seal transactions that succeeded.
	Sealed     int64 `json:"sealed"`
	SealRaises int64 `json:"seal_raises"`
	// ByDecision counts every classified object by its decision.
	ByDecision map[string]int64 `json:"by_decision"`
	Uploads    UploadCounts     `json:"uploads"`
	Records    RecordCounts     `json:"records"`
	// Clock is the domain clock as the pass read it; nil when the pass
	// stopped before.
	Clock    *ClockReport `json:"clock,omitempty"`
	Warnings []string     `json:"warnings"`
	Errors   []string     `json:"errors"`
	// Decisions lists every object and upload with its decision, reason and
	// action, only when RunOptions.Verbose.
	Decisions []Decision `json:"decisions,omitempty"`

	mu sync.Mutex
}

// Kept counts the objects a pass kept, by decision. An abandoned object
// whose seal transaction lost a race is counted as in flight.
type Kept struct {
	Published   int64 `json:"published"`
	Retained    int64 `json:"retained"`
	InFlight    int64 `json:"in_flight"`
	Quarantined int64 `json:"quarantined"`
	Foreign     int64 `json:"foreign"`
}

// UploadCounts counts incomplete multipart uploads under the scanned
// resources' prefixes.
type UploadCounts struct {
	Scanned int64 `json:"scanned"`
	Aborted int64 `json:"aborted"`
	Kept    int64 `json:"kept"`
}

// ClockReport is the domain clock a pass measured ages on (DESIGN.md "Ages
// come from one clock"). A cutoff is an etcd revision: a record last
// modified before it is at least that old; 0 means nothing is yet.
type ClockReport struct {
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

// RecordCounts counts the etcd records a pass deleted.
type RecordCounts struct {
	History  int64 `json:"history"`
	Ops      int64 `json:"ops"`
	Requests int64 `json:"requests"`
	Grants   int64 `json:"grants"`
}

func newReport(dry bool, now time.Time) *Report {
	by := make(map[kind]int64)
	for _, k := range allKinds() {
		by[k] = 0
	}
	return &Report{DryRun: dry, StartedAt: now.UTC(), ByDecision: by, Warnings: []string{}, Errors: []string{}}
}

// keep counts a kept object under kind k.
func (r *Report) keep(k kind) {
	switch k {
	case kindPublished:
		r.Kept.Published++
	case kindRetained:
		r.Kept.Retained++
	case kindQuarantined:
		r.Kept.Quarantined++
	case kindForeign:
		r.Kept.Foreign++
	default:
		r.Kept.InFlight++
	}
}

func (r *Report) warn(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Warnings = append(r.Warnings, msg)
}

func (r *Report) fail(res string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if res != "" {
		r.Errors = append(r.Errors, res+": "+err.Error())
		return
	}
	r.Errors = append(r.Errors, err.Error())
}
