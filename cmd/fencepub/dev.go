package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/localstack"
	"github.com/spf13/cobra"
)

// devState is what `dev up` records in <dir>/state.json for `dev down` and
// `dev status`.
type devState struct {
	Dir           string    `json:"dir"`
	ConfigFile    string    `json:"config_file"`
	EtcdPID       int       `json:"etcd_pid"`
	EtcdEndpoint  string    `json:"etcd_endpoint"`
	MinIOPID      int       `json:"minio_pid"`
	MinIOEndpoint string    `json:"minio_endpoint"`
	Bucket        string    `json:"bucket"`
	StartedAt     time.Time `json:"started_at"`
}

// newDevCmd builds `fencepub dev up|down|status`: a persistent local etcd and
// MinIO for trying fencepub, from the binaries `make deps` built.
func newDevCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a local etcd and MinIO for trying fencepub",
		Long: `dev starts a persistent single-member etcd and a single-drive MinIO on
loopback from ./bin (built by 'make deps'), creates the bucket and writes a
config file (./fencepub.yaml by default) that every other fencepub command
picks up from the working directory. Data lives in --dir (default ./.dev).`,
	}
	var dir string
	cmd.PersistentFlags().StringVar(&dir, "dir", ".dev", "directory for the servers' data, logs and state")
	cmd.AddCommand(newDevUpCmd(&dir), newDevDownCmd(&dir), newDevStatusCmd(&dir))
	return cmd
}

func readDevState(dir string) (devState, error) {
	var st devState
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s/state.json: %w", dir, err)
	}
	return st, nil
}

// alive reports whether pid is a running process.
func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// running reports whether pid is a running server of the stack in dir:
// alive and, where /proc tells (Linux), started with a path under dir (its
// data directory). A PID that an unrelated process reused after the stack
// died is not the stack's, so `dev down` never signals it.
func running(pid int, dir string) bool {
	if !alive(pid) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return runtime.GOOS != "linux"
	}
	return strings.Contains(string(cmdline), dir)
}

// portOr returns want if it is free on 127.0.0.1, else a free port.
func portOr(want int) (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(want))
	if err == nil {
		l.Close()
		return want, nil
	}
	return localstack.FreePort()
}

func newDevUpCmd(dir *string) *cobra.Command {
	var configPath string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Start local etcd and MinIO and write a config file",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			out := c.ErrOrStderr()
			abs, err := filepath.Abs(*dir)
			if err != nil {
				return exitcode.With(exitcode.Usage, err)
			}
			cfgAbs, err := filepath.Abs(configPath)
			if err == nil {
				err = checkWritable(cfgAbs, abs)
			}
			if err != nil {
				return exitcode.Usagef("--write-config %s: %v (nothing started or stopped)", configPath, err)
			}
			if st, err := readDevState(abs); err == nil {
				switch e, m := running(st.EtcdPID, st.Dir), running(st.MinIOPID, st.Dir); {
				case e && m:
					fmt.Fprintf(out, "dev: already running (etcd %s, minio %s); config %s\n", st.EtcdEndpoint, st.MinIOEndpoint, st.ConfigFile)
					if !c.Flags().Changed("write-config") || cfgAbs == st.ConfigFile {
						return nil
					}
					b, err := os.ReadFile(st.ConfigFile)
					if err == nil {
						err = os.WriteFile(cfgAbs, b, 0o600)
					}
					if err != nil {
						return exitcode.Usagef("--write-config %s: copying %s: %v", configPath, st.ConfigFile, err)
					}
					fmt.Fprintf(out, "dev: wrote its config to %s too\n", cfgAbs)
					return nil
				case e || m:
					fmt.Fprintln(out, "dev: one server of the stack is down; restarting both (data is kept)")
					stopDev(out, st)
				}
			}
			if err := os.MkdirAll(abs, 0o755); err != nil {
				return exitcode.With(exitcode.Usage, err)
			}
			ctx, cancel := context.WithTimeout(c.Context(), 90*time.Second)
			defer cancel()
			cport, err := portOr(2379)
			if err != nil {
				return err
			}
			pport, err := portOr(2380)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, "dev: starting etcd ...")
			e, err := localstack.StartEtcd(ctx, filepath.Join(abs, "etcd"), localstack.EtcdOptions{
				Detached: true, ListenClientPorts: []int{cport}, ListenPeerPorts: []int{pport},
			})
			if err != nil {
				return devErr(err)
			}
			mport, err := portOr(9000)
			if err != nil {
				e.Stop()
				return err
			}
			fmt.Fprintln(out, "dev: starting minio ...")
			m, err := localstack.StartMinIO(ctx, filepath.Join(abs, "minio"), localstack.MinIOOptions{Detached: true, Port: mport})
			if err != nil {
				e.Stop()
				return devErr(err)
			}
			yaml := fmt.Sprintf(`# Written by 'fencepub dev up' for the local stack in %s.
etcd:
  endpoints: [%q]
s3:
  endpoint: %q
  access_key: %q
  secret_key: %q
  bucket: %q
  secure: false
namespace:
  prefix: fencepub
  domain: dev
`, abs, e.Members[0].ClientURL, m.Config.Endpoint, m.Config.AccessKey, m.Config.SecretKey, m.Config.Bucket)
			st := devState{
				Dir: abs, ConfigFile: cfgAbs, EtcdPID: e.Members[0].PID(), EtcdEndpoint: e.Members[0].ClientURL,
				MinIOPID: m.PID(), MinIOEndpoint: m.Config.Endpoint, Bucket: m.Config.Bucket, StartedAt: time.Now().UTC(),
			}
			b, _ := json.MarshalIndent(st, "", "  ")
			err = os.WriteFile(filepath.Join(abs, "state.json"), b, 0o644)
			if err == nil {
				err = os.WriteFile(cfgAbs, []byte(yaml), 0o600)
			}
			if err != nil { // leave nothing running that dev down cannot find
				m.Stop()
				e.Stop()
				_ = os.Remove(filepath.Join(abs, "state.json"))
				return exitcode.Usagef("dev up: %v (servers stopped)", err)
			}
			fmt.Fprintf(out, `dev: up
  etcd   %s   (pid %d, log %s)
  minio  %s   (pid %d, bucket %q, log %s)
  config %s

Commands run in this directory pick the config up, e.g.:
  %[9]s publish --resource demo --owner me --ttl 10s --key k1 --file README.md
  %[9]s pointer --resource demo -o json
Stop with: %[9]s dev down
`, st.EtcdEndpoint, st.EtcdPID, e.Members[0].LogPath, st.MinIOEndpoint, st.MinIOPID, st.Bucket, m.LogPath, cfgAbs, os.Args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "write-config", "fencepub.yaml", "where to write the config file for the local stack")
	return cmd
}

