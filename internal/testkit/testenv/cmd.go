package testenv

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// RunCmd runs cmd and returns its stdout, stderr and exit code; it fails t
// when cmd cannot run.
func RunCmd(t testing.TB, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, errb.String())
	return "", "", -1
}

// JSONLines decodes each line of stderr, what's log, as one JSON record
// with time, level and msg (fencepub's --log-format json), failing t on any
// other line.
func JSONLines(t testing.TB, what, stderr string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSuffix(stderr, "\n"), "\n") {
		if line == "" && stderr == "" {
			break
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%s: stderr line is not JSON (%v): %q\nstderr:\n%s", what, err, line, stderr)
		}
		for _, k := range []string{"time", "level", "msg"} {
			if _, ok := r[k]; !ok {
				t.Fatalf("%s: record without %q: %q", what, k, line)
			}
		}
		recs = append(recs, r)
	}
	return recs
}
