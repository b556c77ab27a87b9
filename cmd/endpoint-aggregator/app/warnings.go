package app

import (
	stdsync "sync"

	"k8s.io/klog/v2"
)

// warningLogger logs each distinct API server warning once. The hub warns on
// every core/v1 Endpoints write since Kubernetes 1.33; repeating that per
// write would drown the log.
type warningLogger struct {
	source, cluster string
	seen            stdsync.Map
}

// newWarningLogger logs the warnings of the hub's clients, or of one
// member's when cluster is set.
func newWarningLogger(source, cluster string) *warningLogger {
	return &warningLogger{source: source, cluster: cluster}
}

// HandleWarningHeader implements rest.WarningHandler.
func (w *warningLogger) HandleWarningHeader(code int, agent, text string) {
	if code != 299 || text == "" {
		return
	}
	if _, loaded := w.seen.LoadOrStore(text, struct{}{}); loaded {
		return
	}
	if w.cluster != "" {
		klog.InfoS("API server warning (logged once)", "source", w.source, "cluster", w.cluster, "warning", text)
		return
	}
	klog.InfoS("API server warning (logged once)", "source", w.source, "warning", text)
}
