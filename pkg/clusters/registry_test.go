package clusters

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	stdsync "sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/lifecycle"
)

const ns = "endpoint-aggregator"

// recordingHandler records the registry's callbacks.
type recordingHandler struct {
	mu       stdsync.Mutex
	synced   []string
	removed  []string
	timedOut []string
	health   []string // "<cluster>=<healthy>"
}

func (h *recordingHandler) EventHandlers(string) (cache.ResourceEventHandler, cache.ResourceEventHandler, cache.ResourceEventHandler) {
	return nil, nil, nil
}
func (h *recordingHandler) ClusterSynced(c string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.synced = append(h.synced, c)
}
func (h *recordingHandler) ClusterHealthChanged(c string, healthy bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.health = append(h.health, fmt.Sprintf("%s=%t", c, healthy))
}
func (h *recordingHandler) ClusterSyncTimedOut(c string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.timedOut = append(h.timedOut, c)
}
func (h *recordingHandler) ClusterRemoved(c string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.removed = append(h.removed, c)
}
func (h *recordingHandler) snapshot() (synced, removed []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.synced...), append([]string(nil), h.removed...)
}

// calls returns the clusters of the ClusterSynced and ClusterSyncTimedOut
// callbacks so far, and the ClusterHealthChanged ones as "<cluster>=<healthy>".
func (h *recordingHandler) calls() (synced, timedOut, health []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.synced...), append([]string(nil), h.timedOut...), append([]string(nil), h.health...)
}

const tokenKubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: m
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: Zm9v
users:
- name: u
  user:
    token: abc
contexts:
- name: m
  context: {cluster: m, user: u}
