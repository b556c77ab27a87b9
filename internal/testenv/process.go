package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// process is a child process of a test helper whose output goes to a log
// file: Prometheus, and the processes of a node.
type process struct {
	cmd     *exec.Cmd
	done    chan struct{} // closed once it exited
	waitErr error         // set before done closes
	logPath string
}

// startProcess starts cmd with its stdout and stderr appended to logPath.
func startProcess(cmd *exec.Cmd, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }() // the child has its own descriptor
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", cmd.Path, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{}), logPath: logPath}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// stop ends the process: SIGTERM, then SIGKILL after ten seconds.
func (p *process) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}
