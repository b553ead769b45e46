package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"al.essio.dev/pkg/shellescape"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/publisher"
	"github.com/spf13/cobra"
)

// resolveOptions are the flags of `fencepub resolve`: the attempt, named by
// its flags or by the JSON an unknown publish printed (--from).
type resolveOptions struct {
	resource, key     string
	epoch, fence, seq uint64
	body              bodyFlags // --file, --content-type, --meta: the digest recomputed
	digest, objectKey string    // --sha256, --object-key
	from              string
	timeout           time.Duration
}

// attemptFlags name the attempt without --from.
var attemptFlags = []string{"resource", "key", "epoch", "fence", "seq", "file", "content-type", "meta", "sha256", "object-key"}

// newResolveCmd builds `fencepub resolve`.
func newResolveCmd() *cobra.Command {
	var o resolveOptions
	cmd := &cobra.Command{
		Use:   "resolve (--from FILE | --resource R --key K --epoch E --fence F --seq S (--file PATH | --sha256 HEX | --object-key KEY))",
		Short: "Settle an unknown publish outcome for good",
		Long: `resolve answers whether one publish attempt that ended "unknown" (exit 112)
took effect. It names the attempt: its resource, idempotency key, version
(epoch, fence, seq) and its identity — its request digest, its object key, or
both. --from FILE (or - for stdin) takes all of them from the JSON that the
unknown 'fencepub publish -o json' (or 'fencepub run -o json') printed, as it
was printed; the JSON of an unknown group publish (publish --set) settles the
whole group. Otherwise give the flags, and the identity with:

  --file PATH     the body again (- for stdin) with the same --content-type and
                  --meta as the publish: the request digest is recomputed
                  exactly as publish computes it;
  --sha256 HEX    the request digest, the "digest" field of publish's JSON:
                  sha256 over body, content type and metadata — not what
                  sha256sum prints for the file;
  --object-key KEY  the attempt's object, the "object.key" field of the JSON.

Without any of them resolve cannot tell which attempt it settles (exit 2).

One etcd transaction either finds the key's idempotency record or, finding
none, raises the resource's seal to that version so that the attempt can never
apply later. With a record: "applied" when it names this attempt (its object
key, or its digest: the same operation) at this version, "duplicate" when the
same operation applied at another version, and "conflict" (exit 111) when
another attempt under the same key took effect — the JSON then names the
winner's digest and object. Without one: "stale" with reason "seal" (exit
110). Safe to repeat.

Pass the exact version of the unknown attempt: every version up to it is sealed.
A version no publish can carry — an epoch above the domain's, or a fence never
granted on the resource — is refused (exit 2) and seals nothing; an attempt of
an older epoch is reported stale with reason "epoch" without a seal.

` + publishExitHelp,
		Args: noArgs,
	}
	f := cmd.Flags()
	f.StringVar(&o.resource, "resource", "", "resource name (required without --from)")
	f.StringVar(&o.key, "key", "", "idempotency key of the unknown publish (required without --from)")
	f.Uint64Var(&o.epoch, "epoch", 0, "epoch of the unknown publish's version (required without --from)")
	f.Uint64Var(&o.fence, "fence", 0, "fence of the unknown publish's version (required without --from)")
	f.Uint64Var(&o.seq, "seq", 0, "seq of the unknown publish's version (required without --from)")
	o.body.add(cmd, "the unknown publish's body again, or - for stdin: its request digest names the attempt")
	f.StringVar(&o.digest, "sha256", "", `the attempt's request digest (the "digest" of publish's JSON; not the file's sha256sum)`)
	f.StringVar(&o.objectKey, "object-key", "", `the attempt's object key (the "object.key" of publish's JSON)`)
	f.StringVar(&o.from, "from", "", "the JSON the unknown publish or run printed, from FILE or - for stdin; names the whole attempt")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "upper bound on the whole command, connecting included; etcd unreachable until then exits 115")
	out := addOutputFlag(cmd)
	cli.AddConnFlags(cmd)
	usageErrors(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if err := o.validate(c); err != nil {
			return err
		}
		return o.run(c, *out)
	}
	return cmd
}

// validate checks the flags before any I/O. Errors: usage.
func (o *resolveOptions) validate(c *cobra.Command) error {
	fl := c.Flags()
	if err := positive("timeout", o.timeout); err != nil {
		return err
	}
	if o.from != "" {
		for _, name := range attemptFlags {
			if fl.Changed(name) {
				return exitcode.Usagef("--from names the whole attempt; give it or --%s and the other attempt flags, not both", name)
			}
		}
		return nil
	}
	var missing []string
	for _, name := range attemptFlags[:5] {
		if !fl.Changed(name) {
			missing = append(missing, "--"+name)
		}
	}
	switch {
	case len(missing) > 0:
		return exitcode.Usagef("missing %s (or give --from with the unknown publish's JSON)", strings.Join(missing, ", "))
	case o.body.file == "" && o.digest == "" && o.objectKey == "":
		return exitcode.Usagef("cannot tell which attempt: give its body (--file, with its --content-type and --meta), " +
			"its request digest (--sha256), its object key (--object-key), or --from with the JSON the unknown publish printed; nothing sealed")
	case o.body.file != "" && o.digest != "":
		return exitcode.Usagef("give --file or --sha256, not both: both name the request digest")
	case o.body.file == "" && (fl.Changed("content-type") || fl.Changed("meta")):
		return exitcode.Usagef("--content-type and --meta go with --file: they are part of the request digest")
	}
	return nil
}

