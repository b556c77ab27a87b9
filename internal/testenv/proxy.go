package testenv

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a loopback port in front of another address, for
// cutting one client off a server while others keep using it: give that
// client a kubeconfig through the proxy (Cluster.KubeconfigVia), then Block
// and Unblock. It passes bytes through untouched, so TLS is end to end.
type Proxy struct {
	target string
	addr   string // 127.0.0.1:port; the same across Block and Unblock

	mu      sync.Mutex
	ln      net.Listener // nil while blocked or closed
	conns   map[net.Conn]struct{}
	closed  bool
	serving sync.WaitGroup
}

// StartProxy listens on a free loopback port and forwards every connection
// to target (host:port).
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testenv: proxy: %w", err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	return p, nil
}

// StartProxyT starts a proxy in front of the apiserver of c for a test and
// closes it when the test ends.
func StartProxyT(t testing.TB, c *Cluster) *Proxy {
	t.Helper()
	u, err := url.Parse(c.Host())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	p, err := StartProxy(u.Host)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// URL is the proxy's address as an https URL, for a kubeconfig server.
func (p *Proxy) URL() string { return "https://" + p.addr }

// Block cuts every connection through the proxy and refuses new ones (the
// port is closed: clients get "connection refused") until Unblock.
func (p *Proxy) Block() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for c := range conns {
		_ = c.Close()
	}
	p.serving.Wait()
}

// Unblock accepts connections again, on the same port.
func (p *Proxy) Unblock() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("testenv: proxy is closed")
	}
	if p.ln != nil {
		return nil
	}
	var ln net.Listener
	var err error
	// The port was ours a moment ago; only a racing process could take it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if ln, err = net.Listen("tcp", p.addr); err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("testenv: proxy: listen again on %s: %w", p.addr, err)
	}
	p.ln = ln
	p.serveLocked(ln)
	return nil
}

// Close blocks the proxy for good and waits for its goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Block()
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ln = ln
	p.serveLocked(ln)
}

func (p *Proxy) serveLocked(ln net.Listener) {
	p.serving.Add(1)
	go func() {
		defer p.serving.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by Block
			}
			go p.forward(c)
		}
	}()
}

// track registers conns for Block to close; false if blocked meanwhile.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
	}
}

func (p *Proxy) forward(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		// The target is down: reset, as the target itself would refuse.
		if tc, ok := client.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = client.Close()
		return
	}
	if !p.track(client, server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	defer p.untrack(client, server)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(server, client)
	go pipe(client, server)
	<-done
	_ = client.Close()
	_ = server.Close()
	<-done
}
