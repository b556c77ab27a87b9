package app

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/config"
)

// memberKind is a kind the member identity may hold: where it lives in the
// API and when it is applied (deleted in the reverse order).
type memberKind struct {
	gvr        schema.GroupVersionResource
	namespaced bool
	order      int
}

var memberKinds = map[string]memberKind{
	"Namespace":          {schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, false, 0},
	"ClusterRole":        {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, false, 1},
	"ServiceAccount":     {schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true, 2},
	"Secret":             {schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, true, 3},
	"ClusterRoleBinding": {schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, false, 4},
}

// readOnlyVerbs are the verbs a --read-only ClusterRole keeps.
var readOnlyVerbs = []string{"get", "list", "watch"}

// memberIdentity is what register creates in a member: the objects of
// config/rbac/kustomization.yaml, in apply order.
type memberIdentity struct {
	objects []*unstructured.Unstructured
	// serviceAccount and tokenSecret are the ServiceAccount and its
	// kubernetes.io/service-account-token Secret.
	serviceAccount, tokenSecret *unstructured.Unstructured
}

// loadMemberIdentity reads the member identity from the manifests embedded
// from config/rbac. readOnly strips every verb but get, list and watch from
// the ClusterRole (no ServiceExport status writes).
func loadMemberIdentity(readOnly bool) (*memberIdentity, error) {
	rbac, err := fs.Sub(config.RBAC, "rbac")
	if err != nil {
		return nil, err
	}
	return parseMemberIdentity(rbac, readOnly)
}

// parseMemberIdentity reads the resources a kustomization.yaml in fsys lists.
func parseMemberIdentity(fsys fs.FS, readOnly bool) (*memberIdentity, error) {
	data, err := fs.ReadFile(fsys, "kustomization.yaml")
	if err != nil {
		return nil, err
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, fmt.Errorf("kustomization.yaml: %w", err)
	}
	m := &memberIdentity{}
	for _, file := range k.Resources {
		data, err := fs.ReadFile(fsys, path.Clean(file))
		if err != nil {
			return nil, fmt.Errorf("member RBAC: %w", err)
		}
		objs, err := decodeManifests(data)
		if err != nil {
			return nil, fmt.Errorf("member RBAC %s: %w", file, err)
		}
		m.objects = append(m.objects, objs...)
	}
	for _, o := range m.objects {
		kind, ok := memberKinds[o.GetKind()]
		if !ok {
			return nil, fmt.Errorf("member RBAC: unsupported kind %s (%s)", o.GetKind(), o.GetName())
		}
		if o.GroupVersionKind().GroupVersion() != kind.gvr.GroupVersion() {
			return nil, fmt.Errorf("member RBAC: %s %s has apiVersion %s, want %s", o.GetKind(), o.GetName(), o.GetAPIVersion(), kind.gvr.GroupVersion())
		}
		if kind.namespaced != (o.GetNamespace() != "") {
			return nil, fmt.Errorf("member RBAC: %s %s: namespace %q", o.GetKind(), o.GetName(), o.GetNamespace())
		}
		switch o.GetKind() {
		case "ServiceAccount":
			if m.serviceAccount != nil {
				return nil, errors.New("member RBAC: more than one ServiceAccount")
			}
			m.serviceAccount = o
		case "Secret":
			t, _, _ := unstructured.NestedString(o.Object, "type")
			if corev1.SecretType(t) == corev1.SecretTypeServiceAccountToken {
				m.tokenSecret = o
			}
		case "ClusterRole":
			if readOnly {
				if err := keepReadVerbs(o); err != nil {
					return nil, err
				}
			}
		}
	}
	if m.serviceAccount == nil || m.tokenSecret == nil {
		return nil, errors.New("member RBAC: no ServiceAccount or no service-account-token Secret")
	}
	if sa := m.tokenSecret.GetAnnotations()[corev1.ServiceAccountNameKey]; sa != m.serviceAccount.GetName() || m.tokenSecret.GetNamespace() != m.serviceAccount.GetNamespace() {
		return nil, fmt.Errorf("member RBAC: token Secret %s is not for ServiceAccount %s", m.tokenSecret.GetName(), m.serviceAccount.GetName())
	}
	sort.SliceStable(m.objects, func(i, j int) bool {
		return memberKinds[m.objects[i].GetKind()].order < memberKinds[m.objects[j].GetKind()].order
	})
	return m, nil
}

