package clusters

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	cpv1alpha1 "sigs.k8s.io/cluster-inventory-api/apis/v1alpha1"
	cpinformers "sigs.k8s.io/cluster-inventory-api/client/informers/externalversions/apis/v1alpha1"
	cplisters "sigs.k8s.io/cluster-inventory-api/client/listers/apis/v1alpha1"
)

// Registration Secret contract.
const (
	// LabelMemberCluster marks a Secret as a member registration.
	LabelMemberCluster = "endpoint-aggregator.io/member-cluster"
	// AnnotationClusterName names the member; the Secret's name is the default.
	AnnotationClusterName = "endpoint-aggregator.io/cluster-name"
	// KubeconfigKey is the Secret data key that holds the kubeconfig.
	KubeconfigKey = "kubeconfig"
)

// Event reasons on registration Secrets.
const (
	ReasonConnected        = "MemberConnected"
	ReasonRotated          = "MemberCredentialsRotated"
	ReasonSyncTimeout      = "MemberSyncTimeout"
	ReasonInvalidName      = "InvalidClusterName"
	ReasonDuplicateName    = "DuplicateClusterName"
	ReasonInvalidConfig    = "InvalidKubeconfig"
	ReasonRefusedConfig    = "KubeconfigRefused"
	ReasonClientFailed     = "MemberClientFailed"
	ReasonMemberRemoved    = "MemberRemoved"
	ReasonRotationRejected = "RotationRejected"
)

// registration is what one registering object, a Secret or a
// ClusterProfile, asks for.
type registration struct {
	claim
	hash      string
	policy    PolicyOverride
	policyErr error
	// compress is the registration's choice of gzip, nil for the
	// daemon's; compressErr says why an annotation could not be read.
	compress    *bool
	compressErr error
	// config builds the member's client config; invalid is the Event
	// reason when it fails for another reason than a refused feature.
	config  func() (*rest.Config, error)
	invalid string
	// unhealthy is why the cluster manager says the member's control plane
	// is unhealthy, or "".
	unhealthy string
}

// sync brings the member registered by one Secret or ClusterProfile in line
// with it.
func (r *Registry) sync(key string) error {
	var reg *registration
	var err error
	if pkey, ok := strings.CutPrefix(key, profileKeyPrefix); ok {
		reg, err = r.profileRegistration(pkey)
	} else {
		reg, err = r.secretRegistration(key)
	}
	if err != nil {
		return err
	}
	if reg == nil {
		r.mu.Lock()
		delete(r.rejections, refKey(refForKey(key)))
		r.mu.Unlock()
		r.remove(key, nil)
		return nil
	}
	return r.register(reg)
}

// secretRegistration reads a registration Secret; nil when it is gone.
func (r *Registry) secretRegistration(key string) (*registration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, err
	}
	secret, err := r.secrets.Secrets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cluster := ClusterName(secret)
	policy, policyErr := ParsePolicyOverride(secret.Annotations)
	compress, compressErr := ParseMemberCompression(secret.Annotations)
	data, found := secret.Data[KubeconfigKey]
	config := func() (*rest.Config, error) { return RESTConfig(data, r.opts.Policy) }
	if !found {
		keys := slices.Sorted(maps.Keys(secret.Data))
		config = func() (*rest.Config, error) {
			if len(keys) == 0 {
				return nil, fmt.Errorf("the Secret has no data; the kubeconfig belongs under key %q", KubeconfigKey)
			}
			return nil, fmt.Errorf("the Secret has no key %q for the kubeconfig; its keys are %s", KubeconfigKey, strings.Join(keys, ", "))
		}
	}
	return &registration{
		claim:       claim{key: key, cluster: cluster, created: secret.CreationTimestamp, ref: secretRef(secret)},
		hash:        hashOf(cluster, data, settingAnnotations(secret.Annotations)...),
		policy:      policy,
		policyErr:   policyErr,
		compress:    compress,
		compressErr: compressErr,
		config:      config,
		invalid:     ReasonInvalidConfig,
	}, nil
}

// profileRegistration reads a ClusterProfile (key without its prefix); nil
// when it is gone or filtered out. The member is named after it.
func (r *Registry) profileRegistration(key string) (*registration, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, err
	}
	lister, ok := r.profiles[ns]
	if !ok {
		return nil, nil
	}
	cp, err := lister.Get(name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	providers := r.opts.ClusterProfiles.Providers
	policy, policyErr := ParsePolicyOverride(cp.Annotations)
	compress, compressErr := ParseMemberCompression(cp.Annotations)
	reg := &registration{
		claim:       claim{key: profileKeyPrefix + key, cluster: cp.Name, created: cp.CreationTimestamp, ref: profileRef(cp)},
		hash:        providers.profileHash(cp),
		policy:      policy,
		policyErr:   policyErr,
		compress:    compress,
		compressErr: compressErr,
		config:      func() (*rest.Config, error) { return providers.RESTConfig(cp, r.opts.Policy) },
		invalid:     ReasonInvalidAccessProvider,
		unhealthy:   ControlPlaneUnhealthy(cp),
	}
	if p, _ := providers.choose(cp); p == nil {
		reg.invalid = ReasonNoAccessProvider
	}
	return reg, nil
}

