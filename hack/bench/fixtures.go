package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"

	"github.com/endpoint-aggregator/endpoint-aggregator/internal/testenv"
	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
	easync "github.com/endpoint-aggregator/endpoint-aggregator/pkg/sync"
)

const (
	// appNamespace holds the exported Services in the member and the
	// aggregated objects in the hubs.
	appNamespace = "bench"
	// daemonNamespace holds the registration Secrets.
	daemonNamespace = "endpoint-aggregator"
	// memberSliceSize is the member EndpointSlice controller's default.
	memberSliceSize = 100
)

// fleet is the simulated members' content as this process wrote it: the
// only writer of the member apiserver, it keeps every slice's last written
// version and updates without reading first.
type fleet struct {
	members  []string
	services []*corev1.Service // created, with server-set fields
	// slices[m][s] are member m's slices of service s.
	slices [][][]*memberSlice
	perSvc int // endpoints per member service

	nextIP atomic.Uint32 // changed endpoints get 100.64.0.0/10 + n
}

// memberSlice is one member EndpointSlice; mu serializes its writes.
type memberSlice struct {
	mu      sync.Mutex
	m, s, j int
	obj     *discoveryv1.EndpointSlice
}

func newFleet(members, services, perSvc int) *fleet {
	f := &fleet{perSvc: perSvc}
	width := max(3, len(fmt.Sprint(members-1)))
	for m := range members {
		f.members = append(f.members, fmt.Sprintf("m%0*d", width, m))
	}
	f.services = make([]*corev1.Service, services)
	f.slices = make([][][]*memberSlice, members)
	for m := range members {
		f.slices[m] = make([][]*memberSlice, services)
		for s := range services {
			for j := 0; j*memberSliceSize < perSvc; j++ {
				f.slices[m][s] = append(f.slices[m][s], &memberSlice{m: m, s: s, j: j})
			}
		}
	}
	return f
}

func serviceName(s int) string { return fmt.Sprintf("svc-%03d", s) }

// baseIP is the initial address of endpoint i of service s in member m:
// 10.1.0.0 plus a running number, unique across the fleet. 10.0.0.0/24 is
// the test hub's Service range, whose addresses the daemon refuses.
func (f *fleet) baseIP(m, s, i int) string {
	n := uint32((m*len(f.services)+s)*f.perSvc+i) + 1<<16 + 1
	return fmt.Sprintf("10.%d.%d.%d", n>>16&0xff, n>>8&0xff, n&0xff)
}

// newIP returns an address never used before, from 100.64.0.0/10.
func (f *fleet) newIP() string {
	n := f.nextIP.Add(1)
	if n >= 1<<22 {
		panic("bench: ran out of change addresses")
	}
	return fmt.Sprintf("100.%d.%d.%d", 64+(n>>16), n>>8&0xff, n&0xff)
}

func podName(svc string, ip string) string { return svc + "-" + ip }

func fakeUID(ip string) types.UID {
	return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012x", []byte(ip)[:min(6, len(ip))]))
}

// endpoint is a member endpoint as the EndpointSlice controller writes it.
func endpoint(svc, ip string, i int) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		NodeName:   ptr.To(fmt.Sprintf("node-%02d", i%20)),
		Zone:       ptr.To(fmt.Sprintf("zone-%c", 'a'+i%3)),
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: appNamespace, Name: podName(svc, ip), UID: fakeUID(ip)},
	}
}

// memberService is an exported member Service (annotation mode).
func memberService(s int) *corev1.Service {
	name := serviceName(s)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNamespace, Name: name,
			Labels:      map[string]string{"app": name},
			Annotations: map[string]string{easync.AnnotationExport: "true"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// initialSlice is member m's slice j of service s.
func (f *fleet) initialSlice(m, s, j int) *discoveryv1.EndpointSlice {
	svc := serviceName(s)
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: appNamespace,
			Name:      fmt.Sprintf("%s-%s-%d", svc, f.members[m], j),
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc,
				discoveryv1.LabelManagedBy:   "endpointslice-controller.k8s.io",
				memberLabel:                  f.members[m],
			},
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano)},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	for i := j * memberSliceSize; i < min(f.perSvc, (j+1)*memberSliceSize); i++ {
		sl.Endpoints = append(sl.Endpoints, endpoint(svc, f.baseIP(m, s, i), i))
	}
	return sl
}

