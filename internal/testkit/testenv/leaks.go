package testenv

import (
	"runtime"
	"strings"
	"time"
)

// Leaked waits up to 5 s for the goroutines whose stacks mention one of
// frames (e.g. "publisher.(*Client).putStream") to end, and returns the
// stacks of those still running ("" when none). The test's own goroutine
// is never counted.
func Leaked(frames ...string) string {
	var left string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		buf := make([]byte, 8<<20)
		buf = buf[:runtime.Stack(buf, true)]
		left = ""
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "testing.tRunner") {
				continue
			}
			for _, f := range frames {
				if strings.Contains(g, f) {
					left += g + "\n\n"
					break
				}
			}
		}
		if left == "" {
			return ""
		}
	}
	return left
}
