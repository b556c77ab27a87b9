package main

import (
	"strings"
	"testing"
)

func mustParse(t *testing.T, text string) metrics {
	t.Helper()
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const scrape0 = `# HELP endpoint_aggregator_hub_requests_total Requests sent to the hub.
# TYPE endpoint_aggregator_hub_requests_total counter
endpoint_aggregator_hub_requests_total{client="hub",verb="get"} 3
endpoint_aggregator_hub_requests_total{client="hub",verb="list"} 12
endpoint_aggregator_hub_requests_total{client="hub",verb="watch"} 12
endpoint_aggregator_hub_requests_total{client="hub",verb="update"} 100
endpoint_aggregator_hub_requests_total{client="lease",verb="list"} 1
endpoint_aggregator_hub_requests_total{client="lease",verb="update"} 40
go_memstats_mallocs_total 1000
go_memstats_alloc_bytes_total 1.5e+06
go_cpu_classes_gc_total_cpu_seconds_total 0.5
go_cpu_classes_total_cpu_seconds_total 4
go_cpu_classes_idle_cpu_seconds_total 2
`

const scrape1 = `endpoint_aggregator_hub_requests_total{client="hub",verb="get"} 3
endpoint_aggregator_hub_requests_total{client="hub",verb="list"} 12
endpoint_aggregator_hub_requests_total{client="hub",verb="watch"} 15
endpoint_aggregator_hub_requests_total{client="hub",verb="update"} 300
endpoint_aggregator_hub_requests_total{client="lease",verb="list"} 1
endpoint_aggregator_hub_requests_total{client="lease",verb="update"} 90
go_memstats_mallocs_total 21000
go_memstats_alloc_bytes_total 3.5e+06
go_cpu_classes_gc_total_cpu_seconds_total 1.5
go_cpu_classes_total_cpu_seconds_total 9
go_cpu_classes_idle_cpu_seconds_total 5
`

func TestRequests(t *testing.T) {
	m0, m1 := mustParse(t, scrape0), mustParse(t, scrape1)
	d := m1.requests(m0)
	want := requestCounts{"hub/watch": 3, "hub/update": 200, "lease/update": 50}
	if len(d) != len(want) {
		t.Fatalf("requests = %v, want %v", d, want)
	}
	for k, v := range want {
		if d[k] != v {
			t.Errorf("requests[%s] = %d, want %d", k, d[k], v)
		}
	}
	if got := d.verb("", "get") + d.verb("", "list"); got != 0 {
		t.Errorf("reads between the scrapes = %d, want 0", got)
	}
	if got, want := d.reads(), "GET 0, LIST 0, WATCH 3"; got != want {
		t.Errorf("reads() = %q, want %q", got, want)
	}
	// From the process start, the Lease client's reads are told apart.
	all := m0.requests(nil)
	if got, want := all.reads(), "GET 3, LIST 13, WATCH 12 (Lease client: GET 0, LIST 1, WATCH 0)"; got != want {
		t.Errorf("reads() = %q, want %q", got, want)
	}
	if got := all.verb("hub", "list"); got != 12 {
		t.Errorf("hub lists = %d, want 12", got)
	}
}

func TestDeltaAndGC(t *testing.T) {
	m0, m1 := mustParse(t, scrape0), mustParse(t, scrape1)
	if got := m1.delta("go_memstats_mallocs_total", m0); got != 20000 {
		t.Errorf("mallocs delta = %v, want 20000", got)
	}
	if got := m1.delta("go_memstats_alloc_bytes_total", nil); got != 3.5e6 {
		t.Errorf("alloc bytes from the start = %v", got)
	}
	gc, total := m1.gcCPU(m0)
	if gc != 1 || total != 2 {
		t.Errorf("gcCPU = %v, %v, want 1, 2 (5 in all, 3 of them idle)", gc, total)
	}
	if gc, total := mustParse(t, "process_cpu_seconds_total 3\n").gcCPU(nil); gc != -1 || total != -1 {
		t.Errorf("without the runtime metrics: %v, %v, want -1, -1", gc, total)
	}
}
