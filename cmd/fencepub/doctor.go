package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/cli"
	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/objstore"
	"github.com/fencepub/fencepub/internal/objstore/s3store"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Doctor check results.
const (
	checkPass = "pass"
	checkWarn = "warn"
	checkFail = "fail"
)

// doctorTimeout bounds each check's server calls.
const doctorTimeout = 5 * time.Second

// maxClockOffset is the clock offset to etcd's leader above which doctor
// warns: the Date header it is measured with has a 1 s resolution.
const maxClockOffset = 2 * time.Second

// doctorCheck is one check of `fencepub doctor`.
type doctorCheck struct {
	Name   string `json:"name"`
	Status string `json:"status"` // pass, warn or fail
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// doctorOutput is `fencepub doctor -o json`.
type doctorOutput struct {
	OK     bool          `json:"ok"` // no check failed
	Checks []doctorCheck `json:"checks"`
	// Protection is absent when the bucket could not be checked.
	Protection *doctorProtection `json:"protection,omitempty"`
}

// doctorProtection is what keeps a published object's bytes from an
// overwrite by the credentials doctor ran with (docs/security-object-store.md).
type doctorProtection struct {
	// Versioning is "on", "suspended", "off", or "unknown" when the
	// bucket's settings could not be read.
	Versioning string `json:"versioning"`
	// NoncurrentExpiryRule and NoncurrentExpiryDays name the enabled
	// lifecycle rule that expires the noncurrent versions of every key
	// under the domain root soonest, and its days; "" and 0 when none does.
	NoncurrentExpiryRule string `json:"noncurrent_expiry_rule"`
	NoncurrentExpiryDays int    `json:"noncurrent_expiry_days"`
	// CreateOnlyEnforced is true when the store refused these credentials
	// a PUT without If-None-Match onto an existing key, false when it let
	// it through, null when not checked.
	CreateOnlyEnforced *bool `json:"create_only_enforced"`
}

// doctor runs the checks of one configuration.
type doctor struct {
	cfg    config.Config
	env    *cli.Env // nil when etcd could not be reached
	store  objstore.Store
	checks []doctorCheck
	prot   *doctorProtection // set once the bucket exists
}

func (d *doctor) add(name, status, detail, fix string) {
	d.checks = append(d.checks, doctorCheck{Name: name, Status: status, Detail: detail, Fix: fix})
}

// newDoctorCmd builds `fencepub doctor`.
func newDoctorCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check etcd, the bucket, the store's conditional requests and the domain",
		Long: `doctor checks what fencepub needs of its servers and prints each check as
pass, warn or fail with the fix: etcd reachability, credentials and version;
that the bucket exists; that the store refuses a create-only PUT onto an
existing key (a store that does not is refused: fencing's defence in depth
and its markers rely on it); that If-Match GETs are honoured; bucket
versioning and lifecycle rules; whether these credentials can overwrite an
existing object and whether versioning keeps the replaced bytes; the
domain's state (initialised, epoch, another etcd history, needs recover);
that the bucket holds the domain's ownership marker (a bucket without it, or
with another deployment's, fails: s3.bucket is not the domain's bucket); and
the clock offset to etcd's leader. An s3.endpoint that answers but is not an
S3 store fails the bucket check saying so. It writes only the probe object
<prefix>/_fencepub/probe/create-only: create-only, then once without
If-None-Match with the same bytes.
Exit codes: 0 when no check fails (warnings allowed), 1 when one does, 2 for
a configuration that does not load.`,
		Args: cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cli.AddConnFlags(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		lc, err := cli.LoadConfig(c)
		if err != nil {
			return err
		}
		d := &doctor{cfg: lc.Config}
		d.run(c, lc)
		if d.env != nil {
			defer d.env.Close()
		}
		o := doctorOutput{OK: true, Checks: d.checks, Protection: d.prot}
		failed := 0
		for _, ch := range d.checks {
			if ch.Status == checkFail {
				failed++
				o.OK = false
			}
		}
		if *out == "json" {
			if err := printJSON(c.OutOrStdout(), o); err != nil {
				return err
			}
		} else if err := printDoctor(c.OutOrStdout(), o); err != nil {
			return err
		}
		if failed > 0 {
			return exitcode.With(exitcode.Internal, fmt.Errorf("doctor: %d check(s) failed", failed))
		}
		return nil
	}
	return cmd
}

