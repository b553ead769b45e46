// Package partition builds a network of Linux network namespaces on which
// fencepub's servers and worker processes run, and cuts, loses and delays
// the packets between them: real network partitions for the chaos harness
// (harness/chaos) and for the partition suite (docs/partitions.md).
//
// A Net is one bridge in a namespace of its own and one namespace per
// host, each joined to the bridge by a veth pair; this process joins the
// bridge too (address .1 of the subnet), so that it starts the servers,
// checks their readiness and runs the harness's own clients without being
// cut itself. Cuts and loss are iptables rules in the bridge's namespace
// (bridged traffic passes its FORWARD chain); delay is an NFQUEUE rule in
// a host's namespace whose packets this process holds back (Delay).
//
// Everything needs root, iproute2 and iptables (`make iptables` installs
// the Debian package). Every name a Net creates starts with its prefix, and
// Close deletes each by its exact name.
package partition

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// Host is one network namespace on the bridge.
type Host struct {
	Name  string     // short name within the Net ("e0", "m", "w1")
	Netns string     // the namespace's name: <prefix>-<Name>
	Addr  netip.Addr // its address on the bridge
}

// Net is a bridge and the hosts on it. Its methods are safe for concurrent
// use.
type Net struct {
	prefix string
	subnet netip.Prefix
	bridge string // the bridge's namespace
	ctl    Host   // this process's end of the bridge (root namespace)

	mu      sync.Mutex
	hosts   []Host
	queues  map[uint16]*delayQueue
	nextQ   uint16
	nextIdx int
}

// Root reports whether this process runs as root, which a Net needs.
func Root() bool { return os.Geteuid() == 0 }

// New creates the bridge of a Net named prefix on subnet (an IPv4 /24 no
// route of this host uses): the namespace <prefix>-br with a bridge, and a
// veth pair <prefix>-c (this namespace, address .1) to it. It first deletes
// what a Net of the same prefix left behind (Sweep). prefix is at most 8
// characters (interface names are limited to 15). Errors: a command's,
// with its output; ErrNotRoot when not root.
func New(prefix string, subnet netip.Prefix) (*Net, error) {
	if !Root() {
		return nil, ErrNotRoot
	}
	if len(prefix) == 0 || len(prefix) > 8 || strings.ContainsAny(prefix, "- /") {
		return nil, fmt.Errorf("partition: prefix %q: 1 to 8 characters, no '-', '/' or space", prefix)
	}
	if !subnet.Addr().Is4() || subnet.Bits() != 24 {
		return nil, fmt.Errorf("partition: subnet %s: want an IPv4 /24", subnet)
	}
	subnet = subnet.Masked()
	if err := Sweep(prefix); err != nil {
		return nil, err
	}
	if out, _ := exec.Command("ip", "route", "show", subnet.String()).Output(); len(bytes.TrimSpace(out)) > 0 {
		return nil, fmt.Errorf("partition: subnet %s is in use here: %s", subnet, bytes.TrimSpace(out))
	}
	n := &Net{prefix: prefix, subnet: subnet, bridge: prefix + "-br", queues: map[uint16]*delayQueue{}, nextIdx: 2}
	n.ctl = Host{Name: "c", Addr: n.addr(1)}
	err := run(
		[]string{"ip", "netns", "add", n.bridge},
		[]string{"ip", "-n", n.bridge, "link", "set", "lo", "up"},
		[]string{"ip", "-n", n.bridge, "link", "add", "br0", "type", "bridge"},
		[]string{"ip", "-n", n.bridge, "link", "set", "br0", "up"},
		// Bridged packets pass iptables (br_netfilter), where the cuts are.
		[]string{"ip", "netns", "exec", n.bridge, "sysctl", "-qw", "net.bridge.bridge-nf-call-iptables=1"},
		[]string{"ip", "netns", "exec", n.bridge, "iptables", "-N", chain},
		[]string{"ip", "netns", "exec", n.bridge, "iptables", "-A", "FORWARD", "-j", chain},
		[]string{"ip", "link", "add", prefix + "-c", "type", "veth", "peer", "name", prefix + "-cb"},
		[]string{"ip", "link", "set", prefix + "-cb", "netns", n.bridge},
		[]string{"ip", "-n", n.bridge, "link", "set", prefix + "-cb", "master", "br0"},
		[]string{"ip", "-n", n.bridge, "link", "set", prefix + "-cb", "up"},
		[]string{"ip", "addr", "add", n.ctl.Addr.String() + "/24", "dev", prefix + "-c"},
		[]string{"ip", "link", "set", prefix + "-c", "up"},
	)
	if err != nil {
		_ = n.Close()
		return nil, err
	}
	return n, nil
}

