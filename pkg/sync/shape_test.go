package sync

import (
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	mcsclientset "sigs.k8s.io/mcs-api/pkg/client/clientset/versioned"
)

// The sync's shape, held by a test: the files that read, plan and apply one
// key never record Events, touch metrics or queue keys themselves. They
// fill in an outcome, which settle applies (see the package documentation).
func TestSyncStepsLeaveOutcomesToSettle(t *testing.T) {
	files := []string{"member.go", "clusterset.go", "exportstatus.go", "reader.go", "export.go", "apply.go"}
	forbidden := map[string]bool{
		"recorder": true, "metrics": true, "queue": true,
		"enqueue": true, "waitFor": true, "wake": true, "waits": true,
		"recordEndpoints": true, "reportConflict": true,
		"recordExportConflicts": true, "reportExportConflicts": true,
	}
	fset := token.NewFileSet()
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "c" && forbidden[sel.Sel.Name] {
				t.Errorf("%s: c.%s: a sync step leaves that to its outcome (settle)", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
}

// The read step has no client that writes, and the apply step no listers:
// held by the types of hubReader and hubWriter.
func TestReaderCannotWriteAndWriterHasNoListers(t *testing.T) {
	clients := []reflect.Type{reflect.TypeFor[kubernetes.Interface](), reflect.TypeFor[mcsclientset.Interface]()}
	rt := reflect.TypeFor[hubReader]()
	for i := range rt.NumField() {
		f := rt.Field(i)
		for _, c := range clients {
			if f.Type == c || (f.Type.Kind() == reflect.Interface && f.Type.Implements(c)) {
				t.Errorf("hubReader.%s is a client that writes (%s)", f.Name, f.Type)
			}
		}
	}
	wt := reflect.TypeFor[hubWriter]()
	for i := range wt.NumField() {
		f := wt.Field(i)
		if strings.Contains(f.Type.String(), "Lister") || f.Type == reflect.TypeFor[cache.Indexer]() || f.Type == reflect.TypeFor[cache.SharedIndexInformer]() {
			t.Errorf("hubWriter.%s reads a cache (%s)", f.Name, f.Type)
		}
	}
}
