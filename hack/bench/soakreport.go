package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// soakSample is one sample of the daemon; NaN where it could not be read.
type soakSample struct {
	Minute   time.Duration // since the soak began
	Process  int           // 1 before the restart, 2 after
	Age      time.Duration // since the soak began (process 1) or the restart (2)
	RSS      float64       // bytes
	Heap     float64       // bytes in use
	LiveHeap float64       // bytes the last collection found live
	// LiveHeapCollected is the live heap forced collections found (median
	// of three; see collectedLiveHeap).
	LiveHeapCollected float64
	Goroutines        float64
	Watches           float64 // member watches open through the proxy
	Down              bool    // some members unreachable when sampled
	Events            []string
}

// soakMetric is one sampled figure.
type soakMetric struct {
	Name  string
	Unit  string
	Scale float64 // divides the raw value for display
	get   func(soakSample) float64
	// reportOnly figures are shown and their growth given, but not
	// checked: the heap in use holds garbage awaiting the next collection,
	// and the live heap of one collection the work in flight, so both swing
	// with the collector's timing; the live heap of forced collections is
	// checked.
	reportOnly bool
}

var soakMetrics = []soakMetric{
	{"RSS", "MiB", 1 << 20, func(s soakSample) float64 { return s.RSS }, false},
	{"live heap after forced GC", "MiB", 1 << 20, func(s soakSample) float64 { return s.LiveHeapCollected }, false},
	{"live heap", "MiB", 1 << 20, func(s soakSample) float64 { return s.LiveHeap }, true},
	{"heap in use", "MiB", 1 << 20, func(s soakSample) float64 { return s.Heap }, true},
	{"goroutines", "", 1, func(s soakSample) float64 { return s.Goroutines }, false},
	{"member watches", "", 1, func(s soakSample) float64 { return s.Watches }, false},
}

// soakResult is what a soak measured.
type soakResult struct {
	Command                      string
	StartedAt                    time.Time
	Seconds                      float64
	Machine                      machine
	Members, Services, Endpoints int
	Churn                        float64
	Interval, Warmup             time.Duration
	FlapEvery, FlapDown          time.Duration
	FlapMembers                  int
	Duration                     time.Duration
	Flaps                        [][2]time.Duration // when members were unreachable, from the start
	RestartAt                    time.Duration      // the sample after which the daemon restarted
	Samples                      []soakSample
	ChurnIssued                  int
	ChurnRate                    float64
	ChurnMissing                 int
	FlapRefused                  int64
	HubKeys, HubDiffering        int
}

// processGrowth is one daemon process's growth of one figure after warm-up.
type processGrowth struct {
	Process   int
	N         int     // samples used
	Base, End float64 // medians of the first and the last samples used
	Growth    float64 // End/Base - 1
}

// soakCheck is the verdict on one figure.
type soakCheck struct {
	Metric    soakMetric
	Processes []processGrowth
	Result    string // PASS, FAIL, "not checked" (reportOnly), or n/a when no process had two samples
}

// growthCheck compares, per daemon process, the median of the first samples
// after warm-up with the median of its last samples (three each, half of
// them when the process has fewer than six). Samples taken in warm-up (the first
// warmup of the soak, or of the process after the restart), while members
// were unreachable, or that could not be read are left out.
func growthCheck(samples []soakSample, warmup time.Duration, limit float64) []soakCheck {
	var out []soakCheck
	for _, m := range soakMetrics {
		c := soakCheck{Metric: m, Result: "n/a"}
		byProc := map[int][]float64{}
		var procs []int
		for _, s := range samples {
			v := m.get(s)
			if s.Age < warmup || s.Down || math.IsNaN(v) {
				continue
			}
			if _, ok := byProc[s.Process]; !ok {
				procs = append(procs, s.Process)
			}
			byProc[s.Process] = append(byProc[s.Process], v)
		}
		for _, p := range procs {
			v := byProc[p]
			if len(v) < 2 {
				continue
			}
			k := min(3, len(v)/2)
			g := processGrowth{Process: p, N: len(v), Base: middle(v[:k]), End: middle(v[len(v)-k:])}
			switch {
			case g.Base > 0:
				g.Growth = g.End/g.Base - 1
			case g.End > 0:
				g.Growth = math.Inf(1)
			}
			c.Processes = append(c.Processes, g)
			if m.reportOnly {
				c.Result = "not checked"
				continue
			}
			if g.Growth > limit {
				c.Result = "FAIL"
			} else if c.Result != "FAIL" {
				c.Result = "PASS"
			}
		}
		out = append(out, c)
	}
	return out
}

