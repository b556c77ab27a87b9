package testenv

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// FreezeAPIServer stops the cluster's kube-apiserver process with SIGSTOP:
// it keeps its port and its open connections but answers nothing, so
// clients hang instead of failing, as behind a partition that drops
// packets. ThawAPIServer resumes it; Stop thaws it first.
func (c *Cluster) FreezeAPIServer() error {
	return c.signalAPIServer(syscall.SIGSTOP, true)
}

// ThawAPIServer resumes a kube-apiserver frozen by FreezeAPIServer.
func (c *Cluster) ThawAPIServer() error {
	return c.signalAPIServer(syscall.SIGCONT, false)
}

func (c *Cluster) signalAPIServer(sig syscall.Signal, frozen bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped || c.apiDown {
		return fmt.Errorf("testenv: cluster %q: kube-apiserver is not running", c.Name)
	}
	pid, err := c.apiServerPID()
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("testenv: cluster %q: signal kube-apiserver: %w", c.Name, err)
	}
	c.frozen = frozen
	return nil
}

// apiServerPID finds the cluster's kube-apiserver among this machine's
// processes by its certificate directory, which is unique to the cluster.
// envtest keeps the process to itself.
func (c *Cluster) apiServerPID() (int, error) {
	want := []byte("--cert-dir=" + filepath.Join(c.Dir, "apiserver"))
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, fmt.Errorf("testenv: %w", err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := bytes.Split(cmdline, []byte{0})
		if filepath.Base(string(args[0])) != "kube-apiserver" {
			continue
		}
		for _, a := range args[1:] {
			if bytes.Equal(a, want) {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("testenv: cluster %q: no kube-apiserver process with %s", c.Name, want)
}
