package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"
)

// Cut drops every packet from a host of from to a host of to, and back
// unless oneWay (then requests arrive and their answers are lost), until
// the returned heal runs. Rules: iptables DROP in the bridge's namespace.
// heal is safe to call more than once. Errors: iptables's, with its output
// (nothing is left applied).
func (n *Net) Cut(from, to []Host, oneWay bool) (heal func() error, err error) {
	var rules [][]string
	for _, a := range from {
		for _, b := range to {
			rules = append(rules, []string{"-s", a.Addr.String(), "-d", b.Addr.String(), "-j", "DROP"})
			if !oneWay {
				rules = append(rules, []string{"-s", b.Addr.String(), "-d", a.Addr.String(), "-j", "DROP"})
			}
		}
	}
	return n.bridgeRules(rules)
}

// Loss drops a share p (0 < p ≤ 1) of the packets between every host of a
// and every host of b, both ways, at random (iptables's statistic match in
// the bridge's namespace), until the returned heal runs.
func (n *Net) Loss(a, b []Host, p float64) (heal func() error, err error) {
	if p <= 0 || p > 1 {
		return nil, fmt.Errorf("partition: loss %v: want 0 < p ≤ 1", p)
	}
	prob := strconv.FormatFloat(p, 'f', 4, 64)
	var rules [][]string
	for _, x := range a {
		for _, y := range b {
			for _, dir := range [][2]Host{{x, y}, {y, x}} {
				rules = append(rules, []string{"-s", dir[0].Addr.String(), "-d", dir[1].Addr.String(),
					"-m", "statistic", "--mode", "random", "--probability", prob, "-j", "DROP"})
			}
		}
	}
	return n.bridgeRules(rules)
}

// bridgeRules appends rules to the bridge's chain and returns the function
// that deletes them.
func (n *Net) bridgeRules(rules [][]string) (func() error, error) {
	ipt := func(op string, r []string) []string {
		return append([]string{"ip", "netns", "exec", n.bridge, "iptables", "-w", op, chain}, r...)
	}
	var once sync.Once
	var herr error
	added := 0
	heal := func() error {
		once.Do(func() {
			var errs []error
			for _, r := range rules[:added] {
				errs = append(errs, run(ipt("-D", r)))
			}
			herr = errors.Join(errs...)
		})
		return herr
	}
	for _, r := range rules {
		if err := run(ipt("-A", r)); err != nil {
			return nil, errors.Join(err, heal())
		}
		added++
	}
	return heal, nil
}

// Delay holds every packet between host h and the hosts of peers, both
// ways, for d before letting it go, until the returned heal runs: NFQUEUE
// rules in h's namespace (OUTPUT to a peer, INPUT from one) whose queue
// this process reads through netfilter's netlink interface, accepting each
// packet d after it arrived. The rules carry --queue-bypass: should this
// process stop reading, packets pass undelayed. A round trip through the
// link takes 2d more. Errors: iptables's, or the netlink socket's.
func (n *Net) Delay(h Host, peers []Host, d time.Duration) (heal func() error, err error) {
	n.mu.Lock()
	n.nextQ++
	qn := n.nextQ
	n.mu.Unlock()
	q, err := openDelayQueue(h.Netns, qn, d)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.queues[qn] = q
	n.mu.Unlock()
	ipt := func(op string, r ...string) []string {
		return append(h.Command([]string{"iptables", "-w", op}), r...)
	}
	var rules [][]string
	for _, p := range peers {
		nfq := []string{"-j", "NFQUEUE", "--queue-num", strconv.Itoa(int(qn)), "--queue-bypass"}
		rules = append(rules, append([]string{"OUTPUT", "-d", p.Addr.String()}, nfq...),
			append([]string{"INPUT", "-s", p.Addr.String()}, nfq...))
	}
	var once sync.Once
	var herr error
	added := 0
	heal = func() error {
		once.Do(func() {
			var errs []error
			for _, r := range rules[:added] {
				errs = append(errs, run(ipt("-D", r...)))
			}
			// Packets queued before the rules went keep their delay.
			time.Sleep(d)
			q.close()
			n.mu.Lock()
			delete(n.queues, qn)
			n.mu.Unlock()
			herr = errors.Join(errs...)
		})
		return herr
	}
	for _, r := range rules {
		if err := run(ipt("-A", r...)); err != nil {
			return nil, errors.Join(err, heal())
		}
		added++
	}
	return heal, nil
}

