package main

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/lab"
)

// newLabCmd builds `fencepub lab`, the protocol's event model and its
// deliberate defects (package lab; protocol source, §Lab).
func newLabCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Model-check the lease/fence protocol and its deliberate defects",
		Long: `lab runs fencepub's event model of the lease/fence protocol. The model does not
use etcd or MinIO. It enumerates the orders in which clients, the authority and
the resource can act, and checks these properties in every history:

  revoked_generation_overwrite  a write from an older grant overwrites the state
                                that a newer grant already committed
  unauthorized_accept           a token bound to no valid grant takes effect
  missing_file                  a published dataset manifest names a file that
                                GC deleted (case dataset)
  torn_read                     a reader sees the members of a group from two
                                different group publishes (case group)

Run 'fencepub lab fencing --help' for the scenarios and variants, and
'fencepub lab replay --help' to check the real implementation against the model.`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return exitcode.Usagef("lab: unknown command %q (want: fencing or replay)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return exitcode.With(exitcode.Usage, err) })
	cmd.AddCommand(newLabFencingCmd(), newLabReplayCmd())
	return cmd
}

type labFencingOptions struct {
	variant string
	kase    string
	issuer  int
	output  string
	clients int
	writes  int
}

func newLabFencingCmd() *cobra.Command {
	var o labFencingOptions
	cmd := &cobra.Command{
		Use:   "fencing [flags]",
		Short: "Enumerate every interleaving of the fencing scenario and check it",
		Long: `fencing runs the experiment of the protocol source (docs/protocol-source.zh.txt):
clients A and B, one authority domain, one resource, and an issuer that starts at --issuer (default 40). Lease expiry,
pause, resume and authority recovery are discrete events. Each grant and each
resource transaction is one indivisible step.

Case fencing (default): acquire A -> A pauses -> the lease expires -> the
authority recovers -> acquire B. Then every interleaving of A's resumption and
late write with B's write is enumerated.

Variants:
  correct          the protocol. 3 interleavings, no violation. A may commit
                   before B, but once B committed, A is rejected.
  no-fence         the resource does not compare (fence, seq):
                   revoked_generation_overwrite.
  split-authority  grants carry no number. Workers mint from an independent
                   counter, and A mints again after it resumes without its
                   lease, so it ends up holding issuer+3 (43 for 40):
                   unauthorized_accept. 4 interleavings; the protocol source counts 2
                   (see 'go doc github.com/fencepub/fencepub/internal/lab').
  rollback-issuer  recovery restores the issuer from an old backup, so A and B
                   both get issuer+1: revoked_generation_overwrite.

Case operations (--case operations, correct only): seq 1 and seq 2 in A's
term, a retry of the same key in B's later term, the same key with other
params, and a new key with A's old seq. Expected: applied, applied, duplicate,
conflict, stale, and exactly two effects.

Case dataset (--case dataset): A publishes dataset v1, pauses and loses its
lease; B is granted. Then every interleaving (12) of A's late full publish of
v2, B's incremental publish of v3 (read the pointer as its base, then publish
reusing the base's file) and one GC pass, which deletes the files of
superseded versions that the pointer's manifest does not name.
  correct          B's publish also compares the pointer to its base: a moved
                   pointer is stale (reason base). No violation.
  no-base-compare  B's publish compares (fence, seq) only. When GC runs after
                   A's v2 superseded v1 and before B publishes, it deletes
                   v1's file, and B's published v3 names it: missing_file.

Case group (--case group): A publishes g1 to the group {report, breakdown},
then every interleaving of A's publish of g2 with a reader that reads both
pointers at one revision.
  correct          one transaction moves both pointers: 2 interleavings, the
                   reader sees g1 or g2 whole.
  split-group      each member moves in its own transaction: 3 interleavings;
                   a read between them sees report=g2 next to breakdown=g1:
                   torn_read.

Beyond the protocol source: --clients N and/or --writes W check N clients with W writes
each by depth-first search with state hashing. The search stops at the first
violation and prints the number of states explored.

Text output lists every interleaving, one line per event (actor, action, token,
seq, accepted/rejected, the issuer and the resource after the step, and for
the new cases what the step chose, deleted or saw), then each
violation with its counterexample.events. -o json prints the same as one JSON
object.

Exit codes: 0 the properties hold, 1 a violation was found, 2 bad flags.`,
		Example: `  fencepub lab fencing
  fencepub lab fencing --variant split-authority --issuer 7
  fencepub lab fencing --case operations -o json
  fencepub lab fencing --case dataset --variant no-base-compare
  fencepub lab fencing --case group --variant split-group
  fencepub lab fencing --variant rollback-issuer --clients 3 --writes 2`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return exitcode.Usagef("lab fencing: unexpected argument %q", args[0])
			}
			return nil
		},
	}
	output := addOutputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		o.output = *output
		explore := cmd.Flags().Changed("clients") || cmd.Flags().Changed("writes")
		return runLabFencing(cmd.OutOrStdout(), o, explore)
	}
	f := cmd.Flags()
	f.StringVar(&o.variant, "variant", string(lab.Correct), "protocol variant: correct, no-fence, split-authority or rollback-issuer (case fencing); no-base-compare (case dataset); split-group (case group)")
	f.StringVar(&o.kase, "case", string(lab.Fencing), "scenario: fencing, operations, dataset or group")
	f.IntVar(&o.issuer, "issuer", 40, "initial issuer value; the first grant mints issuer+1")
	f.IntVar(&o.clients, "clients", 2, fmt.Sprintf("check this many clients (2-%d) by state-space search ; given (with or without --writes), the search replaces the fixed scenario", lab.MaxClients))
	f.IntVar(&o.writes, "writes", 2, fmt.Sprintf("writes per client (1-%d) ; given, turns the state-space search on", lab.MaxWrites))
	return cmd
}

