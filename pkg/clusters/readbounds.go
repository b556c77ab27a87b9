package clusters

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// ReadBounds bound what the daemon reads of one member, exported or not:
// its Services (and ServiceExports), and the endpoints of its
// EndpointSlices. A member's caches never hold much more: a list stops at
// the page that crosses a bound, a watch at the event that does. The member
// is then not read (its informers' lists fail and retry with client-go's
// backoff, each reading at most the bound and a page again), its probe fails with
// ClassOverBounds, so its hub objects are kept or withdrawn by the
// unreachable policy, and it is read again once it is back within them.
// Zero: no bound.
type ReadBounds struct {
	Services  int
	Endpoints int
}

// Defaults of ReadBounds: four times the import bounds' defaults
// (--max-member-services, --max-member-endpoints), as a member reads
// Services it does not export too, and well past what Kubernetes is tested
// to hold in one cluster (10,000 Services, 150,000 Pods).
const (
	DefaultMaxReadServices  = 40000
	DefaultMaxReadEndpoints = 400000
)

// errOverBounds marks a member read past its ReadBounds.
var errOverBounds = errors.New("over the daemon's read bounds")

// listPageSize is the most objects a bounded list reads at a time
// (client-go's pager default), so that a list that crosses its bound stops
// there; slicePageSize the most EndpointSlices, each of up to a thousand
// endpoints: what a list holds as the member sent it is one page, so a
// page of slices must stay well under the endpoints bound.
const (
	listPageSize  = 500
	slicePageSize = 50
)

// readBound is one informer's bound: what it counts, the most it may hold,
// and how much it holds now.
type readBound struct {
	unit  string // what limit counts: "Services", "endpoints", …
	flag  string // the flag that sets limit
	limit int    // 0: no bound
	// pageSize is the most objects a list reads at a time.
	pageSize int64
	// held is what the informer's store holds, kept by countingHandler.
	held atomic.Int64
	// listed is what the list being read holds so far, across its pages.
	listed int
	// strip, when set, is the informer's transform, applied to each page
	// as it comes: what a list holds while it is read is then the stripped
	// objects of the pages before, and one page as the member sent it.
	strip cache.TransformFunc
}

// weight is what one object counts against its bound: its endpoints for a
// slice (as the member sent it, or as projected), else 1.
func weight(obj any) int {
	switch o := obj.(type) {
	case *discoveryv1.EndpointSlice:
		return len(o.Endpoints)
	case *endpoints.MemberSlice:
		return len(o.Endpoints) + len(o.Invalid)
	case cache.DeletedFinalStateUnknown:
		return weight(o.Obj)
	}
	return 1
}

func (b *readBound) over(n int) error {
	return fmt.Errorf("%w: it holds more than %s=%d %s (%d read so far); not read until it is back within it",
		errOverBounds, b.flag, b.limit, b.unit, n)
}

// page counts one page of a list (o asked for it) and returns an error
// once the list, all its pages so far, crosses the bound.
func (b *readBound) page(o metav1.ListOptions, obj runtime.Object) error {
	if b == nil || b.limit <= 0 {
		return nil
	}
	if o.Continue == "" {
		b.listed = 0 // the first page of a new list
	}
	n := 0
	err := meta.EachListItem(obj, func(item runtime.Object) error {
		n += weight(item)
		return nil
	})
	if err != nil {
		return nil // not a list: nothing to count
	}
	b.listed += n
	if b.listed > b.limit {
		return b.over(b.listed)
	}
	return nil
}

// list reads a list through b: a page at a time (a caller that asks for
// no pages gets them joined), never at resourceVersion "0", which the API
// server's watch cache serves whole, whatever the limit. It stops at the
// page that crosses the bound. done reports a complete list within it.
func (b *readBound) list(ctx context.Context, o metav1.ListOptions, list cache.ListWithContextFunc) (obj runtime.Object, done bool, err error) {
	if b == nil || b.limit <= 0 {
		obj, err = list(ctx, o)
		return obj, false, err
	}
	if o.Continue == "" {
		switch {
		case o.ResourceVersion == "0":
			o.ResourceVersion = "" // the newest: no older than "0" asks
		case o.ResourceVersion != "" && o.ResourceVersionMatch == "":
			// A version with a limit lists exactly that version, which may
			// be long gone: ask for no older, as a list without one does.
			o.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
		}
	}
	if o.Limit > b.pageSize {
		o.Limit = b.pageSize
	}
	page := func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		obj, err := list(ctx, o)
		if err == nil {
			err = b.page(o, obj)
		}
		if err == nil && b.strip != nil {
			obj, err = stripList(obj, b.strip)
		}
		if err != nil {
			return nil, err
		}
		return obj, nil
	}
	if o.Limit > 0 { // the caller pages
		if obj, err = page(ctx, o); err != nil {
			return nil, false, err
		}
		m, err := meta.ListAccessor(obj)
		return obj, err == nil && m.GetContinue() == "", nil
	}
	p := pager.New(page)
	p.PageSize = b.pageSize
	p.FullListIfExpired = false // an expired list is listed again, and counted again
	if obj, _, err = p.ListWithAlloc(ctx, o); err != nil {
		return nil, false, err
	}
	return obj, true, nil
}

