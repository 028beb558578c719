package api

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/bucket"
)

// fallbackPattern is the /v1 catch-all that answers unknown routes with a
// 404; it is not a route of the document.
const fallbackPattern = "/v1/"

// openAPIMethods are the operation keys of an OpenAPI path item.
var openAPIMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// pathParam matches a {param} of a path template or ServeMux pattern.
var pathParam = regexp.MustCompile(`\{([^}]*)\}`)

// route is one method and path template ("POST", "/v1/jobs/{id}/replay").
type route struct{ method, path string }

func (r route) String() string { return r.method + " " + r.path }

// shape is the route with its parameter names erased, so a route and a
// pattern that differ only in names can be matched and the names compared.
func (r route) shape() string { return r.method + " " + pathParam.ReplaceAllString(r.path, "{}") }

// params lists the route's parameter names in order ("{id...}" is "id").
func (r route) params() []string {
	var names []string
	for _, m := range pathParam.FindAllStringSubmatch(r.path, -1) {
		names = append(names, strings.TrimSuffix(m[1], "..."))
	}
	return names
}

// sample is a concrete request path for the route.
func (r route) sample() string {
	return pathParam.ReplaceAllStringFunc(r.path, func(m string) string {
		switch strings.Trim(m, "{}") {
		case "tenant":
			return "acme-1"
		case "id":
			return "j0_01JDQ3Z9X8K2M4N6P8R0T2V4W6"
		case "name":
			return "search"
		}
		return "x"
	})
}

// parsePattern splits a ServeMux pattern "METHOD /path" (method optional).
func parsePattern(p string) route {
	if method, path, ok := strings.Cut(p, " "); ok {
		return route{method: method, path: strings.TrimSpace(path)}
	}
	return route{path: p}
}

type openAPIParam struct {
	Ref      string `json:"$ref"`
	Name     string `json:"name"`
	In       string `json:"in"`
	Required bool   `json:"required"`
}

type openAPIOperation struct {
	Parameters []openAPIParam     `json:"parameters"`
	Security   *[]json.RawMessage `json:"security"` // nil: the document's default (bearer)
	Responses  map[string]any     `json:"responses"`
}

// openAPIDoc is the document as the tests read it; raw is the whole tree.
type openAPIDoc struct {
	OpenAPI  string                                `json:"openapi"`
	Security []map[string][]string                 `json:"security"`
	Paths    map[string]map[string]json.RawMessage `json:"paths"`
	raw      any
}

func loadOpenAPI(t *testing.T) *openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.json is not valid JSON: %v", err)
	}
	if err := json.Unmarshal(openAPI, &doc.raw); err != nil {
		t.Fatal(err)
	}
	return &doc
}

// operations returns the document's operations by route, and each path's
// path-level parameters.
func (d *openAPIDoc) operations(t *testing.T) (map[route]openAPIOperation, map[string][]openAPIParam) {
	t.Helper()
	ops := map[route]openAPIOperation{}
	pathParams := map[string][]openAPIParam{}
	for path, item := range d.Paths {
		if raw, ok := item["parameters"]; ok {
			var ps []openAPIParam
			if err := json.Unmarshal(raw, &ps); err != nil {
				t.Fatalf("paths[%q].parameters: %v", path, err)
			}
			pathParams[path] = ps
		}
		for key, raw := range item {
			if !slices.Contains(openAPIMethods, key) {
				continue
			}
			var op openAPIOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("paths[%q].%s: %v", path, key, err)
			}
			ops[route{method: strings.ToUpper(key), path: path}] = op
		}
	}
	return ops, pathParams
}

// resolve follows a local JSON pointer ("#/components/parameters/tenant").
func (d *openAPIDoc) resolve(ref string) (any, bool) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, false
	}
	node := d.raw
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := node.(map[string]any)
		if !ok {
			return nil, false
		}
		if node, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return node, true
}

