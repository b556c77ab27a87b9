// Package leasehub is an in-memory Lease API for driving shard
// coordinators in tests: it keeps resourceVersions and refuses a stale
// update or a delete whose precondition fails, as the API server does, lets
// the test fail or delay any call, and records every change in order, so
// that each replica can be given its own, lagging, cache of it.
package leasehub

import (
	"fmt"
	"sort"
	"strconv"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	kubefake "k8s.io/client-go/kubernetes/fake"
	coordinationlisters "k8s.io/client-go/listers/coordination/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
)

var leaseResource = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// Change is one write the hub took: the Lease after it, or before a delete.
type Change struct {
	Lease   *coordinationv1.Lease
	Deleted bool
}

// Hub holds the Leases of one namespace.
type Hub struct {
	mu      sync.Mutex
	rv      int64
	leases  map[string]*coordinationv1.Lease
	history []Change
	// Before, when set, is called before each call with its verb (get,
	// list, create, update, delete) and the Lease's name; an error it
	// returns is the call's, and the hub changes nothing. It runs without
	// the hub's lock, so it may block or park the caller.
	Before func(verb, name string) error
	// After, when set, is called after a write the hub took; an error it
	// returns is the call's (the write happened, its answer was lost).
	After func(verb, name string) error
}

// New returns an empty hub.
func New() *Hub { return &Hub{leases: map[string]*coordinationv1.Lease{}} }

// Client is a clientset whose Lease calls go to the hub; other calls go
// to an empty fake.
func (h *Hub) Client() kubernetes.Interface {
	cs := kubefake.NewClientset()
	cs.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		obj, err := h.handle(a)
		return true, obj, err
	})
	return cs
}

func (h *Hub) handle(a clienttesting.Action) (runtime.Object, error) {
	var name string
	verb := a.GetVerb()
	switch verb {
	case "get":
		name = a.(clienttesting.GetAction).GetName()
	case "create":
		name = a.(clienttesting.CreateAction).GetObject().(*coordinationv1.Lease).Name
	case "update":
		name = a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease).Name
	case "delete":
		name = a.(clienttesting.DeleteAction).GetName()
	}
	if h.Before != nil {
		if err := h.Before(verb, name); err != nil {
			return nil, err
		}
	}
	obj, wrote, err := h.apply(a, name)
	if err == nil && wrote && h.After != nil {
		if err := h.After(verb, name); err != nil {
			return nil, err
		}
	}
	return obj, err
}

func (h *Hub) apply(a clienttesting.Action, name string) (runtime.Object, bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := h.leases[name]
	switch a.GetVerb() {
	case "get":
		if cur == nil {
			return nil, false, apierrors.NewNotFound(leaseResource, name)
		}
		return cur.DeepCopy(), false, nil
	case "list":
		sel := a.(clienttesting.ListAction).GetListRestrictions().Labels
		out := &coordinationv1.LeaseList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(h.rv, 10)}}
		for _, l := range h.sorted() {
			if sel == nil || sel.Matches(labels.Set(l.Labels)) {
				out.Items = append(out.Items, *l.DeepCopy())
			}
		}
		return out, false, nil
	case "create":
		if cur != nil {
			return nil, false, apierrors.NewAlreadyExists(leaseResource, name)
		}
		l := a.(clienttesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		if l.ResourceVersion != "" {
			return nil, false, apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
		}
		return h.put(l), true, nil
	case "update":
		l := a.(clienttesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		switch {
		case cur == nil:
			return nil, false, apierrors.NewNotFound(leaseResource, name)
		case l.ResourceVersion == "":
			return nil, false, apierrors.NewBadRequest("resourceVersion must be set on an update")
		case l.ResourceVersion != cur.ResourceVersion:
			return nil, false, apierrors.NewConflict(leaseResource, name, fmt.Errorf("the object has been modified"))
		}
		return h.put(l), true, nil
	case "delete":
		if cur == nil {
			return nil, false, apierrors.NewNotFound(leaseResource, name)
		}
		if p := a.(clienttesting.DeleteAction).GetDeleteOptions().Preconditions; p != nil && p.ResourceVersion != nil && *p.ResourceVersion != cur.ResourceVersion {
			return nil, false, apierrors.NewConflict(leaseResource, name, fmt.Errorf("the ResourceVersion in the precondition does not match"))
		}
		delete(h.leases, name)
		h.history = append(h.history, Change{Lease: cur.DeepCopy(), Deleted: true})
		return cur.DeepCopy(), true, nil
	}
	return nil, false, apierrors.NewMethodNotSupported(leaseResource, a.GetVerb())
}