current-context: m
`

func secret(name, cluster, kubeconfig string, age time.Duration) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         ns,
			Name:              name,
			UID:               k8stypes.UID("uid-" + name),
			Labels:            map[string]string{LabelMemberCluster: "true"},
			CreationTimestamp: metav1.NewTime(time.Now().Add(-age)),
		},
		Data: map[string][]byte{KubeconfigKey: []byte(kubeconfig)},
	}
	if cluster != "" {
		s.Annotations = map[string]string{AnnotationClusterName: cluster}
	}
	return s
}

// startRegistry runs a registry on a fake hub whose members are fake
// clientsets (their informers sync at once).
func startRegistry(t *testing.T, objs ...runtime.Object) (*Registry, *kubefake.Clientset, *recordingHandler, *record.FakeRecorder) {
	t.Helper()
	return startRegistryWith(t, Options{
		SyncTimeout: 5 * time.Second,
		NewClients: func(*rest.Config) (Clients, error) {
			return Clients{Kube: kubefake.NewClientset()}, nil
		},
	}, objs...)
}

// startRegistryWith is startRegistry with the given options (in namespace ns).
func startRegistryWith(t *testing.T, opts Options, objs ...runtime.Object) (*Registry, *kubefake.Clientset, *recordingHandler, *record.FakeRecorder) {
	t.Helper()
	hub := kubefake.NewClientset(objs...)
	h := &recordingHandler{}
	rec := record.NewFakeRecorder(100)
	opts.Namespace = ns
	r := NewRegistry(hub, rec, h, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil(t, r.SecretsSynced)
	return r, hub, h, rec
}

func waitUntil(t *testing.T, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func events(rec *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestRegistryAddsAndRemovesMembersAtRuntime(t *testing.T) {
	r, hub, h, _ := startRegistry(t, secret("east", "", tokenKubeconfig, time.Hour))
	waitUntil(t, func() bool { c := r.Get("east"); return c != nil && c.HasSynced() })
	waitUntil(t, r.Ready)

	_, err := hub.CoreV1().Secrets(ns).Create(context.Background(), secret("s2", "west", tokenKubeconfig, 0), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { c := r.Get("west"); return c != nil && c.HasSynced() })

	if err := hub.CoreV1().Secrets(ns).Delete(context.Background(), "east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return r.Get("east") == nil })
	waitUntil(t, func() bool { _, removed := h.snapshot(); return len(removed) == 1 && removed[0] == "east" })
	if got := r.Names(); len(got) != 1 || got[0] != "west" {
		t.Errorf("Names() = %v, want [west]", got)
	}
}

func TestRegistryRejectsBadSecretsWithEvents(t *testing.T) {
	marker := filepath.Join(t.TempDir(), "ran")
	execKubeconfig := strings.Replace(tokenKubeconfig, "    token: abc\n",
		"    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [\"-c\", \"touch "+marker+"\"]\n", 1)
	wrongKey := secret("wrong-key", "", "", time.Hour)
	wrongKey.Data = map[string][]byte{"config": []byte(tokenKubeconfig), "value": nil}
	r, _, _, rec := startRegistry(t,
		secret("bad-name", "Not_A_Label", tokenKubeconfig, time.Hour),
		secret("garbage", "", "{not yaml: [", time.Hour),
		secret("exec", "", execKubeconfig, time.Hour),
		secret("older", "dup", tokenKubeconfig, 2*time.Hour),
		secret("newer", "dup", tokenKubeconfig, time.Hour),
		wrongKey,
	)
	waitUntil(t, func() bool { c := r.Get("dup"); return c != nil && c.HasSynced() })
	waitUntil(t, func() bool { return len(rec.Events) >= 5 })
	got := strings.Join(events(rec), "\n")
	for _, want := range []string{ReasonInvalidName, ReasonInvalidConfig, ReasonRefusedConfig, ReasonDuplicateName,
		`the Secret has no key "kubeconfig" for the kubeconfig; its keys are config, value`} {
		if !strings.Contains(got, want) {
			t.Errorf("no %s Event in:\n%s", want, got)
		}
	}
	if c := r.Get("dup"); c.secret != ns+"/older" {
		t.Errorf("cluster dup registered by %s, want the older Secret", c.secret)
	}
	// The member counts as registered when the hub created the owning
	// registration, connected or not.
	secrets, _ := r.secrets.Secrets(ns).List(labels.Everything())
	created := map[string]time.Time{}
	for _, s := range secrets {
		created[s.Name] = s.CreationTimestamp.Time
	}
	for cluster, secret := range map[string]string{"dup": "older", "garbage": "garbage"} {
		if st, _ := r.Lookup(cluster); !st.RegisteredAt.Equal(created[secret]) || st.RegisteredAt.IsZero() {
			t.Errorf("%s registered at %v, want Secret %s's creation %v", cluster, st.RegisteredAt, secret, created[secret])
		}
	}
	// A Secret whose kubeconfig is broken or refused still registers its
	// member, without a connection: only unregistering withdraws.
	if names := r.Names(); !slices.Equal(names, []string{"dup", "exec", "garbage", "wrong-key"}) {
		t.Errorf("registered %v, want [dup exec garbage wrong-key]", names)
	}
	for _, name := range []string{"exec", "garbage", "wrong-key"} {
		st, c := r.Lookup(name)
		if st.Phase != lifecycle.Registered || !st.Unreachable || st.Reason == "" || st.Since.IsZero() || c != nil {
			t.Errorf("%s: state %+v, connection %v; want registered, unreachable with a reason, no connection", name, st, c)
		}
	}
	if st, _ := r.Lookup("Not_A_Label"); st.Registered() {
		t.Errorf("an invalid cluster name is registered: %+v", st)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the exec plugin of a refused kubeconfig ran")
	}
}

func TestRegistryKeepsOldConnectionWhenRotatedToBrokenKubeconfig(t *testing.T) {
	r, hub, _, rec := startRegistry(t, secret("east", "", tokenKubeconfig, time.Hour))
	waitUntil(t, func() bool { c := r.Get("east"); return c != nil && c.HasSynced() })
	before := r.Get("east")
	// MemberConnected is recorded just after the member reports synced.
	waitUntil(t, func() bool { return len(rec.Events) > 0 })
	events(rec)

	s, _ := hub.CoreV1().Secrets(ns).Get(context.Background(), "east", metav1.GetOptions{})
	s.Data[KubeconfigKey] = []byte("garbage")
	s.ResourceVersion = "2" // the fake API server does not bump it
	if _, err := hub.CoreV1().Secrets(ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return len(rec.Events) > 0 })
	if got := strings.Join(events(rec), "\n"); !strings.Contains(got, ReasonInvalidConfig) || !strings.Contains(got, "keeping the previous connection") {
		t.Errorf("events = %s", got)
	}
	if r.Get("east") != before {
		t.Error("the working connection was replaced by a broken one")
	}
}

// A standby records no Events: the leader reports what it does. When the
// standby starts leading, ReportState says once what it takes over.
func TestRegistryOfAStandbyRecordsNoEventsUntilItLeads(t *testing.T) {
	var leading atomic.Bool
	r, hub, _, rec := startRegistryWith(t, Options{
		SyncTimeout: 5 * time.Second,
		NewClients: func(*rest.Config) (Clients, error) {
			return Clients{Kube: kubefake.NewClientset()}, nil
		},
		Leading: leading.Load,
	}, secret("east", "", tokenKubeconfig, time.Hour), secret("garbage", "", "{not yaml: [", time.Hour), secret("gone", "", tokenKubeconfig, time.Hour))
	waitUntil(t, r.Ready)
	if err := hub.CoreV1().Secrets(ns).Delete(context.Background(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return r.Get("gone") == nil })
	time.Sleep(100 * time.Millisecond)
	if got := events(rec); len(got) > 0 {
		t.Errorf("a standby recorded Events:\n%s", strings.Join(got, "\n"))
	}

	leading.Store(true)
	r.ReportState()
	got := events(rec)
	want := []string{
		"Normal " + ReasonConnected + ` member "east" connected and synced; this replica now leads`,
		"Warning " + ReasonInvalidConfig,
	}
	if len(got) != len(want) {
		t.Fatalf("ReportState recorded:\n%s\nwant %d Events", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("Event %d = %q, want prefix %q", i, got[i], want[i])
		}
	}

	// A leader records as things happen.
	if err := hub.CoreV1().Secrets(ns).Delete(context.Background(), "east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return len(rec.Events) > 0 })
	if got := events(rec); len(got) != 1 || !strings.Contains(got[0], ReasonMemberRemoved) {
		t.Errorf("after deleting east: %q, want one %s", got, ReasonMemberRemoved)
	}
}

// A registration that cannot be turned into a connection when the registry
// starts (as after a failover or rollout) keeps its member registered and
// unreachable, is retried with backoff, and connects once it can; its Event
// is recorded once, not once per retry.
func TestRegistryRetriesAMemberThatCannotConnect(t *testing.T) {
	// The plugin gets ready after three attempts, and not before the test
	// has looked at the member unconnected.
	var calls atomic.Int32
	var looked atomic.Bool
	r, _, h, rec := startRegistryWith(t, Options{
		SyncTimeout: 5 * time.Second,
		NewClients: func(*rest.Config) (Clients, error) {
			if calls.Add(1) <= 3 || !looked.Load() {
				return Clients{}, errors.New("credential plugin not ready")
			}
			return Clients{Kube: kubefake.NewClientset()}, nil
		},
	}, secret("east", "", tokenKubeconfig, time.Hour))

	st, c := r.Lookup("east")
	if st.Phase != lifecycle.Registered || !st.Unreachable || c != nil || !strings.Contains(st.Reason, "credential plugin not ready") {
		t.Fatalf("after start: state %+v, connection %v; want registered, unreachable, not connected", st, c)
	}
	if !slices.Contains(r.Names(), "east") {
		t.Fatalf("Names() = %v: a registered member that cannot connect must be listed", r.Names())
	}
	// Ready between the retries: only a retry in the queue at the moment
	// holds it back.
	waitUntil(t, r.Ready)
	looked.Store(true)
	waitUntil(t, func() bool { st, _ := r.Lookup("east"); return st.Phase == lifecycle.Synced })
	if st, _ := r.Lookup("east"); st.Unreachable {
		t.Errorf("connected member still unreachable: %+v", st)
	}
	if _, removed := h.snapshot(); len(removed) != 0 {
		t.Errorf("ClusterRemoved(%v) for a member that was registered throughout", removed)
	}
	// MemberConnected is recorded just after the connection shows synced.
	var got []string
	waitUntil(t, func() bool {
		got = append(got, events(rec)...)
		return strings.Contains(strings.Join(got, "\n"), ReasonConnected)
	})
	failed := 0
	for _, e := range got {
		if strings.Contains(e, ReasonClientFailed) {
			failed++
		}
	}
	if failed != 1 || !strings.Contains(strings.Join(got, "\n"), ReasonConnected) {
		t.Errorf("Events %q: want one %s and a %s", got, ReasonClientFailed, ReasonConnected)
	}
}

// With sharding, a member another replica owns is registered without a
// connection, neither owned nor unreachable, and not reported in the
// metrics; once it is wanted here, Reconsider connects it, and when it is
// no longer wanted, stops the connection. A registration that cannot be
// connected is unreachable only once it is wanted here.
func TestRegistryConnectsOnlyWantedMembers(t *testing.T) {
	var wanted atomic.Bool
	var broken atomic.Bool
	r, _, _, _ := startRegistryWith(t, Options{
		SyncTimeout: 5 * time.Second,
		Wanted:      func(string) bool { return wanted.Load() },
		NewClients: func(*rest.Config) (Clients, error) {
			if broken.Load() {
				return Clients{}, errors.New("credential plugin not ready")
			}
			return Clients{Kube: kubefake.NewClientset()}, nil
		},
	}, secret("east", "", tokenKubeconfig, time.Hour))

	st, c := r.Lookup("east")
	if st.Phase != lifecycle.Registered || st.Owned || st.Unreachable || c != nil {
		t.Fatalf("east owned elsewhere: state %+v, connection %v; want registered, not owned, reachable, no connection", st, c)
	}
	if r.Warm("east") {
		t.Error("a member without a connection here is warm")
	}
	waitUntil(t, r.Ready) // a member owned elsewhere holds nothing back
	wanted.Store(true)
	// Wanted here, not connected yet (Reconsider not called): not ready.
	if r.Ready() {
		t.Error("ready while east is wanted here and has no connection yet")
	}
	r.Reconsider("east")
	waitUntil(t, func() bool { st, _ := r.Lookup("east"); return st.Phase == lifecycle.Synced && st.Owned })
	if !r.Warm("east") {
		t.Error("a synced member is not warm")
	}
	if !r.Ready() {
		t.Error("not ready with east wanted here and synced")
	}
	wanted.Store(false)
	r.Reconsider("east")
	waitUntil(t, func() bool { _, c := r.Lookup("east"); return c == nil })
	if st, _ := r.Lookup("east"); st.Owned || st.Unreachable {
		t.Errorf("east handed away: %+v, want not owned, reachable", st)
	}

	broken.Store(true)
	wanted.Store(true)
	r.Reconsider("east")
	waitUntil(t, func() bool { st, _ := r.Lookup("east"); return st.Unreachable })
	if st, _ := r.Lookup("east"); st.Phase != lifecycle.Registered || !st.Owned || !strings.Contains(st.Reason, "credential plugin not ready") || !r.Warm("east") {
		t.Errorf("east wanted and broken: %+v (warm %t), want registered, owned, unreachable with the reason, warm", st, r.Warm("east"))
	}
}

// A Secret whose cluster-name annotation is edited claims the new name
// only: the older Secret that was named like a newer one gives that name
// up, and the newer one, ignored as a duplicate until then, takes it.
func TestRegistryFollowsASecretRenamedToAnotherCluster(t *testing.T) {
	r, hub, _, _ := startRegistry(t,
		secret("older", "east", tokenKubeconfig, 2*time.Hour),
		secret("newer", "east", tokenKubeconfig, time.Hour))
	waitUntil(t, func() bool { c := r.Get("east"); return c != nil && c.HasSynced() })
	if got := r.Get("east").secret; got != ns+"/older" {
		t.Fatalf("east registered by %q, want the older Secret", got)
	}

	s, err := hub.CoreV1().Secrets(ns).Get(context.Background(), "older", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Annotations[AnnotationClusterName] = "west"
	s.ResourceVersion = "2" // the fake API server does not bump it
	if _, err := hub.CoreV1().Secrets(ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { c := r.Get("west"); return c != nil && c.HasSynced() && c.secret == ns+"/older" })
	waitUntil(t, func() bool { c := r.Get("east"); return c != nil && c.HasSynced() && c.secret == ns+"/newer" })
	if got := r.Names(); !slices.Equal(got, []string{"east", "west"}) {
		t.Errorf("Names() = %v, want [east west]", got)
	}
	if got := r.claimsOf("east"); len(got) != 1 || got[0].key != ns+"/newer" {
		t.Errorf("claims of east %+v, want only the newer Secret's", got)
	}
	if o := r.nameOwner("west"); o == nil || o.key != ns+"/older" {
		t.Errorf("owner of west %+v, want the older Secret", o)
	}
}

// The older of two Secrets with the same kubeconfig takes over the newer
// one's name: its old name must go, although the connection it takes over
// is already the one its kubeconfig asks for.
func TestRegistryWithdrawsTheOldNameWhenASecretTakesOverAnother(t *testing.T) {
	r, hub, h, _ := startRegistry(t,
		secret("older", "east", tokenKubeconfig, 2*time.Hour),
		secret("newer", "west", tokenKubeconfig, time.Hour))
	waitUntil(t, func() bool {
		e, w := r.Get("east"), r.Get("west")
		return e != nil && e.HasSynced() && w != nil && w.HasSynced()
	})

	s, err := hub.CoreV1().Secrets(ns).Get(context.Background(), "older", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Annotations[AnnotationClusterName] = "west"
	s.ResourceVersion = "2" // the fake API server does not bump it
	if _, err := hub.CoreV1().Secrets(ns).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The takeover takes steps (east withdrawn, then west handed to the
	// older Secret): wait for its end, then say what is wrong if it never
	// comes.
	settled := func() bool {
		r.mu.RLock()
		byOlder, member := r.bySecret[ns+"/older"], r.members["west"]
		r.mu.RUnlock()
		_, removed := h.snapshot()
		return r.Get("east") == nil && byOlder == "west" && member != nil && member.secret == ns+"/older" &&
			member.active != nil && slices.Contains(removed, "east")
	}
	deadline := time.Now().Add(10 * time.Second)
	for !settled() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if o := r.nameOwner("west"); o == nil || o.key != ns+"/older" {
		t.Fatalf("owner of west %+v, want the older Secret", o)
	}
	r.mu.RLock()
	byOlder, member := r.bySecret[ns+"/older"], r.members["west"]
	r.mu.RUnlock()
	if byOlder != "west" || member == nil || member.secret != ns+"/older" || member.active == nil {
		t.Errorf("the older Secret registers %q; west's member record %+v", byOlder, member)
	}
	if got := r.Names(); !slices.Equal(got, []string{"west"}) {
		t.Errorf("Names() = %v, want [west]", got)
	}
	if _, removed := h.snapshot(); !slices.Contains(removed, "east") {
		t.Errorf("removed %v, want east withdrawn", removed)
	}
}
