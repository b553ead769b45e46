package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/fencepub/fencepub"
	"github.com/fencepub/fencepub/internal/exitcode"
	"github.com/fencepub/fencepub/internal/layout"
	"github.com/fencepub/fencepub/internal/operator"
	"github.com/spf13/cobra"
	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// rolePerm is one etcd permission: a type (read, write, readwrite) on one
// key (End "") or on the range [Key, End).
type rolePerm struct {
	Type string `json:"type"`
	Key  string `json:"key"`
	End  string `json:"range_end,omitempty"`
}

// roleSpec is one etcd role and the permissions setup-roles gives it.
type roleSpec struct {
	Name        string     `json:"name"`
	Permissions []rolePerm `json:"permissions"`
}

// domainRoles are the roles of ns, named "<prefix>-worker", "-reader",
// "-gc" and "-operator" (DESIGN.md "Security"), from the keys each
// command reads and writes:
//   - every role reads the epoch and deployment keys (each command's first
//     contact reads the epoch);
//   - worker (acquire, renew, release, publish, resolve): readwrite on the
//     rolled-back-counter alarm (an acquire raises it), on the authority keys of every resource but the reserved ones starting with
//     '_' (the GC lease "_gc"), on pointers/, seals/ (release and resolve
//     raise seals), ops/ and history/;
//   - reader (pointer, read, watch, ls, history): read on pointers/,
//     seals/, history/ (history, read --version), authority/ and
//     restored/ (a generation counter or a restore record tells a
//     resource never granted from one not yet published);
//   - gc (gc run, gc daemon): read on epochs/ and restored/; readwrite on
//     the rollback alarm (acquiring the _gc lease requires it absent and
//     raises it, as a worker's acquire does), authority/ (the _gc lease;
//     pruning request and grant records), pointers/ and seals/ (abandon
//     seals), ops/, history/ and clock/;
//   - operator (recover, resource delete, release-quarantine, rollback): readwrite on the whole
//     domain root.
//
// etcd grants read and write per key range and cannot tell a put from a
// delete: a role that may write a range may also delete in it.
func domainRoles(ns layout.Namespace, prefix string) []roleSpec {
	root := ns.Root()
	single := func(typ, key string) rolePerm { return rolePerm{Type: typ, Key: key} }
	under := func(typ, p string) rolePerm {
		return rolePerm{Type: typ, Key: p, End: clientv3.GetPrefixRangeEnd(p)}
	}
	common := []rolePerm{single("read", ns.EpochKey()), single("read", ns.DeploymentKey())}
	auth := ns.AuthorityPrefix()
	alarm := single("readwrite", ns.RollbackKey())
	publish := []rolePerm{
		under("readwrite", ns.PointersPrefix()), under("readwrite", root+"seals/"),
		under("readwrite", root+"ops/"), under("readwrite", root+"history/"),
	}
	// Resource names never start with '_'; the two ranges around
	// "authority/_" leave out exactly the reserved resources.
	workerAuth := []rolePerm{
		{Type: "readwrite", Key: auth, End: auth + "_"},
		{Type: "readwrite", Key: auth + "`", End: clientv3.GetPrefixRangeEnd(auth)},
	}
	gcOwn := []rolePerm{
		under("read", ns.EpochRecordsPrefix()), under("read", root+"restored/"),
		under("readwrite", auth), under("readwrite", root+"clock/"),
	}
	cat := func(parts ...[]rolePerm) []rolePerm {
		var out []rolePerm
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	return []roleSpec{
		{prefix + "-worker", cat(common, []rolePerm{alarm}, workerAuth, publish)},
		{prefix + "-reader", cat(common, []rolePerm{under("read", ns.PointersPrefix()), under("read", ns.SealsPrefix()),
			under("read", root+"history/"), under("read", auth), under("read", root+"restored/")})},
		{prefix + "-gc", cat(common, []rolePerm{alarm}, gcOwn, publish)},
		{prefix + "-operator", []rolePerm{under("readwrite", root)}},
	}
}

// etcdctl is the etcdctl command line that grants p to role.
func (p rolePerm) etcdctl(role string) string {
	cmd := fmt.Sprintf("etcdctl role grant-permission %s %s %s", role, p.Type, shellQuote(p.Key))
	if p.End != "" {
		cmd += " " + shellQuote(p.End)
	}
	return cmd
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// setupRolesResult is the JSON of `authority setup-roles`.
type setupRolesResult struct {
	DryRun   bool       `json:"dry_run"`
	Domain   string     `json:"domain"`
	Epoch    uint64     `json:"epoch,omitempty"`
	Roles    []roleSpec `json:"roles"`
	Commands []string   `json:"commands"`
}

// setupRoles adds each role that is missing and grants each of its
// permissions that is missing; with dry it only reads. It returns the
// etcdctl commands it ran (or would run): none when everything is in
// place. Errors: etcd's, wrapped (a user without the root role gets
// permission denied).
func setupRoles(ctx context.Context, cli *clientv3.Client, roles []roleSpec, dry bool) ([]string, error) {
	var cmds []string
	for _, r := range roles {
		have := map[rolePerm]bool{}
		resp, err := cli.RoleGet(ctx, r.Name)
		switch {
		case errors.Is(err, rpctypes.ErrRoleNotFound):
			cmds = append(cmds, "etcdctl role add "+r.Name)
			if !dry {
				if _, err := cli.RoleAdd(ctx, r.Name); err != nil {
					return cmds, fmt.Errorf("etcd role add %s: %w", r.Name, err)
				}
			}
		case err != nil:
			return cmds, fmt.Errorf("etcd role get %s: %w", r.Name, err)
		default:
			for _, p := range resp.Perm {
				have[rolePerm{Type: strings.ToLower(p.PermType.String()), Key: string(p.Key), End: string(p.RangeEnd)}] = true
			}
		}
		for _, p := range r.Permissions {
			if have[p] {
				continue
			}
			cmds = append(cmds, p.etcdctl(r.Name))
			if dry {
				continue
			}
			typ := clientv3.PermissionType(authpb.Permission_Type_value[strings.ToUpper(p.Type)])
			if _, err := cli.RoleGrantPermission(ctx, r.Name, p.Key, p.End, typ); err != nil {
				return cmds, fmt.Errorf("etcd role grant-permission %s: %w", r.Name, err)
			}
		}
	}
	return cmds, nil
}

// newAuthoritySetupRolesCmd builds `fencepub authority setup-roles`.
func newAuthoritySetupRolesCmd() *cobra.Command {
	var dry bool
	var rolePrefix string
	cmd := &cobra.Command{
		Use:   "setup-roles [--dry-run] [-o json]",
		Short: "Create the etcd roles of the domain: worker, reader, gc, operator",
		Long: `setup-roles creates the etcd roles fencepub-worker, fencepub-reader,
fencepub-gc and fencepub-operator, each restricted to the key ranges of the
configured domain its commands use (docs/security.md), and initialises the
domain (its epoch), which workers may then only read. It is idempotent: it
adds only the roles and permissions that are missing, and prints the etcdctl
commands it ran (with --dry-run: would run, and changes nothing). Run it as an
etcd user with the root role. It does not create users: bind them with
'etcdctl user add NAME' and 'etcdctl user grant-role NAME fencepub-worker'.

etcd grants read and write per key range and cannot tell a put from a
delete: a worker that may write pointers, ops, history and seals can also
delete them through etcd, and can run resource delete and rollback. Deletion
of objects is withheld in the object store: examples/policies gives workers
no DeleteObject.

The roles cover one domain; for another domain, name its roles apart with
--role-prefix.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().BoolVar(&dry, "dry-run", false, "print the etcdctl commands that would run; change nothing")
	cmd.Flags().StringVar(&rolePrefix, "role-prefix", "fencepub", "roles are named <role-prefix>-worker, -reader, -gc, -operator")
	out := addOutputFlag(cmd)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if err := layout.ValidateResource(rolePrefix, false); err != nil {
			return exitcode.Usagef("--role-prefix %q: %v", rolePrefix, err)
		}
		a, env, err := openAuthority(c)
		if err != nil {
			return err
		}
		defer env.Close()
		res := setupRolesResult{DryRun: dry, Domain: env.NS.Root(), Roles: domainRoles(env.NS, rolePrefix), Commands: []string{}}
		if dry {
			res.Epoch, err = operator.Epoch(c.Context(), a)
			if err != nil && !errors.Is(err, fencepub.ErrNotInitialized) {
				return authorityExit(err)
			}
		} else {
			d, err := operator.Init(c.Context(), a)
			if err != nil {
				return authorityExit(err)
			}
			res.Epoch = d.Epoch
		}
		cmds, err := setupRoles(c.Context(), env.Etcd, res.Roles, dry)
		res.Commands = append(res.Commands, cmds...)
		if err != nil {
			return err
		}
		if *out == "json" {
			return printJSON(env.Stdout, res)
		}
		verb := "ran"
		if dry {
			verb = "would run"
		}
		env.Log.Info("setup-roles: "+verb+" etcdctl commands", "domain", res.Domain, "epoch", res.Epoch, "commands", len(cmds))
		for _, line := range cmds {
			fmt.Fprintln(env.Stdout, line)
		}
		return nil
	}
	return cmd
}