func (h *Hub) put(l *coordinationv1.Lease) *coordinationv1.Lease {
	h.rv++
	l.ResourceVersion = strconv.FormatInt(h.rv, 10)
	h.leases[l.Name] = l
	h.history = append(h.history, Change{Lease: l.DeepCopy()})
	return l.DeepCopy()
}

func (h *Hub) sorted() []*coordinationv1.Lease {
	out := make([]*coordinationv1.Lease, 0, len(h.leases))
	for _, l := range h.leases {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Get returns a copy of a Lease as the hub holds it now, nil when none.
func (h *Hub) Get(name string) *coordinationv1.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.leases[name]; l != nil {
		return l.DeepCopy()
	}
	return nil
}

// List returns copies of every Lease, by name.
func (h *Hub) List() []*coordinationv1.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.sorted()
	for i, l := range out {
		out[i] = l.DeepCopy()
	}
	return out
}

// Put writes a Lease as someone else would (an operator, a replica of an
// older version), bypassing Before and After.
func (h *Hub) Put(l *coordinationv1.Lease) *coordinationv1.Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.put(l.DeepCopy())
}

// Delete removes a Lease as someone else would; false when it was absent.
func (h *Hub) Delete(name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	cur := h.leases[name]
	if cur == nil {
		return false
	}
	delete(h.leases, name)
	h.history = append(h.history, Change{Lease: cur.DeepCopy(), Deleted: true})
	return true
}

// Len is how many changes the hub took so far.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.history)
}

// Sort puts the changes from the from-th on in the order of their Leases'
// names, keeping each Lease's own changes in order. A caller whose calls
// ran in parallel (a coordinator writes its fences so) gets one order of
// them, the same every run. No cache may have delivered any of them yet.
func (h *Hub) Sort(from int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if from < len(h.history) {
		sort.SliceStable(h.history[from:], func(i, j int) bool {
			return h.history[from+i].Lease.Name < h.history[from+j].Lease.Name
		})
	}
}

// Cache is one replica's view of the hub's Leases: it shows the changes up
// to the point its watch delivered, and tells the replica of each one.
type Cache struct {
	hub     *Hub
	next    int
	indexer cache.Indexer
	// Deliver, when set, is told of each change Catch delivers.
	Deliver func(l *coordinationv1.Lease, deleted bool)
}

// NewCache returns a cache that has delivered nothing yet.
func (h *Hub) NewCache() *Cache {
	return &Cache{hub: h, indexer: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})}
}

// Lister reads the cache as an informer's lister would.
func (c *Cache) Lister(namespace string) coordinationlisters.LeaseNamespaceLister {
	return coordinationlisters.NewLeaseLister(c.indexer).Leases(namespace)
}

// Behind is how many of the hub's changes the cache has not delivered.
func (c *Cache) Behind() int { return c.hub.Len() - c.next }

// Catch delivers the next n changes (all of them when n < 0) and returns
// how many it delivered.
func (c *Cache) Catch(n int) int {
	c.hub.mu.Lock()
	end := len(c.hub.history)
	if n >= 0 && c.next+n < end {
		end = c.next + n
	}
	changes := c.hub.history[c.next:end]
	c.next = end
	c.hub.mu.Unlock()
	for _, ch := range changes {
		l := ch.Lease.DeepCopy()
		if ch.Deleted {
			_ = c.indexer.Delete(l)
		} else {
			_ = c.indexer.Update(l)
		}
		c.tell(l, ch.Deleted)
	}
	return len(changes)
}

// tell passes a change the cache took in to Deliver, when set.
func (c *Cache) tell(l *coordinationv1.Lease, deleted bool) {
	if c.Deliver != nil {
		c.Deliver(l, deleted)
	}
}

// Restart empties the cache and lists the hub again, as a replica that
// starts cold does: it delivers what the hub holds now, as additions.
func (c *Cache) Restart() {
	c.hub.mu.Lock()
	now := c.hub.sorted()
	c.next = len(c.hub.history)
	c.hub.mu.Unlock()
	objs := make([]interface{}, len(now))
	for i, l := range now {
		objs[i] = l.DeepCopy()
	}
	_ = c.indexer.Replace(objs, "")
	for _, o := range objs {
		c.tell(o.(*coordinationv1.Lease), false)
	}
}
