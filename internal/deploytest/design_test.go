package deploytest

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// designSection is one numbered section of docs/design.md: the names of
// its unnumbered headings and named paragraphs ("Timing and symbols",
// "Expiry") and the numbered steps of its lists.
type designSection struct {
	subheadings []string
	steps       map[string]bool
}

var (
	// sectionHeading is "## 2. Flow…" or "### 2.3 Worker".
	sectionHeading = regexp.MustCompile(`^#{2,3} (\d+(?:\.\d+)*)\.? `)
	// otherHeading is a heading without a number ("### Timing and symbols").
	otherHeading = regexp.MustCompile(`^#{2,4} (\D.*)$`)
	// namedParagraph is a paragraph or list item that opens with its name
	// in bold ("- **Expiry**: …", "**Back-pressure** (…)").
	namedParagraph = regexp.MustCompile(`^(?:- )?\*\*([^*]+?)[.:]?\*\*`)
	// stepLine is an item of a numbered list at the start of a line.
	stepLine = regexp.MustCompile(`^(\d+)\. `)
	// commentWrap is a line break inside a comment: a citation may wrap.
	commentWrap = regexp.MustCompile(`\n[ \t]*(?://|--|#)?[ \t]*`)
	// citedSection is one "§N" of a citation with what may follow it: a
	// quoted subsection name, "step N" (or "step N/M"), then ",", "and" or
	// "–" before the next "§".
	citedSection = regexp.MustCompile(`^\s*§(\d+(?:\.\d+)*)(?:\s+"([^"]+)")?(?:\s+steps? (\d+(?:/\d+)*))?`)
	citationLink = regexp.MustCompile(`^\s*(?:,|and|–|-)\s*`)
)

// designSections reads docs/design.md's numbered sections.
func designSections(t *testing.T, root string) map[string]*designSection {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "docs", "design.md"))
	if err != nil {
		t.Fatalf("docs/design.md: %v", err)
	}
	defer f.Close()
	sections := map[string]*designSection{}
	var cur *designSection
	fence := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence {
			continue
		}
		if m := sectionHeading.FindStringSubmatch(line); m != nil {
			cur = &designSection{steps: map[string]bool{}}
			sections[m[1]] = cur
			continue
		}
		if cur == nil {
			continue
		}
		if m := otherHeading.FindStringSubmatch(line); m != nil {
			cur.subheadings = append(cur.subheadings, m[1])
		} else if m := namedParagraph.FindStringSubmatch(line); m != nil {
			cur.subheadings = append(cur.subheadings, m[1])
		} else if m := stepLine.FindStringSubmatch(line); m != nil {
			cur.steps[m[1]] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("docs/design.md: %v", err)
	}
	return sections
}

// designCitation is one "docs/design.md §N" reference in a file.
type designCitation struct {
	file, section, subheading string
	steps                     []string
}

// citationsIn returns every section a file's text cites as docs/design.md
// §N, following lists ("§2.2, §2.3"), ranges ("§2–§3"), "and", quoted
// subsection names and "step N", across comment line wraps.
func citationsIn(file, text string) []designCitation {
	text = commentWrap.ReplaceAllString(text, " ")
	var out []designCitation
	for rest := text; ; {
		i := strings.Index(rest, "docs/design.md")
		if i < 0 {
			return out
		}
		rest = rest[i+len("docs/design.md"):]
		for tail := rest; ; {
			m := citedSection.FindStringSubmatch(tail)
			if m == nil {
				break
			}
			c := designCitation{file: file, section: m[1], subheading: m[2]}
			if m[3] != "" {
				c.steps = strings.Split(m[3], "/")
			}
			out = append(out, c)
			tail = tail[len(m[0]):]
			link := citationLink.FindString(tail)
			if link == "" || !strings.HasPrefix(tail[len(link):], "§") {
				break
			}
			tail = tail[len(link):]
		}
	}
}

// TestDesignCitationsResolve checks that every "docs/design.md §N" in the
// repository's code, scripts, deployment files and documents names a
// section docs/design.md has — and, where it says so, a subsection heading
// or a numbered step within it — so the section numbers the code cites
// cannot drift from the document.
func TestDesignCitationsResolve(t *testing.T) {
	t.Parallel()
	root := moduleDir(t)
	sections := designSections(t, root)
	for _, want := range []string{"1", "2", "2.1", "2.2", "2.3", "2.4", "2.5", "3", "4", "4.1", "4.2", "4.3", "4.4", "5", "6", "7", "8"} {
		if sections[want] == nil {
			t.Errorf("docs/design.md has no section %s: the code's citations keep these numbers", want)
		}
	}
	exts := []string{".go", ".lua", ".sh", ".yaml", ".yml", ".md"}
	n := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if !slices.Contains(exts, filepath.Ext(path)) && !strings.HasPrefix(rel, "scripts"+string(filepath.Separator)) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, c := range citationsIn(rel, string(b)) {
			n++
			s := sections[c.section]
			if s == nil {
				t.Errorf("%s cites docs/design.md §%s: no such section", c.file, c.section)
				continue
			}
			if c.subheading != "" && !slices.Contains(s.subheadings, c.subheading) {
				t.Errorf("%s cites docs/design.md §%s %q: no such heading or named paragraph in §%s (it has %q)", c.file, c.section, c.subheading, c.section, s.subheadings)
			}
			for _, step := range c.steps {
				if !s.steps[step] {
					t.Errorf("%s cites docs/design.md §%s step %s: §%s has no step %s", c.file, c.section, step, c.section, step)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk the module: %v", err)
	}
	if n == 0 {
		t.Fatal("found no docs/design.md citation at all: the search is broken")
	}
}

// TestCitationsIn pins the citation forms the repository uses.
func TestCitationsIn(t *testing.T) {
	t.Parallel()
	got := citationsIn("f.go", "// a (docs/design.md §2.3 step 4, §4.2). b docs/design.md\n// §2–§3 and docs/design.md §1 \"Timing and\n// symbols\"; docs/design.md §7's defaults; docs/design.md §2.3 step 1/3, §5.\n-- docs/design.md §1 and §7")
	want := []designCitation{
		{file: "f.go", section: "2.3", steps: []string{"4"}},
		{file: "f.go", section: "4.2"},
		{file: "f.go", section: "2"},
		{file: "f.go", section: "3"},
		{file: "f.go", section: "1", subheading: "Timing and symbols"},
		{file: "f.go", section: "7"},
		{file: "f.go", section: "2.3", steps: []string{"1", "3"}},
		{file: "f.go", section: "5"},
		{file: "f.go", section: "1"},
		{file: "f.go", section: "7"},
	}
	if len(got) != len(want) {
		t.Fatalf("citationsIn found %d citations, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i].section != want[i].section || got[i].subheading != want[i].subheading || !slices.Equal(got[i].steps, want[i].steps) {
			t.Errorf("citation %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
