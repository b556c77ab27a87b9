package main

import (
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// soakSeries builds samples a minute apart: process 1 up to restart, then
// process 2, with the given RSS values (other figures constant).
func soakSeries(rss []float64, restart int) []soakSample {
	var out []soakSample
	start := 0
	for k, v := range rss {
		proc := 1
		if k > restart {
			proc, start = 2, restart
		}
		out = append(out, soakSample{
			Minute: time.Duration(k) * time.Minute, Process: proc, Age: time.Duration(k-start) * time.Minute,
			RSS: v, LiveHeapCollected: 55 << 20, LiveHeap: 60 << 20, Heap: 100 << 20, Goroutines: 50, Watches: 40,
		})
	}
	return out
}

func checkOf(t *testing.T, cs []soakCheck, name string) soakCheck {
	t.Helper()
	for _, c := range cs {
		if c.Metric.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q", name)
	return soakCheck{}
}

func TestGrowthCheck(t *testing.T) {
	flat := []float64{10, 50, 80, 100, 101, 99, 100, 102, 100, 101, 100, 100, 101}
	t.Run("warm-up growth is ignored, flat after passes", func(t *testing.T) {
		c := checkOf(t, growthCheck(soakSeries(flat, 100), 3*time.Minute, 0.05), "RSS")
		if c.Result != "PASS" || len(c.Processes) != 1 {
			t.Fatalf("got %+v", c)
		}
		g := c.Processes[0]
		// After warm-up: minutes 3..12, ten samples: medians of three.
		if g.N != 10 || g.Base != 100 || g.End != 100 {
			t.Errorf("got %+v, want 10 samples, base 100, end 100", g)
		}
	})
	t.Run("steady growth fails", func(t *testing.T) {
		var rising []float64
		for k := range 13 {
			rising = append(rising, 100+float64(k)*2)
		}
		c := checkOf(t, growthCheck(soakSeries(rising, 100), 3*time.Minute, 0.05), "RSS")
		if c.Result != "FAIL" {
			t.Fatalf("got %+v, want FAIL", c)
		}
	})
	t.Run("the live heap of forced collections is checked, one collection's is not", func(t *testing.T) {
		s := soakSeries(flat, 100)
		for k := range s {
			// One collection's live heap swings by a fifth with the work in
			// flight, more often at the end; forced collections find it flat.
			s[k].LiveHeap = 100 << 20
			if k >= 10 && k%2 == 0 {
				s[k].LiveHeap = 120 << 20
			}
		}
		cs := growthCheck(s, 3*time.Minute, 0.05)
		if c := checkOf(t, cs, "live heap"); c.Result != "not checked" || c.Processes[0].Growth < 0.05 {
			t.Errorf("live heap: got %+v, want not checked with growth over 5%%", c)
		}
		if c := checkOf(t, cs, "live heap after forced GC"); c.Result != "PASS" {
			t.Errorf("flat: got %+v, want PASS", c)
		}
		for k := range s {
			s[k].LiveHeapCollected = float64(100+2*k) * (1 << 20)
		}
		if c := checkOf(t, growthCheck(s, 3*time.Minute, 0.05), "live heap after forced GC"); c.Result != "FAIL" {
			t.Errorf("rising: got %+v, want FAIL", c)
		}
	})
	t.Run("a checked figure never read fails the soak", func(t *testing.T) {
		r := &soakResult{Samples: soakSeries(flat, 100), Warmup: 3 * time.Minute}
		if !r.passed() {
			t.Fatalf("flat soak did not pass: %+v", r.checks())
		}
		for k := range r.Samples {
			r.Samples[k].LiveHeapCollected = math.NaN()
		}
		if c := checkOf(t, r.checks(), "live heap after forced GC"); c.Result != "n/a" || r.passed() {
			t.Errorf("never read: got %q, passed %v; want n/a and not passed", c.Result, r.passed())
		}
	})
	t.Run("per process: the restart's drop and warm-up do not count", func(t *testing.T) {
		// Process 1 flat at 100 up to minute 6; process 2 starts low
		// and climbs in its warm-up, then stays flat at 120.
		v := []float64{100, 100, 100, 100, 100, 100, 100, 20, 60, 120, 120, 121, 120, 120}
		c := checkOf(t, growthCheck(soakSeries(v, 6), 3*time.Minute, 0.05), "RSS")
		if c.Result != "PASS" || len(c.Processes) != 2 {
			t.Fatalf("got %+v, want PASS for both processes", c)
		}
		if p2 := c.Processes[1]; p2.Process != 2 || p2.Base != 120 {
			t.Errorf("process 2: got %+v, want base 120 (minutes 9..13)", p2)
		}
	})
	t.Run("samples with members down and unreadable ones are left out", func(t *testing.T) {
		s := soakSeries(flat, 100)
		s[11].RSS, s[11].Down = 500, true
		s[12].RSS = math.NaN()
		c := checkOf(t, growthCheck(s, 3*time.Minute, 0.05), "RSS")
		if c.Result != "PASS" || c.Processes[0].N != 8 {
			t.Fatalf("got %+v, want PASS on 8 samples", c)
		}
	})
	t.Run("two samples each: their mean, not the larger", func(t *testing.T) {
		// After warm-up, 49.4 49.2 52.4 48.0 (the heap of a real run):
		// 49.3 → 50.2 is +1.8%; the larger of each pair would say +6.2%.
		s := soakSeries([]float64{40, 49.4, 49.2, 52.4, 48.0}, 100)
		c := checkOf(t, growthCheck(s, time.Minute, 0.05), "RSS")
		g := c.Processes[0]
		if c.Result != "PASS" || math.Abs(g.Base-49.3) > 1e-9 || math.Abs(g.End-50.2) > 1e-9 {
			t.Fatalf("got %+v (%s), want 49.3 → 50.2, PASS", g, c.Result)
		}
	})
	t.Run("too few samples", func(t *testing.T) {
		c := checkOf(t, growthCheck(soakSeries([]float64{1, 2, 3}, 100), 2*time.Minute, 0.05), "RSS")
		if c.Result != "n/a" || len(c.Processes) != 0 {
			t.Fatalf("got %+v, want n/a", c)
		}
	})
}

func TestFlapSchedule(t *testing.T) {
	s := soakConfig{duration: 30 * time.Minute, flapEvery: 3 * time.Minute, flapDown: time.Minute, sample: time.Minute}
	w := flapWindows(s)
	if len(w) != 9 || w[0] != 3*time.Minute+30*time.Second || w[8] != 27*time.Minute+30*time.Second {
		t.Errorf("flapWindows: got %v", w)
	}
	members := newFleet(100, 1, 1).members
	if got := flapRange(members, 10, 0); got[0] != "m000" || got[9] != "m009" {
		t.Errorf("flap 0: %v", got)
	}
	for j := range 30 {
		if got := flapRange(members, 10, j); len(got) != 10 {
			t.Errorf("flap %d: %d members", j, len(got))
		}
	}
	if got := flapRange(members[:5], 10, 3); len(got) != 5 {
		t.Errorf("more flapped than members: %v", got)
	}
}

func TestCountDiffering(t *testing.T) {
	set := func(a ...string) map[string]bool {
		m := map[string]bool{}
		for _, x := range a {
			m[x] = true
		}
		return m
	}
	want := map[string]map[string]bool{"m0/a": set("1", "2"), "m0/b": set("3"), "m1/a": set("4")}
	got := map[string]map[string]bool{"m0/a": set("2", "1"), "m0/b": set("3", "5"), "x/a": set("9")}
	// m0/b has one more, m1/a is missing, x/a is no member service.
	if n := countDiffering(want, got); n != 3 {
		t.Errorf("countDiffering = %d, want 3", n)
	}
	if n := countDiffering(want, want); n != 0 {
		t.Errorf("countDiffering(same) = %d", n)
	}
}

func testResult() *soakResult {
	s := soakSeries([]float64{100 << 20, 101 << 20, 102 << 20, 101 << 20, 50 << 20, 90 << 20, 100 << 20, 100 << 20}, 3)
	s[2].Down = true
	s[2].Events = []string{"members m000..m009 unreachable"}
	s[4].Events = []string{"daemon restarted (stopped in 0.3 s)"}
	s[5].Heap = math.NaN()
	return &soakResult{
		Command: "go run ./hack/bench -soak 7m", Samples: s, Duration: 7 * time.Minute, RestartAt: 3 * time.Minute,
		Flaps: [][2]time.Duration{{90 * time.Second, 150 * time.Second}}, Warmup: time.Minute, Interval: time.Minute,
		HubKeys: 10,
	}
}

func TestSoakTables(t *testing.T) {
	r := testResult()
	var b strings.Builder
	r.writeText(&b)
	text := b.String()
	for _, want := range []string{
		"MINUTE  DAEMON  RSS (MIB)",
		"daemon restarted (stopped in 0.3 s)",
		"members m000..m009 unreachable; sampled with members unreachable",
		"hub equals the members at the end",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text table lacks %q:\n%s", want, text)
		}
	}
	lines := strings.Split(text, "\n")
	if !strings.HasPrefix(lines[1], "0       1       100.0") {
		t.Errorf("first sample line: %q", lines[1])
	}
	if !strings.Contains(lines[6], "—") {
		t.Errorf("an unreadable heap should show as —: %q", lines[6])
	}

	md := r.markdown("soak.svg")
	if !strings.Contains(md, "![RSS, live heap after forced GC, live heap, heap in use, goroutines and member watches by minute](soak.svg)") {
		t.Errorf("markdown lacks the plot link:\n%s", md)
	}
	// Every table line has as many cells as its header.
	var header int
	for _, l := range strings.Split(md, "\n") {
		if !strings.HasPrefix(l, "|") {
			header = 0
			continue
		}
		cells := strings.Count(strings.ReplaceAll(l, `\|`, ""), "|")
		if header == 0 {
			header = cells
		} else if cells != header {
			t.Errorf("markdown row with %d separators, header %d: %q", cells, header, l)
		}
	}
	if !strings.Contains(md, "| 7 | 2 | 100.0 | 55.0 | 60.0 | 100.0 | 50 | 40 |  |") {
		t.Errorf("markdown lacks the last sample row:\n%s", md)
	}
}

func TestSoakSVG(t *testing.T) {
	r := testResult()
	svg := r.svg()
	dec := xml.NewDecoder(strings.NewReader(svg))
	polylines, points := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "polyline" {
			polylines++
			for _, a := range se.Attr {
				if a.Name.Local == "points" {
					points += len(strings.Fields(a.Value))
				}
			}
		}
	}
	// Six figures, a line per daemon process each; 8 samples each, but
	// one heap sample is unreadable.
	if polylines != 12 || points != 6*8-1 {
		t.Errorf("got %d polylines with %d points, want 12 with %d", polylines, points, 6*8-1)
	}
}

