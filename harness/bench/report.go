package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Row is one measured configuration next to its baseline from the same run.
type Row struct {
	Workload    string `json:"workload"`    // e.g. "publish"
	Config      string `json:"config"`      // e.g. "1 MiB, c=16, 64 resources"
	Size        int    `json:"size_bytes"`  // body size, 0 when not applicable
	Concurrency int    `json:"concurrency"` // concurrent clients
	Resources   int    `json:"resources,omitempty"`
	// Unit of Subject.Throughput and Base.Throughput; "" means "ops/s".
	Unit     string `json:"unit,omitempty"`
	Subject  Stats  `json:"subject"`
	Baseline string `json:"baseline"` // what Subject is compared with
	Base     Stats  `json:"base"`
	// RatioP50 = subject p50 / baseline p50 (lower is better);
	// RatioThroughput = subject throughput / baseline throughput.
	RatioP50        float64 `json:"ratio_p50"`
	RatioThroughput float64 `json:"ratio_throughput"`
	Target          string  `json:"target,omitempty"` // the target, e.g. "p50 <= 1.10x"
	Met             *bool   `json:"met,omitempty"`    // whether Target held in this run
	// Skipped says why the row was not measured (its stats are zero).
	Skipped string `json:"skipped,omitempty"`
	// Calibration marks an A/A row: the baseline measured against itself,
	// to show the run's noise. Charts leave it out.
	Calibration bool   `json:"calibration,omitempty"`
	Note        string `json:"note,omitempty"`
}

// NewRow fills the ratios of subject against base. Failed operations on
// either side are mentioned in the note.
func NewRow(workload, config string, size, conc int, subject Stats, baseline string, base Stats) Row {
	r := Row{
		Workload: workload, Config: config, Size: size, Concurrency: conc,
		Subject: subject, Baseline: baseline, Base: base,
		RatioP50:        Ratio(float64(subject.P50), float64(base.P50)),
		RatioThroughput: Ratio(subject.Throughput, base.Throughput),
	}
	for _, side := range []struct {
		name string
		s    Stats
	}{{"subject", subject}, {"baseline", base}} {
		if side.s.Errors > 0 {
			r = r.WithNote(fmt.Sprintf("%s: %d failed ops (first: %s)", side.name, side.s.Errors, side.s.FirstError))
		}
	}
	return r
}

// SkippedRow is a row that could not be measured, with the reason.
func SkippedRow(workload, config, baseline, target, why string) Row {
	return Row{Workload: workload, Config: config, Baseline: baseline, Target: target, Skipped: why}
}

// WithTarget records the target and whether met(row) held. A row with
// failed operations never meets its target.
func (r Row) WithTarget(target string, met func(Row) bool) Row {
	ok := met(r) && r.Subject.Errors == 0 && r.Base.Errors == 0
	r.Target, r.Met = target, &ok
	return r
}

// WithNote appends note to the row's note.
func (r Row) WithNote(note string) Row {
	if r.Note == "" {
		r.Note = note
	} else if note != "" {
		r.Note += "; " + note
	}
	return r
}

// Machine describes where a report was measured.
type Machine struct {
	GOOS      string    `json:"goos"`
	GOARCH    string    `json:"goarch"`
	CPUs      int       `json:"cpus"`
	GoVersion string    `json:"go_version"`
	CPUModel  string    `json:"cpu_model,omitempty"`
	MemTotal  string    `json:"mem_total,omitempty"`
	When      time.Time `json:"when"`
}

// ThisMachine describes the running machine.
func ThisMachine() Machine {
	m := Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), When: time.Now().UTC()}
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	m.MemTotal = procField("/proc/meminfo", "MemTotal")
	return m
}

// procField returns the value of the first "key: value" line of a /proc
// file, or "".
func procField(path, key string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Workload describes one workload of a report: its name (Row.Workload),
// a title and what its subject and baseline are.
type Workload struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	About string `json:"about"`
}

// Report is a whole benchmark run.
type Report struct {
	Machine   Machine    `json:"machine"`
	Servers   string     `json:"servers"` // e.g. "local: etcd 1 member, MinIO 1 drive"
	Options   string     `json:"options,omitempty"`
	Workloads []Workload `json:"workloads,omitempty"`
	Rows      []Row      `json:"rows"`
}

