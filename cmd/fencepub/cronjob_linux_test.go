//go:build !unit

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencepub/fencepub/internal/testkit/testenv"
)

// podSandbox is what a test can give a container without a container
// runtime: the files of its image, its volumes, its environment and its
// security context. run starts a command as the kubelet would start the
// container, in a mount namespace of its own (sandboxScript).
type podSandbox struct {
	// image maps a path in the image to the file on the host that the
	// image holds there. Each such file is mounted alone (its directory
	// holds nothing else), read-only.
	image map[string]string
	// configMaps holds the data of the ConfigMaps the pod's volumes name.
	configMaps map[string]map[string]string
	// secrets holds the data of the Secrets its env names.
	secrets map[string]map[string]string
	// labels are the pod's labels, for fieldRef env.
	labels map[string]string
}

// sandboxScript runs as root in a new mount namespace (private
// propagation) and builds the container's filesystem at $1: a tmpfs root
// holding the host's /usr, /bin, /sbin and /lib* read-only (the image's
// system files), /dev and /proc, a few /etc files, the image files and
// volumes given as "kind:src:dst" arguments up to "--" (kind "ro": a host
// directory mounted read-only; "tmpfs": an emptyDir), then makes the root
// read-only when $2 is "ro" (readOnlyRootFilesystem) and executes what
// follows "--" chrooted, as uid $3 and gid $4 with no supplementary groups,
// no capabilities and no_new_privs (allowPrivilegeEscalation: false,
// capabilities drop ALL).
const sandboxScript = `set -eu
R=$1 ROOTFS=$2 U=$3 G=$4
shift 4
mount -t tmpfs -o mode=0755 fencepub-pod "$R"
for d in usr bin sbin lib lib32 lib64 libx32; do
	if [ -L "/$d" ]; then
		ln -s "$(readlink "/$d")" "$R/$d"
	elif [ -d "/$d" ]; then
		mkdir "$R/$d"
		mount --rbind "/$d" "$R/$d"
	fi
done
mkdir "$R/dev" "$R/proc" "$R/etc" "$R/tmp"
mount --rbind /dev "$R/dev"
mount --rbind /proc "$R/proc"
for f in passwd group hosts nsswitch.conf resolv.conf; do
	if [ -e "/etc/$f" ]; then cp "/etc/$f" "$R/etc/$f"; fi
done
while [ "$1" != -- ]; do
	kind=${1%%:*} rest=${1#*:}
	src=${rest%%:*} dst=${rest#*:}
	mkdir -p "$R$dst"
	case $kind in
	ro) mount --bind "$src" "$R$dst"; mount -o remount,bind,ro "$R$dst" ;;
	tmpfs) mount -t tmpfs -o mode=1777 empty-dir "$R$dst" ;;
	esac
	shift
done
shift
for d in usr bin sbin lib lib32 lib64 libx32; do
	if [ -d "$R/$d" ] && [ ! -L "$R/$d" ]; then mount -o remount,bind,ro "$R/$d"; fi
done
if [ "$ROOTFS" = ro ]; then mount -o remount,ro "$R"; fi
exec chroot "$R" setpriv --reuid="$U" --regid="$G" --clear-groups --no-new-privs --inh-caps=-all --bounding-set=-all -- "$@"
`

