package clusters

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	mcsv1alpha1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

// A member serves ServiceExports in the version its CRD has: v1beta1 since
// mcs-api v0.5.0, v1alpha1 only before (what most clusters running an MCS
// implementation have), or not at all. The daemon reads and writes them in
// the newest version the member serves, and holds them as v1beta1 in its
// cache whatever they were read in: the two differ only in deprecated
// constants. A member that serves none has no exports; it is not failing.
//
// The version is looked up in the member's discovery before each list of
// the ServiceExport informer, and again every exportRediscover while it
// watches. When it changes (the CRD was upgraded, downgraded, installed or
// removed), the watch ends with 410 Gone and the informer lists again in
// the new version: no restart, and the cache keeps the last list meanwhile.
//
// Exports are withdrawn only by a complete, successful list of a served
// version, or by the watch telling of their deletion. A member that served
// ServiceExports and then serves none while they remain (every version
// set served: false) fails its lists instead of listing nothing: its
// last-known exports stay, as for any failed read, until a version is
// served again and listed. Deleting the CRD deletes the objects too, but
// that is no unexport: those exports are held (exporthold.go).

// ExportVersion is the version in which a member serves ServiceExports.
type ExportVersion string

const (
	ExportV1beta1  ExportVersion = "v1beta1"
	ExportV1alpha1 ExportVersion = "v1alpha1"
	// ExportNotServed: the member serves no version of ServiceExport.
	ExportNotServed ExportVersion = lifecycle.ExportNotServed
)

// exportVersions are the versions the daemon reads, the newest first.
var exportVersions = []ExportVersion{ExportV1beta1, ExportV1alpha1}

// exportRediscover is how often a member's discovery is read again while
// its ServiceExports are watched; a variable for tests.
var exportRediscover = 10 * time.Second

// Discovery is the part of a discovery client that tells the served
// ServiceExport version.
type Discovery interface {
	ServerResourcesForGroupVersionWithContext(ctx context.Context, groupVersion string) (*metav1.APIResourceList, error)
}

// ServedExportVersion returns the newest ServiceExport version d's cluster
// serves, or ExportNotServed. A CRD being deleted serves none: its API
// server no longer offers to create its objects.
func ServedExportVersion(ctx context.Context, d Discovery) (ExportVersion, error) {
	for _, v := range exportVersions {
		list, err := d.ServerResourcesForGroupVersionWithContext(ctx, mcsv1beta1.GroupName+"/"+string(v))
		if apierrors.IsNotFound(err) {
			continue // this version, or the whole group, is not served
		}
		if err != nil {
			return "", fmt.Errorf("discovering the served ServiceExport version: %w", err)
		}
		i := slices.IndexFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "serviceexports" })
		if i >= 0 && !terminating(list.APIResources[i]) {
			return v, nil
		}
	}
	return ExportNotServed, nil
}

// terminating tells a resource whose CRD is being deleted: discovery
// lists it without create (a fake's discovery may list no verbs at all).
func terminating(r metav1.APIResource) bool {
	return len(r.Verbs) > 0 && !slices.Contains(r.Verbs, "create")
}

// exportSource lists and watches a member's ServiceExports in the version
// it serves, as v1beta1 objects.
type exportSource struct {
	mcs mcsclientset.Interface
	// disco tells the served version; nil (fake clients in unit tests):
	// v1beta1.
	disco Discovery
	// every is how often disco is read while watching.
	every time.Duration

	// store is the informer's cache, and before its predecessor's until
	// the first list: what is held when the CRD goes.
	store, before cache.Store

	mu sync.Mutex
	// listed is the version of the last successful list, or the one its
	// predecessor listed (inherit); "" before either.
	listed ExportVersion
	// held are the exports kept since the member's CRD went, nil when none.
	held *heldExports
}

