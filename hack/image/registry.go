package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// stringList is a flag that may be given more than once.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }

// runRegistry is `image registry`: go-containerregistry's in-memory
// registry served over HTTPS only, for the real-node tests
// (internal/testenv), which run it as a child process so that
// go-containerregistry stays out of the main module.
func runRegistry(args []string) error {
	fs := flag.NewFlagSet("registry", flag.ContinueOnError)
	var listen stringList
	fs.Var(&listen, "listen", "host:port to serve on, port 0 for a free one (repeatable, at least one)")
	certFile := fs.String("cert", "", "the PEM serving certificate (required)")
	keyFile := fs.String("key", "", "the PEM key of -cert (required)")
	parent := fs.Int("parent", 0, "exit once the process with this pid is no longer this one's parent (it exited)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(listen) == 0 || *certFile == "" || *keyFile == "" || fs.NArg() > 0 {
		return errors.New("registry: need -listen, -cert and -key, and no arguments")
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *parent != 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go exitWithParent(ctx, cancel, *parent)
	}
	return serveRegistry(ctx, listen, cert, os.Stdout, log.New(os.Stderr, "registry: ", log.LstdFlags))
}

// exitWithParent cancels once parent is no longer this process's parent:
// the test that started it is gone, even killed, so the registry goes too.
// (The pid is given rather than read at start: the parent may be gone
// already.)
func exitWithParent(ctx context.Context, cancel context.CancelFunc, parent int) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for os.Getppid() == parent {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
	cancel()
}

// serveRegistry listens on each address, writes https://ADDRESS (the port
// chosen) for each to ready, one a line, and serves the registry over TLS
// with cert until ctx ends or a listener fails.
func serveRegistry(ctx context.Context, addrs []string, cert tls.Certificate, ready io.Writer, logger *log.Logger) error {
	srv := &http.Server{
		Handler:           registry.New(registry.Logger(logger)),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          logger,
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return err
		}
		lns = append(lns, ln)
	}
	errs := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { errs <- srv.Serve(tls.NewListener(ln, srv.TLSConfig)) }()
	}
	for _, ln := range lns {
		if _, err := fmt.Fprintf(ready, "https://%s\n", ln.Addr()); err != nil {
			_ = srv.Close()
			return err
		}
	}
	select {
	case <-ctx.Done():
		return srv.Close()
	case err := <-errs:
		_ = srv.Close()
		return err
	}
}
