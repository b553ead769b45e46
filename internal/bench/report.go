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
	Subject     Stats  `json:"subject"`
	Baseline    string `json:"baseline"` // what Subject is compared with
	Base        Stats  `json:"base"`
	// RatioP50 = subject p50 / baseline p50 (lower is better);
	// RatioThroughput = subject throughput / baseline throughput.
	RatioP50        float64 `json:"ratio_p50"`
	RatioThroughput float64 `json:"ratio_throughput"`
	Target          string  `json:"target,omitempty"` // the target, e.g. "p50 <= 1.10x"
	Met             *bool   `json:"met,omitempty"`    // whether Target held in this run
	Note            string  `json:"note,omitempty"`
}

// NewRow fills the ratios of subject against base.
func NewRow(workload, config string, size, conc int, subject Stats, baseline string, base Stats) Row {
	return Row{
		Workload: workload, Config: config, Size: size, Concurrency: conc,
		Subject: subject, Baseline: baseline, Base: base,
		RatioP50:        Ratio(float64(subject.P50), float64(base.P50)),
		RatioThroughput: Ratio(subject.Throughput, base.Throughput),
	}
}

// WithTarget records the target and whether met(row) held.
func (r Row) WithTarget(target string, met func(Row) bool) Row {
	ok := met(r)
	r.Target, r.Met = target, &ok
	return r
}

// Machine describes where a report was measured.
type Machine struct {
	GOOS      string    `json:"goos"`
	GOARCH    string    `json:"goarch"`
	CPUs      int       `json:"cpus"`
	GoVersion string    `json:"go_version"`
	CPUModel  string    `json:"cpu_model,omitempty"`
	When      time.Time `json:"when"`
}

// ThisMachine describes the running machine.
func ThisMachine() Machine {
	m := Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), When: time.Now().UTC()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// Report is a whole benchmark run.
type Report struct {
	Machine Machine `json:"machine"`
	Servers string  `json:"servers"` // e.g. "local: etcd 1 member, MinIO 1 drive"
	Rows    []Row   `json:"rows"`
}

// Write stores the report as dir/latest.json and dir/latest.md.
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
	defer f.Close()
	return r.Markdown(f)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// Markdown writes the report as a table: subject and baseline side by side,
// with the ratios and whether each target held.
func (r Report) Markdown(w io.Writer) error {
	fmt.Fprintf(w, "# fencepub benchmarks\n\nMeasured %s on %d CPUs (%s), %s, %s/%s. Servers: %s.\n",
		r.Machine.When.Format(time.RFC3339), r.Machine.CPUs, r.Machine.CPUModel, r.Machine.GoVersion, r.Machine.GOOS, r.Machine.GOARCH, r.Servers)
	fmt.Fprintf(w, "Every ratio compares two measurements of the same run on the same servers.\n\n")
	fmt.Fprintln(w, "| workload | config | p50 ms | p99 ms | ops/s | baseline | base p50 ms | base ops/s | p50 ratio | throughput ratio | target | met | note |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, x := range r.Rows {
		met := ""
		if x.Met != nil {
			met = map[bool]string{true: "yes", false: "**no**"}[*x.Met]
		}
		_, err := fmt.Fprintf(w, "| %s | %s | %s | %s | %.1f | %s | %s | %.1f | %.2fx | %.2fx | %s | %s | %s |\n",
			x.Workload, x.Config, ms(x.Subject.P50), ms(x.Subject.P99), x.Subject.Throughput,
			x.Baseline, ms(x.Base.P50), x.Base.Throughput, x.RatioP50, x.RatioThroughput, x.Target, met, x.Note)
		if err != nil {
			return err
		}
	}
	return nil
}
