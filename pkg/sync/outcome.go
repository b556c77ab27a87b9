package sync

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	mcsv1beta1 "sigs.k8s.io/mcs-api/pkg/apis/v1beta1"

	"github.com/endpoint-aggregator/endpoint-aggregator/pkg/endpoints"
)

// outcome is what one sync asks of the controller besides its writes: the
// keys it found work for, the preconditions it waits for, and what an
// operator should see. A sync only fills it in; settle applies it, in one
// place, whatever the sync returned (see the package documentation).
type outcome struct {
	follow []Key
	waits  []pendingWait
	events []event
	// missingNS is set when the hub lacks the key's namespace; unreadable
	// counts export records the merge could not read.
	unreadable int
	missingNS  bool
	// endpoints is what the key contributes to its cluster's gauge (-1:
	// nothing), when the sync got that far, and refused the member
	// endpoints it refused (nil: the key has no source); changed is the
	// newest member change it wrote (zero: none).
	endpoints *int
	refused   *endpoints.Refusals
	changed   time.Time
	// export is the member key's export as the sync judged it against its
	// member's bounds (nil: none); exportRefused says why a Service is not
	// imported although exported (past the bounds, or default/kubernetes).
	export        *ledgerEntry
	exportRefused string
	// census is the member's exports as the sync read them from its
	// caches, to judge its export (nil: not taken); unread is set when it
	// withdrew its key without reading them (see ledger).
	census map[Key]ledgerEntry
	unread bool
	// invalidExport lists what the sync removed from the member's Service
	// and export before building hub objects from them.
	invalidExport []string
	// conflicts are a clusterset key's export conflicts once the hub holds
	// the import the merge planned (nil: the sync did not get that far).
	conflicts *importConflicts
	// drop is set when the sync found that this replica no longer writes
	// its member's keys (not owned here, or unregistered; a clusterset
	// key: not merging): what is kept of them goes (memberStates.drop).
	drop bool
}

// importConflicts are the conflicts of an import's exports, and the import
// they are reported on (nil: the hub has no import of ours).
type importConflicts struct {
	imp  *mcsv1beta1.ServiceImport
	list []endpoints.Conflict
}

// pendingWait is a precondition a sync found missing, and how to tell it
// holds.
type pendingWait struct {
	cond  condition
	holds func() bool
}

// event is an Event to record.
type event struct {
	obj                    runtime.Object
	eventType, reason, msg string
}

func (o *outcome) waitFor(cond condition, holds func() bool) {
	o.waits = append(o.waits, pendingWait{cond, holds})
}

func (o *outcome) queue(key Key) { o.follow = append(o.follow, key) }

func (o *outcome) event(obj runtime.Object, eventType, reason, msg string) {
	o.events = append(o.events, event{obj, eventType, reason, msg})
}

// setConflicts sets the export conflicts of the import the hub holds
// (nil: none of ours).
func (o *outcome) setConflicts(imp *mcsv1beta1.ServiceImport, conflicts []endpoints.Conflict) {
	if imp == nil {
		conflicts = nil
	}
	o.conflicts = &importConflicts{imp: imp, list: conflicts}
}
