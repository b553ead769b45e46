package suite

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

// memPeak is the memory high-water marks of a measured function, in bytes.
type memPeak struct {
	RSS  int64 // the process's peak resident set
	Heap int64 // the Go heap's live objects, sampled
}

// measureMemory runs f and returns the process's peak RSS and the sampled
// peak of the Go heap during it. It first returns freed memory to the OS
// and resets the kernel's RSS high-water mark (VmHWM, through
// /proc/self/clear_refs, Linux 4.0+), so earlier work does not count;
// where that is unavailable the RSS is sampled every 5 ms instead. The
// sampling reads /proc and runtime/metrics, neither of which stops the
// world.
func measureMemory(f func()) memPeak {
	runtime.GC()
	debug.FreeOSMemory()
	reset := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	var (
		mu   sync.Mutex
		peak memPeak
	)
	sample := func() {
		rss := procStatusKB("VmRSS") << 10
		sm := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(sm)
		heap := int64(sm[0].Value.Uint64())
		mu.Lock()
		peak.RSS, peak.Heap = max(peak.RSS, rss), max(peak.Heap, heap)
		mu.Unlock()
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			sample()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	f()
	close(stop)
	<-done
	sample()
	if hwm := procStatusKB("VmHWM") << 10; reset && hwm > 0 {
		peak.RSS = hwm
	}
	return peak
}

// procStatusKB returns a "kB" field of /proc/self/status ("VmRSS:  1234
// kB"), or 0.
func procStatusKB(field string) int64 { return pidStatusKB("self", field) }

// pidStatusKB returns a "kB" field of /proc/<pid>/status, or 0 (also when
// the process is gone).
func pidStatusKB(pid, field string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}
