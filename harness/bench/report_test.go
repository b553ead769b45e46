package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReportWriteAndChart(t *testing.T) {
	st := func(p50 time.Duration, tput float64) Stats {
		return Stats{Ops: 10, P50: p50, P99: 2 * p50, Throughput: tput}
	}
	r := Report{Machine: ThisMachine(), Servers: "test"}
	for i, size := range []int{1 << 10, 1 << 20, 64 << 20} {
		row := NewRow("publish", "c=1", size, 1, st(time.Duration(i+1)*time.Millisecond, 100), "floor", st(time.Duration(i+1)*900*time.Microsecond, 110))
		r.Rows = append(r.Rows, row.WithTarget("p50 <= 1.10x", func(x Row) bool { return x.RatioP50 <= 1.10 }))
	}
	for _, c := range []int{1, 4, 16} {
		r.Rows = append(r.Rows, NewRow("scaling", "", 0, c, st(time.Millisecond, float64(100*c)), "floor", st(time.Millisecond, float64(110*c))))
	}
	if r.Rows[0].RatioP50 < 1.11 || r.Rows[0].RatioP50 > 1.12 || *r.Rows[0].Met {
		t.Fatalf("ratio %.3f met %v", r.Rows[0].RatioP50, *r.Rows[0].Met)
	}
	dir := t.TempDir()
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, "latest.md"))
	if err != nil || !strings.Contains(string(md), "| publish | c=1 |") || !strings.Contains(string(md), "**no**") {
		t.Fatalf("markdown: %s %v", md, err)
	}
	var back Report
	b, _ := os.ReadFile(filepath.Join(dir, "latest.json"))
	if err := json.Unmarshal(b, &back); err != nil || len(back.Rows) != len(r.Rows) {
		t.Fatalf("json: %v", err)
	}
	png := filepath.Join(dir, "chart.png")
	if err := r.Chart(png, "publish", "scaling"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Fatalf("chart: %v", err)
	}
	ratios := filepath.Join(dir, "ratios.png")
	if err := r.RatioChart(ratios, "publish"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(ratios); err != nil || st.Size() < 1000 {
		t.Fatalf("ratio chart: %v", err)
	}
}

// TestChartWithoutRows: a report of other workloads (or none) still draws.
func TestChartWithoutRows(t *testing.T) {
	r := Report{Machine: ThisMachine(), Rows: []Row{NewRow("gc", "scan", 0, 1, Stats{Ops: 1}, "list", Stats{Ops: 1})}}
	if err := r.Chart(filepath.Join(t.TempDir(), "c.png"), "publish", "scaling"); err != nil {
		t.Fatal(err)
	}
	if err := r.RatioChart(filepath.Join(t.TempDir(), "r.png"), "scale"); err != nil {
		t.Fatal(err)
	}
}

// TestBytesChart draws the byte rows of a workload and refuses a report
// without them; the target's measured text names both sides.
func TestBytesChart(t *testing.T) {
	var r Report
	for i, c := range []string{"op + history", "op alone"} {
		row := NewRow("footprint", c, 0, 16, Stats{Ops: 100, Throughput: float64(200 * (2 - i))}, "json", Stats{Ops: 100, Throughput: float64(600 * (2 - i))})
		row.Unit = "bytes"
		r.Rows = append(r.Rows, row.WithTarget("bytes <= 200 per publish", func(x Row) bool { return x.Subject.Throughput <= 200 }))
	}
	if got := r.Rows[1].Measured(); got != "200 bytes (baseline 600)" {
		t.Errorf("Measured() = %q", got)
	}
	png := filepath.Join(t.TempDir(), "footprint.png")
	if err := r.BytesChart(png, "footprint", "compact", "json"); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 1000 {
		t.Fatalf("chart: %v", err)
	}
	if err := r.BytesChart(png, "gc", "a", "b"); err == nil {
		t.Fatal("charted a workload without byte rows")
	}
}
