package testenv

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// killOrphans kills the processes of bin that lost their test: reparented
// to init because the test that started them was killed before it could
// stop them (a CoreDNS bound to a node's address would answer the next
// run's queries from a dead hub).
func killOrphans(bin string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		argv := bytes.SplitN(b, []byte{0}, 2)
		if len(argv) == 0 || string(argv[0]) != bin {
			continue
		}
		dir := filepath.Dir(p)
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so count from
		// the last parenthesis.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[1] != "1" {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(dir)); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