func runLabFencing(w io.Writer, o labFencingOptions, explore bool) error {
	v, err := lab.ParseVariant(o.variant)
	if err != nil {
		return labUsage(err)
	}
	c, err := lab.ParseCase(o.kase)
	if err != nil {
		return labUsage(err)
	}
	var r lab.Result
	if explore {
		if c != lab.Fencing {
			return exitcode.Usagef("lab fencing: --clients and --writes apply to case fencing only, not %q", c)
		}
		r, err = lab.Explore(v, o.issuer, o.clients, o.writes)
	} else {
		var s lab.Scenario
		if s, err = lab.NewScenario(c, v, o.issuer); err == nil {
			r = s.Check()
		}
	}
	if err != nil {
		return labUsage(err)
	}
	if o.output == "json" {
		if err := printJSON(w, r); err != nil {
			return err
		}
	} else if err := writeLabText(w, r); err != nil {
		return err
	}
	if r.OK() {
		return nil
	}
	var props []string
	for _, x := range r.Violations {
		if !slices.Contains(props, string(x.Property)) {
			props = append(props, string(x.Property))
		}
	}
	return &exitcode.Error{Code: exitcode.Violation, Err: fmt.Errorf("lab: %s: %s",
		r.Variant, plural(len(r.Violations), "violation")+" found ("+strings.Join(props, ", ")+")")}
}

// labUsage turns the model's parameter errors into usage errors; anything
// else stays an internal error.
func labUsage(err error) error {
	if errors.Is(err, lab.ErrInvalid) {
		return exitcode.With(exitcode.Usage, err)
	}
	return err
}

