package main

import (
	"math"
	"testing"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{7}, 7},
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	in := []float64{3, 1, 2}
	median(in)
	if in[0] != 3 || in[1] != 1 {
		t.Errorf("median sorted its argument: %v", in)
	}
}

func TestSpreadOf(t *testing.T) {
	s := spreadOf([]float64{50, 40, 60})
	if s.Median != 50 || s.Min != 40 || s.Max != 60 || s.Pct != 20 {
		t.Errorf("spreadOf(50, 40, 60) = %+v", s)
	}
	// The farthest run on either side counts.
	s = spreadOf([]float64{100, 90, 130})
	if s.Median != 100 || math.Abs(s.Pct-30) > 1e-9 {
		t.Errorf("spreadOf(100, 90, 130) = %+v, want median 100, ±30%%", s)
	}
	if s := spreadOf([]float64{12}); s.Pct != 0 || s.Median != 12 {
		t.Errorf("one run: %+v", s)
	}
	if s := spreadOf(nil); s.Median != 0 || s.Runs != nil {
		t.Errorf("no run: %+v", s)
	}
	if s := spreadOf([]float64{0, 0, 1}); s.Pct != 0 {
		t.Errorf("median 0: %+v, want no percentage", s)
	}
}

func TestSpreadFormat(t *testing.T) {
	if got, want := spreadOf([]float64{52.5, 48.14, 60.2}).format("ms", 1), "52.5 ms (48.1–60.2, ±15%)"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got, want := spreadOf([]float64{31.4}).format("s", 1), "31.4 s"; got != want {
		t.Errorf("one run: got %q, want %q", got, want)
	}
}

func TestMedianStats(t *testing.T) {
	runs := []latencyStats{
		{N: 10, P50: 20, P90: 30, P99: 40, Max: 50, Lost: 1, Rate: 48},
		{N: 10, P50: 10, P90: 35, P99: 90, Max: 95, Superseded: 2, Rate: 50},
		{N: 9, P50: 30, P90: 25, P99: 60, Max: 61, Skipped: 3, Failed: 1, Rate: 49},
	}
	got := medianStats(runs)
	want := latencyStats{N: 29, P50: 20, P90: 30, P99: 60, Max: 95, Lost: 1, Superseded: 2, Skipped: 3, Failed: 1, Rate: 49}
	if got != want {
		t.Errorf("medianStats = %+v, want %+v", got, want)
	}
	if s := quantileSpread(runs, func(s latencyStats) float64 { return s.P99 }); s.Median != 60 || s.Min != 40 || s.Max != 90 || s.Pct != 50 {
		t.Errorf("p99 spread = %+v", s)
	}
	if got := medianStats(nil); got != (latencyStats{}) {
		t.Errorf("no runs: %+v", got)
	}
}
