package app

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// preflightFixture is a hub where member east is registered (recording
// kube-system UID uid-east, at https://10.0.0.1:6443), and the member
// cluster east, whose kube-system namespace has that UID.
func preflightFixture(t *testing.T) (hub, member *fake.Clientset) {
	t.Helper()
	kc, err := buildMemberKubeconfig("east", "sa", memberEndpoint{Server: "https://10.0.0.1:6443", CAData: testCAData}, "token")
	if err != nil {
		t.Fatal(err)
	}
	hub = fake.NewClientset(registrationSecret("endpoint-aggregator", "east", kc, "uid-east"))
	member = fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: types.UID("uid-east")}})
	return hub, member
}

func preflightOptions(name string, dryRun bool) *registerOptions {
	o := newRegisterOptions()
	o.kube.Namespace = "endpoint-aggregator"
	o.MemberContext, o.HubContext, o.Name, o.DryRun = "east-lb", "hub", name, dryRun
	return o
}

// writes are the actions of a fake clientset that are not reads.
func writes(c *fake.Clientset) []string {
	var out []string
	for _, a := range c.Actions() {
		switch a.GetVerb() {
		case "get", "list", "watch":
		default:
			out = append(out, a.GetVerb()+" "+a.GetResource().Resource)
		}
	}
	return out
}

// TestPreflightRefusesTheSameClusterThroughAnotherURL: east registered at
// one URL, registered again under another name through a load balancer's
// URL, is refused by its kube-system UID, in a dry run as in a real run,
// and nothing is written.
func TestPreflightRefusesTheSameClusterThroughAnotherURL(t *testing.T) {
	ctx := context.Background()
	lb := memberEndpoint{Server: "https://lb.example:6443", CAData: testCAData}
	for _, dryRun := range []bool{false, true} {
		hub, member := preflightFixture(t)
		o := preflightOptions("east2", dryRun)
		var errOut bytes.Buffer
		c := &checks{w: &errOut, all: dryRun}
		_, err := o.preflight(ctx, &cliClients{context: "hub", kube: hub}, &cliClients{context: "east-lb", kube: member}, "east2", lb, c)
		if dryRun {
			if err != nil {
				t.Fatalf("dry run: preflight stopped: %v", err)
			}
			err = c.err()
			for _, want := range []string{
				`check hub hub: cluster name "east2": ok`,
				"check member east-lb: reachable, kube-system UID uid-east: ok",
				`check hub hub: not registered under another name, "east2" not re-pointed: FAILED: hub hub: https://lb.example:6443 is the cluster already registered as member "east"`,
			} {
				if !strings.Contains(errOut.String(), want) {
					t.Errorf("dry run output lacks %q:\n%s", want, errOut.String())
				}
			}
		}
		if err == nil || !strings.Contains(err.Error(), `already registered as member "east" (secret endpoint-aggregator/east`) {
			t.Errorf("dry run %t: error %v, want the duplicate named", dryRun, err)
		}
		if w := append(writes(hub), writes(member)...); len(w) > 0 {
			t.Errorf("dry run %t: writes %v", dryRun, w)
		}
	}

	// --allow-duplicate lets it through.
	hub, member := preflightFixture(t)
	o := preflightOptions("east2", true)
	o.AllowDuplicate = true
	c := &checks{w: &bytes.Buffer{}, all: true}
	p, err := o.preflight(ctx, &cliClients{context: "hub", kube: hub}, &cliClients{context: "east-lb", kube: member}, "east2", lb, c)
	if err != nil || c.err() != nil {
		t.Fatalf("--allow-duplicate: %v, %v", err, c.err())
	}
	if p.uid != "uid-east" || p.existing != nil || len(p.all) != 1 {
		t.Errorf("preflight read UID %q, existing %v, %d registrations", p.uid, p.existing, len(p.all))
	}
}

// TestPreflightWithoutKubeSystem: a caller that may not read kube-system
// is told so, and the check falls back to server URL and CA.
func TestPreflightWithoutKubeSystem(t *testing.T) {
	hub, member := preflightFixture(t)
	member.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("namespaces"), "kube-system", errors.New("no"))
	})
	var errOut bytes.Buffer
	c := &checks{w: &errOut, all: true}
	o := preflightOptions("east2", true)
	same := memberEndpoint{Server: "https://10.0.0.1:6443", CAData: testCAData}
	p, err := o.preflight(context.Background(), &cliClients{context: "hub", kube: hub}, &cliClients{context: "east-lb", kube: member}, "east2", same, c)
	if err != nil || p.uid != "" {
		t.Fatalf("preflight: %v, UID %q", err, p.uid)
	}
	if !strings.Contains(errOut.String(), "Note: cannot read namespace kube-system of member east-lb") {
		t.Errorf("no note that the UID is unknown:\n%s", errOut.String())
	}
	if err := c.err(); err == nil || !strings.Contains(err.Error(), `server https://10.0.0.1:6443 is already registered as member "east"`) {
		t.Errorf("error %v, want the duplicate by server URL and CA", err)
	}
}