// NFQUEUE's netlink messages and attributes (linux/netfilter/nfnetlink_queue.h).
const (
	nfqnlMsgPacket  = 0
	nfqnlMsgVerdict = 1
	nfqnlMsgConfig  = 2

	nfqaPacketHdr  = 1 // NFQA_PACKET_HDR: be32 packet id, be16 hw protocol, u8 hook
	nfqaVerdictHdr = 2 // NFQA_VERDICT_HDR: be32 verdict, be32 packet id
	nfqaCfgCmd     = 1 // NFQA_CFG_CMD: u8 command, u8 pad, be16 pf
	nfqaCfgParams  = 2 // NFQA_CFG_PARAMS: be32 copy range, u8 copy mode

	nfqnlCfgCmdBind = 1
	nfqnlCopyMeta   = 1
	nfAccept        = 1
)

// delayQueue reads one NFQUEUE queue in a namespace and accepts each
// packet d after it arrived.
type delayQueue struct {
	conn *netlink.Conn
	num  uint16
	d    time.Duration
	done chan struct{}
}

// openDelayQueue binds queue num in namespace netns and starts reading it.
func openDelayQueue(netns string, num uint16, d time.Duration) (*delayQueue, error) {
	f, err := os.Open("/run/netns/" + netns)
	if err != nil {
		return nil, fmt.Errorf("partition: open namespace %s: %w", netns, err)
	}
	defer f.Close()
	conn, err := netlink.Dial(unix.NETLINK_NETFILTER, &netlink.Config{NetNS: int(f.Fd())})
	if err != nil {
		return nil, fmt.Errorf("partition: netfilter netlink socket in %s: %w", netns, err)
	}
	_ = conn.SetReadBuffer(8 << 20)
	q := &delayQueue{conn: conn, num: num, d: d, done: make(chan struct{})}
	cmd := []byte{nfqnlCfgCmdBind, 0, 0, 0}
	params := binary.BigEndian.AppendUint32(nil, 0)
	params = append(params, nfqnlCopyMeta)
	for _, attr := range []netfilter.Attribute{{Type: nfqaCfgCmd, Data: cmd}, {Type: nfqaCfgParams, Data: params}} {
		if err := q.execute(nfqnlMsgConfig, attr); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("partition: bind NFQUEUE %d in %s: %w", num, netns, err)
		}
	}
	go q.read()
	return q, nil
}

// execute sends one message of type typ with attr and waits for its
// acknowledgement.
func (q *delayQueue) execute(typ netfilter.MessageType, attr netfilter.Attribute) error {
	m, err := q.message(typ, attr, netlink.Request|netlink.Acknowledge)
	if err != nil {
		return err
	}
	_, err = q.conn.Execute(m)
	return err
}

func (q *delayQueue) message(typ netfilter.MessageType, attr netfilter.Attribute, flags netlink.HeaderFlags) (netlink.Message, error) {
	return netfilter.MarshalNetlink(netfilter.Header{
		SubsystemID: netfilter.NFSubsysQueue, MessageType: typ, Family: netfilter.ProtoUnspec,
		ResourceID: q.num, Flags: flags,
	}, []netfilter.Attribute{attr})
}

// read accepts each queued packet d after it arrives, until the socket is
// closed.
func (q *delayQueue) read() {
	defer close(q.done)
	for {
		msgs, err := q.conn.Receive()
		if err != nil {
			if errors.Is(err, unix.ENOBUFS) {
				continue // the kernel dropped messages: their packets are lost
			}
			return
		}
		for _, m := range msgs {
			h, attrs, err := netfilter.UnmarshalNetlink(m)
			if err != nil || h.SubsystemID != netfilter.NFSubsysQueue || h.MessageType != nfqnlMsgPacket {
				continue
			}
			for _, a := range attrs {
				if a.Type == nfqaPacketHdr && len(a.Data) >= 4 {
					id := binary.BigEndian.Uint32(a.Data)
					time.AfterFunc(q.d, func() { q.accept(id) })
				}
			}
		}
	}
}

// accept lets packet id go.
func (q *delayQueue) accept(id uint32) {
	v := binary.BigEndian.AppendUint32(nil, nfAccept)
	v = binary.BigEndian.AppendUint32(v, id)
	if m, err := q.message(nfqnlMsgVerdict, netfilter.Attribute{Type: nfqaVerdictHdr, Data: v}, netlink.Request); err == nil {
		_, _ = q.conn.Send(m)
	}
}

// close stops reading; packets still queued are dropped by the kernel.
func (q *delayQueue) close() {
	_ = q.conn.Close()
	<-q.done
}
