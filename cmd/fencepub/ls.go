package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/reader"
	"github.com/spf13/cobra"
)

// lsEntry is one resource of `fencepub ls -o json`: the shape of
// `fencepub pointer -o json` plus whether the resource was retired.
type lsEntry struct {
	pointerOutput
	Decommissioned bool `json:"decommissioned"`
	// Files lists a dataset version's manifest (with --resource).
	Files []reader.FileInfo `json:"manifest,omitempty"`
}

// lsOutput is `fencepub ls -o json`. With --resource, Resources holds that
// one resource; its entry is where the files of a dataset version go.
type lsOutput struct {
	Domain    string    `json:"domain"`
	Resources []lsEntry `json:"resources"`
}

// newLsCmd builds `fencepub ls`.
func newLsCmd() *cobra.Command {
	var (
		resource string
		version  string // a retained dataset version to list (lsfiles.go)
		timeout  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "ls [--resource R [--version V]]",
		Short: "List the domain's resources with their published version and time",
		Long: `ls lists the resources of the domain, sorted by name, with their published
version, size, commit time (the publisher's clock, informative) and state:
published, nothing published yet, or decommissioned ('fencepub resource
delete'). It lists every resource a publisher has bound, since a publisher
creates the pointer before a resource's first publish; a resource that was
only acquired so far is shown by --resource. The listing is read at one etcd
revision. Nothing is read from the object store.

With --resource R, only R is shown. A resource never granted in the domain is
then an error, exit 1, unless --allow-missing. When R's version is a dataset,
its manifest follows: every file's path, size and sha256 (read from the object
store); --version V lists the manifest of retained version V instead.

` + readerExitHelp,
		Example: `  fencepub ls
  fencepub ls -o json | jq -r '.resources[] | select(.published) | .resource'
  fencepub ls --resource nightly-report`,
		Args: noArgs,
	}
	cmd.Flags().StringVar(&resource, "resource", "", "show this resource only")
	cmd.Flags().StringVar(&version, "version", "", "with --resource: list the manifest of this retained dataset version, epoch.fence.seq")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "deadline for the whole command, connecting included")
	out := addOutputFlag(cmd)
	allowMissing := addAllowMissing(cmd)
	cli.AddConnFlags(cmd)
	usageErrors(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if err := positive("timeout", timeout); err != nil {
			return err
		}
		if c.Flags().Changed("resource") && resource == "" {
			return exitcode.Usagef("--resource is empty")
		}
		if version != "" && resource == "" {
			return exitcode.Usagef("--version needs --resource")
		}
		ctx, cancel := context.WithTimeout(c.Context(), timeout)
		defer cancel()
		env, err := cli.OpenEnvContext(ctx, c)
		if err != nil {
			return err
		}
		defer env.Close()
		o := lsOutput{Domain: env.NS.Domain, Resources: []lsEntry{}}
		var states []operator.Resource
		never := false
		if resource == "" {
			states, err = operator.Resources(ctx, readerConfig(env))
		} else {
			var r *reader.Reader
			if r, err = reader.New(readerConfig(env), resource); err != nil {
				return readerExit(err)
			}
			var st operator.Resource
			st, err = operator.State(ctx, r)
			if merr := missingResource(ctx, env, err, *allowMissing); merr != nil {
				return merr
			}
			never = errors.Is(err, reader.ErrUnknownResource)
			if never {
				err = nil
			}
			states = append(states, st)
		}
		if err != nil {
			return readerExit(err)
		}
		for _, st := range states {
			o.Resources = append(o.Resources, lsEntry{
				pointerOutput:  pointerOutput{Resource: st.Name, Published: !st.Pointer.Version.IsZero(), NeverGranted: never, Pointer: st.Pointer},
				Decommissioned: st.Seal.Retires(st.Pointer.Version),
			})
		}
		if resource != "" {
			if err := lsFiles(ctx, env, &o.Resources[0], version); err != nil {
				return err
			}
		}
		if *out == "json" {
			return printJSON(c.OutOrStdout(), o)
		}
		return printLs(c.OutOrStdout(), o)
	}
	return cmd
}

