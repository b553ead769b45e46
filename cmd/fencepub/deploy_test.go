package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/cli/config"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// repoRoot is the checkout holding this package (cmd/fencepub).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// deployFile reads a file of the checkout's deploy/ directory.
func deployFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The Kubernetes objects of deploy/kubernetes, as far as these tests read
// them: which fencepub command each container runs, with which
// environment, configuration and probes. Decoding is not strict here; the
// harness module's deploytest decodes the same files strictly into their
// k8s.io/api types (which fencepub's go.mod does not carry) and checks
// what Kubernetes makes of them: selectors, ports, the Secret, restarts.
type (
	k8sObject struct {
		Kind     string                `yaml:"kind"`
		Metadata struct{ Name string } `yaml:"metadata"`
		Data     map[string]string     `yaml:"data"` // a ConfigMap's
		Spec     struct {
			Replicas    *int32      `yaml:"replicas"`
			Template    k8sTemplate `yaml:"template"` // a Deployment's
			JobTemplate struct {
				Spec struct {
					Template k8sTemplate `yaml:"template"`
				} `yaml:"spec"`
			} `yaml:"jobTemplate"` // a CronJob's
		} `yaml:"spec"`
	}
	k8sTemplate struct {
		Spec k8sPod `yaml:"spec"`
	}
	k8sPod struct {
		Containers                    []k8sContainer      `yaml:"containers"`
		Volumes                       []k8sVolume         `yaml:"volumes"`
		SecurityContext               *k8sSecurityContext `yaml:"securityContext"`
		TerminationGracePeriodSeconds *int64              `yaml:"terminationGracePeriodSeconds"`
	}
	k8sVolume struct {
		Name      string                 `yaml:"name"`
		ConfigMap *struct{ Name string } `yaml:"configMap"`
		EmptyDir  *struct{}              `yaml:"emptyDir"`
	}
	// k8sSecurityContext is both a pod's and a container's (the fields
	// either may set).
	k8sSecurityContext struct {
		RunAsUser                *int64 `yaml:"runAsUser"`
		RunAsGroup               *int64 `yaml:"runAsGroup"`
		ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
		Capabilities             *struct {
			Add  []string `yaml:"add"`
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	}
	k8sContainer struct {
		Name         string      `yaml:"name"`
		Command      []string    `yaml:"command"`
		Args         []string    `yaml:"args"`
		Env          []k8sEnvVar `yaml:"env"`
		VolumeMounts []struct {
			Name      string `yaml:"name"`
			MountPath string `yaml:"mountPath"`
			ReadOnly  bool   `yaml:"readOnly"`
		} `yaml:"volumeMounts"`
		Ports           []k8sPort           `yaml:"ports"`
		SecurityContext *k8sSecurityContext `yaml:"securityContext"`
		LivenessProbe   *k8sProbe           `yaml:"livenessProbe"`
		ReadinessProbe  *k8sProbe           `yaml:"readinessProbe"`
	}
	k8sPort struct {
		ContainerPort int32 `yaml:"containerPort"`
	}
	k8sEnvVar struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name     string `yaml:"name"`
				Key      string `yaml:"key"`
				Optional *bool  `yaml:"optional"`
			} `yaml:"secretKeyRef"`
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	}
	k8sProbe struct {
		HTTPGet *struct {
			Path string `yaml:"path"`
		} `yaml:"httpGet"`
		TimeoutSeconds   int32 `yaml:"timeoutSeconds"`
		PeriodSeconds    int32 `yaml:"periodSeconds"`
		FailureThreshold int32 `yaml:"failureThreshold"`
	}
)

// manifests holds the objects of a Kubernetes file by kind.
type manifests struct {
	configMaps  []*k8sObject
	deployments []*k8sObject
	cronJobs    []*k8sObject
}

