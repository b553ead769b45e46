//go:build !unit

package exampletest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/publisher"
)

// GET /v1/cut reads the followed resources at one etcd revision: after a
// group publish of report and breakdown both pointers are the group's
// versions at one revision, and every cut taken while groups are published
// holds the members of one group; a resource not followed is 404, no name
// or a repeated one 400.
func TestReaderServiceCut(t *testing.T) {
	s := start(t, build(t), 1<<20, "breakdown", "report")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type cutJSON struct {
		Revision int64                       `json:"revision"`
		Pointers map[string]fencepub.Pointer `json:"pointers"`
	}
	cut := func() cutJSON {
		t.Helper()
		resp := s.get("/v1/cut?resource=report&resource=breakdown")
		defer resp.Body.Close()
		var c cutJSON
		if err := json.NewDecoder(resp.Body).Decode(&c); resp.StatusCode != http.StatusOK || err != nil || len(c.Pointers) != 2 {
			t.Fatalf("GET /v1/cut: %d, %+v, %v", resp.StatusCode, c, err)
		}
		return c
	}
	gs, err := s.auth.AcquireGroup(ctx, authority.GroupRequest{Resources: []string{"breakdown", "report"}, Owner: "tester", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.auth.ReleaseGroup(context.Background(), gs)
	ps := make([]*publisher.Publisher, len(gs))
	for i, g := range gs {
		if ps[i], err = s.pub.Bind(ctx, publisher.GrantTerm(g, false)); err != nil {
			t.Fatal(err)
		}
	}
	// The body names the group, so a cut's two objects tell their groups apart.
	group := func(n int) (publisher.GroupResult, error) {
		ms := make([]publisher.GroupMember, len(ps))
		for i, p := range ps {
			o := publisher.Operation{Body: bytes.NewReader(fmt.Appendf(nil, "group %d of %s", n, gs[i].Resource))}
			ms[i] = publisher.GroupMember{Publisher: p, Operation: &o}
		}
		r, err := s.pub.PublishGroup(ctx, fmt.Sprintf("g-%d", n), ms)
		if err == nil && r.Outcome != publisher.Applied {
			err = fmt.Errorf("outcome %s", r.Outcome)
		}
		if err != nil {
			return r, fmt.Errorf("group %d: %w", n, err)
		}
		return r, nil
	}
	r, err := group(1)
	if err != nil {
		t.Fatal(err)
	}
	c := cut()
	if c.Revision < r.Revision || c.Pointers["breakdown"].Version != r.Members[0].Version || c.Pointers["report"].Version != r.Members[1].Version {
		t.Fatalf("cut %+v; want the group's versions %s, %s at revision >= %d", c, r.Members[0].Version, r.Members[1].Version, r.Revision)
	}

	// Cuts taken while groups are published: each member's seq is the
	// group's number (both Publishers count from 1 together), never two.
	done, failed := make(chan struct{}), make(chan error, 1)
	go func() {
		defer close(done)
		for n := 2; n <= 10; n++ {
			if _, err := group(n); err != nil {
				failed <- err
				return
			}
		}
	}()
	for reads, finished := 1, false; !finished; reads++ {
		select {
		case <-done:
			finished = true // one more cut, after the last group
			t.Logf("%d cuts read while 9 groups were published, none torn", reads)
		default:
		}
		c := cut()
		if b, rp := c.Pointers["breakdown"].Version.Seq, c.Pointers["report"].Version.Seq; b != rp {
			t.Fatalf("torn cut at revision %d: breakdown at seq %d, report at seq %d", c.Revision, b, rp)
		}
	}
	select {
	case err := <-failed:
		t.Fatal(err)
	default:
	}
	for path, want := range map[string]int{
		"/v1/cut?resource=report&resource=elsewhere": http.StatusNotFound,
		"/v1/cut": http.StatusBadRequest,
		"/v1/cut?resource=report&resource=report": http.StatusBadRequest,
	} {
		resp := s.get(path)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}
