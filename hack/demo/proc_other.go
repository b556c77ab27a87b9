//go:build !unix

package main

import "os/exec"

func setOwnProcessGroup(*exec.Cmd) {}

func takeTerminal() (restore func()) { return func() {} }