// served is the version the member serves, ExportNotServed while its CRD
// is being deleted.
func (s *exportSource) served(ctx context.Context) (ExportVersion, error) {
	if s.disco == nil {
		return ExportV1beta1, nil
	}
	return ServedExportVersion(ctx, s.disco)
}

// errExportsGone fails the list of a member that no longer serves the
// ServiceExports it served.
var errExportsGone = errors.New("the member no longer serves ServiceExport")

// inherit carries what old listed into s, the source of a fresh informer
// set: a member that served ServiceExports before it does not list none.
func (s *exportSource) inherit(old *exportSource) {
	old.mu.Lock()
	v, held := old.listed, old.held.clone()
	old.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listed == "" {
		s.listed, s.held, s.before = v, held, old.store
	}
}

// version is listed.
func (s *exportSource) version() ExportVersion {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listed
}

func (s *exportSource) list(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	v, err := s.served(ctx)
	if err != nil {
		return nil, err
	}
	out, err := s.listIn(ctx, v, o)
	// A CRD just changed answers 404 for a version its discovery may still
	// list for a moment: discovery is read again before it counts.
	for try := 0; apierrors.IsNotFound(err) && s.disco != nil && try < 3; try++ {
		select {
		case <-ctx.Done(): // the informer set stops: no wait past it
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if v, err = s.served(ctx); err == nil {
			out, err = s.listIn(ctx, v, o)
		}
	}
	if err != nil {
		return nil, err
	}
	out = s.withHeld(ctx, out)
	s.mu.Lock()
	s.listed, s.before = v, nil
	s.mu.Unlock()
	return out, nil
}

// listIn lists the ServiceExports in version v.
func (s *exportSource) listIn(ctx context.Context, v ExportVersion, o metav1.ListOptions) (*mcsv1beta1.ServiceExportList, error) {
	switch v {
	case ExportV1beta1:
		return s.mcs.MulticlusterV1beta1().ServiceExports(metav1.NamespaceAll).List(ctx, o)
	case ExportV1alpha1:
		l, err := s.mcs.MulticlusterV1alpha1().ServiceExports(metav1.NamespaceAll).List(ctx, o)
		if err != nil {
			return nil, err
		}
		out := &mcsv1beta1.ServiceExportList{ListMeta: l.ListMeta, Items: make([]mcsv1beta1.ServiceExport, len(l.Items))}
		for i := range l.Items {
			out.Items[i] = *ServiceExportV1beta1(&l.Items[i])
		}
		return out, nil
	}
	if was := s.version(); was == ExportV1beta1 || was == ExportV1alpha1 {
		s.hold(ctx)
		return nil, fmt.Errorf("%w (it served %s); its last-known ServiceExports are kept until a version is served again", errExportsGone, was)
	}
	return &mcsv1beta1.ServiceExportList{}, nil // a complete list of nothing
}

// watch watches in the version of the last list, until the member serves
// another; then it ends with 410 Gone, so that the reflector lists again.
func (s *exportSource) watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	listed := s.version()
	if v, err := s.served(ctx); err == nil && v != listed {
		return goneWatch(fmt.Sprintf("the member's served ServiceExport version changed from %s to %s", listed, v)), nil
	}
	var w watch.Interface
	var err error
	switch listed {
	case ExportV1beta1:
		w, err = s.mcs.MulticlusterV1beta1().ServiceExports(metav1.NamespaceAll).Watch(ctx, o)
	case ExportV1alpha1:
		if w, err = s.mcs.MulticlusterV1alpha1().ServiceExports(metav1.NamespaceAll).Watch(ctx, o); err == nil {
			w = filterWatch(w, func(e watch.Event) (watch.Event, bool) {
				if se, ok := e.Object.(*mcsv1alpha1.ServiceExport); ok {
					e.Object = ServiceExportV1beta1(se)
				}
				return e, true
			})
		}
	}
	if apierrors.IsNotFound(err) && s.disco != nil {
		// The CRD changed since the list: the next one reads discovery.
		return goneWatch(fmt.Sprintf("ServiceExports are no longer served as %s", listed)), nil
	}
	if err != nil {
		return nil, err
	}
	if s.disco == nil {
		return w, nil
	}
	return s.follow(ctx, w, listed), nil
}

