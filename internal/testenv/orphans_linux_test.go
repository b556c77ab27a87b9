package testenv

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A process of the binary left behind by a killed test (reparented to
// init) is killed; one whose parent still runs is not.
func TestKillOrphansKillsOnlyOrphans(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatalf("no sleep binary (coreutils) to stand in for CoreDNS: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "fake-coredns")
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	child := exec.Command(bin, "60") // parent: this test
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	if err := exec.Command("sh", "-c", bin+" 61 &").Run(); err != nil { // parent: gone at once
		t.Fatal(err)
	}
	orphan := func() (string, bool) {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			c, _ := os.ReadFile(p)
			if bytes.Equal(c, []byte(bin+"\x0061\x00")) {
				stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
				return string(stat), true
			}
		}
		return "", false
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if stat, ok := orphan(); ok && strings.Contains(stat, ") S 1 ") {
			break
		} else if ok && time.Now().After(deadline) {
			t.Skipf("orphans are not reparented to init here (a subreaper adopts them: %s); killOrphans does not apply", stat)
		}
		if time.Now().After(deadline) {
			t.Fatal("the orphan did not start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	killOrphans(bin)
	for deadline := time.Now().Add(5 * time.Second); ; {
		if _, ok := orphan(); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the orphan is still running")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := syscall.Kill(child.Process.Pid, 0); err != nil {
		t.Fatalf("the child of a live test was killed: %v", err)
	}
}
