package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/gc"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/fencepub/fencepub/reader"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// verifyFinding is one problem `fencepub verify` found.
type verifyFinding struct {
	Resource string `json:"resource"`
	// Check is what failed: object, history, ops or seal.
	Check   string `json:"check"`
	Key     string `json:"key,omitempty"` // the etcd key or object key concerned
	Problem string `json:"problem"`
}

// verifyResource is the summary of one resource.
type verifyResource struct {
	Resource    string         `json:"resource"`
	Version     layout.Version `json:"version"`
	Seal        layout.Version `json:"seal"`
	Bytes       int64          `json:"bytes_verified"` // of the pointer's object, hashed
	History     int            `json:"history_entries"`
	Ops         int            `json:"op_records"`
	Quarantined []string       `json:"quarantined"` // object keys GC keeps as a lost publish's possible only copy
	InFlight    []string       `json:"in_flight"`   // object keys above max(pointer, seal) in the current epoch
}

// verifyOutput is `fencepub verify -o json`.
type verifyOutput struct {
	Clean     bool             `json:"clean"`
	Epoch     uint64           `json:"epoch"`
	Resources []verifyResource `json:"resources"`
	Findings  []verifyFinding  `json:"findings"`
	Duration  float64          `json:"duration_seconds"`
}

// newVerifyCmd builds `fencepub verify`.
func newVerifyCmd() *cobra.Command {
	var (
		resources []string
		all       bool
	)
	cmd := &cobra.Command{
		Use:   "verify (--resource R ... | --all)",
		Short: "Check the published data: objects, hashes, history, op records and seals",
		Long: `verify checks each resource's data the way 'restic check' checks a
repository, reading only:
  - the pointer's object exists and its bytes hash to the pointer's sha256
    (streamed: memory stays bounded whatever the size); for a dataset
    version, every file its manifest names too, each against its entry;
  - the history is monotonic, each entry's key matches its version, the
    newest entry is the pointer, and every entry whose op record still
    exists matches it (version and digest);
  - every op record names a version at or below the pointer;
  - pointer and seal exist together, the seal decodes and is not from a
    later epoch than the domain's.
It also lists the quarantined and in-flight objects (as GC classifies them,
with the gc.* settings). A terminal gets a progress bar. A clean --all run
records its time in etcd, which the GC daemon exports as
fencepub_gc_last_clean_verify_timestamp_seconds.
Exit codes: 0 clean, 1 with every finding listed, 2 usage, 115 unavailable.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringSliceVar(&resources, "resource", nil, "resource to verify (repeatable)")
	cmd.Flags().BoolVar(&all, "all", false, "verify every resource that has a pointer")
	out := addOutputFlag(cmd)
	cli.AddConnFlags(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if all == (len(resources) > 0) {
			return exitcode.Usagef("give --resource R (repeatable) or --all")
		}
		env, err := cli.OpenEnv(c)
		if err != nil {
			return err
		}
		defer env.Close()
		v := &verifier{env: env, ctx: c.Context()}
		start := time.Now()
		o, err := v.run(c, resources, all)
		if err != nil {
			return err
		}
		o.Duration = time.Since(start).Seconds()
		if o.Clean && all {
			if err := recordCleanVerify(c.Context(), env, time.Now()); err != nil {
				env.Log.Warn("the clean verify could not be recorded for GC's metrics", "err", err)
			}
		}
		if *out == "json" {
			err = printJSON(env.Stdout, o)
		} else {
			err = printVerify(env.Stdout, o)
		}
		if err != nil {
			return err
		}
		if !o.Clean {
			return exitcode.With(exitcode.Internal, fmt.Errorf("verify: %d finding(s)", len(o.Findings)))
		}
		return nil
	}
	return cmd
}

// verifier checks the resources of one domain.
type verifier struct {
	env      *cli.Env
	ctx      context.Context
	findings []verifyFinding
}

func (v *verifier) find(res, check, key, format string, a ...any) {
	v.findings = append(v.findings, verifyFinding{Resource: res, Check: check, Key: key, Problem: fmt.Sprintf(format, a...)})
}

// unpublished says, for res without pointer and seal, whether it was never
// granted or published or is granted with nothing published yet, as the
// reader tells them apart (`pointer`, `read`).
func (v *verifier) unpublished(res string) string {
	r, err := reader.New(readerConfig(v.env), res)
	if err == nil {
		_, err = r.Current(v.ctx)
	}
	switch {
	case errors.Is(err, reader.ErrNotPublished):
		return unpublishedState(errors.Is(err, reader.ErrUnknownResource))
	case err == nil:
		return "published since this check read it"
	}
	return fmt.Sprintf("its grants could not be read: %v", err)
}

// run verifies the resources (every resource with a pointer with all).
func (v *verifier) run(c *cobra.Command, resources []string, all bool) (verifyOutput, error) {
	ns := v.env.NS
	eresp, err := v.env.Etcd.Get(v.ctx, ns.EpochKey())
	if err != nil {
		return verifyOutput{}, etcdExit(err)
	}
	o := verifyOutput{Resources: []verifyResource{}}
	if len(eresp.Kvs) == 1 {
		if o.Epoch, err = layout.DecodeNumber(string(eresp.Kvs[0].Value)); err != nil {
			v.find("", "seal", ns.EpochKey(), "the epoch does not decode: %v", err)
		}
	}
	if all {
		if resources, err = listResources(v.ctx, v.env); err != nil {
			return o, err
		}
	}
	bar := newCountBar(c, v.env.Stderr, len(resources))
	for _, res := range resources {
		r, err := v.resource(res, o.Epoch)
		if err != nil {
			return o, err
		}
		o.Resources = append(o.Resources, r)
		if bar != nil {
			_ = bar.Add(1)
		}
	}
	if bar != nil {
		_ = bar.Finish()
		fmt.Fprintln(v.env.Stderr)
	}
	if len(resources) > 0 {
		if err := v.classify(o.Resources); err != nil {
			return o, err
		}
	}
	o.Findings = append([]verifyFinding{}, v.findings...)
	o.Clean = len(o.Findings) == 0
	return o, nil
}

// listResources returns the resources that have a pointer, in key order.
func listResources(ctx context.Context, env *cli.Env) ([]string, error) {
	prefix := env.NS.PointersPrefix()
	resp, err := env.Etcd.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, etcdExit(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		name, err := url.PathUnescape(strings.TrimPrefix(string(kv.Key), prefix))
		if err == nil && !strings.HasPrefix(name, "_") {
			out = append(out, name)
		}
	}
	return out, nil
}

// resource verifies one resource from one etcd revision.
func (v *verifier) resource(res string, epoch uint64) (verifyResource, error) {
	ns := v.env.NS
	out := verifyResource{Resource: res, Quarantined: []string{}, InFlight: []string{}}
	if err := layout.ValidateResource(res, false); err != nil {
		return out, exitcode.With(exitcode.Usage, err)
	}
	resp, err := v.env.Etcd.Txn(v.ctx).Then(
		clientv3.OpGet(ns.PointerKey(res)), clientv3.OpGet(ns.SealKey(res)),
		clientv3.OpGet(ns.HistoryPrefix(res), clientv3.WithPrefix()),
		clientv3.OpGet(ns.OpsPrefix(res), clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return out, etcdExit(err)
	}
	ptrKVs, sealKVs := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	histKVs, opKVs := resp.Responses[2].GetResponseRange().Kvs, resp.Responses[3].GetResponseRange().Kvs
	out.History, out.Ops = len(histKVs), len(opKVs)
	switch {
	case len(ptrKVs) == 0 && len(sealKVs) == 0:
		v.find(res, "seal", ns.PointerKey(res), "the resource has no pointer and no seal: %s", v.unpublished(res))
		return out, nil
	case len(ptrKVs) == 0 || len(sealKVs) == 0:
		v.find(res, "seal", ns.SealKey(res), "the pointer and the seal must exist together; one is missing")
		return out, nil
	}
	ptr, err := layout.DecodePointer(ptrKVs[0].Value)
	if err != nil {
		v.find(res, "object", ns.PointerKey(res), "the pointer does not decode: %v", err)
		return out, nil
	}
	out.Version = ptr.Version
	if seal, err := layout.DecodeSeal(sealKVs[0].Value); err != nil {
		v.find(res, "seal", ns.SealKey(res), "the seal does not decode: %v", err)
	} else {
		out.Seal = seal.Version
		if seal.Version.Epoch > epoch {
			v.find(res, "seal", ns.SealKey(res), "the seal %s is from an epoch above the domain's (%d)", seal.Version, epoch)
		}
	}
	if ptr.Version.Seq != 0 {
		out.Bytes = v.object(res, ptr)
	}
	if ptr.IsDataset() {
		out.Bytes += v.datasetFiles(res, ptr)
	}
	v.history(res, ptr, histKVs, opKVs)
	for _, kv := range opKVs {
		op, err := layout.DecodeOp(kv.Key, kv.Value)
		if err != nil {
			v.find(res, "ops", string(kv.Key), "the op record does not decode: %v", err)
			continue
		}
		if ptr.Version.Compare(op.Version) < 0 {
			v.find(res, "ops", string(kv.Key), "the op record names %s, above the pointer %s", op.Version, ptr.Version)
		}
	}
	return out, nil
}

// object streams the pointer's object through sha256 and compares it with
// the pointer; it returns the bytes read.
func (v *verifier) object(res string, ptr layout.Pointer) int64 {
	st, err := v.env.Store, error(nil)
	if ptr.Object.Bucket != "" {
		st, err = objstore.InBucket(st, ptr.Object.Bucket)
	}
	var n int64
	h := sha256.New()
	if err == nil {
		var body io.ReadCloser
		if body, _, err = st.Get(v.ctx, ptr.Object.Key, ptr.Object.ETag); err == nil {
			n, err = io.Copy(h, body)
			_ = body.Close()
		}
	}
	switch {
	case errors.Is(err, fencepub.ErrObjectNotFound):
		v.find(res, "object", ptr.Object.Key, "the pointer's object %s is missing", ptr.Version)
	case errors.Is(err, fencepub.ErrConditionFailed):
		v.find(res, "object", ptr.Object.Key, "the pointer's object was replaced: its ETag is not the pointer's %s", ptr.Object.ETag)
	case err != nil:
		v.find(res, "object", ptr.Object.Key, "the pointer's object cannot be read: %v", err)
	case hex.EncodeToString(h.Sum(nil)) != ptr.Object.SHA256:
		v.find(res, "object", ptr.Object.Key, "the object's %d bytes hash to sha256 %s, the pointer says %s", n, hex.EncodeToString(h.Sum(nil)), ptr.Object.SHA256)
	case n != ptr.Object.Size:
		v.find(res, "object", ptr.Object.Key, "the object has %d bytes, the pointer says %d", n, ptr.Object.Size)
	}
	return n
}

// history checks the history entries (in key order) against themselves,
// the pointer and the op records.
func (v *verifier) history(res string, ptr layout.Pointer, histKVs, opKVs []*mvccpb.KeyValue) {
	ops := make(map[string]layout.OpRecord, len(opKVs))
	for _, kv := range opKVs {
		if op, err := layout.DecodeOp(kv.Key, kv.Value); err == nil {
			ops[string(kv.Key)] = op
		}
	}
	var prev layout.Version
	for i, kv := range histKVs {
		key := string(kv.Key)
		e, err := layout.DecodePointer(kv.Value)
		if err != nil {
			v.find(res, "history", key, "the history entry does not decode: %v", err)
			continue
		}
		if key != v.env.NS.HistoryKey(res, e.Version) {
			v.find(res, "history", key, "the entry holds version %s under another version's key", e.Version)
		}
		if i > 0 && prev.Compare(e.Version) >= 0 {
			v.find(res, "history", key, "the history is not monotonic: %s follows %s", e.Version, prev)
		}
		prev = e.Version
		if e.IdempotencyKey == "" {
			continue
		}
		if op, ok := ops[v.env.NS.OpKey(res, e.IdempotencyKey)]; ok && (op.Version != e.Version || op.Digest != e.Digest) {
			v.find(res, "history", key, "the entry (%s, digest %.12s) does not match its op record %q (%s, digest %.12s)",
				e.Version, e.Digest, e.IdempotencyKey, op.Version, op.Digest)
		}
	}
	if ptr.Version.Seq != 0 && prev != ptr.Version {
		v.find(res, "history", v.env.NS.HistoryPrefix(res), "the newest history entry is %s, the pointer %s", prev, ptr.Version)
	}
}

// classify adds the quarantined and in-flight objects of each resource, as
// a GC dry run with the configured gc.* settings classifies them.
func (v *verifier) classify(rs []verifyResource) error {
	col, err := (&gcFlags{cfg: v.env.Config.GC}).collector(v.env, nil)
	if err != nil {
		return err
	}
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.Resource
	}
	rep, err := operator.RunGC(v.ctx, col, gc.RunOptions{Resources: names, DryRun: true}, true)
	if err != nil {
		return gcExit(err)
	}
	for i := range rs {
		prefix := v.env.NS.ObjectsPrefix(rs[i].Resource)
		for _, d := range rep.Decisions {
			switch {
			case !strings.HasPrefix(d.Key, prefix):
			case d.Kind == "quarantined":
				rs[i].Quarantined = append(rs[i].Quarantined, d.Key)
			case d.Kind == "in_flight":
				rs[i].InFlight = append(rs[i].InFlight, d.Key)
			}
		}
	}
	return nil
}

// newCountBar returns a progress bar of n steps on w when
// progressTerminal allows, else nil.
func newCountBar(c *cobra.Command, w io.Writer, n int) *progressbar.ProgressBar {
	f, ok := progressTerminal(c, w)
	if !ok {
		return nil
	}
	return progressbar.NewOptions(n, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription("verify"),
		progressbar.OptionShowCount(), progressbar.OptionThrottle(100*time.Millisecond))
}

// printVerify prints the summary and every finding.
func printVerify(w io.Writer, o verifyOutput) error {
	for _, r := range o.Resources {
		if _, err := fmt.Fprintf(w, "%-20s %s  %d bytes hashed, %d history entries, %d op records, seal %s, %d quarantined, %d in flight\n",
			r.Resource, r.Version, r.Bytes, r.History, r.Ops, r.Seal, len(r.Quarantined), len(r.InFlight)); err != nil {
			return err
		}
	}
	for _, f := range o.Findings {
		if _, err := fmt.Fprintf(w, "FINDING %s %s: %s\n    %s\n", f.Resource, f.Check, f.Problem, f.Key); err != nil {
			return err
		}
	}
	verdict := "clean"
	if !o.Clean {
		verdict = fmt.Sprintf("%d finding(s)", len(o.Findings))
	}
	_, err := fmt.Fprintf(w, "verify: %d resource(s) in %.2fs: %s\n", len(o.Resources), o.Duration, verdict)
	return err
}

// etcdExit is the exit-115 error of a failed etcd read.
func etcdExit(err error) error {
	return exitcode.With(exitcode.Unavailable, fmt.Errorf("etcd: %w", err))
}

// recordCleanVerify stores at, the end of a clean `verify --all`, in the
// domain's verify key (layout.Namespace.VerifyKey), where the GC daemon
// reads it for fencepub_gc_last_clean_verify_timestamp_seconds.
func recordCleanVerify(ctx context.Context, env *cli.Env, at time.Time) error {
	_, err := env.Etcd.Put(ctx, env.NS.VerifyKey(), at.UTC().Format(time.RFC3339Nano))
	return err
}
