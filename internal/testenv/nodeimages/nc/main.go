// Command nc stands in for the netcat of the nicolaka/netshoot image that
// the newest MCS conformance suite's client pods run, which cannot be pulled
// here. It is a client only, in the forms the suite and the real-node tests
// use:
//
//	nc [-4|-6] [-u] [-v] [-z] [-N] [-w SEC] HOST PORT
//
// It connects to HOST (a name resolved through the pod's resolv.conf, or an
// address) on PORT over TCP, or UDP with -u; -4 and -6 resolve and connect
// in that family only. It sends what it reads on stdin and prints what the
// peer sends until the peer closes, or, with -w, until nothing arrived for
// SEC seconds (-w also bounds the connect). -N shuts the sending side down
// once stdin ends; -z only connects; -v says so on stderr. It exits 1 when
// the name does not resolve or the connection fails, as netcat does.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"
)

// options are what the command line asked for.
type options struct {
	family   string // "", "4" or "6"
	udp      bool
	verbose  bool
	zero     bool
	shutdown bool
	wait     time.Duration // 0: no timeout
	host     string
	port     string
}

func parse(args []string) (options, error) {
	var o options
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			rest = append(rest, a)
			continue
		}
		// Flags may be grouped (-4v) and -w takes its value attached
		// (-w2) or as the next argument.
		for j := 1; j < len(a); j++ {
			switch c := a[j]; c {
			case '4', '6':
				o.family = string(c)
			case 'u':
				o.udp = true
			case 'v':
				o.verbose = true
			case 'z':
				o.zero = true
			case 'N':
				o.shutdown = true
			case 'n':
				// Numeric hosts only: a name fails to resolve anyway
				// when it is an address.
			case 'w':
				v := a[j+1:]
				if v == "" {
					if i+1 >= len(args) {
						return o, errors.New("option -w needs a value")
					}
					i++
					v = args[i]
				}
				secs, err := strconv.ParseFloat(v, 64)
				if err != nil || secs < 0 {
					return o, fmt.Errorf("-w %q: not a number of seconds", v)
				}
				o.wait = time.Duration(secs * float64(time.Second))
				j = len(a)
			default:
				return o, fmt.Errorf("unsupported option -%c (this stand-in knows -4 -6 -u -v -z -N -n -w)", c)
			}
		}
	}
	if len(rest) != 2 {
		return o, errors.New("usage: nc [-4|-6] [-u] [-v] [-z] [-N] [-w SEC] HOST PORT")
	}
	o.host, o.port = rest[0], rest[1]
	return o, nil
}

func (o options) network() string {
	if o.udp {
		return "udp" + o.family
	}
	return "tcp" + o.family
}

func main() {
	o, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "nc:", err)
		os.Exit(1)
	}
	os.Exit(run(o, os.Stdin, os.Stdout, os.Stderr))
}

// run does what o asks, with in, out and errOut as stdin, stdout and
// stderr, and returns the exit status.
func run(o options, in io.Reader, out, errOut io.Writer) int {
	d := net.Dialer{Timeout: o.wait}
	conn, err := d.Dial(o.network(), net.JoinHostPort(o.host, o.port))
	if err != nil {
		fmt.Fprintf(errOut, "nc: connect to %s port %s (%s) failed: %v\n", o.host, o.port, o.network(), err)
		return 1
	}
	defer conn.Close()
	if o.verbose {
		fmt.Fprintf(errOut, "Connection to %s (%s) %s port [%s] succeeded!\n", o.host, conn.RemoteAddr(), o.port, o.network())
	}
	if o.zero {
		return 0
	}
	if o.udp {
		go sendDatagrams(conn, in)
	} else {
		go func() {
			_, _ = io.Copy(conn, in)
			if tc, ok := conn.(*net.TCPConn); ok && o.shutdown {
				_ = tc.CloseWrite()
			}
		}()
	}
	return receive(conn, out, errOut, o.wait)
}

// sendDatagrams sends each read of in as one datagram.
func sendDatagrams(conn net.Conn, in io.Reader) {
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if _, werr := conn.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// receive copies what arrives on conn to out until the peer closes, or
// until nothing arrived for idle (0: wait for ever).
func receive(conn net.Conn, out, errOut io.Writer, idle time.Duration) int {
	buf := make([]byte, 64<<10)
	for {
		if idle > 0 {
			_ = conn.SetReadDeadline(time.Now().Add(idle))
		}
		n, err := conn.Read(buf)
		if n > 0 {
			if _, werr := out.Write(buf[:n]); werr != nil {
				return 1
			}
		}
		var ne net.Error
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF), errors.As(err, &ne) && ne.Timeout():
			return 0
		case errors.Is(err, syscall.ECONNRESET):
			// A server that closes with our bytes unread resets the
			// connection; what it sent before was printed.
			return 0
		default:
			fmt.Fprintln(errOut, "nc:", err)
			return 1
		}
	}
}
