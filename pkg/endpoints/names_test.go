package endpoints

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestDerivedServiceName(t *testing.T) {
	// "derived-" + lower(base32hex(sha256("default/nginx")))[:10], computed
	// independently with coreutils' basenc.
	if got, want := DerivedServiceName("default", "nginx"), "derived-iuq6ea9f4j"; got != want {
		t.Errorf("DerivedServiceName(default, nginx) = %q, want %q", got, want)
	}
	seen := map[string]bool{}
	for _, nn := range [][2]string{{"shop", "web"}, {"shop", "api"}, {"store", "web"}, {"sho", "pweb"}} {
		name := DerivedServiceName(nn[0], nn[1])
		if len(name) != len("derived-")+10 || !strings.HasPrefix(name, "derived-") {
			t.Errorf("DerivedServiceName(%q, %q) = %q: want derived- and 10 characters", nn[0], nn[1], name)
		}
		if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
			t.Errorf("DerivedServiceName(%q, %q) = %q: %v", nn[0], nn[1], name, errs)
		}
		if seen[name] {
			t.Errorf("DerivedServiceName(%q, %q) = %q collides", nn[0], nn[1], name)
		}
		seen[name] = true
	}
}

func TestPerClusterName(t *testing.T) {
	long := strings.Repeat("s", 63)
	tests := []struct {
		service, cluster string
		want             string // when not shortened
	}{
		{service: "web", cluster: "east", want: "web-east"},
		{service: strings.Repeat("s", 30), cluster: strings.Repeat("c", 32), want: strings.Repeat("s", 30) + "-" + strings.Repeat("c", 32)},
		{service: strings.Repeat("s", 31), cluster: strings.Repeat("c", 32)},
		{service: long, cluster: "east"},
		{service: long, cluster: "west"},
		{service: "web", cluster: strings.Repeat("c", 63)},
		{service: "web", cluster: strings.Repeat("c", 62) + "d"},
		{service: long, cluster: strings.Repeat("c", 63)},
		// Cut right after a '-': no "--" before the hash.
		{service: strings.Repeat("s", 53), cluster: strings.Repeat("c", 20)},
		{service: strings.Repeat("s", 52) + "-x", cluster: strings.Repeat("c", 20)},
		{service: strings.Repeat("a-", 30) + "b", cluster: "c-d-e-f"},
	}
	seen := map[string]int{}
	for i, tt := range tests {
		name, shortened := PerClusterName(tt.service, tt.cluster)
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Errorf("PerClusterName(%q, %q) = %q: %v", tt.service, tt.cluster, name, errs)
		}
		if strings.Contains(name, "--") {
			t.Errorf("PerClusterName(%q, %q) = %q: contains --", tt.service, tt.cluster, name)
		}
		if wantShort := tt.want == ""; shortened != wantShort {
			t.Errorf("PerClusterName(%q, %q) shortened = %v, want %v", tt.service, tt.cluster, shortened, wantShort)
		}
		if tt.want != "" && name != tt.want {
			t.Errorf("PerClusterName(%q, %q) = %q, want %q", tt.service, tt.cluster, name, tt.want)
		}
		if again, _ := PerClusterName(tt.service, tt.cluster); again != name {
			t.Errorf("PerClusterName(%q, %q) not stable: %q, %q", tt.service, tt.cluster, name, again)
		}
		if j, ok := seen[name]; ok {
			t.Errorf("PerClusterName: cases %d and %d both give %q", j, i, name)
		}
		seen[name] = i
	}
}

func TestSliceName(t *testing.T) {
	clusters := []string{"east", "east-1", "east-1-2", "e", strings.Repeat("c", 63)}
	seen := map[string]string{}
	for _, c := range clusters {
		for _, i := range []int{0, 1, 2, 12, 123, 1 << 40} {
			name := SliceName(testNamespace, testService, c, i)
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				t.Errorf("SliceName(%q, %d) = %q: %v", c, i, name, errs)
			}
			if idx, ok := sliceIndex(name, slicePrefix(testNamespace, testService, c)); !ok || idx != i {
				t.Errorf("sliceIndex(%q) = %d, %v; want %d", name, idx, ok, i)
			}
			key := fmt.Sprintf("%s/%d", c, i)
			if prev, ok := seen[name]; ok {
				t.Errorf("SliceName collision: %q for %s and %s", name, prev, key)
			}
			seen[name] = key
		}
	}
	for _, name := range []string{"derived-x-east-01", "derived-x-east--1", "derived-x-east-a"} {
		if _, ok := sliceIndex(name, "derived-x-east-"); ok {
			t.Errorf("sliceIndex(%q) accepted a name SliceName never returns", name)
		}
	}
}
