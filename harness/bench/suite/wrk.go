package suite

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/fencepub/fencepub/harness/bench"
)

// wrkResult is what one wrk run reports.
type wrkResult struct {
	Requests   int
	Errors     int // non-2xx/3xx responses plus socket errors
	Duration   time.Duration
	ReqPerSec  float64
	P50, P99   time.Duration
	FirstError string
}

// runWrk runs wrk (path) against url with 2 threads, conns connections, for
// d, with its latency distribution, and parses its report. It blocks until
// wrk exits. Errors: wrk's exit status with its output, or an unparsable
// report.
func runWrk(ctx context.Context, path, url string, conns int, d time.Duration) (wrkResult, error) {
	secs := max(int(d.Round(time.Second)/time.Second), 1)
	out, err := exec.CommandContext(ctx, path, "-t2", "-c"+strconv.Itoa(conns), "-d"+strconv.Itoa(secs)+"s", "--latency", url).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk %s: %w: %s", url, err, out)
	}
	return parseWrk(string(out))
}

// parseWrk parses wrk's text report (wrk 4.x with --latency).
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	var haveReqs, haveRate bool
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "50%":
			r.P50, _ = time.ParseDuration(f[1])
		case len(f) == 2 && f[0] == "99%":
			r.P99, _ = time.ParseDuration(f[1])
		case len(f) >= 4 && f[1] == "requests" && f[2] == "in":
			n, err := strconv.Atoi(f[0])
			if err != nil {
				return r, fmt.Errorf("wrk: bad request count in %q", sc.Text())
			}
			r.Requests, haveReqs = n, true
			r.Duration, _ = time.ParseDuration(strings.TrimSuffix(f[3], ","))
		case len(f) == 2 && f[0] == "Requests/sec:":
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return r, fmt.Errorf("wrk: bad rate in %q", sc.Text())
			}
			r.ReqPerSec, haveRate = v, true
		case len(f) == 5 && f[0] == "Non-2xx":
			n, _ := strconv.Atoi(f[4])
			r.Errors += n
			if r.FirstError == "" {
				r.FirstError = strings.TrimSpace(sc.Text())
			}
		case len(f) >= 2 && f[0] == "Socket" && f[1] == "errors:":
			// "Socket errors: connect 0, read 0, write 0, timeout 0"
			for i := 3; i < len(f); i += 2 {
				n, _ := strconv.Atoi(strings.TrimSuffix(f[i], ","))
				r.Errors += n
			}
			if r.FirstError == "" {
				r.FirstError = strings.TrimSpace(sc.Text())
			}
		}
	}
	if !haveReqs || !haveRate {
		return r, fmt.Errorf("wrk: no request count or rate in its report:\n%s", out)
	}
	return r, nil
}

// wrkStats combines the rounds of one side: requests, errors and time are
// summed, the rate is requests over time, and p50 and p99 are the means of
// the rounds' (wrk reports percentiles, not samples).
func wrkStats(rounds []wrkResult) bench.Stats {
	var s bench.Stats
	var p50, p99 time.Duration
	for _, r := range rounds {
		s.Ops += r.Requests
		s.Errors += r.Errors
		s.Wall += r.Duration
		p50 += r.P50
		p99 += r.P99
		if s.FirstError == "" {
			s.FirstError = r.FirstError
		}
	}
	if len(rounds) > 0 {
		s.P50, s.P99 = p50/time.Duration(len(rounds)), p99/time.Duration(len(rounds))
	}
	if s.Wall > 0 {
		s.Throughput = float64(s.Ops) / s.Wall.Seconds()
	}
	return s
}