func TestSoakUpdateDoc(t *testing.T) {
	dir := t.TempDir()
	doc := filepath.Join(dir, "docs", "performance.md")
	if err := os.MkdirAll(filepath.Dir(doc), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(doc, []byte("# P\n\n"+soakDocBegin+"\nold\n"+soakDocEnd+"\nafter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := testResult().updateDoc(doc, filepath.Join(dir, "bin", "soak.svg")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if strings.Contains(s, "\nold\n") || !strings.Contains(s, "](../bin/soak.svg)") || !strings.HasSuffix(s, soakDocEnd+"\nafter\n") {
		t.Errorf("doc after update:\n%s", s)
	}
	if err := testResult().updateDoc(filepath.Join(dir, "none.md"), ""); err == nil {
		t.Error("no error for a missing doc")
	}
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		30 * time.Minute: "30m", 40 * time.Second: "40s", 90 * time.Second: "1m30s",
		time.Hour: "1h", 90 * time.Minute: "1h30m", 0: "0s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for _, c := range []struct{ in, want float64 }{{0, 1}, {0.7, 1}, {1.1, 2}, {3, 5}, {7, 10}, {110, 200}, {5000, 5000}} {
		if got := niceCeil(c.in); got != c.want {
			t.Errorf("niceCeil(%g) = %g, want %g", c.in, got, c.want)
		}
	}
}
