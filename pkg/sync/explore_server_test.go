package sync

import (
	"fmt"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// simServer is the hub API server of the order explorer: an in-memory store
// with what the controller relies on from a real one (resourceVersions,
// UIDs, optimistic concurrency, UID preconditions on delete, the
// ServiceImport status subresource, ClusterIP allocation), that records
// every change as a watch event for the explorer to deliver when it likes.
type simServer struct {
	rv      int64
	uid     int
	nextIP  int
	objects map[string]map[string]runtime.Object // resource → namespace/name → object
	// watch receives every change to an object a hub informer watches.
	watch func(ev hubEvent)
	// fault decides the fate of one write: nil to apply it and succeed, or
	// an error, applied first when applied is true (a timeout whose write
	// went through).
	fault func(verb, resource string) (err error, applied bool)
	// during is called once a write was applied, before its response is
	// returned: the explorer may deliver watch events meanwhile.
	during func()
	// writes counts the writes that reached the server, failed or not.
	writes int
	// changes counts the writes that changed something.
	changes int
	logf    func(string, ...interface{})
}

// hubEvent is one watch event of a hub informer.
type hubEvent struct {
	resource string
	obj      runtime.Object // a copy, as the server had it
	gone     bool
}

func newSimServer() *simServer {
	return &simServer{objects: map[string]map[string]runtime.Object{}, watch: func(hubEvent) {}, fault: func(string, string) (error, bool) { return nil, false },
		during: func() {}}
}

// Resources the hub informers watch, and the label selector of each.
var simWatched = map[string]labels.Selector{
	resourceService:       labels.SelectorFromSet(labels.Set{endpoints.LabelManagedBy: endpoints.ManagedByValue}),
	resourceEndpoints:     labels.SelectorFromSet(labels.Set{endpoints.LabelManagedBy: endpoints.ManagedByValue}),
	resourceEndpointSlice: labels.SelectorFromSet(labels.Set{discoveryv1.LabelManagedBy: endpoints.SliceManagedByValue}),
	resourceServiceImport: labels.SelectorFromSet(labels.Set{endpoints.LabelManagedBy: endpoints.ManagedByValue}),
	resourceNamespace:     labels.Everything(),
	resourceNode:          labels.Everything(), // only where the hub is a member
}

// resourceNode is the hub's Nodes, which the daemon reads where the hub is
// a member.
const resourceNode = "nodes"

// watched reports whether a hub informer sees obj of resource.
func watched(resource string, obj runtime.Object) bool {
	sel, ok := simWatched[resource]
	if !ok {
		return false
	}
	m, _ := metaOf(obj)
	return sel.Matches(labels.Set(m.GetLabels()))
}

func objKey(m metav1.Object) string { return m.GetNamespace() + "/" + m.GetName() }

// seed stores an object as if written before the test, without an event.
func (s *simServer) seed(resource string, obj runtime.Object) runtime.Object {
	obj = obj.DeepCopyObject()
	m, _ := metaOf(obj)
	s.stamp(m)
	if s.objects[resource] == nil {
		s.objects[resource] = map[string]runtime.Object{}
	}
	s.objects[resource][objKey(m)] = obj
	return obj.DeepCopyObject()
}

func (s *simServer) stamp(m metav1.Object) {
	s.rv++
	m.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	if m.GetUID() == "" {
		s.uid++
		m.SetUID(types.UID(fmt.Sprintf("uid-%d", s.uid)))
	}
}

// list returns copies of every object of resource, sorted by key.
func (s *simServer) list(resource string) []runtime.Object {
	keys := make([]string, 0, len(s.objects[resource]))
	for k := range s.objects[resource] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]runtime.Object, 0, len(keys))
	for _, k := range keys {
		out = append(out, s.objects[resource][k].DeepCopyObject())
	}
	return out
}

func (s *simServer) get(resource, namespace, name string) (runtime.Object, bool) {
	o, ok := s.objects[resource][namespace+"/"+name]
	if !ok {
		return nil, false
	}
	return o.DeepCopyObject(), true
}

func (s *simServer) notify(resource string, obj runtime.Object, gone bool) {
	if watched(resource, obj) {
		s.watch(hubEvent{resource: resource, obj: obj.DeepCopyObject(), gone: gone})
	}
}

// react serves one client action.
func (s *simServer) react(action clienttesting.Action) (bool, runtime.Object, error) {
	resource := action.GetResource().Resource
	gr := action.GetResource().GroupResource()
	// Create and update actions share one interface: tell them by verb.
	switch action.GetVerb() {
	case "get":
		a := action.(clienttesting.GetAction)
		o, ok := s.get(resource, a.GetNamespace(), a.GetName())
		if !ok {
			return true, nil, apierrors.NewNotFound(gr, a.GetName())
		}
		return true, o, nil
	case "create":
		a := action.(clienttesting.CreateAction)
		return s.write(verbCreate, resource, func() (runtime.Object, error) { return s.create(gr, resource, a.GetObject()) })
	case "update":
		a := action.(clienttesting.UpdateAction)
		verb := verbUpdate
		if a.GetSubresource() == "status" {
			verb = verbUpdateStatus
		}
		return s.write(verb, resource, func() (runtime.Object, error) { return s.update(gr, resource, a.GetObject(), verb == verbUpdateStatus) })
	case "delete":
		a := action.(clienttesting.DeleteAction)
		return s.write(verbDelete, resource, func() (runtime.Object, error) {
			return nil, s.delete(gr, resource, a.GetNamespace(), a.GetName(), a.GetDeleteOptions())
		})
	}
	return true, nil, fmt.Errorf("simServer: %s %s not served", action.GetVerb(), resource)
}

