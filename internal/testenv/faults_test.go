package testenv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestProxyBlockCutsConnectionsAndRefusesNewOnes runs the proxy in front of
// a line echo server.
func TestProxyBlockCutsConnectionsAndRefusesNewOnes(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	p, err := StartProxy(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	echo := func(c net.Conn, msg string) error {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, msg+"\n"); err != nil {
			return err
		}
		got, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			return err
		}
		if got != msg+"\n" {
			t.Errorf("echo %q, want %q", got, msg)
		}
		return nil
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := echo(c, "before"); err != nil {
		t.Fatal(err)
	}

	p.Block()
	if err := echo(c, "during"); err == nil {
		t.Error("a connection open before Block still works")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("dial while blocked: %v, want connection refused", err)
	}

	if err := p.Unblock(); err != nil {
		t.Fatal(err)
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := echo(c2, "after"); err != nil {
		t.Fatal(err)
	}
}

// TestFaultHelpersReachEtcdAndMintUsers compacts a cluster's etcd and checks
// that old resourceVersions are gone, and that a minted user and a
// kubeconfig through a proxy both work.
func TestFaultHelpersReachEtcdAndMintUsers(t *testing.T) {
	c := StartT(t, "faults", Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	cm, err := c.Client.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := c.EtcdRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := cm.ResourceVersion
	for i := 0; i < 3; i++ {
		cm.Data = map[string]string{"i": string(rune('0' + i))}
		if cm, err = c.Client.CoreV1().ConfigMaps("default").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rev2, err := c.EtcdRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rev2 < rev+3 {
		t.Fatalf("etcd revision %d after 3 writes from %d", rev2, rev)
	}
	if err := c.CompactEtcd(ctx, rev2); err != nil {
		t.Fatal(err)
	}
	// etcd itself no longer has the old revision...
	oldRev, _ := strconv.ParseInt(old, 10, 64)
	err = c.etcdCall(ctx, "/v3/kv/range", map[string]any{"key": base64.StdEncoding.EncodeToString([]byte("\x00")), "revision": oldRev}, nil)
	if err == nil || !strings.Contains(err.Error(), "compacted") {
		t.Errorf("etcd range at compacted revision %d: %v, want an error saying it was compacted", oldRev, err)
	}
	// ...and once a restart dropped the watch cache, neither has the apiserver.
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	_, err = c.Client.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{ResourceVersion: old, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Errorf("exact list at compacted resourceVersion %s: %v, want 410 Gone", old, err)
	}

	kc, err := c.UserKubeconfig("second", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(kc, c.Kubeconfig) {
		t.Error("second user's kubeconfig equals the admin's")
	}
	p := StartProxyT(t, c)
	via, err := c.KubeconfigVia(p.URL())
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"second user": kc, "through the proxy": via} {
		cfg, err := clientcmd.RESTConfigFromKubeConfig(data)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Timeout = 10 * time.Second
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "a", metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	p.Block()
	cfg, _ := clientcmd.RESTConfigFromKubeConfig(via)
	cfg.Timeout = 5 * time.Second
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "a", metav1.GetOptions{}); err == nil {
		t.Error("request through a blocked proxy succeeded")
	}
}
