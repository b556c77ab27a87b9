// Command coredns is a CoreDNS with only the plugins the end-to-end DNS tests
// use: kubernetes (with its multicluster option, which answers
// clusterset.local from ServiceImports and MCS EndpointSlices), ready (so a
// test knows when the kubernetes caches have synced), bind, errors and log.
//
// It is the usual "custom CoreDNS main": import the wanted plugins (each
// registers itself in init), set the directive order, then run coremain.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives lists the plugins in execution order, as in CoreDNS's own
// plugin.cfg (a plugin sees every request the ones before it pass on).
var directives = []string{
	"bind",
	"ready",
	"errors",
	"log",
	"kubernetes",
}

func main() {
	if err := dnsserver.SetDirectives(directives); err != nil {
		panic(err)
	}
	coremain.Run()
}
