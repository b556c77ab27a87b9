// Command socat stands in for the alpine/socat image of the MCS conformance
// suite, which cannot be pulled here. It implements the one use the suite
// makes of socat, a listener that answers with a command's output:
//
//	socat [-v ...] PROTO-LISTEN:PORT[,OPTION...] SYSTEM:COMMAND
//
// PROTO is TCP or UDP (IPv4), TCP4 or UDP4, or TCP6 or UDP6 (IPv6, and IPv4
// too unless ipv6only=1); LISTEN may be written L. For each TCP connection
// or UDP datagram it runs COMMAND with /bin/sh -c, its environment plus
// SOCAT_PEERADDR and SOCAT_PEERPORT, and sends what COMMAND prints back;
// then it closes the connection. The options it honours are crlf (line ends
// sent as CRLF), fork (serve every connection; without it, the first one
// only), ipv6only (or ipv6-v6only) and bind=ADDRESS; reuseaddr and the
// rest are accepted and ignored. Options before the addresses (-v, -d, ...)
// are ignored, -T, -t, -b, -lf, -lp and -lh with their value.
//
// The suite runs it in both ways the image allows: as the entrypoint with
// those arguments (older suites), and from a `sh -c` script that picks the
// listener from $MY_POD_IPS (newer ones), so the image also holds /bin/sh
// and the tools such a script uses (busybox).
package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// listener is what the first address and its options ask for.
type listener struct {
	network string // tcp, tcp4, tcp6, udp, udp4, udp6
	addr    string // host:port to listen on
	crlf    bool
	fork    bool
	command string
}

// optionsWithValue are socat's options before the addresses that take one.
var optionsWithValue = map[string]bool{"-T": true, "-t": true, "-b": true, "-lf": true, "-lp": true, "-lh": true}

func parse(args []string) (listener, error) {
	var addrs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case optionsWithValue[a]:
			i++
		case strings.HasPrefix(a, "-") && len(a) > 1:
		default:
			addrs = append(addrs, a)
		}
	}
	if len(addrs) != 2 {
		return listener{}, fmt.Errorf("want two addresses, PROTO-LISTEN:PORT[,opts] and SYSTEM:COMMAND, got %q", args)
	}
	kind, command, ok := strings.Cut(addrs[1], ":")
	if !ok || !strings.EqualFold(kind, "SYSTEM") {
		return listener{}, fmt.Errorf("second address %q: only SYSTEM:COMMAND is supported", addrs[1])
	}
	head, rest, ok := strings.Cut(addrs[0], ":")
	if !ok {
		return listener{}, fmt.Errorf("first address %q: want PROTO-LISTEN:PORT", addrs[0])
	}
	proto, suffix, ok := strings.Cut(strings.ToUpper(head), "-")
	if !ok || (suffix != "LISTEN" && suffix != "L") {
		return listener{}, fmt.Errorf("first address %q: only TCP/UDP listeners are supported", addrs[0])
	}
	l := listener{command: command}
	var family string
	switch proto {
	case "TCP", "TCP4":
		l.network, family = "tcp", "4"
	case "TCP6":
		l.network, family = "tcp", "6"
	case "UDP", "UDP4":
		l.network, family = "udp", "4"
	case "UDP6":
		l.network, family = "udp", "6"
	default:
		return listener{}, fmt.Errorf("first address %q: unknown protocol %s", addrs[0], proto)
	}
	fields := strings.Split(rest, ",")
	port := fields[0]
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return listener{}, fmt.Errorf("first address %q: bad port %q", addrs[0], port)
	}
	host := ""
	v6only := false
	for _, opt := range fields[1:] {
		name, value, _ := strings.Cut(opt, "=")
		switch strings.ToLower(name) {
		case "crlf":
			l.crlf = true
		case "fork":
			l.fork = true
		case "ipv6only", "ipv6-v6only":
			v6only = value == "" || value == "1"
		case "bind":
			host = strings.Trim(value, "[]")
		}
	}
	switch {
	case family == "4":
		// IPv4 only, as socat's TCP-LISTEN binds 0.0.0.0.
		l.network += "4"
		if host == "" {
			host = "0.0.0.0"
		}
	case v6only:
		l.network += "6"
		if host == "" {
			host = "::"
		}
	case host == "":
		// An IPv6 socket that takes IPv4 too (ipv6only=0, Linux's default).
		host = "::"
	default:
		l.network += "6"
	}
	l.addr = net.JoinHostPort(host, port)
	return l, nil
}

func main() {
	l, err := parse(os.Args[1:])
	if err != nil {
		fail(err)
	}
	if err := l.serve(); err != nil {
		fail(err)
	}
}

func (l listener) serve() error {
	if strings.HasPrefix(l.network, "udp") {
		pc, err := net.ListenPacket(l.network, l.addr)
		if err != nil {
			return err
		}
		buf := make([]byte, 64<<10)
		for {
			_, addr, err := pc.ReadFrom(buf)
			if err != nil {
				return err
			}
			_, _ = pc.WriteTo(l.run(addr), addr)
			if !l.fork {
				return nil
			}
		}
	}
	ln, err := net.Listen(l.network, l.addr)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		answer := func() {
			defer c.Close()
			_, _ = c.Write(l.run(c.RemoteAddr()))
		}
		if !l.fork {
			answer()
			return nil
		}
		go answer()
	}
}

// run runs the command for a peer and returns what it printed.
func (l listener) run(peer net.Addr) []byte {
	cmd := exec.Command("/bin/sh", "-c", l.command)
	cmd.Env = os.Environ()
	if host, port, err := net.SplitHostPort(peer.String()); err == nil {
		cmd.Env = append(cmd.Env, "SOCAT_PEERADDR="+host, "SOCAT_PEERPORT="+port)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		fmt.Fprintln(os.Stderr, "socat:", err)
	}
	if l.crlf {
		out = bytes.ReplaceAll(out, []byte("\n"), []byte("\r\n"))
	}
	return out
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "socat:", err)
	os.Exit(1)
}