// follow passes on w's events (none when w is nil: nothing is served),
// but the deletions of a CRD being deleted (see pass), and ends once the
// member serves another version than listed, or held exports are let go.
func (s *exportSource) follow(ctx context.Context, w watch.Interface, listed ExportVersion) watch.Interface {
	out := make(chan watch.Event)
	stop := make(chan struct{})
	var in <-chan watch.Event
	if w != nil {
		in = w.ResultChan()
	}
	go func() {
		defer close(out)
		if w != nil {
			defer w.Stop()
		}
		tick := time.NewTicker(s.every)
		defer tick.Stop()
		send := func(e watch.Event) bool {
			select {
			case out <- e:
				return true
			case <-stop:
				return false
			}
		}
		for {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case e, ok := <-in:
				if !ok {
					return
				}
				events, open := []watch.Event{e}, true
				if e.Type == watch.Deleted {
					events, open = s.gather(ctx, events, in)
				}
				for _, e := range s.pass(ctx, events) {
					if !send(e) {
						return
					}
				}
				if !open {
					return
				}
			case <-tick.C:
				if v, err := s.served(ctx); err == nil && v != listed {
					send(goneEvent(fmt.Sprintf("the member's served ServiceExport version changed from %s to %s", listed, v)))
					return
				}
				if s.holdEnded() {
					send(goneEvent("the exports held across the member's ServiceExport CRD deletion are let go"))
					return
				}
			}
		}
	}()
	return &chanWatch{ch: out, stop: stop}
}

// goneWatch is a watch that ends at once with 410 Gone, saying why.
func goneWatch(why string) watch.Interface {
	ch := make(chan watch.Event, 1)
	ch <- goneEvent(why)
	close(ch)
	return &chanWatch{ch: ch, stop: make(chan struct{})}
}

// goneEvent ends a watch with 410 Gone, for the reflector to list again.
func goneEvent(why string) watch.Event {
	st := apierrors.NewResourceExpired(why).Status()
	return watch.Event{Type: watch.Error, Object: &st}
}

// chanWatch is a watch.Interface over a channel its producer closes.
type chanWatch struct {
	ch   <-chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (w *chanWatch) ResultChan() <-chan watch.Event { return w.ch }
func (w *chanWatch) Stop()                          { w.once.Do(func() { close(w.stop) }) }

// patchStatus applies a merge patch to the status of ServiceExport
// namespace/name in the version last listed.
func (s *exportSource) patchStatus(ctx context.Context, namespace, name string, patch []byte) error {
	if s.isHeld(namespace, name) {
		return nil // no object on the member to write to
	}
	opts := metav1.PatchOptions{FieldManager: "endpoint-aggregator"}
	var err error
	switch v := s.version(); v {
	case ExportV1beta1:
		_, err = s.mcs.MulticlusterV1beta1().ServiceExports(namespace).Patch(ctx, name, types.MergePatchType, patch, opts, "status")
	case ExportV1alpha1:
		_, err = s.mcs.MulticlusterV1alpha1().ServiceExports(namespace).Patch(ctx, name, types.MergePatchType, patch, opts, "status")
	default:
		err = fmt.Errorf("the member serves no ServiceExport version the daemon read (%q)", v)
	}
	return err
}

// exportV1beta1 is se as a v1beta1 ServiceExport, sharing its memory.
func ServiceExportV1beta1(se *mcsv1alpha1.ServiceExport) *mcsv1beta1.ServiceExport {
	return &mcsv1beta1.ServiceExport{
		ObjectMeta: se.ObjectMeta,
		Spec:       mcsv1beta1.ServiceExportSpec(se.Spec),
		Status:     mcsv1beta1.ServiceExportStatus(se.Status),
	}
}