// chain is the iptables chain of the bridge's namespace that holds the
// cuts and the loss; FORWARD jumps to it.
const chain = "FENCEPUB"

// ErrNotRoot is returned by New when this process is not root.
var ErrNotRoot = errors.New("partition: network namespaces and iptables need root")

func (n *Net) addr(i int) netip.Addr {
	b := n.subnet.Addr().As4()
	b[3] = byte(i)
	return netip.AddrFrom4(b)
}

// Ctl returns this process's host: the root namespace's end of the bridge.
func (n *Net) Ctl() Host { return n.ctl }

// AddHost creates host name: the namespace <prefix>-<name> with loopback
// up and eth0 on the bridge at the next address of the subnet.
func (n *Net) AddHost(name string) (Host, error) {
	n.mu.Lock()
	i := n.nextIdx
	n.nextIdx++
	n.mu.Unlock()
	h := Host{Name: name, Netns: n.prefix + "-" + name, Addr: n.addr(i)}
	v, vb := n.prefix+"-"+name, n.prefix+"-"+name+"b"
	if len(vb) > 15 {
		return Host{}, fmt.Errorf("partition: host name %q too long for prefix %q", name, n.prefix)
	}
	err := run(
		[]string{"ip", "netns", "add", h.Netns},
		[]string{"ip", "-n", h.Netns, "link", "set", "lo", "up"},
		[]string{"ip", "link", "add", v, "type", "veth", "peer", "name", vb},
		[]string{"ip", "link", "set", vb, "netns", n.bridge},
		[]string{"ip", "-n", n.bridge, "link", "set", vb, "master", "br0"},
		[]string{"ip", "-n", n.bridge, "link", "set", vb, "up"},
		[]string{"ip", "link", "set", v, "netns", h.Netns},
		[]string{"ip", "-n", h.Netns, "link", "set", v, "name", "eth0"},
		[]string{"ip", "-n", h.Netns, "addr", "add", h.Addr.String() + "/24", "dev", "eth0"},
		[]string{"ip", "-n", h.Netns, "link", "set", "eth0", "up"},
	)
	if err != nil {
		return Host{}, err
	}
	n.mu.Lock()
	n.hosts = append(n.hosts, h)
	n.mu.Unlock()
	return h, nil
}

// Command returns the argv that runs argv in host h's namespace.
func (h Host) Command(argv []string) []string {
	return append([]string{"ip", "netns", "exec", h.Netns}, argv...)
}

// Close stops the delay queues and deletes every namespace of the Net by
// its exact name (their veth pairs go with them, this namespace's end of
// the bridge too). The processes still running in a namespace keep it
// alive until they exit; stop them first.
func (n *Net) Close() error {
	n.mu.Lock()
	queues := n.queues
	n.queues = map[uint16]*delayQueue{}
	hosts := n.hosts
	n.hosts = nil
	n.mu.Unlock()
	for _, q := range queues {
		q.close()
	}
	var errs []error
	for _, h := range hosts {
		errs = append(errs, deleteNetns(h.Netns))
	}
	errs = append(errs, deleteNetns(n.bridge), deleteLink(n.prefix+"-c"))
	return errors.Join(errs...)
}

// Sweep deletes every namespace named <prefix>-* and this namespace's end
// of prefix's bridge: what a Net of that prefix left behind when its
// process died before Close.
func Sweep(prefix string) error {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return fmt.Errorf("partition: ip netns list: %w", err)
	}
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		if strings.HasPrefix(name, prefix+"-") {
			errs = append(errs, deleteNetns(name))
		}
	}
	errs = append(errs, deleteLink(prefix+"-c"))
	return errors.Join(errs...)
}

// deleteLink deletes this namespace's link name, if it is still there: the
// kernel removes a veth whose peer's namespace was deleted by itself, a
// moment later.
func deleteLink(name string) error {
	if err := run([]string{"ip", "link", "del", name}); err != nil && exists("/sys/class/net/"+name) {
		return err
	}
	return nil
}

func deleteNetns(name string) error {
	if !exists("/run/netns/" + name) {
		return nil
	}
	return run([]string{"ip", "netns", "del", name})
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// run runs each command in turn, stopping at the first that fails.
func run(cmds ...[]string) error {
	for _, c := range cmds {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("partition: %s: %w: %s", strings.Join(c, " "), err, bytes.TrimSpace(out))
		}
	}
	return nil
}