// watchClusterProfiles sets up one ClusterProfile informer per namespace.
func (r *Registry) watchClusterProfiles() {
	o := r.opts.ClusterProfiles
	r.profiles = map[string]cplisters.ClusterProfileNamespaceLister{}
	for _, ns := range o.Namespaces {
		inf := cpinformers.NewFilteredClusterProfileInformer(o.Client, ns, 0, claimIndexers(),
			func(lo *metav1.ListOptions) {
				if o.ClusterManager != "" {
					lo.LabelSelector = labels.Set{cpv1alpha1.LabelClusterManagerKey: o.ClusterManager}.String()
				}
			})
		enqueue := func(obj interface{}) {
			key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
			if err != nil {
				utilruntime.HandleError(err)
				return
			}
			r.queue.Add(profileKeyPrefix + key)
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: enqueue,
			UpdateFunc: func(old, cur interface{}) {
				if old.(*cpv1alpha1.ClusterProfile).ResourceVersion != cur.(*cpv1alpha1.ClusterProfile).ResourceVersion {
					enqueue(cur)
				}
			},
			DeleteFunc: enqueue,
		})
		r.profileInformers = append(r.profileInformers, inf)
		r.profiles[ns] = cplisters.NewClusterProfileLister(inf.GetIndexer()).ClusterProfiles(ns)
	}
}

// register brings the member a registration names in line with it. Bad
// content keeps whatever already runs for the object and says why in an
// Event: a broken update must not take a working member down. A
// registration with no connection to keep registers its member as not
// connected, and is retried (see unconnected).
func (r *Registry) register(reg *registration) error {
	key, cluster, ref := reg.key, reg.cluster, reg.ref
	r.mu.Lock()
	delete(r.rejections, refKey(ref)) // what this sync warns about replaces them
	r.mu.Unlock()
	if errs := validation.IsDNS1123Label(cluster); len(errs) > 0 {
		r.warn(ref, ReasonInvalidName, "cluster name %q is not a DNS-1123 label: %s", cluster, errs[0])
		return nil
	}
	if _, static := r.opts.Static[cluster]; static {
		r.warn(ref, ReasonDuplicateName, "cluster name %q is taken by a member the daemon registers itself (--hub-is-member); this %s is ignored", cluster, ref.Kind)
		return nil
	}
	if owner := r.nameOwner(cluster); owner != nil && owner.key != key {
		r.warn(ref, ReasonDuplicateName, "cluster name %q is already registered by the older %s %s/%s; this %s is ignored", cluster, owner.ref.Kind, owner.ref.Namespace, owner.ref.Name, ref.Kind)
		r.remove(key, ref)
		return nil
	}

	for _, err := range []error{reg.policyErr, reg.compressErr} {
		if err != nil {
			r.warn(ref, ReasonInvalidConfig, "%v", err)
		}
	}
	r.mu.RLock()
	prevName, hadPrev := r.bySecret[key]
	r.mu.RUnlock()
	if hadPrev && prevName != cluster {
		// The object now names another cluster: withdraw the old name
		// first, also when the new name's connection is kept as it is.
		r.remove(key, ref)
	}
	r.mu.Lock()
	m := r.members[cluster]
	if m != nil && m.secret != key && m.ref != nil {
		// This registration owns the name now (the older claim wins):
		// the member's connection is its previous one, to replace
		// make-before-break, and is no longer the other object's.
		delete(r.bySecret, m.secret)
		m.secret = key
		r.bySecret[key] = cluster
	}
	if m != nil && m.secret == key {
		m.registered = reg.created.Time
	}
	r.mu.Unlock()
	r.mu.RLock()
	upToDate := m != nil && m.secret == key && ((m.active != nil && m.active.hash == reg.hash) || (m.pending != nil && m.pending.hash == reg.hash))
	if upToDate {
		for _, c := range []*Cluster{m.active, m.pending} {
			if c != nil {
				c.reportUnhealthy(reg.unhealthy)
			}
		}
	}
	r.mu.RUnlock()
	wanted := r.wanted(cluster)
	if upToDate && wanted {
		return nil
	}
	if !wanted {
		r.elsewhere(reg)
		return nil
	}

	cfg, err := reg.config()
	if err != nil {
		reason := reg.invalid
		if isRefused(err) {
			reason = ReasonRefusedConfig
		}
		return r.unconnected(reg, m, reason, ClassInvalidRegistration, fmt.Sprintf("%v", err))
	}
	r.configure(cfg, cluster, reg.compress)
	clients, err := r.opts.NewClients(cfg)
	if err != nil {
		class := Classify(err)
		if class == ClassOther {
			class = ClassInvalidRegistration
		}
		return r.unconnected(reg, m, ReasonClientFailed, class, fmt.Sprintf("building client for member %q: %v", cluster, err))
	}
	svcH, sliceH, exportH := r.handler.EventHandlers(cluster)
	c, err := newCluster(cluster, reg.hash, key, clients, EventHandlers{Services: svcH, EndpointSlices: sliceH, ServiceExports: exportH}, r.opts.ReadBounds)
	if err != nil {
		return err
	}
	c.policy = reg.policy
	c.reportUnhealthy(reg.unhealthy)

	r.mu.Lock()
	m = r.members[cluster]
	switch {
	case m == nil:
		r.members[cluster] = &member{secret: key, ref: ref, active: c, policy: reg.policy, registered: reg.created.Time}
	case m.active == nil:
		// Registered without a connection until now: nothing to keep.
		m.ref, m.active, m.policy, m.unconnected, m.unconnectedSince = ref, c, reg.policy, "", time.Time{}
		m.elsewhere = false
	default:
		m.ref = ref
		if m.pending != nil {
			m.pending.shutdown()
		}
		m.pending = c
	}
	r.bySecret[key] = cluster
	r.mu.Unlock()

	go r.run(c, ref)
	return nil
}