// decodeManifests decodes every YAML document of a Kubernetes file; a
// kind other than ConfigMap, Deployment, Service, PodDisruptionBudget and
// CronJob is an error.
func decodeManifests(t *testing.T, name string, b []byte) *manifests {
	t.Helper()
	m := &manifests{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for i := 0; ; i++ {
		o := &k8sObject{}
		err := dec.Decode(o)
		if errors.Is(err, io.EOF) {
			return m
		}
		if err != nil {
			t.Fatalf("%s document %d: %v", name, i, err)
		}
		switch o.Kind {
		case "ConfigMap":
			m.configMaps = append(m.configMaps, o)
		case "Deployment":
			m.deployments = append(m.deployments, o)
		case "CronJob":
			m.cronJobs = append(m.cronJobs, o)
		case "Service", "PodDisruptionBudget":
		default:
			t.Fatalf("%s document %d: unexpected kind %q", name, i, o.Kind)
		}
	}
}

// checkInvocation parses argv (what follows the fencepub executable) with
// the real command tree: the subcommand must exist and be runnable, every
// flag must exist, parse and not be a deprecated spelling (hidden:
// cli.Deprecate), and the positional arguments must pass the command's own
// check. It returns the command with its flags parsed.
func checkInvocation(t *testing.T, where string, argv []string) *cobra.Command {
	t.Helper()
	root := newRootCmd()
	cmd, rest, err := root.Find(argv)
	if err != nil || cmd == root || !cmd.Runnable() {
		t.Fatalf("%s: fencepub %q: no such command (%v)", where, argv, err)
	}
	if err := cmd.ParseFlags(rest); err != nil {
		t.Fatalf("%s: %s: %v", where, cmd.CommandPath(), err)
	}
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		if fl.Hidden {
			t.Errorf("%s: %s uses the deprecated flag --%s", where, cmd.CommandPath(), fl.Name)
		}
	})
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		t.Fatalf("%s: %s: %v", where, cmd.CommandPath(), err)
	}
	return cmd
}

// containerInvocation returns the fencepub arguments of a container: its
// args under the image's ENTRYPOINT (/fencepub) when command is unset, else
// command must be a fencepub executable.
func containerInvocation(t *testing.T, where string, c k8sContainer) *cobra.Command {
	t.Helper()
	argv := append(slices.Clone(c.Command), c.Args...)
	if len(c.Command) > 0 {
		if filepath.Base(c.Command[0]) != "fencepub" {
			t.Fatalf("%s: command %q is not fencepub", where, c.Command)
		}
		argv = argv[1:]
	}
	return checkInvocation(t, where, argv)
}

// knownEnv is every FENCEPUB_* variable fencepub reads: one per
// configuration key (key a.b_c is FENCEPUB_A_B_C, config.NewViper) and
// those the CLI's own source reads with os.Getenv.
func knownEnv(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	for _, k := range config.Keys {
		known["FENCEPUB_"+strings.ToUpper(strings.ReplaceAll(k, ".", "_"))] = true
	}
	srcs, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	getenv := regexp.MustCompile(`os\.(?:Getenv|LookupEnv)\("(FENCEPUB_[A-Z0-9_]+)"\)`)
	for _, f := range srcs {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range getenv.FindAllSubmatch(b, -1) {
			known[string(m[1])] = true
		}
	}
	if !known["FENCEPUB_RUN_ID"] || !known["FENCEPUB_S3_SECRET_KEY"] {
		t.Fatalf("known environment incomplete: %v", known)
	}
	return known
}

// checkEnvNames fails for a FENCEPUB_* name in b that fencepub does not
// read.
func checkEnvNames(t *testing.T, name string, b []byte, known map[string]bool) {
	t.Helper()
	for _, v := range regexp.MustCompile(`FENCEPUB_[A-Z0-9_]+`).FindAll(b, -1) {
		if !known[string(v)] {
			t.Fatalf("%s: %s is not a variable fencepub reads", name, v)
		}
	}
}

