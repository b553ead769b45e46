package devstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
)

// SaveSnapshot writes a snapshot of member m's data to path with the real
// tool: `etcdctl snapshot save` against m's client URL.
func (m *EtcdMember) SaveSnapshot(ctx context.Context, path string) error {
	bin, err := Binary("etcdctl")
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, bin, "--endpoints", m.ClientURL, "snapshot", "save", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("devstack: etcdctl snapshot save: %w\n%s", err, out)
	}
	return nil
}

// RestoreOptions configures RestoreSnapshot. The zero value restores the
// snapshot as it is.
type RestoreOptions struct {
	// BumpRevision, when positive, is passed as `--bump-revision` together
	// with `--mark-compacted`: revisions continue above every revision the
	// lost history may have handed out, and watchers from before the
	// restore get a compaction error instead of waiting silently (the
	// restore the runbook prescribes).
	BumpRevision uint64
}

// RestoreSnapshot replaces the data of a single-member cluster with the
// snapshot at path: it stops the member, deletes its data directory,
// runs `etcdutl snapshot restore` into the member's data directory with the
// member's name, peer URL and cluster token, and restarts the member on the
// same client URL, waiting until it answers. Clients connected before keep
// working against the restored data.
func (e *Etcd) RestoreSnapshot(ctx context.Context, path string, opts RestoreOptions) error {
	if len(e.Members) != 1 {
		return errors.New("devstack: RestoreSnapshot supports single-member clusters only")
	}
	m := e.Members[0]
	bin, err := Binary("etcdutl")
	if err != nil {
		return err
	}
	m.Stop()
	if err := os.RemoveAll(m.DataDir); err != nil {
		return err
	}
	token := argValue(m.args, "--initial-cluster-token")
	args := []string{
		"snapshot", "restore", path,
		"--data-dir", m.DataDir,
		"--name", m.Name,
		"--initial-cluster", m.Name + "=" + m.PeerURL,
		"--initial-advertise-peer-urls", m.PeerURL,
		"--initial-cluster-token", token,
	}
	if opts.BumpRevision > 0 {
		args = append(args, "--bump-revision", strconv.FormatUint(opts.BumpRevision, 10), "--mark-compacted")
	}
	if out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("devstack: etcdutl snapshot restore: %w\n%s", err, out)
	}
	return m.Restart(ctx)
}

// argValue returns the value following flag in args, or "".
func argValue(args []string, flag string) string {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			return args[i+1]
		}
	}
	return ""
}
