// Command socat stands in for the alpine/socat image of the MCS conformance
// suite, which cannot be pulled here. It implements the one use the suite
// makes of socat:
//
//	socat [-v ...] TCP-LISTEN:PORT[,opts] SYSTEM:COMMAND
//	socat [-v ...] UDP-LISTEN:PORT[,opts] SYSTEM:COMMAND
//
// For each TCP connection (fork) or UDP datagram it runs COMMAND with
// /bin/sh -c and sends what COMMAND prints back, with CRLF line ends (the
// crlf option).
package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
)

func main() {
	var listen, system string
	for _, a := range os.Args[1:] {
		switch {
		case strings.HasPrefix(a, "-"):
		case strings.HasPrefix(a, "SYSTEM:"):
			system = strings.TrimPrefix(a, "SYSTEM:")
		case listen == "":
			listen = a
		}
	}
	proto, rest, ok := strings.Cut(listen, "-LISTEN:")
	if !ok || system == "" {
		fail(fmt.Errorf("want TCP-LISTEN:PORT or UDP-LISTEN:PORT and SYSTEM:COMMAND, got %q", os.Args[1:]))
	}
	port, _, _ := strings.Cut(rest, ",")
	switch proto {
	case "TCP":
		ln, err := net.Listen("tcp", ":"+port)
		if err != nil {
			fail(err)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				fail(err)
			}
			go func() {
				defer func() { _ = c.Close() }()
				_, _ = c.Write(run(system))
			}()
		}
	case "UDP":
		pc, err := net.ListenPacket("udp", ":"+port)
		if err != nil {
			fail(err)
		}
		buf := make([]byte, 64<<10)
		for {
			_, addr, err := pc.ReadFrom(buf)
			if err != nil {
				fail(err)
			}
			_, _ = pc.WriteTo(run(system), addr)
		}
	default:
		fail(fmt.Errorf("unknown address type %q", proto))
	}
}

func run(command string) []byte {
	out, _ := exec.Command("/bin/sh", "-c", command).Output()
	return bytes.ReplaceAll(out, []byte("\n"), []byte("\r\n"))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "socat:", err)
	os.Exit(1)
}
