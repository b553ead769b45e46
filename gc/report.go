package gc

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/fencepub/fencepub/internal/operator"
)

// Report summarises one pass (Collector.Run). Counts are of objects; in a
// dry run nothing is changed and Deleted and Sealed count what the pass
// would have done. `fencepub gc run -o json` prints the pass in detail:
// every decision with its reason, uploads, etcd records and the domain
// clock (docs/gc.md, "The pass report").
type Report struct {
	DryRun bool `json:"dry_run"`
	// Resources counts the resources the pass covered.
	Resources int `json:"resources"`
	// Scanned counts the listed objects (not multipart uploads).
	Scanned int64 `json:"scanned"`
	// Deleted counts objects removed: unpublishable ones, and abandoned ones
	// after their seal.
	Deleted int64 `json:"deleted"`
	// Sealed counts abandoned objects made unpublishable by a seal raise.
	Sealed int64 `json:"sealed"`
	// ByDecision counts every scanned object by its decision: "published",
	// "retained", "unpublishable", "in_flight", "abandoned", "quarantined"
	// or "foreign" (DESIGN.md "Garbage collection").
	ByDecision map[string]int64 `json:"by_decision"`
	// Warnings name what the pass noticed and worked around (bucket
	// versioning or lifecycle rules, a resource never granted).
	Warnings []string `json:"warnings"`
	// Errors name what failed, one line each.
	Errors []string `json:"errors"`
}

// passReport is the detailed report one pass fills, with the lock its
// resources' goroutines take and whether it keeps every decision.
type passReport struct {
	operator.GCReport
	verbose bool
	mu      sync.Mutex
}

func newReport(dry, verbose bool, now time.Time) *passReport {
	by := make(map[kind]int64)
	for _, k := range allKinds() {
		by[k] = 0
	}
	return &passReport{GCReport: operator.GCReport{DryRun: dry, StartedAt: now.UTC(), ByDecision: by, Warnings: []string{}, Errors: []string{}}, verbose: verbose}
}

// summary returns the Report of r.
func (r *passReport) summary() *Report {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &Report{DryRun: r.DryRun, Resources: r.Resources, Scanned: r.Scanned, Deleted: r.Deleted, Sealed: r.Sealed,
		ByDecision: maps.Clone(r.ByDecision), Warnings: slices.Clone(r.Warnings), Errors: slices.Clone(r.Errors)}
}

// keep counts a kept object under kind k.
func (r *passReport) keep(k kind) {
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

func (r *passReport) warn(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Warnings = append(r.Warnings, msg)
}

func (r *passReport) fail(res string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if res != "" {
		r.Errors = append(r.Errors, res+": "+err.Error())
		return
	}
	r.Errors = append(r.Errors, err.Error())
}
