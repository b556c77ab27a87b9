package endpoints

import "fmt"

// maxAnnotationsSize is the API server's bound on an object's annotations,
// keys and values together.
const maxAnnotationsSize = 256 * 1024

// ownAnnotationsRoom is what an object keeps of maxAnnotationsSize for the
// annotations of ours written beside an export's (the derived Service's
// name, which is bounded by name lengths; a slice's content digest, about
// 1.1 KB at MaxEndpointsPerSlice) and for those someone else may have set
// on our objects.
const ownAnnotationsRoom = 4 * 1024

// exportBudget is how much of its hub objects' annotations one export may
// take: on the ServiceImport, its exported annotations with the lists of
// exported keys; on its MCS slices, its export record.
const exportBudget = maxAnnotationsSize - ownAnnotationsRoom

// FitExport returns e with what would not fit in the hub objects built
// from it cut, its export record (ExportRecord of fit), and what was cut.
// The ServiceImport carries the exported annotations and the lists of
// exported keys; every MCS slice of the source carries the export record,
// exported labels and annotations included. Over the budget, the exported
// annotations go first, then the exported labels, so that the other
// exports of the service are imported as if this one had exported nothing
// extra. refused is why the export cannot be imported at all: its record
// is over the budget without them. e is not modified.
func FitExport(e Export) (fit Export, record string, cut []string, refused string) {
	fit, record = e, ExportRecord(e)
	size := func() int {
		return max(importAnnotationsSize(fit.ExportedLabels, fit.ExportedAnnotations), len(record))
	}
	for _, part := range []struct {
		what string
		m    *map[string]string
	}{{"annotations", &fit.ExportedAnnotations}, {"labels", &fit.ExportedLabels}} {
		if n := size(); n > exportBudget && len(*part.m) > 0 {
			cut = append(cut, fmt.Sprintf("exported %s cut: with them the hub objects of this export would carry %d bytes of annotations, over the %d the daemon keeps for an export", part.what, n, exportBudget))
			*part.m = nil
			record = ExportRecord(fit)
		}
	}
	if n := size(); n > exportBudget {
		refused = fmt.Sprintf("the export record of this Service is %d bytes (its ports), over the %d the hub's annotations can hold", n, exportBudget)
	}
	return fit, record, cut, refused
}

// importAnnotationsSize is the size of the annotations setImportMeta
// writes for these exported labels and annotations, ours that are not
// bounded by name lengths included.
func importAnnotationsSize(labels, annotations map[string]string) int {
	n := 0
	for k, v := range annotations {
		n += len(k) + len(v)
	}
	// The comma-separated list of a map's keys, under its annotation key.
	keys := func(key string, m map[string]string) int {
		if len(m) == 0 {
			return 0
		}
		l := len(key) + len(m) - 1
		for k := range m {
			l += len(k)
		}
		return l
	}
	return n + keys(AnnotationExportedLabels, labels) + keys(AnnotationExportedAnnotations, annotations)
}
