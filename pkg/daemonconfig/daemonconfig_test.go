package daemonconfig

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

const ns = "endpoint-aggregator"

func sample() Config {
	return Config{Version: "v1.2.3", Flags: map[string]string{
		"export-mode":        "annotation",
		"exclude-namespaces": List([]string{"kube-system", "default"}),
		"unreachable-grace":  (90 * time.Second).String(),
		"hub-is-member":      "true",
	}}
}

func TestConfigMapRoundTrip(t *testing.T) {
	c := sample()
	cm := c.ConfigMap(ns)
	if cm.Namespace != ns || cm.Name != Name || cm.Labels[endpoints.LabelManagedBy] != endpoints.ManagedByValue {
		t.Fatalf("ConfigMap %s/%s labels %v", cm.Namespace, cm.Name, cm.Labels)
	}
	if cm.Data[KeyVersion] != "v1.2.3" || cm.Data["exclude-namespaces"] != "default,kube-system" {
		t.Errorf("data %v", cm.Data)
	}
	got, err := FromConfigMap(cm)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("round trip: got %+v, want %+v", got, c)
	}
	if _, ok := c.Flags[KeyVersion]; ok {
		t.Error("ConfigMap mutated the Config's flags")
	}
	if s := got.String(); s != "--exclude-namespaces=default,kube-system --export-mode=annotation --hub-is-member=true --unreachable-grace=1m30s" {
		t.Errorf("String() = %q", s)
	}
}

func TestFromConfigMapRefusesAForeignConfigMap(t *testing.T) {
	cm := sample().ConfigMap(ns)
	delete(cm.Labels, endpoints.LabelManagedBy)
	if _, err := FromConfigMap(cm); err == nil {
		t.Error("read a ConfigMap without our label")
	}
}

// writes lists the mutating actions of a fake clientset.
func writes(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			out = append(out, a.GetVerb())
		}
	}
	return out
}

func TestPublishWritesOnlyWhenTheConfigurationChanges(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()

	written, err := Publish(ctx, c.CoreV1(), ns, sample())
	if err != nil || !written {
		t.Fatalf("first publish: written %v, err %v", written, err)
	}
	if got := writes(c); !reflect.DeepEqual(got, []string{"create"}) {
		t.Errorf("first publish wrote %v, want one create", got)
	}

	// A restart with the same flags: not one write.
	c.ClearActions()
	written, err = Publish(ctx, c.CoreV1(), ns, sample())
	if err != nil || written || len(writes(c)) != 0 {
		t.Errorf("unchanged publish: written %v, err %v, writes %v", written, err, writes(c))
	}

	// A user's annotation or label on it changes nothing either.
	live, _ := c.CoreV1().ConfigMaps(ns).Get(ctx, Name, metav1.GetOptions{})
	live.Annotations = map[string]string{"note": "mine"}
	live.Labels["team"] = "platform"
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.ClearActions()
	if written, err := Publish(ctx, c.CoreV1(), ns, sample()); err != nil || written {
		t.Errorf("publish after a user's label: written %v, err %v", written, err)
	}

	// Another export mode: one update, that keeps the user's metadata.
	changed := sample()
	changed.Flags["export-mode"] = "all"
	c.ClearActions()
	written, err = Publish(ctx, c.CoreV1(), ns, changed)
	if err != nil || !written || !reflect.DeepEqual(writes(c), []string{"update"}) {
		t.Fatalf("changed publish: written %v, err %v, writes %v", written, err, writes(c))
	}
	got, err := Read(ctx, c.CoreV1(), ns)
	if err != nil || got == nil || got.Flags["export-mode"] != "all" {
		t.Fatalf("Read = %+v, %v", got, err)
	}
	live, _ = c.CoreV1().ConfigMaps(ns).Get(ctx, Name, metav1.GetOptions{})
	if live.Labels["team"] != "platform" || live.Annotations["note"] != "mine" {
		t.Errorf("update dropped the user's metadata: %v %v", live.Labels, live.Annotations)
	}
}