// loadConfigFile loads a fencepub.yaml as every command does (unknown keys
// and wrong types are errors) and validates the gc.* settings.
func loadConfigFile(t *testing.T, name string, b []byte) config.Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fencepub.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	v := config.NewViper()
	if _, err := config.ReadFile(v, path); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	cfg, err := config.Load(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := cfg.GC.Validate(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return cfg
}

// checkPod checks what both workloads share, as far as fencepub is
// concerned: one container, whose --config is the fencepub.yaml of the
// ConfigMap of gc-daemon.yaml mounted in it, whose environment names only
// variables fencepub reads, with the S3 keys (and no secret of the
// configuration) written in the manifest rather than taken from a Secret.
func checkPod(t *testing.T, where string, pod k8sPod, cmd *cobra.Command, cm *k8sObject, known map[string]bool) k8sContainer {
	t.Helper()
	if len(pod.Containers) != 1 {
		t.Fatalf("%s: %d containers, want 1", where, len(pod.Containers))
	}
	c := pod.Containers[0]
	cfgPath, _ := cmd.Flags().GetString("config")
	var mounted bool
	for _, vm := range c.VolumeMounts {
		for _, vol := range pod.Volumes {
			if vol.Name == vm.Name && vol.ConfigMap != nil && vol.ConfigMap.Name == cm.Metadata.Name &&
				filepath.Join(vm.MountPath, "fencepub.yaml") == cfgPath {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Fatalf("%s: --config %q is not the ConfigMap %s's fencepub.yaml", where, cfgPath, cm.Metadata.Name)
	}
	for _, e := range c.Env {
		if !known[e.Name] {
			t.Fatalf("%s: env %s is not a variable fencepub reads", where, e.Name)
		}
		if config.SecretKeys[strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(e.Name, "FENCEPUB_"), "_", "."))] && e.ValueFrom == nil {
			t.Fatalf("%s: secret %s is written in the manifest", where, e.Name)
		}
	}
	for _, k := range []string{"FENCEPUB_S3_ACCESS_KEY", "FENCEPUB_S3_SECRET_KEY"} {
		if !slices.ContainsFunc(c.Env, func(e k8sEnvVar) bool {
			return e.Name == k && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil
		}) {
			t.Fatalf("%s: %s does not come from a Secret", where, k)
		}
	}
	return c
}

// deploy/kubernetes/gc-daemon.yaml runs `fencepub gc daemon` with flags
// that exist and its ConfigMap as the config file, which loads as fencepub
// loads it, with gc.listen ":9464" on a container port and not overridden
// by --listen; liveness and readiness probes are set (their paths and ports
// are deploytest's, in the harness module).
func TestDeployKubernetesGCDaemon(t *testing.T) {
	t.Parallel()
	b := deployFile(t, "kubernetes/gc-daemon.yaml")
	known := knownEnv(t)
	checkEnvNames(t, "gc-daemon.yaml", b, known)
	m := decodeManifests(t, "gc-daemon.yaml", b)
	if len(m.configMaps) != 1 || len(m.deployments) != 1 || len(m.cronJobs) != 0 {
		t.Fatalf("gc-daemon.yaml: want one ConfigMap and one Deployment; got %d %d", len(m.configMaps), len(m.deployments))
	}
	cm, pod := m.configMaps[0], m.deployments[0].Spec.Template.Spec
	cfg := loadConfigFile(t, "ConfigMap fencepub.yaml", []byte(cm.Data["fencepub.yaml"]))
	if cfg.GC.Listen != ":9464" {
		t.Fatalf("gc.listen %q, want \":9464\"", cfg.GC.Listen)
	}
	if len(pod.Containers) == 0 {
		t.Fatal("gc-daemon.yaml: the Deployment has no container")
	}
	cmd := containerInvocation(t, "gc container", pod.Containers[0])
	if cmd.CommandPath() != "fencepub gc daemon" {
		t.Fatalf("gc container runs %q", cmd.CommandPath())
	}
	if cmd.Flags().Changed("listen") {
		t.Fatal("gc container: --listen overrides the ConfigMap's gc.listen")
	}
	c := checkPod(t, "gc container", pod, cmd, cm, known)
	if !slices.Contains(c.Ports, k8sPort{ContainerPort: 9464}) {
		t.Fatalf("gc container ports %+v: gc.listen's 9464 is not one", c.Ports)
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil {
		t.Fatal("gc container: a liveness or readiness probe is missing")
	}
}

// deploy/kubernetes/run-cronjob.yaml runs `fencepub run` with flags that
// exist, the ConfigMap of gc-daemon.yaml as the config file, FENCEPUB_RUN_ID
// (not --run-id or --key) naming the run, and a termination grace period
// longer than --grace.
func TestDeployKubernetesRunCronJob(t *testing.T) {
	t.Parallel()
	b := deployFile(t, "kubernetes/run-cronjob.yaml")
	known := knownEnv(t)
	checkEnvNames(t, "run-cronjob.yaml", b, known)
	m := decodeManifests(t, "run-cronjob.yaml", b)
	if len(m.cronJobs) != 1 || len(m.configMaps)+len(m.deployments) != 0 {
		t.Fatal("run-cronjob.yaml: want exactly one CronJob")
	}
	pod := m.cronJobs[0].Spec.JobTemplate.Spec.Template.Spec
	cm := decodeManifests(t, "gc-daemon.yaml", deployFile(t, "kubernetes/gc-daemon.yaml")).configMaps[0]
	if len(pod.Containers) == 0 {
		t.Fatal("run-cronjob.yaml: the CronJob has no container")
	}
	cmd := containerInvocation(t, "run container", pod.Containers[0])
	if cmd.CommandPath() != "fencepub run" {
		t.Fatalf("run container runs %q", cmd.CommandPath())
	}
	c := checkPod(t, "run container", pod, cmd, cm, known)
	if !slices.ContainsFunc(c.Env, func(e k8sEnvVar) bool { return e.Name == "FENCEPUB_RUN_ID" && e.ValueFrom != nil }) {
		t.Fatalf("FENCEPUB_RUN_ID does not come from the Job: %+v", c.Env)
	}
	if cmd.Flags().Changed("run-id") || cmd.Flags().Changed("key") {
		t.Fatal("run container: --run-id or --key overrides FENCEPUB_RUN_ID")
	}
	grace, err := cmd.Flags().GetDuration("grace")
	if err != nil {
		t.Fatal(err)
	}
	if tg := pod.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second <= grace {
		t.Fatalf("terminationGracePeriodSeconds is not set longer than --grace %s", grace)
	}
}

// systemdDirectives are the directives the unit files may use, by section
// (systemd.directives(7)); a typo is not in the list.
var systemdDirectives = map[string][]string{
	"Unit": {"Description", "Documentation", "Wants", "Requires", "After", "Before", "ConditionPathExists",
		"StartLimitIntervalSec", "StartLimitBurst"},
	"Service": {"Type", "ExecStart", "ExecStartPre", "ExecReload", "Environment", "EnvironmentFile", "User", "Group",
		"DynamicUser", "WorkingDirectory", "StateDirectory", "RuntimeDirectory", "KillMode", "KillSignal",
		"TimeoutStartSec", "TimeoutStopSec", "Restart", "RestartSec", "RestartPreventExitStatus", "SuccessExitStatus",
		"NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "ProtectKernelTunables",
		"ProtectKernelModules", "ProtectControlGroups", "RestrictAddressFamilies", "LockPersonality",
		"MemoryDenyWriteExecute", "ReadWritePaths", "LimitNOFILE", "CapabilityBoundingSet", "AmbientCapabilities",
		"PrivateUsers", "DevicePolicy", "PrivateMounts", "ProtectKernelLogs", "ProtectClock", "ProtectHostname",
		"ProtectProc", "ProcSubset", "RestrictNamespaces", "RestrictRealtime", "RestrictSUIDSGID", "RemoveIPC", "UMask",
		"SystemCallArchitectures", "SystemCallFilter", "SystemCallErrorNumber"},
	"Timer":   {"OnCalendar", "OnBootSec", "OnUnitActiveSec", "Persistent", "RandomizedDelaySec", "AccuracySec", "Unit"},
	"Install": {"WantedBy", "RequiredBy", "Alias"},
}

// unitFile is a parsed systemd unit: section → key → values in order.
type unitFile map[string]map[string][]string

// parseUnit parses a unit file strictly: comments, blank lines, [Section]
// headers and Key=Value lines of systemdDirectives only, no continuation
// lines.
func parseUnit(t *testing.T, name string, b []byte) unitFile {
	t.Helper()
	u := unitFile{}
	section := ""
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
			continue
		case strings.HasSuffix(line, "\\"):
			t.Fatalf("%s:%d: continuation line", name, n+1)
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			if _, ok := systemdDirectives[section]; !ok {
				t.Fatalf("%s:%d: unknown section [%s]", name, n+1, section)
			}
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || section == "" {
			t.Fatalf("%s:%d: not Key=Value in a section: %q", name, n+1, line)
		}
		if !slices.Contains(systemdDirectives[section], k) {
			t.Fatalf("%s:%d: unknown directive %s= in [%s]", name, n+1, k, section)
		}
		u[section][k] = append(u[section][k], v)
	}
	return u
}

// one returns the single value of section's key.
func (u unitFile) one(t *testing.T, name, section, key string) string {
	t.Helper()
	vs := u[section][key]
	if len(vs) != 1 {
		t.Fatalf("%s: [%s] %s= given %d times, want once", name, section, key, len(vs))
	}
	return vs[0]
}

// execInvocation checks an ExecStart= line: /usr/local/bin/fencepub and
// arguments the command tree accepts, with the instance specifier %i
// standing for a resource name.
func execInvocation(t *testing.T, name, line string) *cobra.Command {
	t.Helper()
	if strings.ContainsAny(line, `"'$`) {
		t.Fatalf("%s: ExecStart= with quotes or variables: %q", name, line)
	}
	argv := strings.Fields(strings.ReplaceAll(line, "%i", "nightly-report"))
	if argv[0] != "/usr/local/bin/fencepub" {
		t.Fatalf("%s: ExecStart= runs %q, want /usr/local/bin/fencepub", name, argv[0])
	}
	return checkInvocation(t, name, argv[1:])
}

// systemdSeconds parses a systemd time span of the forms the units use:
// plain seconds or a Go duration ("45", "45s", "1min" is not used).
func systemdSeconds(t *testing.T, name, v string) time.Duration {
	t.Helper()
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: time span %q: %v", name, v, err)
	}
	return d
}

