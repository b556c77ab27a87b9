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
// served again and listed. Deleting the CRD deletes the objects, and the
// watch says so: those are withdrawn.

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
// serves, or ExportNotServed.
func ServedExportVersion(ctx context.Context, d Discovery) (ExportVersion, error) {
	for _, v := range exportVersions {
		list, err := d.ServerResourcesForGroupVersionWithContext(ctx, mcsv1beta1.GroupName+"/"+string(v))
		if apierrors.IsNotFound(err) {
			continue // this version, or the whole group, is not served
		}
		if err != nil {
			return "", fmt.Errorf("discovering the served ServiceExport version: %w", err)
		}
		if slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "serviceexports" }) {
			return v, nil
		}
	}
	return ExportNotServed, nil
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

	mu sync.Mutex
	// listed is the version of the last successful list, or the one its
	// predecessor listed (inherit); "" before either.
	listed ExportVersion
}

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
	v := old.version()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listed == "" {
		s.listed = v
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
	var out *mcsv1beta1.ServiceExportList
	switch v {
	case ExportV1beta1:
		out, err = s.mcs.MulticlusterV1beta1().ServiceExports(metav1.NamespaceAll).List(ctx, o)
	case ExportV1alpha1:
		var l *mcsv1alpha1.ServiceExportList
		if l, err = s.mcs.MulticlusterV1alpha1().ServiceExports(metav1.NamespaceAll).List(ctx, o); err == nil {
			out = &mcsv1beta1.ServiceExportList{ListMeta: l.ListMeta, Items: make([]mcsv1beta1.ServiceExport, len(l.Items))}
			for i := range l.Items {
				out.Items[i] = *ServiceExportV1beta1(&l.Items[i])
			}
		}
	default:
		if was := s.version(); was == ExportV1beta1 || was == ExportV1alpha1 {
			return nil, fmt.Errorf("%w (it served %s); its last-known ServiceExports are kept until a version is served again", errExportsGone, was)
		}
		out = &mcsv1beta1.ServiceExportList{} // a complete list of nothing
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.listed = v
	s.mu.Unlock()
	return out, nil
}

// watch watches in the version of the last list, until the member serves
// another; then it ends with 410 Gone, so that the reflector lists again.
func (s *exportSource) watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	listed := s.version()
	if v, err := s.served(ctx); err == nil && v != listed {
		return versionChanged(listed, v), nil
	}
	var w watch.Interface
	var err error
	switch listed {
	case ExportV1beta1:
		w, err = s.mcs.MulticlusterV1beta1().ServiceExports(metav1.NamespaceAll).Watch(ctx, o)
	case ExportV1alpha1:
		if w, err = s.mcs.MulticlusterV1alpha1().ServiceExports(metav1.NamespaceAll).Watch(ctx, o); err == nil {
			w = watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				if se, ok := e.Object.(*mcsv1alpha1.ServiceExport); ok {
					e.Object = ServiceExportV1beta1(se)
				}
				return e, true
			})
		}
	}
	if err != nil {
		return nil, err
	}
	if s.disco == nil {
		return w, nil
	}
	return s.follow(ctx, w, listed), nil
}

// follow passes on w's events (none when w is nil: nothing is served)
// and ends once the member serves another version than listed.
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
				select {
				case out <- e:
				case <-stop:
					return
				}
			case <-tick.C:
				if v, err := s.served(ctx); err == nil && v != listed {
					select {
					case out <- goneEvent(listed, v):
					case <-stop:
					}
					return
				}
			}
		}
	}()
	return &chanWatch{ch: out, stop: stop}
}

// versionChanged is a watch that says only that the version changed.
func versionChanged(from, to ExportVersion) watch.Interface {
	ch := make(chan watch.Event, 1)
	ch <- goneEvent(from, to)
	close(ch)
	return &chanWatch{ch: ch, stop: make(chan struct{})}
}

func goneEvent(from, to ExportVersion) watch.Event {
	st := apierrors.NewResourceExpired(fmt.Sprintf("the member's served ServiceExport version changed from %s to %s", from, to)).Status()
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