// printLs writes the text form of `fencepub ls`: one row per resource.
func printLs(w io.Writer, o lsOutput) error {
	if len(o.Resources) == 0 {
		_, err := fmt.Fprintf(w, "no resources in domain %q\n", o.Domain)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tVERSION\tSIZE\tCOMMITTED_AT\tSTATE")
	for _, e := range o.Resources {
		version, size, at := "-", "-", "-"
		state := "published"
		if e.Published {
			version, size = e.Version.String(), strconv.FormatInt(e.Object.Size, 10)
			if !e.CommittedAt.IsZero() {
				at = e.CommittedAt.UTC().Format(time.RFC3339)
			}
		}
		switch {
		case e.NeverGranted:
			state = "never granted"
		case e.Decommissioned:
			state = "decommissioned"
		case !e.Published:
			state = "nothing published yet"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Resource, version, size, at, state)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printFiles(w, o.Resources)
}

// addAllowMissing registers --allow-missing, which makes a resource never
// granted in the domain an answer ("never granted") instead of an error.
func addAllowMissing(cmd *cobra.Command) *bool {
	return cmd.Flags().Bool("allow-missing", false, "accept a resource never granted in the domain (exit 0) instead of failing with exit 1")
}

// missingResource returns, for err from a reader call, the error of a
// resource with nothing published that the command must not report as
// such: exit 116 when etcd holds none of the bucket's history
// (explainNotPublished), and exit 1 (exitcode.NotFound) for a resource
// never granted in the domain (reader.ErrUnknownResource: a misspelt
// name) unless allowMissing. It returns nil otherwise, err included.
func missingResource(ctx context.Context, env *cli.Env, err error, allowMissing bool) error {
	if !errors.Is(err, reader.ErrNotPublished) {
		return nil
	}
	if herr := explainNotPublished(ctx, env); herr != nil {
		return herr
	}
	if errors.Is(err, reader.ErrUnknownResource) && !allowMissing {
		return exitcode.With(exitcode.NotFound, fmt.Errorf("%w: check the name ('fencepub ls' lists the domain's resources)", err))
	}
	return nil
}

// resourceRead holds the flags of a command that reads one resource once
// (pointer, history): --resource, --timeout, -o and --allow-missing, with
// the connection flags.
type resourceRead struct {
	resource     string
	resources    []string // pointer's repeatable --resource (addResourcesRead)
	timeout      time.Duration
	out          *string
	allowMissing *bool
}

// addResourceRead registers resourceRead's flags on cmd.
func addResourceRead(cmd *cobra.Command) *resourceRead {
	o := &resourceRead{}
	cmd.Flags().StringVar(&o.resource, "resource", "", "resource name (required)")
	return o.addRest(cmd)
}

// addResourcesRead is addResourceRead with a repeatable --resource
// (resourceRead.resources).
func addResourcesRead(cmd *cobra.Command) *resourceRead {
	o := &resourceRead{}
	cmd.Flags().StringArrayVar(&o.resources, "resource", nil, "resource name (required; repeatable: the pointers are read at one etcd revision)")
	return o.addRest(cmd)
}

// addRest registers resourceRead's flags but --resource on cmd.
func (o *resourceRead) addRest(cmd *cobra.Command) *resourceRead {
	cmd.Flags().DurationVar(&o.timeout, "timeout", 30*time.Second, "deadline for the whole command, connecting included")
	_ = cmd.MarkFlagRequired("resource")
	o.out = addOutputFlag(cmd)
	o.allowMissing = addAllowMissing(cmd)
	cli.AddConnFlags(cmd)
	usageErrors(cmd)
	return o
}

// read connects and calls get with the resource's Reader, both under
// --timeout.
// It returns get's error as got, for the caller to classify, and as err
// the command's own failure: a bad --timeout, a failed connection, or a
// resource the command must not report (missingResource).
func (o *resourceRead) read(c *cobra.Command, serializable bool, get func(context.Context, *reader.Reader) error) (got, err error) {
	if err := positive("timeout", o.timeout); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
	defer cancel()
	r, env, err := openReader(ctx, c, o.resource, serializable, 0)
	if err != nil {
		return nil, err
	}
	defer env.Close()
	got = get(ctx, r)
	return got, missingResource(ctx, env, got, *o.allowMissing)
}