// middle is the median of v, the mean of the middle two for an even count
// (median takes the upper one: the larger of two).
func middle(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func (r *soakResult) checks() []soakCheck { return growthCheck(r.Samples, r.Warmup, soakGrowthLimit) }

// hubResult is the verdict on the hub at the end.
func (r *soakResult) hubResult() string {
	if r.HubDiffering == 0 && r.ChurnMissing == 0 {
		return "PASS"
	}
	return "FAIL"
}

// passed reports whether every checked figure passed: one without the
// samples to decide (n/a) does not.
func (r *soakResult) passed() bool {
	for _, c := range r.checks() {
		if c.Result == "FAIL" || c.Result == "n/a" && !c.Metric.reportOnly {
			return false
		}
	}
	return r.hubResult() == "PASS"
}

func (m soakMetric) format(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	if m.Scale == 1 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v/m.Scale)
}

func (g processGrowth) String() string {
	return fmt.Sprintf("%+.1f%%", 100*g.Growth)
}

// shortDuration formats d without trailing zero units: 6m, 40s, 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// minutes formats a time into the soak as minutes.
func minutes(d time.Duration) string {
	return fmt.Sprintf("%g", math.Round(d.Minutes()*100)/100)
}

// checkRows are the verdict table's rows: figure, growth of each process
// (base → end), limit, result; then the hub.
func (r *soakResult) checkRows() [][]string {
	var rows [][]string
	for _, c := range r.checks() {
		var per []string
		for _, g := range c.Processes {
			per = append(per, fmt.Sprintf("daemon %d: %s → %s (%s, %d samples)", g.Process, c.Metric.format(g.Base), c.Metric.format(g.End), g, g.N))
		}
		if len(per) == 0 {
			per = append(per, "too few samples after warm-up")
		}
		name := c.Metric.Name
		if c.Metric.Unit != "" {
			name += " (" + c.Metric.Unit + ")"
		}
		rows = append(rows, []string{name, strings.Join(per, "; "), fmt.Sprintf("≤ +%.0f%% after warm-up", 100*soakGrowthLimit), c.Result})
	}
	hub := fmt.Sprintf("%d of %d member services differ; %d of %d changes never showed", r.HubDiffering, r.HubKeys, r.ChurnMissing, r.ChurnIssued)
	rows = append(rows, []string{"hub equals the members at the end", hub, "0 differ", r.hubResult()})
	return rows
}

// sampleRow is one line of the sample table.
func sampleRow(s soakSample) []string {
	row := []string{minutes(s.Minute), fmt.Sprint(s.Process)}
	for _, m := range soakMetrics {
		row = append(row, m.format(m.get(s)))
	}
	ev := strings.Join(s.Events, "; ")
	if s.Down {
		ev = strings.TrimPrefix(ev+"; sampled with members unreachable", "; ")
	}
	return append(row, ev)
}

func sampleHeader() []string {
	h := []string{"minute", "daemon"}
	for _, m := range soakMetrics {
		name := m.Name
		if m.Unit != "" {
			name += " (" + m.Unit + ")"
		}
		h = append(h, name)
	}
	return append(h, "events since the last sample")
}

func formatSampleLine(s soakSample) string {
	row := sampleRow(s)
	h := sampleHeader()
	var parts []string
	for i := range row[:len(row)-1] {
		parts = append(parts, h[i]+" "+row[i])
	}
	if ev := row[len(row)-1]; ev != "" {
		parts = append(parts, "("+ev+")")
	}
	return strings.Join(parts, ", ")
}

