package app

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/clusters"
)

// memberEndpoint is how the hub reaches a member's apiserver.
type memberEndpoint struct {
	Server        string
	CAData        []byte
	TLSServerName string
}

// endpointFromConfig takes the server, the CA (inlined when the context
// names a file) and the TLS server name from the member context's client
// config. A non-empty server replaces the context's.
func endpointFromConfig(cfg *rest.Config, server string) (memberEndpoint, error) {
	ep := memberEndpoint{Server: strings.TrimSuffix(cfg.Host, "/"), TLSServerName: cfg.ServerName}
	if server != "" {
		ep.Server = strings.TrimSuffix(server, "/")
	}
	if err := validateServerURL(ep.Server); err != nil {
		return ep, err
	}
	ep.CAData = cfg.CAData
	if len(ep.CAData) == 0 && cfg.CAFile != "" {
		data, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return ep, fmt.Errorf("reading the member context's certificate-authority: %w", err)
		}
		ep.CAData = data
	}
	return ep, nil
}

func validateServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("member server %q: %w", s, err)
	}
	if u.Scheme != "https" && u.Scheme != "http" || u.Host == "" {
		return fmt.Errorf("member server %q is not an http(s)://host[:port] URL", s)
	}
	return nil
}

// buildMemberKubeconfig renders the kubeconfig the daemon uses for a member:
// one cluster, user and context, all inline, nothing the daemon's default
// kubeconfig policy refuses. The output is deterministic, so the same inputs
// give the same Secret.
func buildMemberKubeconfig(cluster, user string, ep memberEndpoint, token string) ([]byte, error) {
	if token == "" {
		return nil, errors.New("no token")
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters[cluster] = &clientcmdapi.Cluster{
		Server:                   ep.Server,
		CertificateAuthorityData: ep.CAData,
		TLSServerName:            ep.TLSServerName,
	}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: user}
	kc.CurrentContext = cluster
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, err
	}
	// The daemon must accept it as it is.
	if _, err := clusters.RESTConfig(data, clusters.KubeconfigPolicy{}); err != nil {
		return nil, fmt.Errorf("built kubeconfig is not usable: %w", err)
	}
	return data, nil
}

// kubeconfigToken returns the token of the current context's user of a
// kubeconfig, or "".
func kubeconfigToken(data []byte) string {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return ""
	}
	ctx := kc.Contexts[kc.CurrentContext]
	if ctx == nil {
		return ""
	}
	if u := kc.AuthInfos[ctx.AuthInfo]; u != nil {
		return u.Token
	}
	return ""
}

// kubeconfigServer is the server and CA of a kubeconfig's current context;
// "" when it has none.
func kubeconfigServer(data []byte) (string, []byte) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return "", nil
	}
	ctx := kc.Contexts[kc.CurrentContext]
	if ctx == nil {
		return "", nil
	}
	if c := kc.Clusters[ctx.Cluster]; c != nil {
		return c.Server, c.CertificateAuthorityData
	}
	return "", nil
}

// registrationSecret is the hub Secret registering a member. kubeSystemUID,
// the UID of the member's kube-system namespace, is recorded unless "".
func registrationSecret(namespace, name string, kubeconfig []byte, kubeSystemUID string) *corev1.Secret {
	s := &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   namespace,
			Name:        name,
			Labels:      map[string]string{clusters.LabelMemberCluster: clusters.MemberClusterValue},
			Annotations: map[string]string{clusters.AnnotationClusterName: name},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{clusters.KubeconfigKey: kubeconfig},
	}
	if kubeSystemUID != "" {
		s.Annotations[clusters.AnnotationKubeSystemUID] = kubeSystemUID
	}
	return s
}

// registrationUpToDate reports whether live already holds what desired
// sets; other labels, annotations and data keys are ignored.
func registrationUpToDate(live, desired *corev1.Secret) bool {
	return hasAllLabels(live.Labels, desired.Labels) &&
		hasAllLabels(live.Annotations, desired.Annotations) &&
		string(live.Data[clusters.KubeconfigKey]) == string(desired.Data[clusters.KubeconfigKey])
}

// secretYAML renders a Secret for reading and applying: the kubeconfig as
// stringData rather than base64, no empty server-set fields.
func secretYAML(s *corev1.Secret) ([]byte, error) {
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	if err != nil {
		return nil, err
	}
	unstructured.RemoveNestedField(obj, "metadata", "creationTimestamp")
	unstructured.RemoveNestedField(obj, "data")
	stringData := map[string]any{}
	for k, v := range s.Data {
		stringData[k] = string(v)
	}
	obj["stringData"] = stringData
	return yaml.Marshal(obj)
}

// jwtLifetime reads the iat and exp claims of a JWT without verifying it;
// ok is false when the token is not a JWT or has no exp.
func jwtLifetime(token string) (issued, expires time.Time, ok bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, time.Time{}, false
	}
	var claims struct {
		IssuedAt  int64 `json:"iat"`
		ExpiresAt int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil || claims.ExpiresAt == 0 {
		return time.Time{}, time.Time{}, false
	}
	return time.Unix(claims.IssuedAt, 0), time.Unix(claims.ExpiresAt, 0), true
}

// tokenDueForRenewal reports whether less than a third of a token's lifetime
// is left. Tokens without an expiry (legacy Secret tokens) never are.
func tokenDueForRenewal(now time.Time, token string) bool {
	issued, expires, ok := jwtLifetime(token)
	if !ok {
		return false
	}
	lifetime := expires.Sub(issued)
	if issued.Unix() == 0 || lifetime <= 0 {
		return !now.Before(expires)
	}
	return expires.Sub(now) < lifetime/3
}
