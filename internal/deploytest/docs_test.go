package deploytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/config"
	"github.com/sluicehq/sluice/internal/policy"
	"github.com/sluicehq/sluice/internal/upstream"
)

// readmeMaxLines is the README's length bound: a front door read in ten
// minutes.
const readmeMaxLines = 300

// configKey is one key of the configuration file: its dotted path as
// docs/configuration.md writes it (map entries as "<name>", list items as
// "[]") and the default values that line must show (none when the key has
// no default of its own).
type configKey struct {
	path     string
	defaults []string
}

// configDefaults gives, for a struct type of the configuration, the value
// holding its defaults, computed by the package that owns them.
var configDefaults = map[reflect.Type]func() reflect.Value{
	reflect.TypeFor[config.Config](): func() reflect.Value {
		return reflect.ValueOf(*(&config.Config{}).WithDefaults())
	},
	reflect.TypeFor[policy.Overrides](): func() reflect.Value { return reflect.ValueOf(policy.Builtin()) },
	reflect.TypeFor[upstream.Config](): func() reflect.Value {
		return reflect.ValueOf(upstream.Config{}.WithDefaults())
	},
}

// configKeys walks t's yaml tags recursively. A section (a struct field)
// is its keys; a map or list of structs is a key of its own and then its
// element's keys, unless that struct type was met before (tenants.<name>
// holds what defaults holds): the page describes its keys once. def holds
// t's defaults (invalid when there are none); a struct type listed in
// configDefaults brings its own.
func configKeys(t reflect.Type, def reflect.Value, prefix string, seen map[reflect.Type]bool) []configKey {
	if f, ok := configDefaults[t]; ok {
		def = f()
	}
	seen[t] = true
	var keys []configKey
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		path := prefix + name
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		fdef := as(fieldByName(def, f.Name), ft)
		switch {
		case ft.Kind() == reflect.Struct && isConfigStruct(ft):
			// A section: its keys stand for it.
			if !seen[ft] {
				keys = append(keys, configKeys(ft, fdef, path+".", seen)...)
			}
		case ft.Kind() == reflect.Map && isConfigStruct(ft.Elem()):
			keys = append(keys, configKey{path: path + ".<name>"})
			if !seen[ft.Elem()] {
				keys = append(keys, configKeys(ft.Elem(), reflect.Value{}, path+".<name>.", seen)...)
			}
		case ft.Kind() == reflect.Slice && isConfigStruct(ft.Elem()):
			keys = append(keys, configKey{path: path})
			if !seen[ft.Elem()] {
				keys = append(keys, configKeys(ft.Elem(), reflect.Value{}, path+"[].", seen)...)
			}
		default:
			keys = append(keys, configKey{path: path, defaults: defaultTexts(fdef)})
		}
	}
	return keys
}

// isConfigStruct reports whether t is a struct whose fields are keys of
// the file (it has a yaml tag), not a value written as one string such as
// a rate.
func isConfigStruct(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := range t.NumField() {
		if t.Field(i).Tag.Get("yaml") != "" {
			return true
		}
	}
	return false
}

// fieldByName is v's field called name (a Policy's fields carry the names
// of Overrides'), or the invalid Value when v has none.
func fieldByName(v reflect.Value, name string) reflect.Value {
	v = deref(v)
	if !v.IsValid() || v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	return v.FieldByName(name)
}

// as is v converted to the file's type t when both have one kind (a
// Policy's int64 size read as the policy.ByteSize the file writes), else v.
func as(v reflect.Value, t reflect.Type) reflect.Value {
	v = deref(v)
	if v.IsValid() && v.Type() != t && v.Kind() == t.Kind() && v.Type().ConvertibleTo(t) {
		return v.Convert(t)
	}
	return v
}

func deref(v reflect.Value) reflect.Value {
	for v.IsValid() && v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	return v
}

// defaultTexts is how the page writes default value v: each element of a
// list, a duration in its shortest form, a number as Go prints it; nothing
// for a zero value, a struct or a map (their keys carry their own).
func defaultTexts(v reflect.Value) []string {
	v = deref(v)
	if !v.IsValid() || v.IsZero() {
		return nil
	}
	switch x := v.Interface().(type) {
	case time.Duration:
		return []string{policy.Duration(x).String()}
	case fmt.Stringer:
		if v.Kind() == reflect.Slice { // policy.Secrets prints a count
			break
		}
		return []string{x.String()}
	}
	switch v.Kind() {
	case reflect.Slice:
		var out []string
		for i := range v.Len() {
			out = append(out, defaultTexts(v.Index(i))...)
		}
		return out
	case reflect.String:
		return []string{v.String()}
	case reflect.Bool:
		return []string{strconv.FormatBool(v.Bool())}
	case reflect.Int, reflect.Int64:
		return []string{strconv.FormatInt(v.Int(), 10)}
	case reflect.Float64:
		return []string{strconv.FormatFloat(v.Float(), 'g', -1, 64)}
	}
	return nil
}

