//go:build !unit

package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/authority"
	"github.com/fencepub/fencepub/internal/devstack"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/testkit/testenv"
	"go.yaml.in/yaml/v3"
)

// kubeletProbe GETs path on addr as a kubelet's httpGet probe does: the
// probe's timeoutSeconds (default 1 s) bounds the request, and a status of
// 200-399 is success. It returns the status (0 when the request failed) and
// the body or the error.
func kubeletProbe(p *k8sProbe, addr string) (int, string) {
	timeout := time.Duration(p.TimeoutSeconds) * time.Second
	if timeout == 0 {
		timeout = time.Second
	}
	c := &http.Client{Timeout: timeout}
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+p.HTTPGet.Path, nil)
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("User-Agent", "kube-probe/1.31")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The GC daemon as deploy/kubernetes/gc-daemon.yaml runs it (its args, its
// environment with the Secret's keys, its ConfigMap as the config file, only
// the servers' addresses and the listen port overridden by environment),
// probed as a kubelet would while its etcd stops and comes back: /readyz is
// ready, then 503 saying etcd, then ready again; /healthz stays 200 the
// whole time (a liveness failure would restart a pod that etcd's outage
// does not concern). The Deployment's other replicas, started the same way,
// are ready and say they are standby, go unready with etcd and come back.
func TestGCDaemonProbesThroughEtcdOutage(t *testing.T) {
	m := decodeManifests(t, "gc-daemon.yaml", deployFile(t, "kubernetes/gc-daemon.yaml"))
	cm, pod := m.configMaps[0], m.deployments[0].Spec.Template.Spec
	c := pod.Containers[0]

	e := testenv.StartEtcd(t, devstack.EtcdOptions{})
	mi := testenv.StartMinIO(t, devstack.MinIOOptions{})
	secret := map[string]string{"s3-access-key": mi.Config.AccessKey, "s3-secret-key": mi.Config.SecretKey}

	// The ConfigMap, mounted where the pod mounts it.
	dir := t.TempDir()
	args := c.Args
	for _, vm := range c.VolumeMounts {
		if vm.Name != "config" {
			continue
		}
		for k, v := range cm.Data {
			if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		args = nil
		for _, a := range c.Args {
			args = append(args, strings.Replace(a, vm.MountPath, dir, 1))
		}
	}
	for _, ev := range c.Env {
		switch {
		case ev.ValueFrom == nil:
			t.Setenv(ev.Name, ev.Value)
		case ev.ValueFrom.SecretKeyRef != nil:
			ref := ev.ValueFrom.SecretKeyRef
			v, ok := secret[ref.Key]
			if !ok && (ref.Optional == nil || !*ref.Optional) {
				t.Fatalf("env %s: secret key %q is not optional", ev.Name, ref.Key)
			}
			if ok {
				t.Setenv(ev.Name, v)
			}
		default:
			t.Fatalf("env %s: unsupported source %+v", ev.Name, ev.ValueFrom)
		}
	}
	freeAddr := func() string {
		t.Helper()
		port, err := devstack.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return "127.0.0.1:" + strconv.Itoa(port)
	}
	addr := freeAddr()
	t.Setenv("FENCEPUB_ETCD_ENDPOINTS", e.Endpoints()[0])
	t.Setenv("FENCEPUB_S3_ENDPOINT", mi.Config.Endpoint)
	t.Setenv("FENCEPUB_S3_BUCKET", mi.Config.Bucket)
	t.Setenv("FENCEPUB_GC_LISTEN", addr)

	// A domain with a published resource, as the workers leave it.
	cfg := loadConfigFile(t, "ConfigMap fencepub.yaml", []byte(cm.Data["fencepub.yaml"]))
	ns, err := layout.NewNamespace(cfg.Namespace.Prefix, cfg.Namespace.Domain)
	if err != nil {
		t.Fatal(err)
	}
	cli, err := devstack.NewEtcdClient(e.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	st, err := mi.Store()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	auth, err := authority.New(authority.Config{Env: fencepub.Env{Namespace: fencepub.Namespace(ns), Etcd: cli, Store: st}})
	if err != nil {
		t.Fatal(err)
	}
	g, err := auth.Acquire(ctx, authority.AcquireRequest{Resource: "job", Owner: "w", TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := auth.Release(ctx, g); err != nil {
		t.Fatal(err)
	}

	dctx, stop := context.WithCancel(ctx)
	var dones []chan string
	start := func() chan string {
		done := make(chan string, 1)
		go func() {
			o, errs, code := publishCLI(t, dctx, "", args...)
			done <- fmt.Sprintf("exit %d\nstdout: %s\nstderr: %s", code, o, errs)
		}()
		dones = append(dones, done)
		return done
	}
	done := start()
	defer func() {
		stop()
		for _, d := range dones {
			select {
			case <-d:
			case <-time.After(15 * time.Second):
				t.Error("daemon did not stop on cancel")
			}
		}
	}()

	// Every period of the readiness probe, both probes; until's condition
	// is on /readyz. /healthz must answer 200 at every round.
	type status struct {
		Ready   bool   `json:"ready"`
		Reason  string `json:"reason"`
		Leader  bool   `json:"leader"`
		Standby bool   `json:"standby"`
	}
	var until func(what string, cond func(code int, st status, body string) bool)
	untilAt := func(addr string, done chan string, what string, cond func(code int, st status, body string) bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			if code, body := kubeletProbe(c.LivenessProbe, addr); code != http.StatusOK && code != 0 {
				t.Fatalf("%s: liveness %d %s", what, code, body)
			}
			code, body := kubeletProbe(c.ReadinessProbe, addr)
			var st status
			if code != 0 {
				if err := json.Unmarshal([]byte(body), &st); err != nil {
					t.Fatalf("%s: readiness body %q: %v", what, body, err)
				}
			}
			if cond(code, st, body) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: last readiness %d %s", what, code, body)
			}
			select {
			case r := <-done:
				t.Fatalf("%s: the daemon ended: %s", what, r)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	until = func(what string, cond func(code int, st status, body string) bool) {
		t.Helper()
		untilAt(addr, done, what, cond)
	}
	until("ready as the leader", func(code int, st status, _ string) bool { return code == http.StatusOK && st.Ready && st.Leader })

	// The other replicas, with the same args and environment, each on its
	// own port (the first has read its configuration).
	type replica struct {
		addr string
		done chan string
	}
	var others []replica
	if m.deployments[0].Spec.Replicas == nil || *m.deployments[0].Spec.Replicas < 2 {
		t.Fatalf("gc-daemon.yaml: want at least 2 replicas, got %v", m.deployments[0].Spec.Replicas)
	}
	for range *m.deployments[0].Spec.Replicas - 1 {
		r := replica{addr: freeAddr()}
		t.Setenv("FENCEPUB_GC_LISTEN", r.addr)
		r.done = start()
		untilAt(r.addr, r.done, "a standby replica ready", func(code int, st status, body string) bool {
			return code == http.StatusOK && st.Ready && st.Standby && !st.Leader && st.Reason == "standby"
		})
		others = append(others, r)
	}
	// From here on the endpoint answers: a refused liveness probe fails.
	live := func(what string) {
		t.Helper()
		if code, body := kubeletProbe(c.LivenessProbe, addr); code != http.StatusOK {
			t.Fatalf("%s: liveness %d %s", what, code, body)
		}
	}
	live("leading")
	leaderBodies(t, c, addr)
	etcdHiccup(t, c.ReadinessProbe, addr, e.Members[0])

	e.Members[0].Stop()
	until("not ready, saying etcd", func(code int, st status, body string) bool {
		live("etcd down")
		return code == http.StatusServiceUnavailable && !st.Ready && strings.Contains(st.Reason, "etcd")
	})
	for _, r := range others {
		untilAt(r.addr, r.done, "a standby not ready, saying etcd", func(code int, st status, body string) bool {
			return code == http.StatusServiceUnavailable && !st.Ready && strings.Contains(st.Reason, "etcd")
		})
	}
	// It stays not ready (and live) while etcd is down.
	for range 3 {
		live("etcd still down")
		if code, body := kubeletProbe(c.ReadinessProbe, addr); code != http.StatusServiceUnavailable || !strings.Contains(body, "etcd") {
			t.Fatalf("etcd down: readiness %d %s", code, body)
		}
	}

	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	if err := e.Members[0].Restart(rctx); err != nil {
		t.Fatal(err)
	}
	until("ready again", func(code int, st status, _ string) bool {
		live("etcd back")
		return code == http.StatusOK && st.Ready
	})
	live("ready again")
	for _, r := range others {
		untilAt(r.addr, r.done, "a standby ready again", func(code int, st status, _ string) bool {
			return code == http.StatusOK && st.Ready && (st.Standby || st.Leader)
		})
	}
}

// leaderBodies checks the probe bodies of a healthy leader at addr: /healthz
// says nothing about readiness (it does not check it), and every field
// that an alert of deploy/monitoring/fencepub-alerts.yaml sends operators
// to ("/healthz field F", "/readyz field F") is in that endpoint's body,
// FencepubGCNotSucceeding naming at least one.
func leaderBodies(t *testing.T, c k8sContainer, addr string) {
	t.Helper()
	bodies := map[string]map[string]any{}
	for path, p := range map[string]*k8sProbe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
		code, body := kubeletProbe(p, addr)
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); code != http.StatusOK || err != nil {
			t.Fatalf("healthy leader %s: %d %s", path, code, body)
		}
		bodies[path] = m
	}
	if r, ok := bodies["/healthz"]["ready"]; ok {
		t.Fatalf("a healthy leader's /healthz says ready: %v (readiness is /readyz's)", r)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(deployFile(t, "monitoring/fencepub-alerts.yaml"), &rules); err != nil {
		t.Fatal(err)
	}
	field := regexp.MustCompile(`(/healthz|/readyz)\s+field\s+(\w+)`)
	named := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, text := range r.Annotations {
				for _, m := range field.FindAllStringSubmatch(text, -1) {
					if _, ok := bodies[m[1]][m[2]]; !ok {
						t.Errorf("alert %s points at %s field %s, which a healthy leader's body %v does not have", r.Alert, m[1], m[2], bodies[m[1]])
					}
					if r.Alert == "FencepubGCNotSucceeding" {
						named++
					}
				}
			}
		}
	}
	if named == 0 {
		t.Error("FencepubGCNotSucceeding names no /healthz or /readyz field")
	}
}

// etcdHiccup freezes etcd's only member (SIGSTOP) across one period of
// the readiness probe rp, so that one probe of the daemon at addr fails
// saying etcd, then thaws it, and probes on at rp's period as a kubelet
// does until one succeeds. The kubelet marks a pod unready after
// failureThreshold failures in a row: one hiccup must not do that, or both
// replicas turn unready together and block node drains.
func etcdHiccup(t *testing.T, rp *k8sProbe, addr string, m *devstack.EtcdMember) {
	t.Helper()
	period := time.Duration(cmp.Or(rp.PeriodSeconds, 10)) * time.Second
	threshold := int(cmp.Or(rp.FailureThreshold, 3))
	next := time.Now()
	probe := func() (int, string) {
		time.Sleep(time.Until(next))
		next = next.Add(period)
		return kubeletProbe(rp, addr)
	}
	if code, body := probe(); code != http.StatusOK {
		t.Fatalf("before the hiccup: readiness %d %s", code, body)
	}
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	code, body := probe() // the cached check has expired: readyCheckTTL < period
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "etcd") {
		t.Fatalf("etcd frozen: readiness %d %s, want 503 saying etcd", code, body)
	}
	failures := 1
	for ; failures < threshold; failures++ {
		if code, _ := probe(); code == http.StatusOK {
			return
		}
	}
	t.Fatalf("one etcd hiccup (frozen for one probe period, %s) failed %d readiness probes in a row: failureThreshold %d makes the pod unready", period, failures, threshold)
}
