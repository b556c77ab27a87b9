package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/endpoint-aggregator/endpoint-aggregator/cmd/endpoint-aggregator/app"
	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

var clusterProperties = schema.GroupVersionResource{Group: "about.k8s.io", Version: "v1beta1", Resource: "clusterproperties"}

// installAboutCRD installs a ClusterProperty CRD with the About API's
// group, names and versions (v1beta1 stored, v1alpha1 served), and waits
// until it is served.
func installAboutCRD(t *testing.T, c *testenv.Cluster) {
	t.Helper()
	schemaOf := func() *apiextensionsv1.CustomResourceValidation {
		return &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
			Type:     "object",
			Required: []string{"spec"},
			Properties: map[string]apiextensionsv1.JSONSchemaProps{
				"spec": {Type: "object", Required: []string{"value"}, Properties: map[string]apiextensionsv1.JSONSchemaProps{
					"value": {Type: "string", MinLength: new(int64(1))},
				}},
			},
		}}
	}
	crd := &apiextensionsv1.CustomResourceDefinition{
		// A *.k8s.io group needs its API review named, as the About API's does.
		ObjectMeta: metav1.ObjectMeta{Name: "clusterproperties.about.k8s.io",
			Annotations: map[string]string{"api-approved.kubernetes.io": "https://github.com/kubernetes/enhancements/pull/3084"}},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "about.k8s.io",
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "ClusterProperty", ListKind: "ClusterPropertyList", Plural: "clusterproperties", Singular: "clusterproperty"},
			Scope: apiextensionsv1.ClusterScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{
				{Name: "v1beta1", Served: true, Storage: true, Schema: schemaOf()},
				{Name: "v1alpha1", Served: true, Schema: schemaOf()},
			},
		},
	}
	api := apiextensionsclient.NewForConfigOrDie(c.Config).ApiextensionsV1().CustomResourceDefinitions()
	if _, err := api.Create(context.Background(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	props := dynamic.NewForConfigOrDie(c.Config).Resource(clusterProperties)
	eventually(t, waitTimeout, func() error {
		_, err := props.List(context.Background(), metav1.ListOptions{})
		return err
	})
}

// setClusterProperty creates or updates a ClusterProperty.
func setClusterProperty(t *testing.T, c *testenv.Cluster, name, value string) {
	t.Helper()
	ctx := context.Background()
	props := dynamic.NewForConfigOrDie(c.Config).Resource(clusterProperties)
	p, err := props.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		p = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "about.k8s.io/v1beta1", "kind": "ClusterProperty",
			"metadata": map[string]any{"name": name}, "spec": map[string]any{"value": value},
		}}
		if _, err := props.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(p.Object, value, "spec", "value"); err != nil {
		t.Fatal(err)
	}
	if _, err := props.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func clusterProperty(t *testing.T, c *testenv.Cluster, name string) (string, error) {
	t.Helper()
	p, err := dynamic.NewForConfigOrDie(c.Config).Resource(clusterProperties).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	v, _, err := unstructured.NestedString(p.Object, "spec", "value")
	return v, err
}

