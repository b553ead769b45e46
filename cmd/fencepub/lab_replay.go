package main

import (
	"errors"
	"fmt"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/lab"
	"github.com/fencepub/fencepub/internal/lab/replay"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/spf13/cobra"
)

// newLabReplayCmd builds `fencepub lab replay`: the correct model's
// interleavings performed against the real authority and publisher.
func newLabReplayCmd() *cobra.Command {
	var issuer int
	var variant string
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

--variant no-fence or rollback-issuer replays the fencing case of that
deliberately broken model instead: the implementation does not have the defect,
so the replay reports mismatches and exits 1 on purpose (split-authority mints
apart from the grant, which has no real counterpart: exit 2).

Exit status: 0 when the implementation matched the model at every step, 1 when
it did not (each mismatch is printed), 2 for a variant that cannot be
replayed, 115 when a server is unreachable.`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.Flags().StringVar(&variant, "variant", string(lab.Correct), "model variant: correct (both cases), or no-fence or rollback-issuer (fencing case only; mismatches expected)")
	cmd.Flags().IntVar(&issuer, "issuer", 40, "the model's initial issuer value; a real fresh resource starts at generation 1, so the model's token T is compared with generation T-issuer")
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		v, err := lab.ParseVariant(variant)
		if err != nil {
			return exitcode.With(exitcode.Usage, err)
		}
		cases := []lab.Case{lab.Fencing, lab.Operations}
		if v != lab.Correct {
			cases = cases[:1] // the operations case has no defective variant
		}
		scenarios := make([]lab.Scenario, len(cases))
		for i, k := range cases {
			if scenarios[i], err = lab.NewScenario(k, v, issuer); err != nil {
				return exitcode.With(exitcode.Usage, err)
			}
		}
		env, err := cli.OpenEnv(c)
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
		for i, s := range scenarios {
			env.Log.Info("lab replay: replaying", "case", cases[i], "variant", v, "interleavings", len(s.Interleavings()))
			rep, err := replay.Run(c.Context(), t, s)
			switch {
			case errors.Is(err, replay.ErrNotReplayable):
				return exitcode.With(exitcode.Usage, err)
			case err != nil:
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
			if err := printJSON(env.Stdout, struct {
				Reports []replay.Report `json:"reports"`
			}{reports}); err != nil {
				return err
			}
		}
		if failed > 0 {
			return &exitcode.Error{Code: exitcode.Violation, Err: fmt.Errorf("lab replay: %d steps differ from the model", failed)}
		}
		return nil
	}
	cli.AddConnFlags(cmd)
	return cmd
}
