package main

import (
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseTheSuitesForms(t *testing.T) {
	for _, tc := range []struct {
		args          []string
		network, addr string
		crlf, fork    bool
		command       string
	}{
		// Older suites: the image's entrypoint with these arguments.
		{args: []string{"-v", "-v", "TCP-LISTEN:42,crlf,reuseaddr,fork", "SYSTEM:echo pod ip $(MY_POD_IP)"},
			network: "tcp4", addr: "0.0.0.0:42", crlf: true, fork: true, command: "echo pod ip $(MY_POD_IP)"},
		{args: []string{"-v", "-v", "UDP-LISTEN:42,crlf,reuseaddr,fork", "SYSTEM:echo hi"},
			network: "udp4", addr: "0.0.0.0:42", crlf: true, fork: true, command: "echo hi"},
		// Newer suites, from a script: dual-stack and IPv6-only pods.
		{args: []string{"-v", "-v", "TCP6-LISTEN:42,crlf,reuseaddr,fork,ipv6only=0", `SYSTEM:echo "pod ip $first_ip"`},
			network: "tcp", addr: "[::]:42", crlf: true, fork: true, command: `echo "pod ip $first_ip"`},
		{args: []string{"-v", "-v", "UDP6-LISTEN:42,crlf,reuseaddr,fork", "SYSTEM:echo x"},
			network: "udp", addr: "[::]:42", crlf: true, fork: true, command: "echo x"},
		{args: []string{"tcp6-l:8080,ipv6only=1", "SYSTEM:true"}, network: "tcp6", addr: "[::]:8080", command: "true"},
		{args: []string{"-T", "5", "TCP4-LISTEN:1,bind=127.0.0.1", "system:date"}, network: "tcp4", addr: "127.0.0.1:1", command: "date"},
	} {
		l, err := parse(tc.args)
		if err != nil {
			t.Errorf("%q: %v", tc.args, err)
			continue
		}
		if l.network != tc.network || l.addr != tc.addr || l.crlf != tc.crlf || l.fork != tc.fork || l.command != tc.command {
			t.Errorf("%q: got %+v", tc.args, l)
		}
	}
	for _, bad := range [][]string{
		{"TCP-LISTEN:42"},
		{"TCP-CONNECT:host:42", "SYSTEM:true"},
		{"TCP-LISTEN:42", "EXEC:/bin/true"},
		{"SCTP-LISTEN:42", "SYSTEM:true"},
		{"TCP-LISTEN:http", "SYSTEM:true"},
	} {
		if l, err := parse(bad); err == nil {
			t.Errorf("%q: accepted as %+v", bad, l)
		}
	}
}

// A TCP listener answers each connection with the command's output, CRLF
// line ends, the peer's address in the command's environment.
func TestServeAnswersEachConnection(t *testing.T) {
	probe, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	l, err := parse([]string{"-v", "TCP4-LISTEN:" + strconv.Itoa(port) + ",bind=127.0.0.1,crlf,fork", `SYSTEM:echo "pod ip $MY_IP"; echo "from $SOCAT_PEERADDR"`})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("MY_IP", "10.244.1.7")
	go func() { _ = l.serve() }()
	for i := 0; i < 2; i++ {
		var c net.Conn
		deadline := time.Now().Add(5 * time.Second)
		for {
			c, err = net.Dial("tcp4", l.addr)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := "pod ip 10.244.1.7\r\nfrom 127.0.0.1\r\n"; string(b) != want {
			t.Errorf("connection %d got %q, want %q", i, b, want)
		}
	}
}

func TestRunKeepsLineEndsWithoutCRLF(t *testing.T) {
	l := listener{command: "printf 'a\\nb\\n'"}
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9}
	if got := string(l.run(addr)); got != "a\nb\n" {
		t.Errorf("got %q", got)
	}
	l.crlf = true
	if got := string(l.run(addr)); !strings.HasSuffix(got, "b\r\n") {
		t.Errorf("with crlf got %q", got)
	}
}
