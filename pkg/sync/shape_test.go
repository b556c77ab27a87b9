package sync

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"
)

// The sync's shape, held by a test: the files that read, plan and apply one
// key never record Events, touch metrics or queue keys themselves. They
// fill in an outcome, which settle applies (see the package documentation).
func TestSyncStepsLeaveOutcomesToSettle(t *testing.T) {
	files := []string{"member.go", "clusterset.go", "exportstatus.go", "reader.go", "apply.go"}
	forbidden := map[string]bool{
		"recorder": true, "metrics": true, "queue": true,
		"enqueue": true, "waitFor": true, "wake": true,
		"recordEndpoints": true, "reportConflict": true,
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
