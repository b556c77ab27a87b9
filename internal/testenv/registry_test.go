package testenv

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The registry serves HTTPS with the CA it was given, answers a puller's
// HEAD for a tag it lacks with 404, and refuses plain HTTP.
func TestRegistryServesTLSWithItsCA(t *testing.T) {
	t.Cleanup(RemoveTestImages) // the hack/image binary
	r := StartRegistry(t)
	if !strings.HasPrefix(r.Host, "127.0.0.1:") {
		t.Errorf("registry host %s, want 127.0.0.1:PORT", r.Host)
	}
	if _, _, err := r.Digest("endpoint-aggregator", "v0.0.0"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("an empty registry resolved a tag: %v", err)
	}
	c, err := r.client()
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := c.Get("http://" + r.Host + "/v2/"); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the registry answers plain HTTP")
		}
	}
	resp, err := c.Get("https://" + r.Host + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v2/: %s", resp.Status)
	}
}

// A registry whose parent is gone (a test killed before its cleanup) exits
// by itself.
func TestRegistryExitsWithItsParent(t *testing.T) {
	t.Cleanup(RemoveTestImages)
	bin, err := hackImage()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := writeRegistryCerts(dir, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		t.Fatal(err)
	}
	// sh starts it in the background, waits (up to 10s) until it serves,
	// prints its pid and exits.
	log := filepath.Join(dir, "log")
	script := strings.Join([]string{bin, "registry", "-listen", "127.0.0.1:0", "-parent", "$$",
		"-cert", filepath.Join(dir, "tls.crt"), "-key", filepath.Join(dir, "tls.key")}, " ") +
		" >" + log + " 2>&1 & i=0; until grep -q https:// " + log + " || [ $i -gt 200 ]; do i=$((i+1)); sleep 0.05; done; echo $!"
	out, err := exec.Command("sh", "-c", script).Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("pid %q: %v", out, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || !strings.Contains(string(cmdline), dir) {
			return // gone
		}
		if stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); strings.Contains(string(stat), ") Z ") {
			return // exited, not yet reaped by its new parent
		}
		if time.Now().After(deadline) {
			_ = exec.Command("kill", "-9", strconv.Itoa(pid)).Run()
			b, _ := os.ReadFile(log)
			t.Fatalf("the registry (pid %d) still runs 10s after its parent exited:\n%s", pid, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A node's hosts.toml names the registry's address on the node's link in
// a form containerd 1.6 parses: its TOML parser refuses a table header
// whose key holds ']', as an IPv6 literal's does, and then ignores the
// whole file.
func TestTrustRegistryWritesHostsTOMLContainerdParses(t *testing.T) {
	for _, c := range []struct{ hostIP, addr string }{
		{"10.250.1.1", "10.250.1.1:5000"},
		{"fd00:250:1::1", "[fd00:250:1::1]:5000"},
	} {
		t.Run(c.hostIP, func(t *testing.T) {
			dir := t.TempDir()
			ca := filepath.Join(dir, "registry-ca.crt")
			if err := os.WriteFile(ca, []byte("CA"), 0o600); err != nil {
				t.Fatal(err)
			}
			r := &Registry{Host: "127.0.0.1:4000", CAFile: ca, nodeAddrs: map[string]string{c.hostIP: c.addr}}
			n := &Node{Name: "hub-node", HostIP: c.hostIP, dir: dir}
			if err := n.TrustRegistry(r); err != nil {
				t.Fatal(err)
			}
			hostDir := filepath.Join(dir, "certs.d", r.Host)
			b, err := os.ReadFile(filepath.Join(hostDir, "hosts.toml"))
			if err != nil {
				t.Fatal(err)
			}
			got := string(b)
			want := `server = "https://127.0.0.1:4000"

[host]
  "https://` + c.addr + `" = { capabilities = ["pull", "resolve"], ca = "` + filepath.Join(hostDir, "ca.crt") + `" }
`
			if got != want {
				t.Errorf("hosts.toml:\n%s\nwant:\n%s", got, want)
			}
			for _, l := range strings.Split(got, "\n") {
				if l = strings.TrimSpace(l); strings.HasPrefix(l, "[") && strings.Count(l, "]") > 1 {
					t.Errorf("table header %s: containerd 1.6 refuses a ']' in its key", l)
				}
			}
			if b, err := os.ReadFile(filepath.Join(hostDir, "ca.crt")); err != nil || string(b) != "CA" {
				t.Errorf("the node's copy of the CA: %q, %v", b, err)
			}
		})
	}
}
