package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func findRow(t *testing.T, r *results, prefix string) row {
	t.Helper()
	for _, x := range r.Rows {
		if strings.HasPrefix(x.Metric, prefix) {
			return x
		}
	}
	t.Fatalf("no row %q in %+v", prefix, r.Rows)
	return row{}
}

func TestFinishMediansSpreadsAndReads(t *testing.T) {
	r := &results{Params: params{Members: 2, ServicesPerMember: 1, EndpointsPerService: 10, AggregatedEndpoints: 20,
		Churn: 10, ChurnSeconds: 5, Runs: 3, WritesPerChange: 2}}
	r.Floor.ColdRuns = spreadOf([]float64{10, 11, 9})
	r.Floor.ColdSeconds = r.Floor.ColdRuns.Median
	r.Daemon.ColdRuns = spreadOf([]float64{12, 13, 11})
	r.Daemon.ColdSeconds = r.Daemon.ColdRuns.Median
	r.Floor.IdleRuns = []latencyStats{{P50: 10, P99: 40}, {P50: 11, P99: 41}, {P50: 12, P99: 39}}
	r.Daemon.IdleRuns = []latencyStats{{P50: 10, P99: 40}, {P50: 11, P99: 50}, {P50: 12, P99: 90}}
	r.Floor.Idle, r.Daemon.Idle = medianStats(r.Floor.IdleRuns), medianStats(r.Daemon.IdleRuns)
	r.Floor.ChurnRuns = []latencyStats{{P50: 10, P99: 40, Rate: 10}}
	r.Daemon.ChurnRuns = []latencyStats{{P50: 10, P99: 60, Rate: 10}}
	r.Floor.Churn, r.Daemon.Churn = medianStats(r.Floor.ChurnRuns), medianStats(r.Daemon.ChurnRuns)
	r.Daemon.IdleChanges = 30
	r.Daemon.IdleRequests = requestCounts{"hub/watch": 1, "lease/get": 4}
	r.Daemon.IdleAllocsPerChange, r.Daemon.IdleAllocBytesPerChange = 5000, 400*1024
	r.Daemon.ChurnGCCPUSeconds, r.Daemon.ChurnGoCPUSeconds = 0.5, 2
	r.finish(0)

	cold := findRow(t, r, "cold convergence")
	if cold.Daemon != "12.0 s (11.0–13.0, ±8%)" || cold.Ratio != "1.20×" || cold.Result != "MISSED" || cold.Target != "≤ 1.15× floor (median of 3)" {
		t.Errorf("cold row: %+v", cold)
	}
	idle := findRow(t, r, "propagation p99, idle")
	// Within 1.5× at the median, but the runs disagree: not met.
	if idle.Ratio != "1.25×" || idle.Result != "MISSED, spread ±80% > ±25%" || !strings.Contains(idle.Target, "≤ 1.5× floor (median of 3") {
		t.Errorf("idle p99 row: %+v", idle)
	}
	if churn := findRow(t, r, "propagation p99 @ 10/s"); churn.Result != "met" {
		t.Errorf("churn p99 row: %+v", churn)
	}
	reads := findRow(t, r, "hub reads per member change, idle")
	if reads.Result != "met" || !strings.Contains(reads.Daemon, "1 watches opened; Lease client: 4, not per change") {
		t.Errorf("reads row: %+v", reads)
	}
	r.Daemon.IdleRequests["hub/get"] = 3
	r.Rows, r.Notes = nil, nil
	r.finish(0)
	if reads := findRow(t, r, "hub reads per member change, idle"); reads.Result != "MISSED" || !strings.HasPrefix(reads.Daemon, "0.10 (GET 3") {
		t.Errorf("reads row with hub GETs: %+v", reads)
	}
	if x := findRow(t, r, "daemon allocations per member change"); x.Daemon != "5000 (400.0 KiB)" {
		t.Errorf("allocations row: %+v", x)
	}
	if x := findRow(t, r, "daemon GC share of CPU @ 10/s"); x.Daemon != "25% (0.50 of 2.00 CPU-s)" {
		t.Errorf("GC row: %+v", x)
	}
	if md := r.markdown(); !strings.Contains(md, "| propagation p99, idle | 50.0 ms (40.0–90.0, ±80%) |") {
		t.Errorf("markdown:\n%s", md)
	}
}

// TestScaleSectionsAndTargets: runs at other scales write their own doc
// section, side by side with the default run's, and are judged by the
// targets of their scale.
func TestScaleSectionsAndTargets(t *testing.T) {
	def := params{Members: defaultMembers, ServicesPerMember: defaultServices, EndpointsPerService: defaultEndpoints,
		AggregatedEndpoints: defaultMembers * defaultServices * defaultEndpoints}
	many := params{Members: 1000, ServicesPerMember: 1, EndpointsPerService: 100, AggregatedEndpoints: 100_000}
	million := params{Members: 1000, ServicesPerMember: 1, EndpointsPerService: 1000, AggregatedEndpoints: 1_000_000}
	for _, tc := range []struct {
		p    params
		cold float64
	}{{def, coldMaxRatio}, {many, coldManyMaxRatio}, {million, coldMillionMaxRatio}} {
		if got := coldTarget(tc.p); got != tc.cold {
			t.Errorf("coldTarget(%+v) = %v, want %v", tc.p, got, tc.cold)
		}
	}

	doc := filepath.Join(t.TempDir(), "performance.md")
	var text strings.Builder
	text.WriteString("intro\n")
	for _, p := range []params{def, many} {
		b, e := docMarkers(p)
		text.WriteString(b + "\nold\n" + e + "\n")
	}
	if err := os.WriteFile(doc, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	r := &results{Params: many, Command: "make bench-scale"}
	if err := r.updateDoc(doc); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	if strings.Count(s, "old") != 1 || !strings.Contains(s, "make bench-scale") {
		t.Errorf("the 1000x1x100 run did not replace only its own section:\n%s", s)
	}
	if err := (&results{Params: million}).updateDoc(doc); err == nil {
		t.Error("a scale without a section in the doc: no error")
	}
}