// writeText prints the sample table and the verdicts.
func (r *soakResult) writeText(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.ToUpper(strings.Join(sampleHeader(), "\t")))
	for _, s := range r.Samples {
		fmt.Fprintln(tw, strings.Join(sampleRow(s), "\t"))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tGROWTH (BASE → END)\tLIMIT\tRESULT")
	for _, row := range r.checkRows() {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, n := range r.notes() {
		fmt.Fprintln(w, "- "+n)
	}
}

func (r *soakResult) notes() []string {
	return []string{
		fmt.Sprintf("Scale: %d simulated members × %d services × %d endpoints; churn asked %g/s, achieved %.1f/s (%d changes).",
			r.Members, r.Services, r.Endpoints, r.Churn, r.ChurnRate, r.ChurnIssued),
		fmt.Sprintf("Every %s, %d members were unreachable for %s (their requests answered 503, their open watches cut; %d requests refused); the daemon restarted (SIGTERM, the same command again) after the sample at minute %s.",
			shortDuration(r.FlapEvery), r.FlapMembers, shortDuration(r.FlapDown), r.FlapRefused, minutes(r.RestartAt)),
		fmt.Sprintf("Growth check: per daemon process, the median of its first samples after warm-up (%s from the soak's start or from the restart) against the median of its last samples; samples taken while members were unreachable are left out.",
			shortDuration(r.Warmup)),
		"RSS is process_resident_memory_bytes (as the benchmark reports it: the kernel's resident set of the process, VmRSS), live heap go_gc_heap_live_bytes (what the last collection found reachable, the work in flight included, so shown, not checked), heap in use go_memstats_heap_inuse_bytes (which also holds garbage awaiting the next collection, so shown, not checked), goroutines go_goroutines, each the median of five scrapes of the daemon's /metrics a second apart; the live heap after forced GC is the median of three collections forced through the daemon's pprof handler two seconds apart, each read from go_gc_heap_live_bytes (it is checked); member watches are the watch requests open through the member proxy, which carries every member request of the daemon (its few hub watches are not counted).",
		fmt.Sprintf("Load average before/after: %s / %s (on %d CPUs).", r.Machine.LoadAvgBefore, r.Machine.LoadAvgAfter, r.Machine.CPUs),
	}
}

// markdown renders the soak for docs/performance.md, linking plotLink
// (relative to the doc) unless empty.
func (r *soakResult) markdown(plotLink string) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Soak of %s, %.0f s in all, with `%s`.", r.StartedAt.Format("2006-01-02"), r.Seconds, r.Command)
	if r.Duration < 30*time.Minute {
		fmt.Fprintf(&b, " A short soak (%s), not the 30 minutes of `make soak`.", shortDuration(r.Duration))
	}
	b.WriteString("\n\n")
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %d GiB memory, %s, %s; Kubernetes %s, etcd %s.\n\n",
		m.CPUs, m.CPUModel, m.MemoryGiB, m.OS, m.GoVersion, m.Kubernetes, m.Etcd)
	if plotLink != "" {
		fmt.Fprintf(&b, "![RSS, live heap after forced GC, live heap, heap in use, goroutines and member watches by minute](%s)\n\n", plotLink)
	}
	writeMarkdownTable(&b, []string{"Check", "Growth (base → end)", "Limit", "Result"}, r.checkRows())
	b.WriteString("\n")
	var rows [][]string
	for _, s := range r.Samples {
		rows = append(rows, sampleRow(s))
	}
	h := sampleHeader()
	for i := range h {
		h[i] = strings.ToUpper(h[i][:1]) + h[i][1:]
	}
	writeMarkdownTable(&b, h, rows)
	b.WriteString("\n")
	for _, n := range r.notes() {
		b.WriteString("- " + n + "\n")
	}
	return b.String()
}

func writeMarkdownTable(b *strings.Builder, header []string, rows [][]string) {
	b.WriteString("| " + strings.Join(header, " | ") + " |\n")
	b.WriteString(strings.Repeat("|---", len(header)) + "|\n")
	for _, row := range rows {
		cells := slices.Clone(row)
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", `\|`)
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
}

const (
	soakDocBegin = "<!-- soak:results:begin (written by `go run ./hack/bench -soak ... -doc`) -->"
	soakDocEnd   = "<!-- soak:results:end -->"
)

// updateDoc replaces the text between the soak markers of path.
func (r *soakResult) updateDoc(path, plot string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	link := ""
	if plot != "" {
		docAbs, err1 := filepath.Abs(filepath.Dir(path))
		plotAbs, err2 := filepath.Abs(plot)
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		rel, err := filepath.Rel(docAbs, plotAbs)
		if err != nil {
			return err
		}
		link = filepath.ToSlash(rel)
	}
	s := string(data)
	i, j := strings.Index(s, soakDocBegin), strings.Index(s, soakDocEnd)
	if i < 0 || j < i {
		return errors.New(path + ": no soak markers " + soakDocBegin + " … " + soakDocEnd)
	}
	out := s[:i+len(soakDocBegin)] + "\n" + r.markdown(link) + s[j:]
	return os.WriteFile(path, []byte(out), 0o644)
}