// populate creates the Services and slices in the member, many at a time.
func (f *fleet) populate(ctx context.Context, member kubernetes.Interface) error {
	if err := createNamespace(ctx, member, appNamespace); err != nil {
		return err
	}
	for s := range f.services {
		svc, err := member.CoreV1().Services(appNamespace).Create(ctx, memberService(s), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("member: create Service: %w", err)
		}
		f.services[s] = svc
	}
	var all []*memberSlice
	for m := range f.slices {
		for s := range f.slices[m] {
			all = append(all, f.slices[m][s]...)
		}
	}
	return parallel(ctx, 16, len(all), func(ctx context.Context, i int) error {
		ms := all[i]
		out, err := member.DiscoveryV1().EndpointSlices(appNamespace).Create(ctx, f.initialSlice(ms.m, ms.s, ms.j), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("member: create EndpointSlice: %w", err)
		}
		ms.obj = out
		return nil
	})
}

// memberSlices returns the current slices of service s in member m (shared:
// read-only).
func (f *fleet) memberSlices(m, s int) []*discoveryv1.EndpointSlice {
	out := make([]*discoveryv1.EndpointSlice, 0, len(f.slices[m][s]))
	for _, ms := range f.slices[m][s] {
		ms.mu.Lock()
		out = append(out, ms.obj)
		ms.mu.Unlock()
	}
	return out
}

// registerMembers writes one registration Secret per simulated member into
// the hub, each with the kubeconfig of its own proxy view.
func registerMembers(ctx context.Context, hub kubernetes.Interface, f *fleet, p *memberProxy) error {
	if err := createNamespace(ctx, hub, daemonNamespace); err != nil {
		return err
	}
	return parallel(ctx, 16, len(f.members), func(ctx context.Context, i int) error {
		name := f.members[i]
		kc, err := p.kubeconfig(name)
		if err != nil {
			return err
		}
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Namespace:   daemonNamespace,
				Name:        "member-" + name,
				Labels:      map[string]string{clusters.LabelMemberCluster: "true"},
				Annotations: map[string]string{clusters.AnnotationClusterName: name},
			},
			Data: map[string][]byte{clusters.KubeconfigKey: kc},
		}
		_, err = hub.CoreV1().Secrets(daemonNamespace).Create(ctx, s, metav1.CreateOptions{})
		return err
	})
}

func createNamespace(ctx context.Context, c kubernetes.Interface, name string) error {
	_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// parallel runs f(0..n-1) on up to workers goroutines and returns the first
// error; after an error or when ctx ends, no new calls start.
func parallel(ctx context.Context, workers, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

// warmUp writes (and removes) one object of each kind the hubs get in a
// namespace of its own, until each write is fast: the first write of a
// ServiceImport into a fresh apiserver waits seconds for its CRD handler,
// which would otherwise be charged to whichever side writes first.
func warmUp(ctx context.Context, c *testenv.Cluster) error {
	const ns = "bench-warmup"
	if err := createNamespace(ctx, c.Client, ns); err != nil {
		return err
	}
	hubMCS, err := mcsclientset.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	for i := 0; ; i++ {
		t0 := time.Now()
		name := fmt.Sprintf("warmup-%d", i)
		si := &mcsv1beta1.ServiceImport{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       mcsv1beta1.ServiceImportSpec{Type: mcsv1beta1.ClusterSetIP, Ports: []mcsv1beta1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}},
		}
		if _, err := hubMCS.MulticlusterV1beta1().ServiceImports(ns).Create(ctx, si, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s: warm-up: %w", c.Name, err)
		}
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
		if _, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("%s: warm-up: %w", c.Name, err)
		}
		if err := hubMCS.MulticlusterV1beta1().ServiceImports(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		if err := c.Client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		if time.Since(t0) < 200*time.Millisecond || i >= 20 {
			return nil
		}
	}
}
