package main

import (
	"errors"
	"fmt"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/spf13/cobra"
)

// initOutput is `fencepub init -o json`.
type initOutput struct {
	Domain        string `json:"domain"` // the domain's root, <prefix>/<domain>/
	Epoch         uint64 `json:"epoch"`
	DeploymentID  string `json:"deployment_id"`
	Initialised   bool   `json:"initialised"`    // false: it already was
	BucketCreated bool   `json:"bucket_created"` // --create-bucket made the bucket
}

// newInitCmd builds `fencepub init`.
func newInitCmd() *cobra.Command {
	var createBucket bool
	cmd := &cobra.Command{
		Use:   "init [--create-bucket]",
		Short: "Set the domain up explicitly: bucket, store probe, epoch and deployment id",
		Long: `init sets the configured domain up, as the first acquire would: it checks
that the object store refuses a create-only PUT onto an existing key (a store
that ignores If-None-Match is refused, exit 2), claims the bucket for this
etcd's deployment and creates the domain's first epoch (DESIGN.md "etcd
layout"). With --create-bucket a missing bucket is created first; without it a
missing bucket exits 2, and so does an endpoint that is not an S3 store. On
an initialised domain it changes nothing and prints its epoch, after checking
that the bucket holds the domain's ownership marker (a bucket without it, or
with another deployment's, exits 2: s3.bucket is not the domain's bucket). A
bucket holding another etcd history exits 116 ('fencepub authority recover
--from-bucket').`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().BoolVar(&createBucket, "create-bucket", false, "create the bucket (s3.bucket) if it does not exist")
	out := addOutputFlag(cmd)
	cli.AddConnFlags(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		a, env, err := openAuthority(c)
		if err != nil {
			return err
		}
		defer env.Close()
		o := initOutput{Domain: env.NS.Root()}
		if createBucket {
			if cerr := env.Store.CheckBucket(c.Context()); cerr != nil {
				if err := env.Store.EnsureBucket(c.Context()); err != nil {
					return bucketError(env, err)
				}
				o.BucketCreated = true
			}
		}
		if err := checkStore(c.Context(), env, a); err != nil {
			return err
		}
		_, err = operator.Epoch(c.Context(), a)
		o.Initialised = errors.Is(err, fencepub.ErrNotInitialized)
		if err != nil && !o.Initialised {
			return authorityExit(err)
		}
		d, err := operator.Init(c.Context(), a)
		if err != nil {
			return authorityExit(err)
		}
		o.Epoch, o.DeploymentID = d.Epoch, d.DeploymentID
		if *out == "json" {
			return printJSON(env.Stdout, o)
		}
		verb := "already initialised"
		if o.Initialised {
			verb = "initialised"
		}
		if o.BucketCreated {
			env.Log.Info("created the bucket", "bucket", env.Config.S3.Bucket)
		}
		_, err = fmt.Fprintf(env.Stdout, "%s %s: epoch %d, deployment %s\n", verb, o.Domain, o.Epoch, o.DeploymentID)
		return err
	}
	return cmd
}