// TestConfigurationDocumented: every key of the configuration file has a
// table row in docs/configuration.md that starts with the key in
// backticks (key | type | default | bound | what it does), and the row's
// default column shows the key's default.
func TestConfigurationDocumented(t *testing.T) {
	t.Parallel()
	page := readFile(t, "docs/configuration.md")
	lines := strings.Split(page, "\n")
	keys := configKeys(reflect.TypeFor[config.Config](), reflect.Value{}, "", map[reflect.Type]bool{})
	if len(keys) < 50 {
		t.Fatalf("found only %d configuration keys: the walk of config.Config is broken", len(keys))
	}
	for _, k := range keys {
		idx := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| `"+k.path+"` |") })
		if idx < 0 {
			t.Errorf("docs/configuration.md: no table row for the key `%s` (a line starting \"| `%s` |\")", k.path, k.path)
			continue
		}
		cells := strings.Split(strings.ReplaceAll(lines[idx], `\|`, "\x00"), "|")
		if len(cells) < 7 {
			t.Errorf("docs/configuration.md:%d: the row of `%s` has %d cells, want key | type | default | bound | what it does", idx+1, k.path, len(cells)-2)
			continue
		}
		for _, d := range k.defaults {
			if !regexp.MustCompile(`(^|[^0-9A-Za-z.])` + regexp.QuoteMeta(d) + `($|[^0-9A-Za-z.])`).MatchString(cells[3]) {
				t.Errorf("docs/configuration.md:%d: the default column of `%s` does not show its default %q: %s", idx+1, k.path, d, cells[3])
			}
		}
	}
}

// TestAPIRoutesDocumented: every route (method and path) of the OpenAPI
// document appears in docs/api.md as "METHOD /path".
func TestAPIRoutesDocumented(t *testing.T) {
	t.Parallel()
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal([]byte(readFile(t, "internal/api/openapi.json")), &doc); err != nil {
		t.Fatalf("parse internal/api/openapi.json: %v", err)
	}
	page := readFile(t, "docs/api.md")
	methods := []string{"get", "put", "post", "delete", "patch", "head", "options"}
	n := 0
	for path, ops := range doc.Paths {
		for m := range ops {
			if !slices.Contains(methods, m) {
				continue
			}
			n++
			route := strings.ToUpper(m) + " " + path
			if !strings.Contains(page, route) {
				t.Errorf("docs/api.md does not describe the route %q of internal/api/openapi.json", route)
			}
		}
	}
	if n == 0 {
		t.Fatal("internal/api/openapi.json lists no route")
	}
}

// docFiles are the documents whose links must resolve: the README, the
// map, the changelog and every page of docs/.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "ARCHITECTURE.md", "CHANGELOG.md"}
	pages, err := filepath.Glob(filepath.Join(moduleDir(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		files = append(files, filepath.ToSlash(filepath.Join("docs", filepath.Base(p))))
	}
	return files
}

// mdLink matches a Markdown link or image target: [text](target) and
// ![alt](target "title").
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestDocLinksResolve: every relative link of the documents names a file
// of the repository, and its #anchor, in a Markdown file, one of that
// file's headings.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	root := moduleDir(t)
	for _, file := range docFiles(t) {
		text := readFile(t, file)
		for i, line := range strings.Split(withoutCode(text), "\n") {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				rel, anchor, _ := strings.Cut(target, "#")
				dest := file
				if rel != "" {
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), rel)))
					if strings.HasPrefix(dest, "../") {
						t.Errorf("%s:%d: link %q leaves the repository", file, i+1, target)
						continue
					}
					if _, err := os.Stat(filepath.Join(root, dest)); err != nil {
						t.Errorf("%s:%d: link %q: no file %s", file, i+1, target, dest)
						continue
					}
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if !slices.Contains(headingAnchors(readFile(t, dest)), anchor) {
					t.Errorf("%s:%d: link %q: %s has no heading with the anchor #%s", file, i+1, target, dest, anchor)
				}
			}
		}
	}
}

// withoutCode is text with the lines of fenced code blocks blanked, so
// that code is not read as links; line numbers are kept.
func withoutCode(text string) string {
	lines := strings.Split(text, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return strings.Join(lines, "\n")
}

// headingAnchors are the anchors GitHub gives the Markdown headings of
// text: lower case, punctuation dropped, spaces as hyphens, repeats
// numbered.
func headingAnchors(text string) []string {
	var anchors []string
	count := map[string]int{}
	for _, l := range strings.Split(withoutCode(text), "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127 && !strings.ContainsRune("—–…×≤≥·", r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := count[a]; n > 0 {
			anchors = append(anchors, a+"-"+strconv.Itoa(n))
		} else {
			anchors = append(anchors, a)
		}
		count[a]++
	}
	return anchors
}

// TestReadmeIsShort keeps the README a front door.
func TestReadmeIsShort(t *testing.T) {
	t.Parallel()
	n := strings.Count(readFile(t, "README.md"), "\n")
	if n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move reference into docs/", n, readmeMaxLines)
	}
}

// outside are the ways a file could point at something outside the
// repository: the original design and the directories beside the
// checkout. They are spelled in pieces so that this file does not match
// itself.
var outside = []string{".." + "/shared", "shared/" + "DESIGN", "DESIGN" + ".md", "/" + "work/"}

// TestNothingRefersOutside: no tracked text file names a file outside the
// repository; the design is docs/design.md.
func TestNothingRefersOutside(t *testing.T) {
	t.Parallel()
	root := moduleDir(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Errorf("read %s: %v", name, err)
			continue
		}
		if bytes.IndexByte(data, 0) >= 0 {
			continue // binary
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, len(data)+1)
		for n := 1; sc.Scan(); n++ {
			for _, s := range outside {
				if strings.Contains(sc.Text(), s) {
					t.Errorf("%s:%d refers outside the repository (%q): %s", name, n, s, strings.TrimSpace(sc.Text()))
				}
			}
		}
	}
}