// stripList returns the items of a list page through strip, with the
// page's list metadata, so that the page itself can be freed.
func stripList(obj runtime.Object, strip cache.TransformFunc) (runtime.Object, error) {
	m, err := meta.ListAccessor(obj)
	if err != nil {
		return obj, nil
	}
	out := &metainternalversion.List{ListMeta: metav1.ListMeta{
		ResourceVersion:    m.GetResourceVersion(),
		Continue:           m.GetContinue(),
		RemainingItemCount: m.GetRemainingItemCount(),
	}}
	out.Items = make([]runtime.Object, 0, meta.LenList(obj))
	err = meta.EachListItem(obj, func(item runtime.Object) error {
		stripped, err := strip(item)
		if err != nil {
			return err
		}
		o, ok := stripped.(runtime.Object)
		if !ok {
			return fmt.Errorf("stripping a %T gave a %T, not an object", item, stripped)
		}
		out.Items = append(out.Items, o)
		return nil
	})
	return out, err
}

// watch bounds w: while the watch streams its initial list, the objects it
// added so far count; after that, what the store holds and what the event
// adds. The event that
// crosses the bound is replaced by an error, which ends the watch (the
// reflector lists again, and that list fails while the member is over),
// and report is told; within is told when a streamed initial list ended
// within the bound.
func (b *readBound) watch(w watch.Interface, streaming bool, report func(error), within func()) watch.Interface {
	if b == nil || b.limit <= 0 {
		return w
	}
	initial := streaming
	added := 0
	return filterWatch(w, func(in watch.Event) (watch.Event, bool) {
		n := int(b.held.Load())
		switch {
		case initial && in.Type == watch.Added:
			added += weight(in.Object)
			n = added
		case initial && in.Type == watch.Bookmark && initialEventsEnd(in.Object):
			initial = false
			within()
			return in, true
		case !initial && in.Type == watch.Added:
			n += weight(in.Object)
			// A modified object was held already: what it grew by counts
			// in held once the store has it, before the next event.
		}
		if n <= b.limit {
			return in, true
		}
		err := b.over(n)
		report(err)
		status := apierrors.NewRequestEntityTooLargeError(err.Error()).Status()
		return watch.Event{Type: watch.Error, Object: &status}, true
	})
}

func initialEventsEnd(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	return err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}

// countingHandler keeps bound.held equal to what the store holds, then
// calls h. Handlers run after the store changed, one at a time.
type countingHandler struct {
	bound *readBound
	h     cache.ResourceEventHandler
}

func (c countingHandler) OnAdd(obj any, initial bool) {
	c.bound.held.Add(int64(weight(obj)))
	c.h.OnAdd(obj, initial)
}

func (c countingHandler) OnUpdate(oldObj, newObj any) {
	c.bound.held.Add(int64(weight(newObj) - weight(oldObj)))
	c.h.OnUpdate(oldObj, newObj)
}

func (c countingHandler) OnDelete(obj any) {
	c.bound.held.Add(-int64(weight(obj)))
	c.h.OnDelete(obj)
}

// overBounds records which informers of a member are over their bound now.
type overBounds struct {
	mu   sync.Mutex
	errs map[string]error // by informer ("Services", …)
}

// set records err for what (nil: within its bound again) and reports
// whether the member's state changed (over, or back within every bound).
func (o *overBounds) set(what string, err error) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	before := len(o.errs) > 0
	if err == nil {
		delete(o.errs, what)
	} else {
		if o.errs == nil {
			o.errs = map[string]error{}
		}
		o.errs[what] = err
	}
	return before != (len(o.errs) > 0)
}

// err says which informers are over, or nil.
func (o *overBounds) err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.errs) == 0 {
		return nil
	}
	whats := make([]string, 0, len(o.errs))
	for w := range o.errs {
		whats = append(whats, w)
	}
	sort.Strings(whats)
	msgs := make([]string, len(whats))
	for i, w := range whats {
		msgs[i] = fmt.Sprintf("%s: %v", w, o.errs[w])
	}
	return fmt.Errorf("%w: %s", errOverBounds, strings.Join(msgs, "; "))
}

// newReadBound returns the bound of one informer of a member.
func newReadBound(what string, b ReadBounds) *readBound {
	switch what {
	case "EndpointSlices":
		return &readBound{unit: "endpoints", flag: "--max-member-read-endpoints", limit: b.Endpoints, pageSize: slicePageSize}
	case "ServiceExports":
		return &readBound{unit: "ServiceExports", flag: "--max-member-read-services", limit: b.Services, pageSize: listPageSize}
	}
	return &readBound{unit: "Services", flag: "--max-member-read-services", limit: b.Services, pageSize: listPageSize}
}