// param resolves a parameter that may be a $ref.
func (d *openAPIDoc) param(t *testing.T, p openAPIParam) openAPIParam {
	t.Helper()
	if p.Ref == "" {
		return p
	}
	node, ok := d.resolve(p.Ref)
	if !ok {
		t.Fatalf("parameter $ref %q does not resolve", p.Ref)
	}
	b, _ := json.Marshal(node)
	var out openAPIParam
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("parameter %q: %v", p.Ref, err)
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestOpenAPIDocument checks the document on its own: OpenAPI 3.1, every
// $ref resolves, each path's {params} are declared as required path
// parameters (and nothing else is), the routes of docs/design.md §6 are all there,
// and the error codes and headers are the ones the server uses.
func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	doc := loadOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") {
		t.Errorf("openapi = %q, want 3.1.x", doc.OpenAPI)
	}
	var refs []string
	collectRefs(doc.raw, &refs)
	if len(refs) == 0 {
		t.Error("the document has no $ref: components are not used")
	}
	for _, ref := range refs {
		if _, ok := doc.resolve(ref); !ok {
			t.Errorf("$ref %q does not resolve", ref)
		}
	}

	ops, pathParams := doc.operations(t)
	for r, op := range ops {
		var declared []string
		for _, p := range append(slices.Clone(pathParams[r.path]), op.Parameters...) {
			p = doc.param(t, p)
			if p.In != "path" {
				continue
			}
			declared = append(declared, p.Name)
			if !p.Required {
				t.Errorf("%s: path parameter %q is not required", r, p.Name)
			}
		}
		want := r.params()
		slices.Sort(declared)
		slices.Sort(want)
		if !slices.Equal(declared, want) {
			t.Errorf("%s: path parameters declared %v, the template has %v", r, declared, want)
		}
		if len(op.Responses) == 0 {
			t.Errorf("%s: no responses", r)
		}
		public := op.Security != nil && len(*op.Security) == 0
		if strings.HasPrefix(r.path, "/v1/") == public {
			t.Errorf("%s: security: /v1 routes use the bearer default, the others none (security: [])", r)
		}
	}
	if len(doc.Security) != 1 || doc.Security[0]["bearerAuth"] == nil {
		t.Errorf("document security = %v, want [{bearerAuth: []}]", doc.Security)
	}

	design := []string{ // docs/design.md §6, plus this document
		"POST /v1/tenants/{tenant}/jobs", "POST /v1/tenants/{tenant}/jobs:batch",
		"GET /v1/jobs/{id}", "DELETE /v1/jobs/{id}", "POST /v1/jobs/{id}/replay",
		"GET /v1/tenants/{tenant}", "PUT /v1/tenants/{tenant}/policy",
		"POST /v1/tenants/{tenant}/pause", "POST /v1/tenants/{tenant}/resume",
		"GET /v1/tenants/{tenant}/dead", "POST /v1/limits/{name}/check",
		"GET /metrics", "GET /healthz", "GET /readyz", "GET /openapi.json",
		// issue #16: webhook secrets by API
		"POST /v1/tenants/{tenant}/secrets", "GET /v1/tenants/{tenant}/secrets", "DELETE /v1/tenants/{tenant}/secrets/{id}",
		"GET /v1/tenants", "POST /v1/tenants/{tenant}/dead:replay", // issue #16
		"GET /v1/summary", "GET /v1/tenants/{tenant}/live", // issue #17: the console's polls
		// issue #15: shared upstream quotas
		"GET /v1/upstreams", "GET /v1/upstreams/{name}", "PUT /v1/upstreams/{name}",
		"POST /v1/upstreams/{name}/pause", "POST /v1/upstreams/{name}/resume", "DELETE /v1/upstreams/{name}",
		// issue #31: API keys by API
		"POST /v1/keys", "GET /v1/keys", "DELETE /v1/keys/{name}", "POST /v1/admin/reload",
		// issue #31: a tenant's jobs by state, canceled in bulk
		"GET /v1/tenants/{tenant}/jobs", "POST /v1/tenants/{tenant}/jobs:cancel",
		// issue #32: the destinations' circuits
		"GET /v1/circuits", "POST /v1/circuits:close",
	}
	for _, p := range design {
		if _, ok := ops[parsePattern(p)]; !ok {
			t.Errorf("docs/design.md §6 route %s is not in the document", p)
		}
	}
	if len(ops) != len(design) {
		var got []string
		for r := range ops {
			got = append(got, r.String())
		}
		sort.Strings(got)
		t.Errorf("the document has %d operations, docs/design.md §6 %d: %v", len(ops), len(design), got)
	}

	codes, _ := doc.resolve("#/components/schemas/ErrorCode/enum")
	wantCodes := []any{CodeMalformed, CodeUnauthorized, CodeForbidden, CodeNotFound, CodeMethodNotAllowed, CodeConflict, CodeTooLarge,
		CodeUnsupportedMedia, CodeInvalid, CodeIdempotencyMismat, CodeNoTaskWorker, CodeNoWebhookSecret, CodeRateLimited, CodeBacklogFull,
		CodeUnavailable, CodeReplicationTimeout, CodeSecretsDisabled, CodeStorageFull, CodePreconditionFailed, CodeUnknownUpstream,
		CodeCostExceedsUpstreamBurst, CodeUpstreamInUse, "internal"}
	if got, ok := codes.([]any); !ok || !sameSet(got, wantCodes) {
		t.Errorf("ErrorCode enum = %v, want the codes of errors.go %v", codes, wantCodes)
	}
	for _, h := range []string{bucket.HeaderLimit, bucket.HeaderRemaining, bucket.HeaderReset, bucket.HeaderPolicy,
		bucket.HeaderRateLimit, bucket.HeaderRetryAfter, HeaderReplayed, "ETag"} {
		if _, ok := doc.resolve("#/components/headers/" + h); !ok {
			t.Errorf("response header %s is not in components.headers", h)
		}
	}
	for _, h := range []string{HeaderIdempotencyKey, "If-Match"} {
		if p, ok := doc.resolve("#/components/parameters/" + h); !ok || p.(map[string]any)["name"] != h {
			t.Errorf("request header %s is not in components.parameters", h)
		}
	}
}

