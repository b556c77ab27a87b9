package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
)

// spread summarizes one figure measured in several runs (-runs).
type spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	// Pct is how far the farthest run lies from the median, in percent of
	// the median (0 for one run).
	Pct  float64   `json:"pct"`
	Runs []float64 `json:"runs"`
}

// spreadOf summarizes runs; it is zero for none.
func spreadOf(runs []float64) spread {
	if len(runs) == 0 {
		return spread{}
	}
	s := spread{Median: median(runs), Min: slices.Min(runs), Max: slices.Max(runs), Runs: slices.Clone(runs)}
	if s.Median > 0 {
		s.Pct = 100 * math.Max(s.Max-s.Median, s.Median-s.Min) / s.Median
	}
	return s
}

// format writes the median with unit, and with more than one run the
// range and the spread: "52.5 ms (48.1–60.2, ±15%)".
func (s spread) format(unit string, decimals int) string {
	v := func(x float64) string { return fmt.Sprintf("%.*f", decimals, x) }
	out := v(s.Median) + " " + unit
	if len(s.Runs) > 1 {
		out += fmt.Sprintf(" (%s–%s, ±%.0f%%)", v(s.Min), v(s.Max), s.Pct)
	}
	return out
}

// median is the middle value of v (the mean of the two middle ones for an
// even count), 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// medianStats combines the latencies of several runs of one phase: each
// quantile and the rate are the median of the runs', Max the largest, and
// the counts are summed.
func medianStats(runs []latencyStats) latencyStats {
	var out latencyStats
	if len(runs) == 0 {
		return out
	}
	pick := func(f func(latencyStats) float64) []float64 {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		return v
	}
	out.P50 = median(pick(func(r latencyStats) float64 { return r.P50 }))
	out.P90 = median(pick(func(r latencyStats) float64 { return r.P90 }))
	out.P99 = median(pick(func(r latencyStats) float64 { return r.P99 }))
	out.Rate = median(pick(func(r latencyStats) float64 { return r.Rate }))
	out.Max = slices.Max(pick(func(r latencyStats) float64 { return r.Max }))
	for _, r := range runs {
		out.N += r.N
		out.Lost += r.Lost
		out.Superseded += r.Superseded
		out.Skipped += r.Skipped
		out.Failed += r.Failed
	}
	return out
}

// quantileSpread is the spread of one quantile (or the rate) over runs.
func quantileSpread(runs []latencyStats, f func(latencyStats) float64) spread {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	return spreadOf(v)
}
