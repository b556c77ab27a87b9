package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/daemonconfig"
)

// explainFlagSet is explain's flags after parsing args.
func explainFlagSet(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := newExplainCommand().Flags()
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

// Every flag explain mirrors from the daemon ("The daemon's --X") is one
// the daemon publishes, but the local file it would run plugins from.
func TestTheDaemonPublishesEveryFlagExplainMirrors(t *testing.T) {
	published := NewOptions().published()
	explainFlagSet(t).VisitAll(func(f *pflag.Flag) {
		if !strings.HasPrefix(f.Usage, "The daemon's --") || f.Name == "access-provider-file" {
			return
		}
		if _, ok := published.Flags[f.Name]; !ok {
			t.Errorf("explain's --%s mirrors the daemon's, which does not publish it", f.Name)
		}
	})
	if _, ok := published.Flags["leader-election-id"]; !ok {
		t.Error("cleanup's --leader-election-id is not published")
	}
}

func TestUseDaemonConfigFillsFlagsNotGivenAndWarnsOnThoseThatDiffer(t *testing.T) {
	ctx := context.Background()
	o := NewOptions()
	o.ExportMode, o.IncludeNamespaces, o.UnreachableGrace = "annotation", []string{"shop", "billing"}, time.Minute
	hub := &cliClients{context: "hub", kube: fake.NewClientset()}
	if _, err := daemonconfig.Publish(ctx, hub.kube.CoreV1(), o.Namespace, o.published()); err != nil {
		t.Fatal(err)
	}

	// No flag given: the daemon's values, no warning.
	fs := explainFlagSet(t)
	var errOut bytes.Buffer
	d := useDaemonConfig(ctx, hub, o.Namespace, fs, &errOut)
	mode, _ := fs.GetString("export-mode")
	incl, _ := fs.GetStringSlice("include-namespaces")
	grace, _ := fs.GetDuration("unreachable-grace")
	if mode != "annotation" || strings.Join(incl, ",") != "billing,shop" || grace != time.Minute || errOut.Len() != 0 {
		t.Errorf("mode %q include %v grace %v; stderr %q", mode, incl, grace, errOut.String())
	}
	if !strings.Contains(d.Source, "ConfigMap endpoint-aggregator/endpoint-aggregator-config by endpoint-aggregator ") {
		t.Errorf("source %q", d.Source)
	}

	// Given: the flag wins; a warning when it differs, none when it does not.
	fs = explainFlagSet(t, "--export-mode=serviceexport", "--include-namespaces=shop,billing")
	errOut.Reset()
	d = useDaemonConfig(ctx, hub, o.Namespace, fs, &errOut)
	if mode, _ := fs.GetString("export-mode"); mode != "serviceexport" {
		t.Errorf("the given --export-mode was replaced by %q", mode)
	}
	want := "Warning: --export-mode=serviceexport given, but the daemon runs with --export-mode=annotation (ConfigMap endpoint-aggregator/endpoint-aggregator-config): using the value given.\n"
	if errOut.String() != want || !strings.Contains(d.Source, "overridden") {
		t.Errorf("stderr %q, want %q; source %q", errOut.String(), want, d.Source)
	}
}

func TestUseDaemonConfigWithNothingPublishedKeepsTheDefaultsAndSaysSo(t *testing.T) {
	hub := &cliClients{context: "hub", kube: fake.NewClientset()}
	fs := explainFlagSet(t)
	var errOut bytes.Buffer
	d := useDaemonConfig(context.Background(), hub, "endpoint-aggregator", fs, &errOut)
	if mode, _ := fs.GetString("export-mode"); mode != "serviceexport" || d.Config != nil {
		t.Errorf("mode %q, config %+v", mode, d.Config)
	}
	if n := strings.Count(errOut.String(), "Warning:"); n != 1 || !strings.Contains(errOut.String(), "publishes no configuration") {
		t.Errorf("stderr %q, want one warning", errOut.String())
	}
}

func TestStatusSummarizesTheDaemonConfig(t *testing.T) {
	o := NewOptions()
	o.ExportMode = "annotation"
	c := o.published()
	got := daemonSummary(daemonFlags{Config: &c, Source: "ConfigMap x/y"})
	for _, want := range []string{"Daemon " + version() + " runs with --export-mode=annotation", "--exclude-namespaces=kube-node-lease,kube-public,kube-system", "(ConfigMap x/y)."} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "hub-cluster-name") {
		t.Errorf("summary %q names the hub without --hub-is-member", got)
	}
}