// run runs every check, skipping (as warn) those whose server is
// unreachable.
func (d *doctor) run(c *cobra.Command, lc cli.LoadedConfig) {
	ctx := c.Context()
	env, err := cli.Connect(c, lc)
	if err != nil {
		d.add("etcd", checkFail, err.Error(), "check etcd.endpoints (--etcd-endpoints), etcd.username and FENCEPUB_ETCD_PASSWORD, etcd.tls.*")
		st, serr := s3store.New(d.cfg.S3)
		if serr != nil {
			d.add("bucket", checkFail, serr.Error(), "fix the s3.* keys")
			return
		}
		d.store = st
	} else {
		d.env, d.store = env, env.Store
		d.checkEtcd(ctx)
	}
	bucket := d.checkBucket(ctx)
	if bucket {
		d.prot = &doctorProtection{Versioning: "unknown"}
		createOnly := d.checkCreateOnly(ctx)
		d.checkIfMatch(ctx)
		d.checkSettings(ctx)
		d.checkOverwrite(ctx, createOnly)
	}
	if d.env == nil {
		d.add("domain", checkWarn, "not checked: etcd unreachable", "")
		d.add("clock", checkWarn, "not checked: etcd unreachable", "")
		return
	}
	if d.checkDomain(ctx) && bucket {
		d.checkOwnership(ctx)
	}
	d.checkClock(ctx)
}

func (d *doctor) checkEtcd(ctx context.Context) {
	var versions, down []string
	for _, ep := range d.env.Etcd.Endpoints() {
		sctx, cancel := context.WithTimeout(ctx, doctorTimeout)
		st, err := d.env.Etcd.Status(sctx, ep)
		cancel()
		if err != nil {
			down = append(down, fmt.Sprintf("%s (%v)", ep, err))
			continue
		}
		versions = append(versions, ep+" "+st.Version)
	}
	detail := fmt.Sprintf("%d of %d endpoint(s) answer with these credentials: %s", len(versions), len(versions)+len(down), strings.Join(versions, ", "))
	if len(down) > 0 {
		d.add("etcd", checkWarn, detail+"; not answering: "+strings.Join(down, ", "), "a member is down or unreachable: with a quorum fencepub keeps working; restore the member")
		return
	}
	d.add("etcd", checkPass, detail, "")
}

// checkBucket reports whether the bucket exists.
func (d *doctor) checkBucket(ctx context.Context) bool {
	bctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	err := d.store.CheckBucket(bctx)
	switch {
	case err == nil:
		d.add("bucket", checkPass, fmt.Sprintf("bucket %q exists at %s", d.store.BucketName(), d.cfg.S3.Endpoint), "")
		return true
	case errors.Is(err, fencepub.ErrObjectNotFound):
		d.add("bucket", checkFail, fmt.Sprintf("bucket %q does not exist at %s", d.store.BucketName(), d.cfg.S3.Endpoint), "fencepub init --create-bucket (or fix s3.bucket)")
	case errors.Is(err, fencepub.ErrInvalid): // keys or TLS refused, an s3.endpoint that is not S3: the message names the key
		d.add("bucket", checkFail, err.Error(), "fix the configuration the message names (the keys may come from FENCEPUB_S3_ACCESS_KEY / FENCEPUB_S3_SECRET_KEY)")
	default:
		d.add("bucket", checkFail, err.Error(), "check s3.endpoint (--s3-endpoint), s3.secure and s3.tls.*, and that the store is up")
	}
	return false
}

func (d *doctor) probeKey() string {
	ns, _ := d.cfg.NS() // validated by LoadConfig
	return ns.CreateOnlyProbeObject()
}

