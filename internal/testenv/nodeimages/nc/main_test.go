package main

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestParseTheSuitesForms(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want options
	}{
		{args: []string{"hello.ns.svc.clusterset.local", "42"}, want: options{host: "hello.ns.svc.clusterset.local", port: "42"}},
		{args: []string{"-4", "-w", "2", "h", "42"}, want: options{family: "4", wait: 2 * time.Second, host: "h", port: "42"}},
		{args: []string{"-6", "-w2", "h", "4242"}, want: options{family: "6", wait: 2 * time.Second, host: "h", port: "4242"}},
		{args: []string{"-uvz4", "h", "1"}, want: options{family: "4", udp: true, verbose: true, zero: true, host: "h", port: "1"}},
		{args: []string{"-N", "-w", "0.5", "--", "h", "1"}, want: options{shutdown: true, wait: 500 * time.Millisecond, host: "h", port: "1"}},
	} {
		got, err := parse(tc.args)
		if err != nil || got != tc.want {
			t.Errorf("%q: got %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
	for _, bad := range [][]string{{"h"}, {"-w", "h", "1"}, {"-l", "-p", "42"}, {"-w"}, {"h", "1", "2"}} {
		if o, err := parse(bad); err == nil {
			t.Errorf("%q: accepted as %+v", bad, o)
		}
	}
}

// echo hi | nc -4 -w 2 HOST PORT: the peer gets "hi", nc prints its answer
// and exits 0 when the peer closes; a refused connection exits 1.
func TestRunSendsStdinAndPrintsTheAnswer(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, 3)
		_, _ = io.ReadFull(c, buf)
		got <- string(buf)
		_, _ = c.Write([]byte("pod ip 10.244.1.7\r\n"))
		c.Close()
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	var out, errOut bytes.Buffer
	o := options{family: "4", wait: 2 * time.Second, host: host, port: port}
	if code := run(o, strings.NewReader("hi\n"), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if s := <-got; s != "hi\n" {
		t.Errorf("the peer got %q", s)
	}
	if out.String() != "pod ip 10.244.1.7\r\n" {
		t.Errorf("printed %q", out.String())
	}

	ln.Close()
	out.Reset()
	errOut.Reset()
	if code := run(o, strings.NewReader("hi\n"), &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "failed") {
		t.Errorf("to a closed port: exit %d, stderr %q", code, errOut.String())
	}
}

// With -w, a peer that stays silent ends the wait after that long.
func TestRunIdleTimeout(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			time.Sleep(3 * time.Second)
			c.Close()
		}
	}()
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	start := time.Now()
	var out, errOut bytes.Buffer
	if code := run(options{wait: 300 * time.Millisecond, host: host, port: port}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("returned after %s, want about 300ms", d)
	}
}