// checkWritable reports why a file cannot be written at path: it is a
// directory, its directory does not exist (and is not stackDir, which
// dev up creates), or either is not writable.
func checkWritable(path, stackDir string) error {
	if fi, err := os.Stat(path); err == nil {
		if fi.IsDir() {
			return errors.New("is a directory; give a file path")
		}
		return syscall.Access(path, 2 /* W_OK */)
	}
	dir := filepath.Dir(path)
	if dir == stackDir {
		return nil // created with the stack
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("directory %s does not exist", dir)
	}
	if err := syscall.Access(dir, 2 /* W_OK */); err != nil {
		return fmt.Errorf("directory %s is not writable: %w", dir, err)
	}
	return nil
}

// devErr maps a server start failure to its exit code: a missing binary is
// a usage problem (run make deps), anything else an unavailable service.
func devErr(err error) error {
	if errors.Is(err, localstack.ErrNoBinary) {
		return exitcode.With(exitcode.Usage, err)
	}
	return exitcode.With(exitcode.Unavailable, err)
}

func newDevDownCmd(dir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop the local etcd and MinIO started by 'dev up' (data is kept)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			st, err := readDevState(*dir)
			if err != nil {
				return exitcode.With(exitcode.Usage, fmt.Errorf("no local stack in %s (run 'fencepub dev up', or give the stack's --dir): %w", *dir, err))
			}
			stopDev(c.ErrOrStderr(), st)
			return nil
		},
	}
}

// stopDev stops the stack's processes: SIGTERM, then SIGKILL after 10 s.
func stopDev(out io.Writer, st devState) {
	for _, p := range []struct {
		name string
		pid  int
	}{{"minio", st.MinIOPID}, {"etcd", st.EtcdPID}} {
		if !running(p.pid, st.Dir) {
			fmt.Fprintf(out, "dev: %s (pid %d) is not running\n", p.name, p.pid)
			continue
		}
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
		deadline := time.Now().Add(10 * time.Second)
		for alive(p.pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(p.pid) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		fmt.Fprintf(out, "dev: stopped %s (pid %d)\n", p.name, p.pid)
	}
}

func newDevStatusCmd(dir *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show whether the local etcd and MinIO are running (exit 115 if not both)",
		Args:  cobra.NoArgs,
	}
	out := addOutputFlag(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		st, err := readDevState(*dir)
		if err != nil {
			return exitcode.With(exitcode.Usage, fmt.Errorf("no local stack in %s (run 'fencepub dev up', or give the stack's --dir): %w", *dir, err))
		}
		status := map[string]any{
			"etcd":   map[string]any{"pid": st.EtcdPID, "running": running(st.EtcdPID, st.Dir), "endpoint": st.EtcdEndpoint},
			"minio":  map[string]any{"pid": st.MinIOPID, "running": running(st.MinIOPID, st.Dir), "endpoint": st.MinIOEndpoint, "bucket": st.Bucket},
			"config": st.ConfigFile,
		}
		if *out == "json" {
			if err := printJSON(c.OutOrStdout(), status); err != nil {
				return err
			}
		} else {
			fmt.Fprintf(c.OutOrStdout(), "etcd   %-28s pid %-7d running=%v\nminio  %-28s pid %-7d running=%v\nconfig %s\n",
				st.EtcdEndpoint, st.EtcdPID, running(st.EtcdPID, st.Dir), st.MinIOEndpoint, st.MinIOPID, running(st.MinIOPID, st.Dir), st.ConfigFile)
		}
		if !running(st.EtcdPID, st.Dir) || !running(st.MinIOPID, st.Dir) {
			return exitcode.With(exitcode.Unavailable, errors.New("the local stack is not fully running; start it with 'fencepub dev up'"))
		}
		return nil
	}
	return cmd
}