// checkCreateOnly reports whether the store refuses a create-only PUT
// onto an existing key.
func (d *doctor) checkCreateOnly(ctx context.Context) bool {
	pctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	err := objstore.ProbeCreateOnly(pctx, d.store, d.probeKey())
	switch {
	case err == nil:
		d.add("create-only", checkPass, "a create-only PUT (If-None-Match: *) onto an existing key is refused with 412", "")
		return true
	case errors.Is(err, fencepub.ErrCreateOnlyIgnored):
		d.add("create-only", checkFail, err.Error(), "fencepub refuses this store: use one that honours If-None-Match (MinIO, AWS S3)")
	default:
		d.add("create-only", checkFail, "the probe could not write: "+err.Error(), "the credentials need s3:PutObject on the bucket (a reader's do not: run doctor with a worker's)")
	}
	return false
}

func (d *doctor) checkIfMatch(ctx context.Context) {
	ictx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	key := d.probeKey()
	info, err := d.store.Stat(ictx, key)
	if err != nil {
		d.add("if-match", checkWarn, "not checked: the probe object cannot be read: "+err.Error(), "")
		return
	}
	get := func(etag string) error {
		body, _, err := d.store.Get(ictx, key, etag)
		if err == nil {
			_, err = io.Copy(io.Discard, body)
			_ = body.Close()
		}
		return err
	}
	if err := get(info.ETag); err != nil {
		d.add("if-match", checkFail, "a GET with If-Match on the object's own ETag failed: "+err.Error(), "readers GET with If-Match: the store must support it")
		return
	}
	wrong := "00000000000000000000000000000000"
	if err := get(wrong); !errors.Is(err, fencepub.ErrConditionFailed) {
		d.add("if-match", checkFail, fmt.Sprintf("a GET with If-Match on another ETag was not refused with 412 (%v)", err), "readers rely on If-Match to detect a replaced object: use a store that honours it")
		return
	}
	d.add("if-match", checkPass, "GETs honour If-Match (the object's ETag reads, another answers 412)", "")
}

// checkSettings reports bucket versioning and lifecycle rules: versioning
// without a rule expiring noncurrent versions keeps deleted bytes for ever,
// and a rule acting on current objects deletes behind GC's back. It fills
// d.prot's versioning and noncurrent expiry.
func (d *doctor) checkSettings(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	set, err := d.store.Settings(sctx)
	if err != nil {
		d.add("versioning", checkWarn, "could not read the bucket's versioning and lifecycle rules: "+err.Error(),
			"the credentials need s3:GetBucketVersioning and s3:GetLifecycleConfiguration on the bucket (examples/policies grant them)")
		return
	}
	ns, _ := d.cfg.NS() // validated by LoadConfig
	root := ns.Root()
	rule, expiring := set.NoncurrentExpiry(root)
	expiry := fmt.Sprintf("no enabled lifecycle rule expires the noncurrent versions under %s", root)
	if expiring {
		d.prot.NoncurrentExpiryRule, d.prot.NoncurrentExpiryDays = rule.ID, rule.NoncurrentDays
		expiry = fmt.Sprintf("lifecycle rule %q expires the noncurrent versions under %s %d day(s) after they stop being current", rule.ID, root, rule.NoncurrentDays)
	}
	switch set.Versioning {
	case "Enabled":
		d.prot.Versioning = "on"
		if expiring {
			d.add("versioning", checkPass, "bucket versioning is on and "+expiry+": the bytes of an overwritten or deleted object stay that long", "")
		} else {
			d.add("versioning", checkWarn, "bucket versioning is on and "+expiry+": GC's deletes leave noncurrent versions, so space is never freed",
				"add a lifecycle rule that expires noncurrent versions (examples/policies/lifecycle-noncurrent.json), or suspend versioning")
		}
	case "Suspended":
		d.prot.Versioning = "suspended"
		d.add("versioning", checkWarn, "bucket versioning is suspended ("+expiry+"): a write or a delete replaces an object's null version, so the bytes of an overwritten object are not kept",
			"enable versioning with a lifecycle rule that expires noncurrent versions (docs/security-object-store.md)")
	default:
		d.prot.Versioning = "off"
		d.add("versioning", checkPass, "bucket versioning is off: GC's deletes free space at once, and the bytes of an overwritten object are not kept (see the overwrite check)", "")
	}
	bypass := set.BypassingRules()
	switch {
	case len(set.LifecycleRules) == 0:
		d.add("lifecycle", checkPass, "no lifecycle rules", "")
	case len(bypass) == 0:
		d.add("lifecycle", checkPass, fmt.Sprintf("%d lifecycle rule(s), each only expiring noncurrent versions or expired delete markers: none removes a current object", len(set.LifecycleRules)), "")
	default:
		d.add("lifecycle", checkWarn, fmt.Sprintf("%d lifecycle rule(s) acting on current objects or uploads: one that covers %s/ could delete a published object (GC is the only deleter)", len(bypass), d.cfg.Namespace.Prefix),
			"limit the rules to other prefixes, or to noncurrent versions")
	}
}

