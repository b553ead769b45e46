package suite

import (
	"testing"
	"time"
)

// A real wrk 4.1 report (python's http.server answering 404), with a
// socket error line added as wrk prints it.
const wrkOutput = `Running 1s test @ http://127.0.0.1:18777/nonexistent
  2 threads and 4 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.77ms    0.87ms  14.48ms   93.67%
    Req/Sec     1.14k    39.44     1.20k    80.00%
  Latency Distribution
     50%    1.67ms
     75%    1.94ms
     90%    2.28ms
     99%    3.73ms
  2262 requests in 1.00s, 1.12MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 2262
Requests/sec:   2258.86
Transfer/sec:      1.12MB
`

func TestParseWrk(t *testing.T) {
	r, err := parseWrk(wrkOutput)
	if err != nil {
		t.Fatal(err)
	}
	want := wrkResult{Requests: 2262, Errors: 2262 + 3, Duration: time.Second, ReqPerSec: 2258.86,
		P50: 1670 * time.Microsecond, P99: 3730 * time.Microsecond, FirstError: "Socket errors: connect 0, read 2, write 0, timeout 1"}
	if r != want {
		t.Fatalf("got  %+v\nwant %+v", r, want)
	}
	if _, err := parseWrk("wrk: unable to connect"); err == nil {
		t.Fatal("parsed a report without a request count")
	}
	s := wrkStats([]wrkResult{want, {Requests: 1000, Duration: time.Second, P50: 330 * time.Microsecond, P99: 270 * time.Microsecond}})
	if s.Ops != 3262 || s.Errors != 2265 || s.Wall != 2*time.Second || s.Throughput != 1631 || s.P50 != time.Millisecond || s.P99 != 2*time.Millisecond {
		t.Fatalf("combined: %+v", s)
	}
}

func TestResOf(t *testing.T) {
	// 16 workers on 64 resources: each worker cycles over 4 resources of its
	// own, and together they cover all 64.
	owner := map[int]int{}
	for w := range 16 {
		for i := range 8 {
			r := resOf(w, i, 16, 64)
			if o, ok := owner[r]; ok && o != w {
				t.Fatalf("resource %d used by workers %d and %d", r, o, w)
			}
			owner[r] = w
		}
	}
	if len(owner) != 64 {
		t.Fatalf("%d resources used, want 64", len(owner))
	}
	// One worker cycles over all of them; 16 workers share one.
	if resOf(0, 70, 1, 64) != 6 || resOf(9, 3, 16, 1) != 0 {
		t.Fatal("resOf")
	}
}

func TestRounds(t *testing.T) {
	s := &runner{opts: Options{Rounds: 3}}
	for _, c := range []struct{ ops, conc, want int }{{800, 16, 3}, {32, 16, 1}, {64, 16, 2}, {5, 1, 2}, {1, 1, 1}} {
		if got := s.rounds(c.ops, c.conc); got != c.want {
			t.Errorf("rounds(%d, %d) = %d, want %d", c.ops, c.conc, got, c.want)
		}
	}
}