func TestPublishLeavesAForeignConfigMapAlone(t *testing.T) {
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: Name}, Data: map[string]string{"a": "b"}}
	c := fake.NewClientset(foreign)
	written, err := Publish(context.Background(), c.CoreV1(), ns, sample())
	if err == nil || written || len(writes(c)) != 0 {
		t.Errorf("foreign ConfigMap: written %v, err %v, writes %v", written, err, writes(c))
	}
}

// Two replicas start at once: the loser of the create compares again and,
// the configuration being the same, writes nothing more.
func TestPublishRacingReplicaCreatedItFirst(t *testing.T) {
	c := fake.NewClientset()
	raced := false
	c.PrependReactor("create", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		// The other replica's create lands first.
		if err := c.Tracker().Create(a.GetResource(), sample().ConfigMap(ns), ns); err != nil {
			t.Fatal(err)
		}
		return false, nil, nil
	})
	written, err := Publish(context.Background(), c.CoreV1(), ns, sample())
	if err != nil || written {
		t.Errorf("written %v, err %v, want no write and no error", written, err)
	}
	if got := writes(c); !reflect.DeepEqual(got, []string{"create"}) {
		t.Errorf("writes %v, want only the create that lost", got)
	}
}

func TestReadWithNothingPublished(t *testing.T) {
	got, err := Read(context.Background(), fake.NewClientset().CoreV1(), ns)
	if got != nil || err != nil {
		t.Errorf("Read = %+v, %v; want nil, nil", got, err)
	}
}

// explainFlags are flags as an operator command mirrors the daemon's.
func explainFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("explain", pflag.ContinueOnError)
	fs.String("export-mode", "serviceexport", "")
	fs.StringSlice("exclude-namespaces", []string{"kube-system"}, "")
	fs.StringSlice("include-namespaces", nil, "")
	fs.Duration("unreachable-grace", 0, "")
	fs.Bool("hub-is-member", false, "")
	fs.String("output", "table", "") // not a daemon flag
	return fs
}

func TestApplyTakesPublishedValuesForFlagsNotGiven(t *testing.T) {
	fs := explainFlags()
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	c := sample()
	c.Flags["max-member-services"] = "10" // a flag explain lacks
	c.Flags["include-namespaces"] = ""
	diffs, errs := Apply(fs, c)
	if len(diffs) != 0 || len(errs) != 0 {
		t.Fatalf("diffs %v, errs %v", diffs, errs)
	}
	mode, _ := fs.GetString("export-mode")
	excl, _ := fs.GetStringSlice("exclude-namespaces")
	incl, _ := fs.GetStringSlice("include-namespaces")
	grace, _ := fs.GetDuration("unreachable-grace")
	hub, _ := fs.GetBool("hub-is-member")
	if mode != "annotation" || !reflect.DeepEqual(excl, []string{"default", "kube-system"}) || len(incl) != 0 || grace != 90*time.Second || !hub {
		t.Errorf("after Apply: mode %q exclude %v include %v grace %v hub %v", mode, excl, incl, grace, hub)
	}
}

func TestApplyKeepsGivenFlagsAndReportsThoseThatDiffer(t *testing.T) {
	fs := explainFlags()
	// Same value spelled another way (order, duration form): no difference.
	if err := fs.Parse([]string{"--export-mode=all", "--exclude-namespaces=kube-system,default", "--unreachable-grace=90s"}); err != nil {
		t.Fatal(err)
	}
	diffs, errs := Apply(fs, sample())
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	want := []Difference{{Flag: "export-mode", Given: "all", Published: "annotation"}}
	if !reflect.DeepEqual(diffs, want) {
		t.Errorf("diffs %+v, want %+v", diffs, want)
	}
	if mode, _ := fs.GetString("export-mode"); mode != "all" {
		t.Errorf("the given flag was overridden: %q", mode)
	}
	if hub, _ := fs.GetBool("hub-is-member"); !hub {
		t.Error("a flag not given did not take the published value")
	}
}

func TestApplyReportsPublishedValuesItCannotSet(t *testing.T) {
	fs := explainFlags()
	_ = fs.Parse(nil)
	c := Config{Flags: map[string]string{"unreachable-grace": "soon"}}
	_, errs := Apply(fs, c)
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "unreachable-grace") {
		t.Errorf("errs %v", errs)
	}
}
