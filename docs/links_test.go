package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// markdownFiles are the pages whose links are checked, relative to the
// repository's root.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append(pages, filepath.Join("..", "README.md"), filepath.Join("..", "charts", "endpoint-aggregator", "README.md"))
}

var (
	fence   = regexp.MustCompile("(?ms)^\\s*```.*?^\\s*```")
	link    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
)

// prose is a page without its fenced code blocks, where "](" means nothing.
func prose(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fence.ReplaceAllString(string(b), "")
}

// anchors are the fragment names GitHub gives a page's headings: lower
// case, spaces as hyphens, punctuation other than hyphens and underscores
// dropped, a repeated heading numbered -1, -2, ...
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
				b.WriteRune(r)
			}
		}
		a := b.String()
		for i, base := 1, a; out[a]; i++ {
			a = base + "-" + strconv.Itoa(i)
		}
		out[a] = true
	}
	return out
}

// TestDocsLinksLeadSomewhere: every relative link in the README, docs/ and
// the chart's README names a file or directory of the repository, and every
// #fragment a heading of its page.
func TestDocsLinksLeadSomewhere(t *testing.T) {
	for _, page := range markdownFiles(t) {
		text := prose(t, page)
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			dest := page
			if file != "" {
				dest = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %v", page, target, err)
					continue
				}
			}
			if frag == "" {
				continue
			}
			if !strings.HasSuffix(dest, ".md") {
				t.Errorf("%s: link %q: a fragment of a file that is not Markdown", page, target)
				continue
			}
			if !anchors(prose(t, dest))[frag] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", page, target, dest, frag)
			}
		}
	}
}

func TestAnchorsFollowGitHub(t *testing.T) {
	got := anchors("# Real nodes (`make test-node`)\n## End-to-end tests (`test/e2e`)\n## Sizing\n## Sizing\n## Discovery, not connectivity\n")
	for _, want := range []string{"real-nodes-make-test-node", "end-to-end-tests-teste2e", "sizing", "sizing-1", "discovery-not-connectivity"} {
		if !got[want] {
			t.Errorf("anchors lack %q: %v", want, got)
		}
	}
}
