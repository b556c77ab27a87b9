package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// What the Dockerfile's base image provides that the daemon relies on, and
// that Build therefore puts into its layer and config itself.
// gcr.io/distroless/static:nonroot: passwd and group entries for nonroot
// (65532, home /home/nonroot), /tmp, the CA bundle, and this config.
const distrolessBase = "gcr.io/distroless/static:nonroot"

var distrolessConfig = struct {
	WorkingDir string
	Env        []string
}{
	WorkingDir: "/home/nonroot",
	Env: []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
	},
}

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	line int
	cmd  string // upper case
	args string
}

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if cur.Len() > 0 && strings.HasPrefix(trimmed, "#") {
			continue // a comment inside a continued instruction
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// finalStage returns the base image of the Dockerfile's last stage and its
// instructions.
func finalStage(t *testing.T, ins []instruction) (string, []instruction) {
	t.Helper()
	last := -1
	for i, in := range ins {
		if in.cmd == "FROM" {
			last = i
		}
	}
	if last < 0 {
		t.Fatal("the Dockerfile has no FROM")
	}
	fields := strings.Fields(ins[last].args)
	for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
		fields = fields[1:]
	}
	if len(fields) == 0 {
		t.Fatalf("line %d: FROM without an image", ins[last].line)
	}
	return fields[0], ins[last+1:]
}

var labelPair = regexp.MustCompile(`([A-Za-z0-9._-]+)="([^"]*)"`)

// The Dockerfile and Build describe the same image: entrypoint, command,
// user, ports, labels, where the binary goes, and what the base image gives.
func TestDockerfileDescribesTheSameImage(t *testing.T) {
	base, stage := finalStage(t, parseDockerfile(t, filepath.Join("..", "..", "Dockerfile")))
	if base != distrolessBase {
		t.Fatalf("the Dockerfile's final stage is FROM %s; this test (distrolessConfig) and Build know only %s", base, distrolessBase)
	}

	img := mustBuild(t, testOptions(t))
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.WorkingDir != distrolessConfig.WorkingDir || !slices.Equal(c.Env, distrolessConfig.Env) {
		t.Errorf("image: working dir %q env %q; %s has %q %q", c.WorkingDir, c.Env, base, distrolessConfig.WorkingDir, distrolessConfig.Env)
	}

	var ports []string
	seen := map[string]bool{}
	for _, in := range stage {
		seen[in.cmd] = true
		switch in.cmd {
		case "ARG":
		case "COPY":
			f := strings.Fields(in.args)
			if dst := f[len(f)-1]; dst != BinaryPath {
				t.Errorf("line %d: COPY to %s; the image has the binary at %s", in.line, dst, BinaryPath)
			}
		case "USER":
			if in.args != c.User {
				t.Errorf("line %d: USER %s; the image's user is %s", in.line, in.args, c.User)
			}
		case "EXPOSE":
			for _, p := range strings.Fields(in.args) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				ports = append(ports, p)
			}
		case "ENTRYPOINT", "CMD":
			var argv []string
			if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
				t.Errorf("line %d: %s is not in exec (JSON) form: %v", in.line, in.cmd, err)
			}
			want := c.Entrypoint
			if in.cmd == "CMD" {
				want = c.Cmd
			}
			if !slices.Equal(argv, want) {
				t.Errorf("line %d: %s %q; the image has %q", in.line, in.cmd, argv, want)
			}
		case "LABEL":
			labels := map[string]string{}
			for _, m := range labelPair.FindAllStringSubmatch(in.args, -1) {
				labels[m[1]] = m[2]
			}
			want := maps.Clone(StaticLabels)
			want[labelVersion] = "${VERSION}"
			want[labelRevision] = "${REVISION}"
			if !maps.Equal(labels, want) {
				t.Errorf("line %d: LABEL %v; want %v (StaticLabels, then the VERSION and REVISION args)", in.line, labels, want)
			}
		default:
			t.Errorf("line %d: %s in the final stage: Build does not know it; teach it (and this test)", in.line, in.cmd)
		}
	}
	for _, cmd := range []string{"COPY", "USER", "EXPOSE", "ENTRYPOINT", "CMD", "LABEL"} {
		if !seen[cmd] {
			t.Errorf("the Dockerfile's final stage has no %s", cmd)
		}
	}
	slices.Sort(ports)
	if exposed := slices.Sorted(maps.Keys(c.ExposedPorts)); !slices.Equal(ports, exposed) {
		t.Errorf("Dockerfile EXPOSE %q; the image exposes %q", ports, exposed)
	}
}

// The daemon's version variable is set the same way in both builds.
func TestDockerfileAndMakefileSetTheSameVersion(t *testing.T) {
	xflag := regexp.MustCompile(`-X ([^ ='"]+)=`)
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var inDockerfile []string
	for _, m := range xflag.FindAllStringSubmatch(read("Dockerfile"), -1) {
		inDockerfile = append(inDockerfile, m[1])
	}
	var inMakefile []string
	for _, line := range strings.Split(read("Makefile"), "\n") {
		if strings.HasPrefix(line, "IMAGE_LDFLAGS") {
			for _, m := range xflag.FindAllStringSubmatch(line, -1) {
				inMakefile = append(inMakefile, m[1])
			}
		}
	}
	if len(inDockerfile) == 0 || !slices.Equal(inDockerfile, inMakefile) {
		t.Errorf("-X in the Dockerfile %q, in the Makefile's IMAGE_LDFLAGS %q: want the same", inDockerfile, inMakefile)
	}
}

// The chart runs the pods as the image's user.
func TestChartRunsAsTheImageUser(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "charts", "endpoint-aggregator", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	ids := regexp.MustCompile(`(?m)^\s*(runAsUser|runAsGroup): *(\d+)`).FindAllStringSubmatch(string(b), -1)
	if len(ids) == 0 {
		t.Fatal("values.yaml sets no runAsUser")
	}
	for _, m := range ids {
		if m[2] != "65532" {
			t.Errorf("values.yaml %s: %s; the image's user is %s", m[1], m[2], User)
		}
	}
}
