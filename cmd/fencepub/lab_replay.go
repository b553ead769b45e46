package main

import (
	"fmt"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/lab"
	"github.com/fencepub/fencepub/lab/replay"
	"github.com/spf13/cobra"
)

// newLabReplayCmd builds `fencepub lab replay`: the correct model's
// interleavings performed against the real authority and publisher.
func newLabReplayCmd() *cobra.Command {
	var issuer int
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Replay every interleaving of the correct model against real etcd and MinIO",
		Long: `replay performs every interleaving of the correct fencing scenario and of the
operations case against the configured etcd and object store (for example the
stack from 'fencepub dev up'), one fresh resource per interleaving in the domain
<namespace.domain>-lab-replay (kept apart from real resources; it stays there
afterwards, like any published state), and compares
each real outcome and pointer with the model's. Pauses are a client doing
nothing while etcd expires its 2 s lease, so the run takes a few seconds per
interleaving.

Exit status: 0 when the implementation matched the model at every step, 1 when
it did not (each mismatch is printed), 115 when a server is unreachable.`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.Flags().IntVar(&issuer, "issuer", 40, "the model's initial issuer value; a real fresh resource starts at generation 1, so the model's token T is compared with generation T-issuer")
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		env, err := openEnv(c)
		if err != nil {
			return err
		}
		defer env.Close()
		// Its own domain: the replay's resources never mix with real ones.
		ns, err := layout.NewNamespace(env.NS.Prefix, env.NS.Domain+"-lab-replay")
		if err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		t := replay.Target{Namespace: ns, Etcd: env.Etcd, Store: env.Store}
		var reports []replay.Report
		failed := 0
		for _, k := range []lab.Case{lab.Fencing, lab.Operations} {
			s, err := lab.NewScenario(k, lab.Correct, issuer)
			if err != nil {
				return exitcode.With(exitcode.Usage, err)
			}
			fmt.Fprintf(env.Stderr, "lab replay: case %s: %d interleavings ...\n", k, len(s.Interleavings()))
			rep, err := replay.Run(c.Context(), t, s)
			if err != nil {
				return exitcode.With(exitcode.Unavailable, err)
			}
			reports = append(reports, rep)
			failed += len(rep.Mismatches)
			if *out == "text" {
				fmt.Fprintf(env.Stdout, "case %s: %d interleavings, %d steps, %d mismatches\n", rep.Case, rep.Interleavings, rep.Steps, len(rep.Mismatches))
				for _, m := range rep.Mismatches {
					fmt.Fprintf(env.Stdout, "  interleaving %d step %d: %s %s expected %s: got %s\n",
						m.Interleaving, m.Step, m.Expected.Actor, m.Expected.Action, m.Expected.Outcome, m.Got)
				}
			}
		}
		if *out == "json" {
			if err := printJSON(env.Stdout, reports); err != nil {
				return err
			}
		}
		if failed > 0 {
			return &exitcode.Error{Code: exitcode.Violation, Err: fmt.Errorf("lab replay: %d steps differ from the model", failed)}
		}
		return nil
	}
	addConnFlags(cmd)
	return cmd
}
