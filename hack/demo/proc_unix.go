//go:build unix

package main

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// setOwnProcessGroup keeps a terminal's Ctrl-C (sent to the foreground
// process group) away from cmd, so the demo decides when it stops.
func setOwnProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// takeTerminal makes the demo its terminal's foreground process group, so
// that Ctrl-C reaches the demo alone and not the make or go run that
// started it: those then see the demo end on its own, with its exit status.
// It returns the function that gives the terminal back. Without a
// controlling terminal it does nothing.
func takeTerminal() (restore func()) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return func() {}
	}
	fd := int(tty.Fd())
	fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || fg != unix.Getpgrp() {
		// Not started in the foreground: leave the terminal alone.
		_ = tty.Close()
		return func() {}
	}
	// A background group that sets the foreground group gets SIGTTOU.
	signal.Ignore(syscall.SIGTTOU)
	if err := unix.Setpgid(0, 0); err != nil {
		_ = tty.Close()
		return func() {}
	}
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, unix.Getpgrp()); err != nil {
		_ = tty.Close()
		return func() {}
	}
	return func() {
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, fg)
		_ = tty.Close()
	}
}