// checkOverwrite reports whether these credentials can overwrite an
// existing object (objstore.ProbeOverwrite on the probe object, after the
// create-only probe passed) and whether versioning keeps the bytes it
// replaces. It fills d.prot's CreateOnlyEnforced.
func (d *doctor) checkOverwrite(ctx context.Context, createOnly bool) {
	ow, ok := d.store.(objstore.Overwriter)
	switch {
	case !createOnly:
		d.add("overwrite", checkWarn, "not checked: the create-only probe did not pass", "")
		return
	case !ok:
		d.add("overwrite", checkWarn, "not checked: this store sends no PUT without If-None-Match", "")
		return
	}
	octx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	refused, err := objstore.ProbeOverwrite(octx, ow, d.probeKey())
	if err != nil {
		d.add("overwrite", checkWarn, "not checked: a PUT without If-None-Match onto the probe object failed: "+err.Error(), "")
		return
	}
	d.prot.CreateOnlyEnforced = &refused
	const can = "these credentials can overwrite an existing object (the store let a PUT without If-None-Match onto the probe object through)"
	switch {
	case refused:
		d.add("overwrite", checkPass, "the store refuses these credentials a PUT without If-None-Match onto an existing object (access denied): they can only create objects", "")
	case d.prot.Versioning == "on":
		d.add("overwrite", checkPass, can+"; bucket versioning keeps the replaced bytes as a noncurrent version (see the versioning check)", "")
	default:
		d.add("overwrite", checkWarn, can+" and bucket versioning is "+d.prot.Versioning+": readers refuse an overwritten object (If-Match, sha256), but its published bytes are lost",
			"enable bucket versioning with a lifecycle rule that expires noncurrent versions (examples/policies/lifecycle-noncurrent.json); on AWS S3, give workers examples/policies/worker-aws.json (docs/security-object-store.md)")
	}
}

// checkDomain reports the domain's state; true when it is initialised.
func (d *doctor) checkDomain(ctx context.Context) bool {
	a, err := authority.New(d.env.AuthorityConfig())
	if err != nil {
		d.add("domain", checkFail, err.Error(), "")
		return false
	}
	dctx, cancel := context.WithTimeout(ctx, 2*doctorTimeout)
	defer cancel()
	root := d.env.NS.Root()
	if err := operator.CheckHistory(dctx, a); err != nil {
		fix := ""
		if errors.Is(err, authority.ErrForeignHistory) {
			fix = "the bucket holds another etcd history: 'fencepub authority recover --from-bucket' takes it over (docs/operations.md), or use another namespace.prefix / namespace.domain"
		}
		d.add("domain", checkFail, err.Error(), fix)
		return false
	}
	epoch, err := operator.Epoch(dctx, a)
	if errors.Is(err, fencepub.ErrNotInitialized) {
		d.add("domain", checkWarn, root+" is not initialised", "fencepub init (the first acquire also initialises it)")
		return false
	}
	if err != nil {
		d.add("domain", checkFail, err.Error(), "")
		return false
	}
	resp, err := d.env.Etcd.Get(dctx, d.env.NS.RollbackKey(), clientv3.WithCountOnly())
	if err != nil {
		d.add("domain", checkFail, err.Error(), "")
		return false
	}
	if resp.Count > 0 {
		d.add("domain", checkFail, fmt.Sprintf("%s, epoch %d, needs recover: a grant found the authority's counters rolled back (an etcd restore)", root, epoch),
			"fencepub authority recover (docs/operations.md, \"Restore runbook\")")
		return false
	}
	d.add("domain", checkPass, fmt.Sprintf("%s initialised, epoch %d", root, epoch), "")
	return true
}

