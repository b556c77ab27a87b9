package main

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// Plot layout: four panels in two columns, in SVG user units.
const (
	plotPanelW  = 440
	plotPanelH  = 210
	plotMarginL = 60
	plotMarginR = 20
	plotMarginT = 30
	plotMarginB = 40
	plotCols    = 2
	plotLegendH = 30
)

var plotProcessColors = []string{"#1f77b4", "#2ca02c", "#9467bd"}

func (r *soakResult) svg() string {
	return soakSVG(r.Samples, r.Duration, r.Warmup, r.RestartAt, r.Flaps)
}

// soakSVG draws one line chart per sampled figure, minute on x, with the
// warm-ups (left out of the growth check) and the windows in which members
// were unreachable shaded, and the restart marked.
// Each daemon process has its own line; unreadable samples are left out.
func soakSVG(samples []soakSample, total, warmup, restartAt time.Duration, flaps [][2]time.Duration) string {
	cellW := plotMarginL + plotPanelW + plotMarginR
	cellH := plotMarginT + plotPanelH + plotMarginB
	rows := (len(soakMetrics) + plotCols - 1) / plotCols
	width, height := plotCols*cellW, rows*cellH+plotLegendH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	maxMin := total.Minutes()
	for _, s := range samples {
		maxMin = math.Max(maxMin, s.Minute.Minutes())
	}
	if maxMin <= 0 {
		maxMin = 1
	}
	for i, m := range soakMetrics {
		ox := float64((i%plotCols)*cellW + plotMarginL)
		oy := float64((i/plotCols)*cellH + plotMarginT)
		ymax := 0.0
		for _, s := range samples {
			if v := m.get(s) / m.Scale; !math.IsNaN(v) {
				ymax = math.Max(ymax, v)
			}
		}
		ymax = niceCeil(ymax * 1.1)
		x := func(d time.Duration) float64 { return ox + plotPanelW*d.Minutes()/maxMin }
		y := func(v float64) float64 { return oy + plotPanelH*(1-v/ymax) }
		title := m.Name
		if m.Unit != "" {
			title += " (" + m.Unit + ")"
		}
		fmt.Fprintf(&b, `<g><text x="%.1f" y="%.1f" font-weight="bold">%s</text>`+"\n", ox, oy-10, html.EscapeString(title))
		for _, w := range warmups(restartAt, warmup) {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#eeeeee"/>`+"\n", x(w[0]), oy, x(min(w[1], time.Duration(maxMin*float64(time.Minute))))-x(w[0]), plotPanelH)
		}
		for _, f := range flaps {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#fdd9b5"/>`+"\n", x(f[0]), oy, x(f[1])-x(f[0]), plotPanelH)
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", ox, oy, plotPanelW, plotPanelH)
		for _, frac := range []float64{0, 0.5, 1} {
			v := ymax * frac
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`, ox, y(v), ox+plotPanelW, y(v))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", ox-5, y(v)+4, trimFloat(v))
		}
		for _, frac := range []float64{0, 0.5, 1} {
			mm := maxMin * frac
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", ox+plotPanelW*frac, oy+plotPanelH+16, trimFloat(mm))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">minute</text>`+"\n", ox+plotPanelW/2, oy+plotPanelH+32)
		if restartAt > 0 {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#d62728" stroke-dasharray="4 3"/>`+"\n",
				x(restartAt), oy, x(restartAt), oy+plotPanelH)
		}
		var pts []string
		proc := 0
		flush := func() {
			if len(pts) > 0 {
				color := plotProcessColors[(proc-1+len(plotProcessColors))%len(plotProcessColors)]
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
			}
			pts = nil
		}
		for _, s := range samples {
			if s.Process != proc {
				flush()
				proc = s.Process
			}
			if v := m.get(s) / m.Scale; !math.IsNaN(v) {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.Minute), y(v)))
			}
		}
		flush()
		b.WriteString("</g>\n")
	}
	ly := float64(rows*cellH) + 15
	fmt.Fprintf(&b, `<g><line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="2"/><text x="%d" y="%.1f">daemon before the restart</text>`+"\n",
		plotMarginL, ly, plotMarginL+25, ly, plotProcessColors[0], plotMarginL+30, ly+4)
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-width="2"/><text x="%d" y="%.1f">after</text>`+"\n",
		plotMarginL+210, ly, plotMarginL+235, ly, plotProcessColors[1], plotMarginL+240, ly+4)
	fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#d62728" stroke-dasharray="4 3"/><text x="%d" y="%.1f">restart</text>`+"\n",
		plotMarginL+300, ly, plotMarginL+325, ly, plotMarginL+330, ly+4)
	fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="25" height="10" fill="#fdd9b5"/><text x="%d" y="%.1f">members unreachable</text>`+"\n",
		plotMarginL+400, ly-5, plotMarginL+430, ly+4)
	fmt.Fprintf(&b, `<rect x="%d" y="%.1f" width="25" height="10" fill="#eeeeee"/><text x="%d" y="%.1f">warm-up (not checked)</text></g>`+"\n",
		plotMarginL+580, ly-5, plotMarginL+610, ly+4)
	b.WriteString("</svg>\n")
	return b.String()
}

// warmups are the spans left out of the growth check: the first warmup of
// the soak and of the restarted daemon.
func warmups(restartAt, warmup time.Duration) [][2]time.Duration {
	if warmup <= 0 {
		return nil
	}
	out := [][2]time.Duration{{0, warmup}}
	if restartAt > 0 {
		out = append(out, [2]time.Duration{restartAt, restartAt + warmup})
	}
	return out
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (1 for v ≤ 0).
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

func trimFloat(v float64) string {
	return fmt.Sprintf("%g", math.Round(v*100)/100)
}
