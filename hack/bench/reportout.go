package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// output prints the table and writes the JSON and the Markdown report.
func (r *results) output(c *config) error {
	fmt.Println()
	r.writeTable(os.Stdout)
	fmt.Println()
	for _, n := range r.Notes {
		fmt.Println("- " + n)
	}
	if c.jsonOut != "" {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
		if err := os.WriteFile(c.jsonOut, buf.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Printf("\nJSON written to %s\n", c.jsonOut)
	}
	if c.doc != "" {
		if err := r.updateDoc(c.doc); err != nil {
			return err
		}
		fmt.Printf("Report written into %s\n", c.doc)
	}
	return nil
}

func (r *results) writeTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "METRIC\tDAEMON\tFLOOR\tRATIO\tTARGET\tRESULT")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", x.Metric, x.Daemon, x.Floor, x.Ratio, x.Target, x.Result)
	}
	_ = tw.Flush()
}

// markdown renders the run for docs/performance.md.
func (r *results) markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Run of %s, %.0f s, with `%s`.\n\n", r.StartedAt.Format("2006-01-02"), r.Seconds, r.Command)
	fmt.Fprintf(&b, "Machine: %d CPUs (%s), %d GiB memory, %s, %s; Kubernetes %s, etcd %s. Load average before/after: %s / %s.\n\n",
		m.CPUs, m.CPUModel, m.MemoryGiB, m.OS, m.GoVersion, m.Kubernetes, m.Etcd, m.LoadAvgBefore, m.LoadAvgAfter)
	b.WriteString("| Metric | Daemon | Floor | Ratio | Target | Result |\n|---|---|---|---|---|---|\n")
	for _, x := range r.Rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", x.Metric, x.Daemon, x.Floor, x.Ratio, x.Target, x.Result)
	}
	b.WriteString("\n")
	for _, n := range r.Notes {
		b.WriteString("- " + n + "\n")
	}
	return b.String()
}

// docMarkers returns the markers of the section of docs/performance.md that
// a run at this scale rewrites: the default scale has its own, every other
// scale one named after it (e.g. bench:results:1000x1x100), so runs at
// different scales keep their tables side by side.
func docMarkers(p params) (begin, end string) {
	if p.Members == defaultMembers && p.ServicesPerMember == defaultServices && p.EndpointsPerService == defaultEndpoints {
		return "<!-- bench:results:begin (written by `go run ./hack/bench -doc`) -->", "<!-- bench:results:end -->"
	}
	name := fmt.Sprintf("bench:results:%dx%dx%d", p.Members, p.ServicesPerMember, p.EndpointsPerService)
	return "<!-- " + name + ":begin (written by `go run ./hack/bench -doc`) -->", "<!-- " + name + ":end -->"
}

// updateDoc replaces the text between the markers of path for this run's
// scale with this run.
func (r *results) updateDoc(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(data)
	docBegin, docEnd := docMarkers(r.Params)
	i, j := strings.Index(s, docBegin), strings.Index(s, docEnd)
	if i < 0 || j < i {
		return errors.New(path + ": no results markers " + docBegin + " … " + docEnd)
	}
	out := s[:i+len(docBegin)] + "\n" + r.markdown() + s[j:]
	return os.WriteFile(path, []byte(out), 0o644)
}