func (s *simServer) write(verb, resource string, apply func() (runtime.Object, error)) (bool, runtime.Object, error) {
	s.writes++
	fault, applied := s.fault(verb, resource)
	if fault != nil && !applied {
		return true, nil, fault
	}
	out, err := apply()
	if s.logf != nil {
		s.logf("  %s %s: %v", verb, resource, err)
	}
	if err == nil {
		s.changes++
		s.during()
	}
	if fault != nil {
		return true, nil, fault
	}
	return true, out, err
}

func (s *simServer) create(gr schema.GroupResource, resource string, obj runtime.Object) (runtime.Object, error) {
	obj = obj.DeepCopyObject()
	m, _ := metaOf(obj)
	if _, ok := s.objects[resource][objKey(m)]; ok {
		return nil, apierrors.NewAlreadyExists(gr, m.GetName())
	}
	m.SetUID("")
	m.SetCreationTimestamp(metav1.Unix(2000+s.rv, 0))
	m.SetGeneration(1)
	switch o := obj.(type) {
	case *mcsv1beta1.ServiceImport:
		o.Status = mcsv1beta1.ServiceImportStatus{} // a subresource
	case *corev1.Service:
		if o.Spec.ClusterIP == "" {
			s.nextIP++
			o.Spec.ClusterIP = fmt.Sprintf("10.96.%d.%d", s.nextIP/250, s.nextIP%250+1)
			o.Spec.ClusterIPs = []string{o.Spec.ClusterIP}
		}
	}
	s.stamp(m)
	if s.objects[resource] == nil {
		s.objects[resource] = map[string]runtime.Object{}
	}
	s.objects[resource][objKey(m)] = obj
	s.notify(resource, obj, false)
	return obj.DeepCopyObject(), nil
}

func (s *simServer) update(gr schema.GroupResource, resource string, obj runtime.Object, status bool) (runtime.Object, error) {
	obj = obj.DeepCopyObject()
	m, _ := metaOf(obj)
	cur, ok := s.objects[resource][objKey(m)]
	if !ok {
		return nil, apierrors.NewNotFound(gr, m.GetName())
	}
	cm, _ := metaOf(cur)
	if m.GetResourceVersion() != "" && m.GetResourceVersion() != cm.GetResourceVersion() {
		return nil, apierrors.NewConflict(gr, m.GetName(), fmt.Errorf("the object has been modified"))
	}
	m.SetUID(cm.GetUID())
	m.SetCreationTimestamp(cm.GetCreationTimestamp())
	m.SetGeneration(cm.GetGeneration())
	switch o := obj.(type) {
	case *mcsv1beta1.ServiceImport:
		c := cur.(*mcsv1beta1.ServiceImport)
		if status {
			st := o.Status
			o = c.DeepCopy()
			o.Status = st
			obj, m = o, o
		} else {
			o.Status = c.Status
			if !apiequality.Semantic.DeepEqual(o.Spec, c.Spec) {
				m.SetGeneration(cm.GetGeneration() + 1)
			}
		}
	case *corev1.Service:
		c := cur.(*corev1.Service)
		if o.Spec.ClusterIP == "" {
			o.Spec.ClusterIP, o.Spec.ClusterIPs = c.Spec.ClusterIP, c.Spec.ClusterIPs
		}
		if o.Spec.ClusterIP != c.Spec.ClusterIP {
			return nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, m.GetName(), nil)
		}
	}
	s.stamp(m)
	s.objects[resource][objKey(m)] = obj
	s.notify(resource, obj, false)
	return obj.DeepCopyObject(), nil
}

func (s *simServer) delete(gr schema.GroupResource, resource, namespace, name string, opts metav1.DeleteOptions) error {
	cur, ok := s.objects[resource][namespace+"/"+name]
	if !ok {
		return apierrors.NewNotFound(gr, name)
	}
	cm, _ := metaOf(cur)
	if p := opts.Preconditions; p != nil && p.UID != nil && *p.UID != cm.GetUID() {
		return apierrors.NewConflict(gr, name, fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", *p.UID, cm.GetUID()))
	}
	delete(s.objects[resource], namespace+"/"+name)
	s.rv++
	gone := cur.DeepCopyObject()
	gm, _ := metaOf(gone)
	gm.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	s.notify(resource, gone, true)
	return nil
}

// hasGarbage reports whether collectGarbage would delete anything.
func (s *simServer) hasGarbage() bool {
	imports := map[types.UID]bool{}
	for _, o := range s.objects[resourceServiceImport] {
		imports[o.(*mcsv1beta1.ServiceImport).UID] = true
	}
	for _, o := range s.objects[resourceService] {
		for _, ref := range o.(*corev1.Service).OwnerReferences {
			if ref.Kind == mcsv1beta1.ServiceImportKindName && !imports[ref.UID] {
				return true
			}
		}
	}
	return false
}

// collectGarbage deletes what the hub's garbage collector would: Services
// owned by a ServiceImport that no longer exists (by UID). It reports
// whether it deleted anything.
func (s *simServer) collectGarbage() bool {
	imports := map[types.UID]bool{}
	for _, o := range s.objects[resourceServiceImport] {
		imports[o.(*mcsv1beta1.ServiceImport).UID] = true
	}
	any := false
	for _, o := range s.list(resourceService) {
		svc := o.(*corev1.Service)
		for _, ref := range svc.OwnerReferences {
			if ref.Kind == mcsv1beta1.ServiceImportKindName && !imports[ref.UID] {
				_ = s.delete(corev1.Resource("services"), resourceService, svc.Namespace, svc.Name, metav1.DeleteOptions{})
				any = true
				break
			}
		}
	}
	return any
}
