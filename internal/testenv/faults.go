package testenv

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Helpers for fault-injection tests: a cluster's etcd, extra identities and
// kubeconfigs that reach the apiserver another way.

// EtcdURL returns the client URL of the cluster's etcd (plain HTTP on
// loopback). It stays the same across StopAPIServer/StartAPIServer.
func (c *Cluster) EtcdURL() *url.URL {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := *c.env.ControlPlane.Etcd.URL
	return &u
}

// EtcdRevision returns the current revision of the cluster's etcd: the
// resourceVersion the next write gets is greater.
func (c *Cluster) EtcdRevision(ctx context.Context) (int64, error) {
	// A count-only range over an empty key space still carries the header.
	var out struct {
		Header struct {
			Revision string `json:"revision"`
		} `json:"header"`
	}
	req := map[string]any{
		"key":        base64.StdEncoding.EncodeToString([]byte("\x00")),
		"count_only": true,
	}
	if err := c.etcdCall(ctx, "/v3/kv/range", req, &out); err != nil {
		return 0, err
	}
	rev, err := strconv.ParseInt(out.Header.Revision, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("testenv: cluster %q: etcd revision %q: %w", c.Name, out.Header.Revision, err)
	}
	return rev, nil
}

// CompactEtcd compacts the cluster's etcd up to revision (physically, so it
// is done when this returns). Reads and watches at older resourceVersions
// that reach etcd then fail with 410 Gone. The apiserver's watch cache still
// serves its own window: restart the apiserver to drop it.
func (c *Cluster) CompactEtcd(ctx context.Context, revision int64) error {
	req := map[string]any{"revision": strconv.FormatInt(revision, 10), "physical": true}
	return c.etcdCall(ctx, "/v3/kv/compaction", req, nil)
}

// etcdCall posts a request to etcd's gRPC gateway (JSON over HTTP, served on
// the client URL), so the tests need no etcd client library.
func (c *Cluster) etcdCall(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	u := c.EtcdURL()
	u.Path = path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("testenv: cluster %q: etcd %s: %w", c.Name, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("testenv: cluster %q: etcd %s: %w", c.Name, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("testenv: cluster %q: etcd %s: %s: %s", c.Name, path, resp.Status, strings.TrimSpace(string(data)))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("testenv: cluster %q: etcd %s: %w", c.Name, path, err)
	}
	return nil
}

// UserKubeconfig provisions another identity in the cluster (a client
// certificate signed by the cluster's CA, for user in groups) and returns a
// self-contained kubeconfig for it, shaped like Kubeconfig: same server and
// CA, cluster and context named after the cluster, the credentials under
// "<cluster>-<user>". It differs from Kubeconfig in its bytes and its
// credential, as a rotated Secret would.
func (c *Cluster) UserKubeconfig(user string, groups ...string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, fmt.Errorf("testenv: cluster %q is stopped", c.Name)
	}
	u, err := c.env.AddUser(envtest.User{Name: user, Groups: groups}, nil)
	if err != nil {
		return nil, fmt.Errorf("testenv: cluster %q: add user %q: %w", c.Name, user, err)
	}
	cfg := u.Config()
	if len(cfg.CAData) == 0 || len(cfg.CertData) == 0 || len(cfg.KeyData) == 0 {
		return nil, errors.New("testenv: new user has no inline CA or client certificate data")
	}
	authInfo := c.Name + "-" + user
	kc := clientcmdapi.NewConfig()
	kc.Clusters[c.Name] = &clientcmdapi.Cluster{
		Server:                   strings.TrimSuffix(cfg.Host, "/"),
		CertificateAuthorityData: cfg.CAData,
	}
	kc.AuthInfos[authInfo] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: authInfo}
	kc.CurrentContext = c.Name
	return clientcmd.Write(*kc)
}

// KubeconfigVia returns Kubeconfig with its server replaced by server, e.g.
// a Proxy in front of the apiserver. The serving certificate names
// 127.0.0.1, so any loopback port verifies.
func (c *Cluster) KubeconfigVia(server string) ([]byte, error) {
	return KubeconfigWithServer(c.Kubeconfig, server)
}

// KubeconfigWithServer returns kubeconfig with the server of every cluster
// entry replaced by server.
func KubeconfigWithServer(kubeconfig []byte, server string) ([]byte, error) {
	kc, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = server
	}
	return clientcmd.Write(*kc)
}