// run resolves the attempt and reports it.
func (o *resolveOptions) run(c *cobra.Command, format string) error {
	ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
	defer cancel()
	id := publisher.AttemptID{Digest: strings.ToLower(o.digest), ObjectKey: o.objectKey}
	if o.from != "" {
		a, err := readAttempt(c.InOrStdin(), o.from)
		if err != nil {
			return err
		}
		if len(a.Members) > 0 {
			return o.runGroup(ctx, c, format, a)
		}
		o.resource, o.key, o.epoch, o.fence, o.seq = a.Resource, a.key(), a.Version.Epoch, a.Version.Fence, a.Version.Seq
		id = publisher.AttemptID{Digest: a.Digest, ObjectKey: a.Object.Key}
	}
	if o.body.file != "" {
		digest, err := o.body.digest(ctx, c.InOrStdin(), o.key)
		if err != nil {
			return err
		}
		id.Digest = digest
	}
	client, env, err := resolveClient(ctx, c)
	if err != nil {
		return err
	}
	defer env.Close()
	res, err := client.Resolve(ctx, o.resource, o.key, layout.Version{Epoch: o.epoch, Fence: o.fence, Seq: o.seq}, id)
	return reportResult(c, format, "resolve", res, err)
}

// runGroup settles the unknown group publish a names (publisher.ResolveGroup)
// and reports it as publish --set does.
func (o *resolveOptions) runGroup(ctx context.Context, c *cobra.Command, format string, a attemptJSON) error {
	client, env, err := resolveClient(ctx, c)
	if err != nil {
		return err
	}
	defer env.Close()
	res, err := client.ResolveGroup(ctx, publisher.GroupResult{
		Outcome: publisher.Unknown, IdempotencyKey: a.key(), Digest: a.Digest, Members: a.Members,
	})
	return reportGroup(c, format, res, err)
}

// resolveClient connects within ctx and returns a publisher Client of the
// environment, which the caller closes. Errors: the connection's; usage.
func resolveClient(ctx context.Context, c *cobra.Command) (*publisher.Client, *cli.Env, error) {
	env, err := cli.OpenEnvContext(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	client, err := publisher.New(env.PublisherConfig())
	if err != nil {
		env.Close()
		return nil, nil, exitcode.With(exitcode.Usage, err)
	}
	return client, env, nil
}

// attemptJSON is what --from reads: the JSON document of an unknown
// outcome, as publish (idempotency_key) or run (key) printed it.
type attemptJSON struct {
	Outcome        string         `json:"outcome"`
	Resource       string         `json:"resource"`
	IdempotencyKey string         `json:"idempotency_key"`
	Key            string         `json:"key"`
	Digest         string         `json:"digest"`
	Version        layout.Version `json:"version"`
	Object         struct {
		Key string `json:"key"`
	} `json:"object"`
	// Members are a group publish's members (publish --set).
	Members []publisher.Result `json:"members"`
	// Error and ExitCode are those of a failure (cli.ErrorOutput, or a
	// result that was not applied).
	Error    string `json:"error"`
	ExitCode int    `json:"exit_code"`
}

// key is the idempotency key, under publish's name or run's.
func (a attemptJSON) key() string {
	if a.IdempotencyKey != "" {
		return a.IdempotencyKey
	}
	return a.Key
}

// readAttempt decodes the first JSON document of path ("-": stdin). Errors:
// usage (unreadable, not JSON, a failure before any outcome, not an
// unknown outcome).
func readAttempt(stdin io.Reader, path string) (attemptJSON, error) {
	in := stdin
	if path != "-" {
		fh, err := os.Open(path)
		if err != nil {
			return attemptJSON{}, exitcode.Usagef("--from: %v", err)
		}
		defer fh.Close()
		in = fh
	}
	var a attemptJSON
	if err := json.NewDecoder(in).Decode(&a); err != nil {
		return attemptJSON{}, exitcode.Usagef("--from %s: not the JSON of a publish (-o json): %v", path, err)
	}
	switch {
	case a.Outcome == "" && a.Error != "":
		return attemptJSON{}, exitcode.Usagef("--from %s: the command failed before a publish outcome (exit %d: %s); nothing was published, so there is nothing to resolve",
			path, a.ExitCode, a.Error)
	case a.Outcome != string(publisher.Unknown):
		return attemptJSON{}, exitcode.Usagef("--from %s: the outcome is %q, already definite; resolve settles an %q one", path, a.Outcome, publisher.Unknown)
	}
	return a, nil
}

// resolveHint is the resolve command line that settles res, an unknown
// outcome of key (Result.IdempotencyKey for publish).
func resolveHint(res publisher.Result, key string) string {
	id := res.AttemptID()
	return shellescape.QuoteCommand([]string{"fencepub", "resolve", "--resource", res.Resource, "--key", key,
		"--epoch", strconv.FormatUint(res.Version.Epoch, 10), "--fence", strconv.FormatUint(res.Version.Fence, 10),
		"--seq", strconv.FormatUint(res.Version.Seq, 10), "--sha256", id.Digest, "--object-key", id.ObjectKey})
}