// TestPreflightMemberDown: a member that does not answer fails its check;
// the duplicate check cannot run, and says so; a real run stops there.
func TestPreflightMemberDown(t *testing.T) {
	for _, dryRun := range []bool{false, true} {
		hub, member := preflightFixture(t)
		member.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
		})
		var errOut bytes.Buffer
		c := &checks{w: &errOut, all: dryRun}
		o := preflightOptions("east2", dryRun)
		_, err := o.preflight(context.Background(), &cliClients{context: "hub", kube: hub}, &cliClients{context: "east-lb", kube: member}, "east2", memberEndpoint{Server: "https://lb.example:6443"}, c)
		if dryRun {
			if err != nil {
				t.Fatal(err)
			}
			err = c.err()
			if !strings.Contains(errOut.String(), "not re-pointed: not run: needs the hub and the member") {
				t.Errorf("dry run output:\n%s", errOut.String())
			}
		}
		if err == nil || !strings.Contains(err.Error(), "member east-lb: reading namespace kube-system: dial tcp") {
			t.Errorf("dry run %t: error %v", dryRun, err)
		}
	}
}

// TestPreflightRepointByUID: registering name east for a cluster whose
// kube-system UID is not the one east recorded needs --force, even at the
// same URL; another URL of the recorded cluster does not.
func TestPreflightRepointByUID(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		server, uid string
		force       bool
		want        string
	}{
		{"https://10.0.0.1:6443", "uid-rebuilt", false, "pass --force to re-point it"},
		{"https://10.0.0.1:6443", "uid-rebuilt", true, ""},
		{"https://lb.example:6443", "uid-east", false, ""},
	} {
		hub, _ := preflightFixture(t)
		member := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: types.UID(tc.uid)}})
		o := preflightOptions("east", false)
		o.Force = tc.force
		c := &checks{w: &bytes.Buffer{}}
		p, err := o.preflight(ctx, &cliClients{context: "hub", kube: hub}, &cliClients{context: "east", kube: member}, "east", memberEndpoint{Server: tc.server, CAData: testCAData}, c)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s with UID %s (force %t): %v", tc.server, tc.uid, tc.force, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s with UID %s (force %t): %v, want %q", tc.server, tc.uid, tc.force, err, tc.want)
		case tc.want == "" && p.existing == nil:
			t.Errorf("%s: the existing registration was not read", tc.server)
		}
	}
}

func TestChecks(t *testing.T) {
	var out bytes.Buffer
	real := &checks{w: &out}
	if err := real.report("a", nil); err != nil {
		t.Fatal(err)
	}
	if err := real.report("b", errors.New("boom")); err == nil || err.Error() != "boom" {
		t.Errorf("a real run goes on after a failed check: %v", err)
	}
	if out.Len() != 0 {
		t.Errorf("a real run printed verdicts:\n%s", out.String())
	}

	dry := &checks{w: &out, all: true}
	if dry.report("a", nil) != nil || dry.report("b", errors.New("boom")) != nil || dry.report("c", errors.New("bang")) != nil {
		t.Error("a dry run stopped at a failed check")
	}
	dry.skip("d", "needs b")
	want := "check a: ok\ncheck b: FAILED: boom\ncheck c: FAILED: bang\ncheck d: not run: needs b\n"
	if out.String() != want {
		t.Errorf("verdicts:\n%s\nwant:\n%s", out.String(), want)
	}
	if err := dry.err(); err == nil || err.Error() != "a real run would fail: boom\nbang" {
		t.Errorf("err() = %v", err)
	}
	if err := (&checks{all: true}).err(); err != nil {
		t.Errorf("no failed check: %v", err)
	}
}

func TestMayDo(t *testing.T) {
	c := fake.NewClientset()
	var asked *authorizationv1.ResourceAttributes
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		asked = r.Spec.ResourceAttributes
		r.Status.Allowed = r.Spec.ResourceAttributes.Resource == "secrets"
		if !r.Status.Allowed {
			r.Status.Reason = "no rule"
		}
		return true, r, nil
	})
	ctx := context.Background()
	if err := mayDo(ctx, c, "create", "", "secrets", "", "endpoint-aggregator"); err != nil {
		t.Errorf("allowed: %v", err)
	}
	if asked == nil || asked.Verb != "create" || asked.Namespace != "endpoint-aggregator" {
		t.Errorf("asked %+v", asked)
	}
	err := mayDo(ctx, c, "create", "", "serviceaccounts", "token", "m")
	if err == nil || err.Error() != "may not create serviceaccounts/token in namespace m: no rule" {
		t.Errorf("denied: %v", err)
	}
}

func TestDryRunResult(t *testing.T) {
	obj := func(rv string, labels map[string]string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("ServiceAccount")
		u.SetName("sa")
		u.SetResourceVersion(rv)
		u.SetLabels(labels)
		u.SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "m" + rv}})
		return u
	}
	if got := dryRunResult(nil, obj("", nil)); got != "would be created" {
		t.Errorf("absent: %q", got)
	}
	if got := dryRunResult(obj("1", map[string]string{"a": "b"}), obj("2", map[string]string{"a": "b"})); got != "unchanged" {
		t.Errorf("same content: %q", got)
	}
	if got := dryRunResult(obj("1", nil), obj("1", map[string]string{"a": "b"})); got != "would be configured" {
		t.Errorf("new label: %q", got)
	}
}