// writeLabText prints r for people: a summary line, every history (the
// shared prefix once), then every violation with its counterexample.events.
// Event columns line up across the whole report.
func writeLabText(w io.Writer, r lab.Result) error {
	var t labTable
	verdict := "no violation"
	if !r.OK() {
		verdict = plural(len(r.Violations), "violation")
	}
	if r.States > 0 {
		t.line("%s, variant %s, issuer %d, %d clients x %s: %s explored (%s), %s",
			r.Case, r.Variant, r.Issuer, r.Clients, plural(r.Writes, "write"),
			plural(r.States, "state"), plural(r.Transitions, "transition"), verdict)
	} else {
		t.line("%s, variant %s, issuer %d: %s explored, %s",
			r.Case, r.Variant, r.Issuer, plural(r.Interleavings, "interleaving"), verdict)
	}
	for i, h := range r.Histories {
		switch {
		case r.Prefix == len(h.Events):
			t.line("")
			t.line("events: %s", historyVerdict(h))
			t.events(h.Events, 0)
		case i == 0:
			t.line("")
			t.line("prefix, shared by every interleaving:")
			t.events(h.Events[:r.Prefix], 0)
			fallthrough
		default:
			t.line("interleaving %d: %s", i+1, historyVerdict(h))
			t.events(h.Events[r.Prefix:], r.Prefix)
		}
		t.line("  writes: %s; effects: %d", writeOutcomes(h.Events), h.Events[len(h.Events)-1].Resource.Effects)
	}
	for i, v := range r.Violations {
		where := fmt.Sprintf("step %d", v.Step)
		if v.Interleaving > 0 {
			where = fmt.Sprintf("interleaving %d, %s", v.Interleaving, where)
		}
		t.line("")
		t.line("violation %d: %s (%s)", i+1, v.Property, where)
		t.line("  %s", v.Detail)
		t.line("  counterexample.events:")
		t.events(v.Counterexample.Events, 0)
	}
	return t.flush(w)
}

// labTable collects text lines and event rows, and pads every row's cells
// to the widest cell of their column.
type labTable struct {
	lines  [][]string // one cell: free text; more: an event row
	widths []int
}

func (t *labTable) line(format string, args ...any) {
	t.lines = append(t.lines, []string{fmt.Sprintf(format, args...)})
}

// events adds one row per event, numbered from first+1: actor, action, token,
// seq, key and params, accepted/rejected, the issuer and the resource after
// the step.
func (t *labTable) events(evs []lab.Event, first int) {
	for i, e := range evs {
		op := ""
		switch {
		case e.Key != "":
			op = "key " + e.Key + " params " + e.Params
		case e.Member != "":
			op = e.Version + " to " + e.Member
		case e.Version != "":
			op = e.Version
		case e.Note != "":
			op = e.Note
		}
		res := "resource empty"
		switch {
		case e.Pointers != "":
			res = "pointers " + e.Pointers
		case e.Resource.Writer != "":
			res = fmt.Sprintf("resource %d/%d by %s", e.Resource.Fence, e.Resource.Seq, e.Resource.Writer)
			if e.Resource.Version != "" {
				res += ", " + e.Resource.Version
			}
		}
		verdict := verdictOf(e.Outcome)
		if e.Reason != "" {
			verdict = "rejected (" + string(e.Outcome) + ", " + e.Reason + ")"
		}
		row := []string{strconv.Itoa(first + i + 1), e.Actor, string(e.Action), labeled("token", e.Token),
			labeled("seq", e.Seq), op, verdict, "issuer " + strconv.Itoa(e.Issuer), res}
		for j, c := range row {
			if j == len(t.widths) {
				t.widths = append(t.widths, 0)
			}
			t.widths[j] = max(t.widths[j], len(c))
		}
		t.lines = append(t.lines, row)
	}
}

func (t *labTable) flush(w io.Writer) error {
	var b strings.Builder
	for _, l := range t.lines {
		if len(l) == 1 {
			b.WriteString(l[0] + "\n")
			continue
		}
		var row strings.Builder
		for j, c := range l {
			if t.widths[j] > 0 {
				row.WriteString("  " + c + strings.Repeat(" ", t.widths[j]-len(c)))
			}
		}
		b.WriteString(strings.TrimRight(row.String(), " ") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func historyVerdict(h lab.History) string {
	if len(h.Violated) == 0 {
		return "properties hold"
	}
	var s []string
	for _, p := range h.Violated {
		s = append(s, string(p))
	}
	return strings.Join(s, ", ")
}

func writeOutcomes(evs []lab.Event) string {
	var s []string
	for _, e := range evs {
		if e.Action == lab.Write {
			s = append(s, string(e.Outcome))
		}
	}
	return strings.Join(s, ", ")
}

func labeled(name string, v int) string {
	if v == 0 {
		return ""
	}
	return name + " " + strconv.Itoa(v)
}

func verdictOf(o lab.Outcome) string {
	switch o {
	case lab.Applied:
		return "accepted"
	case lab.Stale, lab.Conflict:
		return "rejected (" + string(o) + ")"
	case lab.Duplicate:
		return "duplicate (original result, no effect)"
	}
	return string(o)
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
