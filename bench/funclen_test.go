// Package bench holds no code: the benchmark programs are its
// subdirectories (see each one's package comment). This test keeps their
// functions short.
package bench

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is the most lines a function of the bench module may span,
// from its func keyword to its closing brace.
const maxFuncLines = 59

// TestFunctionsAreShort fails for every function or method of the bench
// module (tests included) longer than maxFuncLines.
func TestFunctionsAreShort(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	funcs := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok {
				continue
			}
			funcs++
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s spans %d lines (at most %d: split it)", fset.Position(fd.Pos()), fd.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if funcs < 100 {
		t.Fatalf("found %d functions under %s: the walk missed the programs", funcs, "bench/")
	}
}