// checkOwnership checks that the bucket's ownership marker names etcd's
// deployment (operator.CheckOwnership, DESIGN.md invariant 9): a bucket
// without it, or with another deployment's, is not the domain's bucket,
// and publishes there would never be collected.
func (d *doctor) checkOwnership(ctx context.Context) {
	a, err := authority.New(d.env.AuthorityConfig())
	if err != nil {
		d.add("ownership", checkFail, err.Error(), "")
		return
	}
	octx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	dom, err := operator.CheckOwnership(octx, a)
	switch {
	case err == nil:
		d.add("ownership", checkPass, fmt.Sprintf("bucket %q holds the ownership marker of this etcd's deployment %s", d.store.BucketName(), dom.DeploymentID), "")
	case errors.Is(err, authority.ErrNoOwnership), errors.Is(err, authority.ErrForeignDeployment):
		d.add("ownership", checkFail, err.Error(),
			"s3.bucket is not the bucket this domain was initialised with: point s3.bucket (--s3-bucket) back at it, or namespace.prefix / namespace.domain at the domain this bucket belongs to")
	default:
		d.add("ownership", checkFail, err.Error(), "")
	}
}

// checkClock measures this host's clock against etcd's leader from the
// Date header of its /health endpoint, against the midpoint of the request.
func (d *doctor) checkClock(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	url, err := d.leaderURL(cctx)
	if err != nil {
		d.add("clock", checkWarn, "not measurable: "+err.Error(), "")
		return
	}
	tlsCfg, err := d.cfg.EtcdTLS()
	if err != nil {
		d.add("clock", checkWarn, "not measurable: "+err.Error(), "")
		return
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		d.add("clock", checkWarn, "not measurable: "+err.Error(), "")
		return
	}
	t0 := time.Now()
	resp, err := hc.Do(req)
	t1 := time.Now()
	if err != nil {
		d.add("clock", checkWarn, "not measurable: "+err.Error(), "")
		return
	}
	_ = resp.Body.Close()
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		d.add("clock", checkWarn, "not measurable: etcd's leader sent no Date header", "")
		return
	}
	mid := t0.Add(t1.Sub(t0) / 2)
	offset := date.Sub(mid.Truncate(time.Second)).Round(time.Second)
	detail := fmt.Sprintf("this host's clock is %s from etcd's leader %s (±1s; gc.clock_skew allows %s)", offset, url, d.cfg.GC.ClockSkew)
	if offset > maxClockOffset || offset < -maxClockOffset {
		d.add("clock", checkWarn, detail, "synchronise clocks (chrony, systemd-timesyncd): record ages come from etcd's clock, but GC's retention allows only gc.clock_skew")
		return
	}
	d.add("clock", checkPass, detail, "")
}

// leaderURL returns a client URL of etcd's leader.
func (d *doctor) leaderURL(ctx context.Context) (string, error) {
	cli := d.env.Etcd
	for _, ep := range cli.Endpoints() {
		st, err := cli.Status(ctx, ep)
		if err != nil {
			continue
		}
		ml, err := cli.MemberList(ctx)
		if err != nil {
			return "", err
		}
		for _, m := range ml.Members {
			if m.ID == st.Leader && len(m.ClientURLs) > 0 {
				return m.ClientURLs[0], nil
			}
		}
		return "", errors.New("the leader has no client URL")
	}
	return "", errors.New("no endpoint answers a status request")
}

// printDoctor prints one line per check, the fix under it.
func printDoctor(w io.Writer, o doctorOutput) error {
	for _, ch := range o.Checks {
		if _, err := fmt.Fprintf(w, "%-4s  %-12s %s\n", strings.ToUpper(ch.Status), ch.Name, ch.Detail); err != nil {
			return err
		}
		if ch.Fix != "" && ch.Status != checkPass {
			if _, err := fmt.Fprintf(w, "      %-12s fix: %s\n", "", ch.Fix); err != nil {
				return err
			}
		}
	}
	return nil
}