func decodeManifests(data []byte) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, err
		}
		if len(obj) == 0 {
			continue // only comments
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

// keepReadVerbs removes every verb but get, list and watch from a
// ClusterRole's rules, and the rules left without verbs.
func keepReadVerbs(role *unstructured.Unstructured) error {
	rules, _, err := unstructured.NestedSlice(role.Object, "rules")
	if err != nil {
		return fmt.Errorf("ClusterRole %s: %w", role.GetName(), err)
	}
	var kept []any
	for _, r := range rules {
		rule, ok := r.(map[string]any)
		if !ok {
			return fmt.Errorf("ClusterRole %s: malformed rule", role.GetName())
		}
		verbs, _, err := unstructured.NestedStringSlice(rule, "verbs")
		if err != nil {
			return fmt.Errorf("ClusterRole %s: %w", role.GetName(), err)
		}
		var read []any
		for _, v := range verbs {
			if slices.Contains(readOnlyVerbs, v) {
				read = append(read, v)
			}
		}
		if len(read) == 0 {
			continue
		}
		rule["verbs"] = read
		kept = append(kept, rule)
	}
	return unstructured.SetNestedSlice(role.Object, kept, "rules")
}

// namespace is the member namespace of the identity.
func (m *memberIdentity) namespace() string { return m.serviceAccount.GetNamespace() }

// username is the ServiceAccount's user name in the member.
func (m *memberIdentity) username() string {
	return "system:serviceaccount:" + m.serviceAccount.GetNamespace() + ":" + m.serviceAccount.GetName()
}

// identityObjectRef names an object in output, kubectl style.
func identityObjectRef(o *unstructured.Unstructured) string {
	ref := strings.ToLower(o.GetKind()) // as kubectl prints it
	if g := memberKinds[o.GetKind()].gvr.Group; g != "" {
		ref += "." + g
	}
	ref += "/" + o.GetName()
	if o.GetNamespace() != "" {
		ref += " (namespace " + o.GetNamespace() + ")"
	}
	return ref
}

func identityResource(dc dynamic.Interface, o *unstructured.Unstructured) dynamic.ResourceInterface {
	kind := memberKinds[o.GetKind()]
	if kind.namespaced {
		return dc.Resource(kind.gvr).Namespace(o.GetNamespace())
	}
	return dc.Resource(kind.gvr)
}

// apply server-side applies the identity and reports each object as
// created, configured or unchanged. A second run writes nothing: the
// apiserver does not persist an apply that changes nothing.
// The result is keyed by identityKey.
//
// With dryRun the applies are server-side dry runs, which persist nothing
// but pass authorization and admission like a real apply, and the results
// say what a real run would do. An object in a namespace that does not exist
// yet cannot be dry-run: only the permission to create it is checked.
func (m *memberIdentity) apply(ctx context.Context, c *cliClients, dryRun bool, report func(ref, result string)) (map[string]string, error) {
	results := map[string]string{}
	newNamespaces := map[string]bool{} // namespaces a dry run would create
	for _, o := range m.objects {
		ref := identityObjectRef(o)
		ri := identityResource(c.dynamic, o)
		before, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading %s: %w", ref, err)
		}
		if apierrors.IsNotFound(err) {
			before = nil
		}
		if before != nil && before.GetDeletionTimestamp() != nil {
			return nil, fmt.Errorf("%s is being deleted; wait until it is gone and run register again", ref)
		}
		if dryRun && newNamespaces[o.GetNamespace()] {
			kind := memberKinds[o.GetKind()]
			if err := mayDo(ctx, c.kube, "create", kind.gvr.Group, kind.gvr.Resource, "", o.GetNamespace()); err != nil {
				return nil, fmt.Errorf("applying %s: %w", ref, err)
			}
			result := "would be created (its namespace does not exist yet: only the permission was checked)"
			report(ref, result)
			results[identityKey(o)] = result
			continue
		}
		after, err := ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: cliFieldManager, Force: true, DryRun: dryRunOption(dryRun)})
		if err != nil {
			return nil, fmt.Errorf("applying %s: %w", ref, err)
		}
		result := "unchanged"
		switch {
		case dryRun:
			result = dryRunResult(before, after)
			if before == nil && o.GetKind() == "Namespace" {
				newNamespaces[o.GetName()] = true
			}
		case before == nil:
			result = "created"
		case before.GetResourceVersion() != after.GetResourceVersion():
			result = "configured"
		}
		report(ref, result)
		results[identityKey(o)] = result
	}
	return results, nil
}

func identityKey(o *unstructured.Unstructured) string {
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

// remove deletes the identity in reverse apply order. Objects that lack the
// labels of the manifests are left alone: they are not ours.
func (m *memberIdentity) remove(ctx context.Context, dc dynamic.Interface, report func(ref, result string)) error {
	var errs []error
	for i := len(m.objects) - 1; i >= 0; i-- {
		o := m.objects[i]
		ri := identityResource(dc, o)
		live, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			report(identityObjectRef(o), "not found")
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading %s: %w", identityObjectRef(o), err))
			continue
		}
		if !hasAllLabels(live.GetLabels(), o.GetLabels()) {
			report(identityObjectRef(o), "kept: it lacks the labels of config/rbac, so it was not created by register")
			continue
		}
		if live.GetDeletionTimestamp() != nil {
			report(identityObjectRef(o), "already being deleted")
			continue
		}
		uid := live.GetUID()
		err = ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case apierrors.IsNotFound(err):
			report(identityObjectRef(o), "not found")
		case err != nil:
			errs = append(errs, fmt.Errorf("deleting %s: %w", identityObjectRef(o), err))
		default:
			report(identityObjectRef(o), "deleted")
		}
	}
	return errors.Join(errs...)
}

func hasAllLabels(live, want map[string]string) bool {
	for k, v := range want {
		if live[k] != v {
			return false
		}
	}
	return true
}
