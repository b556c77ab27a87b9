package clusters

import (
	"errors"
	"strings"
	"testing"
)

func TestRESTConfigRefusesEverythingThatRunsCommandsOrReadsFiles(t *testing.T) {
	user := func(lines string) string {
		return strings.Replace(tokenKubeconfig, "    token: abc\n", lines, 1)
	}
	cluster := func(lines string) string {
		return strings.Replace(tokenKubeconfig, "    certificate-authority-data: Zm9v\n", lines, 1)
	}
	cases := []struct {
		name    string
		config  string
		allow   KubeconfigPolicy
		refused bool
		errText string
	}{
		{name: "inline token and CA", config: tokenKubeconfig},
		{name: "inline client certificate", config: user("    client-certificate-data: Zm9v\n    client-key-data: Zm9v\n")},
		{name: "exec plugin", config: user("    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n"), refused: true, errText: "exec credential plugin \"aws\""},
		{name: "exec plugin allowed", config: user("    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: aws\n"), allow: KubeconfigPolicy{AllowExec: true}},
		{name: "auth provider", config: user("    auth-provider:\n      name: oidc\n"), refused: true, errText: "auth-provider"},
		{name: "token file", config: user("    tokenFile: /var/run/token\n"), refused: true, errText: "tokenFile"},
		{name: "client certificate path", config: user("    client-certificate: /etc/cert.pem\n    client-key: /etc/key.pem\n"), refused: true, errText: "file paths"},
		{name: "CA path", config: cluster("    certificate-authority: /etc/ca.pem\n"), refused: true, errText: "certificate-authority"},
		{name: "insecure", config: cluster("    insecure-skip-tls-verify: true\n"), refused: true, errText: "insecure-skip-tls-verify"},
		{name: "proxy", config: cluster("    certificate-authority-data: Zm9v\n    proxy-url: http://127.0.0.1:3128\n"), refused: true, errText: "proxy-url"},
		{name: "insecure allowed", config: cluster("    insecure-skip-tls-verify: true\n"), allow: KubeconfigPolicy{AllowInsecureSkipVerify: true}},
		{name: "plain http", config: strings.Replace(tokenKubeconfig, "https://", "http://", 1), refused: true, errText: "plain http:// server"},
		{name: "plain http allowed", config: strings.Replace(tokenKubeconfig, "https://", "http://", 1), allow: KubeconfigPolicy{AllowInsecureSkipVerify: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := RESTConfig([]byte(tc.config), tc.allow)
			if !tc.refused {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrRefused) {
				t.Fatalf("error = %v, want a refusal", err)
			}
			if !strings.Contains(err.Error(), tc.errText) || !strings.Contains(err.Error(), "--allow-kubeconfig-") {
				t.Errorf("error %q should name %q and the flag that allows it", err, tc.errText)
			}
		})
	}
}

func TestRESTConfigRejectsMalformedKubeconfigs(t *testing.T) {
	for name, cfg := range map[string]string{
		"empty":             "",
		"not yaml":          "{[",
		"no contexts":       "apiVersion: v1\nkind: Config\n",
		"missing context":   strings.Replace(tokenKubeconfig, "current-context: m", "current-context: other", 1),
		"context's cluster": strings.Replace(tokenKubeconfig, "context: {cluster: m,", "context: {cluster: nope,", 1),
		"no server":         strings.Replace(tokenKubeconfig, "    server: https://127.0.0.1:6443\n", "", 1),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := RESTConfig([]byte(cfg), KubeconfigPolicy{}); err == nil {
				t.Fatal("accepted")
			} else if errors.Is(err, ErrRefused) {
				t.Fatalf("malformed config reported as refused: %v", err)
			}
		})
	}
}
