package sync

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-multierror"
)

// ReasonNameConflict is the Event reason on a hub object that holds a name the
// daemon wanted to write, without being managed by it.
const ReasonNameConflict = "NameConflict"

// errStaleCache says a write failed because our hub cache lags behind the API
// server (the object exists already, or changed since we read it). The watch
// event that brings the cache up to date queues the key again, so the sync
// is not retried with backoff.
var errStaleCache = errors.New("hub cache is behind the API server")

// conflictError says a hub object we do not own holds a name we need. It
// is an outcome of a sync: processNext reports it (report) and parks the
// key; resyncNow asks for one more sync at once, which writes what the key
// can without that name.
type conflictError struct {
	resource, namespace, name string
	key                       Key
	holder                    hubObject // for the Event
	resyncNow                 bool
}

func (e *conflictError) Error() string {
	return fmt.Sprintf("%s %s/%s exists and is not managed by endpoint-aggregator for %s; left untouched", e.resource, e.namespace, e.name, e.key)
}

// newConflict is the outcome of finding an object that holds a name key
// needs.
func newConflict(resource string, live hubObject, key Key) *conflictError {
	return &conflictError{resource: resource, namespace: live.GetNamespace(), name: live.GetName(), key: key, holder: live}
}

// conflictsIn returns every conflict an error of a sync carries (a write
// step joins the errors of its writes).
func conflictsIn(err error) []*conflictError {
	var merr *multierror.Error
	if errors.As(err, &merr) {
		var out []*conflictError
		for _, e := range merr.Errors {
			out = append(out, conflictsIn(e)...)
		}
		return out
	}
	var ce *conflictError
	if errors.As(err, &ce) {
		return []*conflictError{ce}
	}
	return nil
}
