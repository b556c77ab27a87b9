package app

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// hack/bench reads these from the daemon's /metrics: allocations per change
// and the GC share of the CPU.
func TestGoCollectorExportsWhatTheBenchReads(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newGoCollector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{
		"go_memstats_mallocs_total",
		"go_memstats_alloc_bytes_total",
		"go_memstats_heap_inuse_bytes",
		"go_goroutines",
		"go_cpu_classes_gc_total_cpu_seconds_total",
		"go_cpu_classes_idle_cpu_seconds_total",
		"go_cpu_classes_total_cpu_seconds_total",
	} {
		if !have[name] {
			t.Errorf("the Go collector does not export %s", name)
		}
	}
}
