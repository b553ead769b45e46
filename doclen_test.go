package fencepub_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxDocWords bounds an exported declaration's doc comment in a public
// package: what it does, what blocks and retries, the errors and the
// DESIGN.md section. How the protocol gets there belongs in the package's
// doc.go or in DESIGN.md.
const maxDocWords = 100

// TestDocCommentsAreShort fails for every exported function, method, type,
// constant or variable of a public package whose doc comment exceeds
// maxDocWords words.
func TestDocCommentsAreShort(t *testing.T) {
	for _, p := range publicPackages(t) {
		dir := "." + strings.TrimPrefix(p, module)
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			for name, doc := range exportedDocs(file) {
				if n := len(strings.Fields(doc.Text())); n > maxDocWords {
					t.Errorf("%s: %s: the doc has %d words, more than %d: keep the contract, move the mechanism to doc.go or DESIGN.md", filepath.ToSlash(f), name, n, maxDocWords)
				}
			}
		}
	}
}

// exportedDocs returns the doc comments of file's exported declarations by
// name (Type.Method for a method).
func exportedDocs(file *ast.File) map[string]*ast.CommentGroup {
	docs := map[string]*ast.CommentGroup{}
	for _, d := range file.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				rt := d.Recv.List[0].Type
				if s, ok := rt.(*ast.StarExpr); ok {
					rt = s.X
				}
				id, ok := rt.(*ast.Ident)
				if !ok || !id.IsExported() {
					continue
				}
				name = id.Name + "." + name
			}
			if d.Name.IsExported() && d.Doc != nil {
				docs[name] = d.Doc
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				var names []*ast.Ident
				doc := d.Doc
				switch s := s.(type) {
				case *ast.TypeSpec:
					names = []*ast.Ident{s.Name}
					if s.Doc != nil {
						doc = s.Doc
					}
				case *ast.ValueSpec:
					names = s.Names
					if s.Doc != nil {
						doc = s.Doc
					}
				}
				for _, n := range names {
					if n.IsExported() && doc != nil {
						docs[n.Name] = doc
					}
				}
			}
		}
	}
	return docs
}