// Write stores the report as dir/latest.json and dir/latest.md, creating
// dir.
func (r Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "latest.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "latest.md"))
	if err != nil {
		return err
	}
	if err := r.Markdown(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// Markdown writes the report: a summary of every target, then one table per
// workload with subject and baseline side by side, the ratios and whether
// each target held.
func (r Report) Markdown(w io.Writer) error {
	ew := &errWriter{w: w}
	ew.printf("# fencepub benchmarks\n\nMeasured %s on %d CPUs (%s, %s RAM), %s, %s/%s.\n\nServers: %s.",
		r.Machine.When.Format(time.RFC3339), r.Machine.CPUs, r.Machine.CPUModel, r.Machine.MemTotal, r.Machine.GoVersion, r.Machine.GOOS, r.Machine.GOARCH, r.Servers)
	if r.Options != "" {
		ew.printf(" Options: %s.", r.Options)
	}
	ew.printf("\n\nEvery ratio compares two measurements of the same run on the same servers (interleaved in rounds). p50 ratio = subject/baseline (lower is better); throughput ratio = subject/baseline (higher is better).\n\n")
	ew.printf("## Targets\n\n| workload | config | target | measured | met |\n|---|---|---|---|---|\n")
	for _, x := range r.Rows {
		if x.Target == "" {
			continue
		}
		ew.printf("| %s | %s | %s | %s | %s |\n", x.Workload, x.Config, x.Target, x.Measured(), met(x))
	}
	names := make([]string, 0, len(r.Workloads))
	described := map[string]bool{}
	for _, wl := range r.Workloads {
		names = append(names, wl.Name)
		described[wl.Name] = true
	}
	for _, x := range r.Rows {
		if !described[x.Workload] {
			names = append(names, x.Workload)
			described[x.Workload] = true
		}
	}
	for _, name := range names {
		var rows []Row
		for _, x := range r.Rows {
			if x.Workload == name {
				rows = append(rows, x)
			}
		}
		if len(rows) == 0 {
			continue
		}
		title, about := name, ""
		for _, wl := range r.Workloads {
			if wl.Name == name {
				title, about = wl.Title, wl.About
			}
		}
		ew.printf("\n## %s\n\n", title)
		if about != "" {
			ew.printf("%s\n\n", about)
		}
		ew.printf("| config | p50 ms | p99 ms | throughput | baseline | base p50 ms | base p99 ms | base throughput | p50 ratio | throughput ratio | target | met | note |\n")
		ew.printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, x := range rows {
			if x.Skipped != "" {
				ew.printf("| %s | - | - | - | %s | - | - | - | - | - | %s | %s | skipped: %s |\n", x.Config, x.Baseline, x.Target, met(x), x.Skipped)
				continue
			}
			unit := x.Unit
			if unit == "" {
				unit = "ops/s"
			}
			ew.printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				x.Config, msOrDash(x.Subject.P50), msOrDash(x.Subject.P99), rate(x.Subject.Throughput, unit),
				x.Baseline, msOrDash(x.Base.P50), msOrDash(x.Base.P99), rate(x.Base.Throughput, unit),
				ratio(x.RatioP50), ratio(x.RatioThroughput), x.Target, met(x), x.Note)
		}
	}
	return ew.err
}

// Measured is what the row's target talks about, as text: the ratio, the
// p99, or the two peak RSS values.
func (x Row) Measured() string {
	switch {
	case x.Skipped != "":
		return "skipped: " + x.Skipped
	case strings.HasPrefix(x.Target, "p50") && strings.Contains(x.Target, "throughput"):
		return fmt.Sprintf("p50 %.2fx, throughput %.2fx", x.RatioP50, x.RatioThroughput)
	case strings.HasPrefix(x.Target, "p50"):
		return fmt.Sprintf("p50 %.2fx", x.RatioP50)
	case strings.HasPrefix(x.Target, "throughput"):
		return fmt.Sprintf("throughput %.2fx", x.RatioThroughput)
	case strings.HasPrefix(x.Target, "p99"):
		return fmt.Sprintf("p99 %s ms (baseline %s ms)", ms(x.Subject.P99), ms(x.Base.P99))
	case strings.HasPrefix(x.Target, "bytes"), strings.HasPrefix(x.Target, "largest"):
		return fmt.Sprintf("%s %s (baseline %s)", Num(x.Subject.Throughput), x.Unit, Num(x.Base.Throughput))
	case strings.HasPrefix(x.Target, "orphans"):
		return fmt.Sprintf("%s per 1000 (%d of %d left)", Num(x.Subject.Throughput), x.Subject.Ops, x.Base.Ops)
	case strings.HasPrefix(x.Target, "peak RSS"):
		return fmt.Sprintf("%.1f MiB vs %.1f MiB (%.2fx)", MiB(x.Subject.PeakRSS), MiB(x.Base.PeakRSS), Ratio(float64(x.Subject.PeakRSS), float64(x.Base.PeakRSS)))
	default:
		return fmt.Sprintf("p50 %.2fx, throughput %.2fx", x.RatioP50, x.RatioThroughput)
	}
}

func met(x Row) string {
	switch {
	case x.Met == nil:
		return ""
	case *x.Met:
		return "yes"
	default:
		return "**no**"
	}
}

func msOrDash(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return ms(d)
}

func rate(f float64, unit string) string {
	if f == 0 {
		return "-"
	}
	return Num(f) + " " + unit
}

func ratio(f float64) string {
	if f == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", f)
}

// Num formats a rate or size with about three significant digits.
func Num(f float64) string {
	switch {
	case f >= 100:
		return fmt.Sprintf("%.0f", f)
	case f >= 10:
		return fmt.Sprintf("%.1f", f)
	default:
		return fmt.Sprintf("%.2f", f)
	}
}

// MiB converts bytes to MiB.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }

// errWriter keeps the first write error, so a long report is written
// without checking every line.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
