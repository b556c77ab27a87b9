//go:build unix

package main

import (
	"os/exec"
	"syscall"
)

// setOwnProcessGroup keeps a terminal's Ctrl-C (sent to the foreground
// process group) away from cmd, so the demo decides when it stops.
func setOwnProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}
