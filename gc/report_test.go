package gc

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// TestReportSummary checks that Run's Report carries the detailed report's
// counts, warnings and errors, and shares no slice or map with it (a
// resource goroutine still failing after Run returned cannot change it).
func TestReportSummary(t *testing.T) {
	errTest := errors.New("list: store unavailable")
	r := newReport(true, false, time.Unix(1, 0))
	r.Resources, r.Scanned, r.Deleted, r.Sealed = 3, 10, 4, 2
	r.ByDecision[kindPublished], r.ByDecision[kindUnpublishable] = 3, 4
	r.keep(kindPublished)
	r.warn("versioning Enabled")
	r.fail("a", errTest)
	got := r.summary()
	want := &Report{DryRun: true, Resources: 3, Scanned: 10, Deleted: 4, Sealed: 2,
		ByDecision: map[string]int64{kindPublished: 3, kindRetained: 0, kindUnpublishable: 4, kindInFlight: 0, kindAbandoned: 0, kindQuarantined: 0, kindForeign: 0},
		Warnings:   []string{"versioning Enabled"}, Errors: []string{"a: " + errTest.Error()}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("summary %+v, want %+v", got, want)
	}
	r.fail("", errTest)
	r.ByDecision[kindForeign]++
	if len(got.Errors) != 1 || got.ByDecision[kindForeign] != 0 {
		t.Fatalf("the summary changed with the detailed report: %+v", got)
	}
}
