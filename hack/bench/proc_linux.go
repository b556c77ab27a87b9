//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// setProcAttrs puts the daemon in its own process group, so a terminal's
// Ctrl-C reaches the benchmark only (which then stops the daemon in order),
// and has the kernel send it SIGTERM should the benchmark die first.
func setProcAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
