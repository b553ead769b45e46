package bench

import (
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Chart draws the report as one PNG of two panels: p50 latency (ms) vs body
// size for the rows of workload latencyWorkload (subject and baseline, one
// line per concurrency and resource count), and throughput (ops/s) vs
// concurrency for the rows of scalingWorkload. Rows of other workloads,
// skipped rows and calibration rows are ignored. It writes path (creating or truncating it).
func (r Report) Chart(path, latencyWorkload, scalingWorkload string) error {
	left := plot.New()
	left.Title.Text = "p50 latency vs body size (" + latencyWorkload + ")"
	left.X.Label.Text = "body size (bytes, log)"
	left.Y.Label.Text = "p50 (ms, log)"
	subj, base := map[string]plotter.XYs{}, map[string]plotter.XYs{}
	for _, x := range r.Rows {
		if x.Workload != latencyWorkload || x.Calibration || x.Size == 0 || x.Subject.P50 == 0 || x.Base.P50 == 0 {
			continue
		}
		k := fmt.Sprintf("c=%d", x.Concurrency)
		if x.Resources > 0 {
			k += fmt.Sprintf(" r=%d", x.Resources)
		}
		subj[k] = append(subj[k], plotter.XY{X: float64(x.Size), Y: ms64(x.Subject.P50)})
		base[k] = append(base[k], plotter.XY{X: float64(x.Size), Y: ms64(x.Base.P50)})
	}
	var lines []any
	for _, k := range sortedKeys(subj) {
		lines = append(lines, "fencepub "+k, sortXY(subj[k]), "floor "+k, sortXY(base[k]))
	}
	left.Legend.Top, left.Legend.Left = true, true
	if len(lines) > 0 {
		// Log axes only with data: an empty log axis has no valid range.
		left.X.Scale, left.Y.Scale = plot.LogScale{}, plot.LogScale{}
		left.X.Tick.Marker, left.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
		if err := plotutil.AddLinePoints(left, lines...); err != nil {
			return err
		}
	} else {
		left.Title.Text += ": no rows"
	}

	right := plot.New()
	right.Title.Text = "throughput vs concurrency (" + scalingWorkload + ")"
	right.X.Label.Text = "concurrent publishers"
	right.Y.Label.Text = "ops/s"
	var pts, bpts plotter.XYs
	for _, x := range r.Rows {
		if x.Workload == scalingWorkload && !x.Calibration && x.Skipped == "" && x.Subject.Throughput > 0 {
			pts = append(pts, plotter.XY{X: float64(x.Concurrency), Y: x.Subject.Throughput})
			bpts = append(bpts, plotter.XY{X: float64(x.Concurrency), Y: x.Base.Throughput})
		}
	}
	if len(pts) > 0 {
		if err := plotutil.AddLinePoints(right, "fencepub", sortXY(pts), "floor", sortXY(bpts)); err != nil {
			return err
		}
	} else {
		right.Title.Text += ": no rows"
	}

	img := vgimg.New(16*vg.Inch, 6*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Inch / 4, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	canvases := plot.Align([][]*plot.Plot{{left, right}}, tiles, dc)
	left.Draw(canvases[0][0])
	right.Draw(canvases[0][1])
	w, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

func ms64(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sortXY(p plotter.XYs) plotter.XYs {
	sort.Slice(p, func(i, j int) bool { return p[i].X < p[j].X })
	return p
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// BytesChart draws, as one PNG at path, a bar pair (subject, baseline) per
// measured row of workload whose Unit is "bytes" (the footprint workload's
// bytes per publish), labelled with the rows' configs. It returns an
// error when there is no such row, or path cannot be written.
func (r Report) BytesChart(path, workload, subject, baseline string) error {
	var subj, base plotter.Values
	var labels []string
	for _, x := range r.Rows {
		if x.Workload == workload && x.Unit == "bytes" && x.Skipped == "" {
			subj, base = append(subj, x.Subject.Throughput), append(base, x.Base.Throughput)
			labels = append(labels, x.Config)
		}
	}
	if len(subj) == 0 {
		return fmt.Errorf("bench: no %s rows in bytes to chart", workload)
	}
	p := plot.New()
	p.Title.Text = "etcd bytes per publish (" + workload + "), lower is better"
	p.Y.Label.Text = "bytes (db size after compaction and defrag)"
	w := vg.Points(40)
	for i, side := range []struct {
		name string
		v    plotter.Values
	}{{subject, subj}, {baseline, base}} {
		bars, err := plotter.NewBarChart(side.v, w)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.Offset = vg.Length(2*i-1) * w / 2
		p.Add(bars)
		p.Legend.Add(side.name, bars)
	}
	p.Legend.Top = true
	p.NominalX(labels...)
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}

// RatioChart draws one bar per measured row of workload: the row's
// headline ratio, fencepub over its baseline (the p99 ratio for a row whose
// target is about p99, else the throughput ratio, which for a row whose
// unit is a size per item is a size ratio), with a line at 1.0 where the
// two sides cost the same. Skipped and calibration rows, and rows without a
// baseline, are left out. It writes path (creating or truncating it) as a
// PNG.
func (r Report) RatioChart(path, workload string) error {
	p := plot.New()
	p.Title.Text = "fencepub / baseline per row (" + workload + ")"
	p.Y.Label.Text = "ratio (1.0 = same as the baseline)"
	var vals plotter.Values
	var labels []string
	for _, x := range r.Rows {
		if x.Workload != workload || x.Calibration || x.Skipped != "" {
			continue
		}
		v := x.RatioThroughput
		if strings.HasPrefix(x.Target, "p99") {
			v = Ratio(float64(x.Subject.P99), float64(x.Base.P99))
		}
		if v == 0 {
			continue
		}
		vals = append(vals, v)
		labels = append(labels, shortLabel(x.Config))
	}
	if len(vals) == 0 {
		p.Title.Text += ": no rows"
	} else {
		bars, err := plotter.NewBarChart(vals, vg.Points(28))
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(0)
		one := plotter.NewFunction(func(float64) float64 { return 1 })
		one.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		p.Add(bars, one)
		p.NominalX(labels...)
		p.X.Tick.Label.Rotation = math.Pi / 8
		p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
		p.Y.Min = 0
	}
	return p.Save(14*vg.Inch, 7*vg.Inch, path)
}

// shortLabel cuts a row's config to a bar label.
func shortLabel(s string) string {
	const n = 48
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