// The systemd units parse (known sections and directives only), run
// fencepub commands and flags that exist, read config keys and variables
// fencepub knows, give `fencepub run` a stop timeout longer than --grace
// with only fencepub signalled first, and pass `systemd-analyze verify`
// (with ExecStart's binary pointed at an existing executable, since verify
// checks that it exists; `make test` installs systemd-analyze).
func TestDeploySystemd(t *testing.T) {
	t.Parallel()
	known := knownEnv(t)
	cfg := deployFile(t, "systemd/fencepub.yaml")
	checkEnvNames(t, "fencepub.yaml", cfg, known)
	loadConfigFile(t, "systemd/fencepub.yaml", cfg)

	files := map[string][]byte{}
	for _, n := range []string{"fencepub-gc.service", "fencepub-run@.service", "fencepub-run@.timer"} {
		files[n] = deployFile(t, "systemd/"+n)
		checkEnvNames(t, n, files[n], known)
	}
	gcu := parseUnit(t, "fencepub-gc.service", files["fencepub-gc.service"])
	if cmd := execInvocation(t, "fencepub-gc.service", gcu.one(t, "fencepub-gc.service", "Service", "ExecStart")); cmd.CommandPath() != "fencepub gc daemon" {
		t.Fatalf("fencepub-gc.service runs %q", cmd.CommandPath())
	}
	run := parseUnit(t, "fencepub-run@.service", files["fencepub-run@.service"])
	cmd := execInvocation(t, "fencepub-run@.service", run.one(t, "fencepub-run@.service", "Service", "ExecStart"))
	if cmd.CommandPath() != "fencepub run" {
		t.Fatalf("fencepub-run@.service runs %q", cmd.CommandPath())
	}
	grace, err := cmd.Flags().GetDuration("grace")
	if err != nil {
		t.Fatal(err)
	}
	if stop := systemdSeconds(t, "fencepub-run@.service", run.one(t, "fencepub-run@.service", "Service", "TimeoutStopSec")); stop <= grace {
		t.Fatalf("fencepub-run@.service: TimeoutStopSec %s is not longer than --grace %s", stop, grace)
	}
	if km := run.one(t, "fencepub-run@.service", "Service", "KillMode"); km != "mixed" {
		t.Fatalf("fencepub-run@.service: KillMode=%s; want mixed (fencepub stops its command itself)", km)
	}
	timer := parseUnit(t, "fencepub-run@.timer", files["fencepub-run@.timer"])
	calendar := timer.one(t, "fencepub-run@.timer", "Timer", "OnCalendar")

	sa := systemdAnalyze(t)
	if out, err := exec.Command(sa, "calendar", calendar).CombinedOutput(); err != nil {
		t.Fatalf("systemd-analyze calendar %q: %v\n%s", calendar, err, out)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for n, b := range files {
		b = bytes.ReplaceAll(b, []byte("/usr/local/bin/fencepub"), []byte(exe))
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v := exec.Command(sa, "verify", "./fencepub-gc.service", "./fencepub-run@nightly-report.service", "./fencepub-run@nightly-report.timer")
	v.Dir = dir
	out, err := v.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// systemdAnalyze returns the path of systemd-analyze (Debian package
// systemd; `make systemd-analyze` installs it) or fails t.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Fatalf("systemd-analyze is not installed (make systemd-analyze installs Debian's systemd package): %v", err)
	}
	return sa
}

// maxExposure is the highest `systemd-analyze security` exposure the units
// may have (0 to 10; 4.0 and below is rated OK).
const maxExposure = 4.0

// `systemd-analyze security --offline=true` rates each service unit at most
// maxExposure, and the exposure its comment states ("rates it N.N") is the
// one measured. It needs no running systemd (systemd 250 and later).
func TestDeploySystemdSecurity(t *testing.T) {
	t.Parallel()
	sa := systemdAnalyze(t)
	dir := t.TempDir()
	for file, unit := range map[string]string{"fencepub-gc.service": "fencepub-gc.service", "fencepub-run@.service": "fencepub-run@nightly-report.service"} {
		b := deployFile(t, "systemd/"+file)
		if err := os.WriteFile(filepath.Join(dir, unit), b, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(sa, "security", "--offline=true", "--no-pager", fmt.Sprintf("--threshold=%d", int(maxExposure*10)), "./"+unit)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		m := regexp.MustCompile(`Overall exposure level for ` + regexp.QuoteMeta(unit) + `: (\d+\.\d)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("systemd-analyze security %s: no overall exposure (%v; --offline needs systemd 250 or later)\n%s", unit, err, out)
		}
		exposure, perr := strconv.ParseFloat(string(m[1]), 64)
		if perr != nil || exposure > maxExposure || err != nil {
			t.Fatalf("%s: systemd-analyze security rates it %s, above %.1f (%v)\n%s", file, m[1], maxExposure, err, out)
		}
		stated := regexp.MustCompile(`rates it\s+(?:#\s*)?(\d+\.\d)`).FindSubmatch(b)
		if stated == nil || string(stated[1]) != string(m[1]) {
			t.Fatalf("%s: its comment must state the exposure systemd-analyze measures, %s (\"rates it %s\")", file, m[1], m[1])
		}
	}
}

// The Dockerfile builds a static binary in a Go stage of go.mod's Go
// version and copies it into a distroless or scratch stage that runs it as
// the non-root user with ENTRYPOINT fencepub; nothing is fetched by ADD.
// (No container runtime here: this parses it, it does not build it.)
func TestDockerfile(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVersion := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	if goVersion == nil {
		t.Fatal("go.mod has no go directive")
	}
	type stage struct {
		from, name string
		instr      []string // "KEYWORD args", continuation lines joined
	}
	var stages []*stage
	var logical string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if logical == "" && (line == "" || strings.HasPrefix(line, "#")) {
			continue
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			logical += cont + " "
			continue
		}
		logical += line
		kw, args, _ := strings.Cut(logical, " ")
		kw, logical = strings.ToUpper(kw), ""
		switch {
		case kw == "FROM":
			f := strings.Fields(args)
			s := &stage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
		case kw == "ADD":
			t.Fatalf("Dockerfile: ADD %s (use COPY; never fetch URLs)", args)
		case len(stages) == 0:
			if kw != "ARG" {
				t.Fatalf("Dockerfile: %s before FROM", kw)
			}
		default:
			s := stages[len(stages)-1]
			s.instr = append(s.instr, kw+" "+args)
		}
	}
	if len(stages) != 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and a runtime stage", len(stages))
	}
	build, final := stages[0], stages[1]
	if !strings.HasPrefix(build.from, "golang:"+string(goVersion[1])) || build.name == "" {
		t.Fatalf("Dockerfile: build stage FROM %s AS %q, want golang:%s AS <name>", build.from, build.name, goVersion[1])
	}
	if !slices.ContainsFunc(build.instr, func(s string) bool {
		return strings.HasPrefix(s, "RUN ") && strings.Contains(s, "CGO_ENABLED=0") && strings.Contains(s, "./cmd/fencepub")
	}) {
		t.Fatalf("Dockerfile: no RUN CGO_ENABLED=0 go build of ./cmd/fencepub: %q", build.instr)
	}
	if !strings.HasPrefix(final.from, "gcr.io/distroless/static") && final.from != "scratch" {
		t.Fatalf("Dockerfile: runtime stage FROM %s, want distroless static or scratch", final.from)
	}
	want := []string{"COPY --from=" + build.name + " /out/fencepub /fencepub", "USER nonroot:nonroot", `ENTRYPOINT ["/fencepub"]`}
	if !slices.Equal(final.instr, want) {
		t.Fatalf("Dockerfile: runtime stage %q, want %q", final.instr, want)
	}
	if !strings.Contains(final.from, ":nonroot") {
		t.Fatalf("Dockerfile: %s has no nonroot user", final.from)
	}
}

// go install github.com/fencepub/fencepub/cmd/fencepub@latest builds from
// the module proxy's copy only if the main go.mod has no replace or exclude
// directives (go install ignores them and refuses a module that has them).
func TestGoModInstallable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^\s*(replace|exclude)\b`).Find(b); m != nil {
		t.Fatalf("go.mod has a %s directive: go install ...@latest would refuse the module", strings.TrimSpace(string(m)))
	}
}
