package sync

import (
	"fmt"
	stdsync "sync"
	"time"
)

// failureRepeat is how long a key that keeps failing the same way waits
// before its failure is logged again at the default verbosity.
const failureRepeat = 5 * time.Minute

// failureLog decides which sync failures are logged at the default
// verbosity: a key's first failure, one with a new message, and the same
// again every failureRepeat. The others go to V(2). A key that syncs is
// forgotten, so its next failure is said at once.
type failureLog struct {
	mu   stdsync.Mutex
	now  func() time.Time
	said map[Key]saidFailure
}

type saidFailure struct {
	msg string
	at  time.Time
}

func newFailureLog(now func() time.Time) *failureLog {
	return &failureLog{now: now, said: map[Key]saidFailure{}}
}

// loud reports whether this failure of key is to be logged at the default
// verbosity, and notes it if so.
func (l *failureLog) loud(key Key, err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now, msg := l.now(), err.Error()
	if s, ok := l.said[key]; ok && s.msg == msg && now.Sub(s.at) < failureRepeat {
		return false
	}
	l.said[key] = saidFailure{msg: msg, at: now}
	return true
}

// forget drops what was said of key, and reports whether there was any.
func (l *failureLog) forget(key Key) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.said[key]
	delete(l.said, key)
	return ok
}

// Event reasons on a ServiceImport for a key whose sync keeps failing (the
// hub refuses a write, or cannot be reached), and for its recovery.
const (
	ReasonSyncFailed    = "SyncFailed"
	ReasonSyncRecovered = "SyncRecovered"
)

// failureSubject names what a key's sync writes, for its Events: "cluster
// c1: writing its hub objects of ns/name" (explain reads the prefix) or
// "merging ns/name".
func failureSubject(key Key) string {
	if key.IsClusterSet() {
		return fmt.Sprintf("merging %s/%s", key.Namespace, key.Name)
	}
	return fmt.Sprintf("cluster %s: writing its hub objects of %s/%s", key.Cluster, key.Namespace, key.Name)
}