// run runs the container c of pod under sb, with extraEnv after the
// container's env, and returns its stdout, stderr and exit code. It fails
// the test for anything in the manifest it cannot reproduce.
func (sb *podSandbox) run(t *testing.T, ctx context.Context, pod k8sPod, c k8sContainer, extraEnv ...string) (string, string, int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("running a container's command line needs root (mount namespaces, setuid); CI runs as root")
	}
	uid, gid := int64(0), int64(0)
	for _, sc := range []*k8sSecurityContext{pod.SecurityContext, c.SecurityContext} {
		if sc != nil && sc.RunAsUser != nil {
			uid = *sc.RunAsUser
		}
		if sc != nil && sc.RunAsGroup != nil {
			gid = *sc.RunAsGroup
		}
	}
	if uid == 0 {
		t.Fatalf("container %s runs as root", c.Name)
	}
	csc := c.SecurityContext
	if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
		csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []string{"ALL"}) || len(csc.Capabilities.Add) > 0 {
		t.Fatalf("container %s: the sandbox runs it with no privilege escalation and no capabilities; the manifest says %+v", c.Name, csc)
	}
	rootfs := "rw"
	if csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem {
		rootfs = "ro"
	}

	work := t.TempDir()
	if err := os.Chmod(work, 0o755); err != nil { // the pod's user reaches the image files
		t.Fatal(err)
	}
	var mounts []string
	for i, dst := range slices.Sorted(maps.Keys(sb.image)) {
		dir := filepath.Join(work, "image", strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(sb.image[dst], filepath.Join(dir, path.Base(dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		mounts = append(mounts, "ro:"+dir+":"+path.Dir(dst))
	}
	for i, vm := range c.VolumeMounts {
		j := slices.IndexFunc(pod.Volumes, func(v k8sVolume) bool { return v.Name == vm.Name })
		if j < 0 {
			t.Fatalf("volumeMount %s names no volume", vm.Name)
		}
		switch v := pod.Volumes[j]; {
		case v.ConfigMap != nil:
			data, ok := sb.configMaps[v.ConfigMap.Name]
			if !ok || !vm.ReadOnly {
				t.Fatalf("volume %s: ConfigMap %q (known: %v), mounted read-only: %v", v.Name, v.ConfigMap.Name, slices.Collect(maps.Keys(sb.configMaps)), vm.ReadOnly)
			}
			dir := filepath.Join(work, "volume", strconv.Itoa(i))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, content := range data {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			mounts = append(mounts, "ro:"+dir+":"+vm.MountPath)
		case v.EmptyDir != nil:
			mounts = append(mounts, "tmpfs:-:"+vm.MountPath)
		default:
			t.Fatalf("volume %s: only ConfigMap and emptyDir volumes are reproduced", v.Name)
		}
	}

	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/", "HOSTNAME=" + c.Name}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			v, ok := sb.secrets[ref.Name][ref.Key]
			if !ok && (ref.Optional == nil || !*ref.Optional) {
				t.Fatalf("env %s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			if ok {
				env = append(env, e.Name+"="+v)
			}
		case e.ValueFrom.FieldRef != nil:
			p := e.ValueFrom.FieldRef.FieldPath
			label, ok := strings.CutPrefix(p, "metadata.labels['")
			label, ok2 := strings.CutSuffix(label, "']")
			if !ok || !ok2 {
				t.Fatalf("env %s: fieldRef %s is not reproduced", e.Name, p)
			}
			env = append(env, e.Name+"="+sb.labels[label])
		default:
			t.Fatalf("env %s: valueFrom %+v is not reproduced", e.Name, e.ValueFrom)
		}
	}
	env = append(env, extraEnv...)

	root := filepath.Join(work, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	argv := append([]string{"-c", sandboxScript, "sandbox", root, rootfs, strconv.FormatInt(uid, 10), strconv.FormatInt(gid, 10)}, mounts...)
	argv = append(append(append(argv, "--"), c.Command...), c.Args...)
	cmd := exec.CommandContext(ctx, "/bin/sh", argv...)
	cmd.Env = env
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	return testenv.RunCmd(t, cmd)
}

// copyFile copies src to dst with mode perm.
func copyFile(src, dst string, perm os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// The CronJob of deploy/kubernetes/run-cronjob.yaml publishes when its
// container runs as the manifest says: its command line, the ConfigMap of
// gc-daemon.yaml mounted where it says, its env (the Secret's keys, the
// Job's name for FENCEPUB_RUN_ID), as its runAsUser and runAsGroup with no
// capabilities, on a read-only root filesystem with nothing writable but
// the volumes it declares. The test's etcd and MinIO stand in for the
// cluster's services named in the ConfigMap (FENCEPUB_ETCD_ENDPOINTS and
// FENCEPUB_S3_ENDPOINT in the environment; the file is the shipped one).
// The job, at the manifest's /app/report, fails unless it runs as that user
// with / and /tmp read-only, and writes 20 MiB, more than one part of a
// multipart upload; fencepub streams them into the store (README "fencepub
// run"), and `read` returns them. A retried pod of the same Job is
// "duplicate".
func TestDeployKubernetesRunCronJobRuns(t *testing.T) {
	_, e, m := testenv.CLIStack(t, "fencepub")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	cj := decodeManifests(t, "run-cronjob.yaml", deployFile(t, "kubernetes/run-cronjob.yaml")).cronJobs[0]
	cm := decodeManifests(t, "gc-daemon.yaml", deployFile(t, "kubernetes/gc-daemon.yaml")).configMaps[0]
	pod := cj.Spec.JobTemplate.Spec.Template.Spec
	c := pod.Containers[0]
	dash := slices.Index(c.Args, "--")
	if len(c.Command) != 1 || dash < 0 || dash != len(c.Args)-2 {
		t.Fatalf("run container: command %q args %q: want fencepub's path as command and one job after --", c.Command, c.Args)
	}
	resource := c.Args[slices.Index(c.Args, "--resource")+1]

	const size = 20 << 20
	job := filepath.Join(t.TempDir(), "report")
	script := fmt.Sprintf(`#!/bin/sh
for d in / /tmp /etc/fencepub; do
	if touch "$d/.fencepub-probe" 2>/dev/null; then echo "$d is writable" >&2; exit 3; fi
done
[ "$(id -u):$(id -g)" = %d:%d ] || { echo "runs as $(id -u):$(id -g)" >&2; exit 4; }
echo "report of $FENCEPUB_RESOURCE, uid $(id -u)"
yes 0123456789abcdef | head -c %d
`, *pod.SecurityContext.RunAsUser, *pod.SecurityContext.RunAsGroup, size)
	if err := os.WriteFile(job, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	sb := &podSandbox{
		image:      map[string]string{c.Command[0]: buildCLI(t), c.Args[dash+1]: job},
		configMaps: map[string]map[string]string{cm.Metadata.Name: cm.Data},
		secrets: map[string]map[string]string{"fencepub-credentials": {
			"s3-access-key": m.Config.AccessKey, "s3-secret-key": m.Config.SecretKey,
		}},
		labels: map[string]string{"batch.kubernetes.io/job-name": cj.Metadata.Name + "-29430000"},
	}
	services := []string{"FENCEPUB_ETCD_ENDPOINTS=" + e.Endpoints()[0], "FENCEPUB_S3_ENDPOINT=" + m.Config.Endpoint}

	// Before the first deploy: init with the same configuration (README
	// "Deploy on Kubernetes").
	cfgDir := t.TempDir()
	cfgFile := filepath.Join(cfgDir, "fencepub.yaml")
	if err := os.WriteFile(cfgFile, []byte(cm.Data["fencepub.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FENCEPUB_ETCD_ENDPOINTS", e.Endpoints()[0])
	t.Setenv("FENCEPUB_S3_ENDPOINT", m.Config.Endpoint)
	if out, errs, code := publishCLI(t, ctx, "", "init", "--create-bucket", "--config", cfgFile); code != 0 {
		t.Fatalf("init: exit %d\n%s\n%s", code, out, errs)
	}

	type report struct {
		Outcome     string `json:"outcome"`
		CommandExit int    `json:"command_exit"`
	}
	for i, outcome := range []string{"applied", "duplicate"} {
		stdout, stderr, code := sb.run(t, ctx, pod, c, services...)
		var r report
		if code != 0 || json.Unmarshal([]byte(stdout), &r) != nil || r.Outcome != outcome || r.CommandExit != 0 {
			t.Fatalf("pod %d: exit %d, want 0 and %s\nstdout: %s\nstderr: %s", i+1, code, outcome, stdout, stderr)
		}
	}
	out := filepath.Join(t.TempDir(), "read")
	if stdout, errs, code := publishCLI(t, ctx, "", "read", "--config", cfgFile, "--resource", resource, "--out", out); code != 0 {
		t.Fatalf("read: exit %d\n%s\n%s", code, stdout, errs)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Appendf(nil, "report of %s, uid %d\n", resource, *pod.SecurityContext.RunAsUser)
	want = append(want, bytes.Repeat([]byte("0123456789abcdef\n"), size/17+1)[:size]...)
	wantSum := sha256.Sum256(want)
	if gotSum := sha256.Sum256(got); gotSum != wantSum {
		t.Fatalf("published %d bytes (sha256 %s) starting %q; want %d bytes (sha256 %s)",
			len(got), hex.EncodeToString(gotSum[:]), got[:min(len(got), 64)], len(want), hex.EncodeToString(wantSum[:]))
	}
}