func collectRefs(node any, refs *[]string) {
	switch n := node.(type) {
	case map[string]any:
		if ref, ok := n["$ref"].(string); ok {
			*refs = append(*refs, ref)
		}
		for _, v := range n {
			collectRefs(v, refs)
		}
	case []any:
		for _, v := range n {
			collectRefs(v, refs)
		}
	}
}

func sameSet(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// TestOpenAPIMatchesRoutes checks the document against the server (with a
// store, so every route is registered): every pattern routes() registers
// is documented with the same {param} names, and every documented
// (method, path) is registered, reached through the mux, and authenticated
// as documented (/v1 routes answer 401 without a key, the others do not).
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t, nil)
	doc := loadOpenAPI(t)
	ops, _ := doc.operations(t)
	documented := map[string]route{} // by shape
	for r := range ops {
		documented[r.shape()] = r
	}

	registered := map[string]string{} // shape → pattern
	var undocumented []string
	for _, p := range f.srv.mux.patterns {
		if p == fallbackPattern {
			continue
		}
		r := parsePattern(p)
		registered[r.shape()] = p
		d, ok := documented[r.shape()]
		switch {
		case !ok:
			undocumented = append(undocumented, p)
		case !slices.Equal(d.params(), r.params()):
			t.Errorf("%s is documented with parameters %v but registered as %q with %v", d, d.params(), p, r.params())
		}
	}
	if len(undocumented) > 0 {
		sort.Strings(undocumented)
		t.Errorf("routes the server registers that openapi.json does not document: %s", strings.Join(undocumented, ", "))
	}

	var missing []string
	for _, shape := range sortedKeys(documented) {
		d := documented[shape]
		pattern, ok := registered[shape]
		if !ok {
			missing = append(missing, d.String())
			continue
		}
		req := httptest.NewRequest(d.method, d.sample(), nil)
		if _, got := f.srv.mux.Handler(req); got != pattern {
			t.Errorf("%s %s is routed to %q, want %q", d.method, d.sample(), got, pattern)
		}
		resp := f.do(t, d.method, d.sample(), "", "", "")
		switch public := ops[d].Security != nil; {
		case public && resp.status == http.StatusUnauthorized:
			t.Errorf("%s without an API key: 401, but the document says it needs none", d)
		case !public && resp.status != http.StatusUnauthorized:
			t.Errorf("%s without an API key: %d, but the document says it needs a bearer key (401)", d, resp.status)
		}
	}
	if len(missing) > 0 {
		t.Errorf("routes in openapi.json that routes() does not register (register them, or drop them from the document): %s",
			strings.Join(missing, ", "))
	}
}

// TestOpenAPIServed checks GET /openapi.json: no key needed, JSON, the
// embedded document byte for byte.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, nil)
	resp, err := f.http.Client().Get(f.http.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %q, want 200 application/json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !bytes.Equal(body, openAPI) {
		t.Errorf("GET /openapi.json served %d bytes that differ from the embedded document (%d bytes)", len(body), len(openAPI))
	}
	if !json.Valid(body) {
		t.Error("the served document is not JSON")
	}
}