// remove stops the member registered by a Secret or ClusterProfile and tells
// the handler, which withdraws the member's hub objects. ref is nil when the
// object was deleted.
func (r *Registry) remove(key string, ref *corev1.ObjectReference) {
	r.mu.Lock()
	name, ok := r.bySecret[key]
	if !ok {
		r.mu.Unlock()
		return
	}
	delete(r.bySecret, key)
	m := r.members[name]
	if m == nil || m.secret != key {
		r.mu.Unlock()
		return
	}
	delete(r.members, name)
	r.mu.Unlock()

	m.shutdown()
	if ref == nil {
		ref = refForKey(key)
	}
	r.eventf(ref, corev1.EventTypeNormal, ReasonMemberRemoved, "member %q unregistered; its hub objects are withdrawn", name)
	klog.InfoS("Member removed", "cluster", name, "registration", key)
	r.handler.ClusterRemoved(name)
	// Another Secret or ClusterProfile may have been waiting for this name.
	for _, cl := range r.claimsOf(name) {
		if cl.key != key {
			r.queue.Add(cl.key)
		}
	}
}

// refForKey is the Event reference of a deleted Secret or ClusterProfile.
func refForKey(key string) *corev1.ObjectReference {
	if pkey, ok := strings.CutPrefix(key, profileKeyPrefix); ok {
		ns, n, _ := cache.SplitMetaNamespaceKey(pkey)
		return &corev1.ObjectReference{Kind: "ClusterProfile", APIVersion: cpv1alpha1.GroupVersion.String(), Namespace: ns, Name: n}
	}
	ns, n, _ := cache.SplitMetaNamespaceKey(key)
	return &corev1.ObjectReference{Kind: "Secret", APIVersion: "v1", Namespace: ns, Name: n}
}

// ClusterName is the member name a registration Secret claims.
func ClusterName(s *corev1.Secret) string {
	if n, ok := s.Annotations[AnnotationClusterName]; ok {
		return n
	}
	return s.Name
}

// refKey identifies the object an Event reference names.
func refKey(ref *corev1.ObjectReference) string {
	return ref.Kind + "/" + ref.Namespace + "/" + ref.Name
}

func secretRef(s *corev1.Secret) *corev1.ObjectReference {
	if s == nil {
		return nil
	}
	return &corev1.ObjectReference{Kind: "Secret", APIVersion: "v1", Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion}
}

// hashOf identifies what a connection was built from: a change rebuilds it.
func hashOf(cluster string, kubeconfig []byte, settings ...string) string {
	h := sha256.New()
	h.Write([]byte(cluster))
	h.Write([]byte{0})
	h.Write(kubeconfig)
	for _, s := range settings {
		h.Write([]byte{0})
		h.Write([]byte(s))
	}
	return hex.EncodeToString(h.Sum(nil))
}