// TestAboutAPIIdentity: a member whose About API ClusterProperty claims
// another member's id is refused before any of its endpoints reach the hub,
// as is one of another ClusterSet than the hub's; each is let in once its
// properties agree. With --hub-is-member the daemon gives the hub its id.
func TestAboutAPIIdentity(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	for _, c := range []*testenv.Cluster{e.hub, e.east, e.west} {
		installAboutCRD(t, c)
	}
	setClusterProperty(t, e.hub, clusters.PropertyClusterSet, "prod")
	setClusterProperty(t, e.west, clusters.PropertyClusterID, "west")
	setClusterProperty(t, e.west, clusters.PropertyClusterSet, "prod")
	setClusterProperty(t, e.east, clusters.PropertyClusterID, "west") // east claims west's id
	// register takes a member's id for its name, and refuses another name.
	kubeconfig := cliKubeconfig(t, e.hub, e.east, e.west)
	stdout, stderr, err := runCLI(context.Background(), "register", "--member-context", "east", "--hub-context", "hub", "--dry-run", "--kubeconfig", kubeconfig)
	if err != nil || !strings.Contains(stderr, `Cluster name "west" from member east's About API`) || !strings.Contains(stdout, "endpoint-aggregator.io/cluster-name: west") {
		t.Errorf("register of a member that claims west's id, without --name: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	_, stderr, err = runCLI(context.Background(), "register", "--member-context", "east", "--hub-context", "hub", "--name", "east", "--dry-run", "--kubeconfig", kubeconfig)
	if err == nil || !strings.Contains(err.Error(), `names itself "west"`) {
		t.Errorf("register --name east of a member whose id is west: %v\nstderr:\n%s", err, stderr)
	}
	e.register(t, "east", "east", e.east.Kubeconfig)
	e.register(t, "west", "west", e.west.Kubeconfig)
	exportService(t, e.east.Client, "cart")
	exportService(t, e.west.Client, "cart")
	applySlices(t, e.east.Client, "cart", endpointSlice("cart", "cart-1", 1, 3, true))
	applySlices(t, e.west.Client, "cart", endpointSlice("cart", "cart-1", 2, 2, true))

	d := e.startDaemon(t, func(o *app.Options) {
		o.ProbeInterval, o.ProbeTimeout = time.Second, time.Second
		o.MemberSyncTimeout = 5 * time.Second
		o.HubIsMember, o.HubClusterName = true, "hub"
	})
	waitFor(t, e, "cart", map[string]int{"west": 2}, map[string]int{"west": 2})
	eventually(t, waitTimeout, func() error {
		if n := eventCount(t, e, "east", clusters.ClassIdentityMismatch.Reason()); n == 0 {
			return fmt.Errorf("no %s Event on east's Secret; events:\n%s", clusters.ClassIdentityMismatch.Reason(), secretEvents(t, e, "east"))
		}
		if !strings.Contains(secretEvents(t, e, "east"), `is "west", but it is registered as "east"`) {
			return fmt.Errorf("east's Events do not say which id it claims:\n%s", secretEvents(t, e, "east"))
		}
		if v := gaugeSum(t, d, "endpoint_aggregator_member_cluster_error", map[string]string{"cluster": "east", "reason": clusters.ClassIdentityMismatch.Label()}); v != 1 {
			return fmt.Errorf("member_cluster_error for east's identity = %v, want 1", v)
		}
		return nil
	})
	// Still nothing of east in the hub, well after its probes began.
	waitFor(t, e, "cart", map[string]int{"west": 2}, map[string]int{"west": 2})

	// The hub, a member too, was given its id.
	eventually(t, waitTimeout, func() error {
		v, err := clusterProperty(t, e.hub, clusters.PropertyClusterID)
		if err != nil || v != "hub" {
			return fmt.Errorf("the hub's %s = %q, %v; want \"hub\"", clusters.PropertyClusterID, v, err)
		}
		return nil
	})

	// east drops the claim, but names another ClusterSet: still refused.
	setClusterProperty(t, e.east, clusters.PropertyClusterID, "east")
	setClusterProperty(t, e.east, clusters.PropertyClusterSet, "staging")
	eventually(t, waitTimeout, func() error {
		stdout, stderr, err := runCLI(context.Background(), "status", "--hub-context", "hub", "-o", "json", "--kubeconfig", kubeconfig)
		if err != nil {
			return fmt.Errorf("status: %v\n%s", err, stderr)
		}
		var report struct {
			Members []cliMember `json:"members"`
		}
		if err := json.Unmarshal([]byte(stdout), &report); err != nil {
			return fmt.Errorf("%v\n%s", err, stdout)
		}
		seen := map[string]cliMember{}
		for _, m := range report.Members {
			seen[m.Name] = m
		}
		if east := seen["east"]; !strings.HasPrefix(east.LastError, string(clusters.ClassIdentityMismatch)+": ") || !strings.Contains(east.LastError, `"staging"`) {
			return fmt.Errorf("status does not say east belongs to ClusterSet staging:\n%s", stdout)
		}
		if west := seen["west"]; west.AboutID != "west" || west.IDSource != "registration, About API agrees" {
			return fmt.Errorf("status does not say west's About API id agrees:\n%s", stdout)
		}
		return nil
	})
	waitFor(t, e, "cart", map[string]int{"west": 2}, map[string]int{"west": 2})

	// Its properties agree now: it is let in.
	setClusterProperty(t, e.east, clusters.PropertyClusterSet, "prod")
	waitFor(t, e, "cart", map[string]int{"east": 3, "west": 2}, map[string]int{"east": 3, "west": 2})
}
