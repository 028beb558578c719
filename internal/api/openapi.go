package api

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openAPI is the OpenAPI 3.1 description of the HTTP API (docs/design.md §6): every
// route, its request and response bodies, the error object and codes of
// docs/design.md §4.3, the rate-limit, idempotency and ETag headers and bearer
// authentication. The server serves it, unauthenticated, at
// GET /openapi.json.
//
//go:embed openapi.json
var openAPI []byte

// serveOpenAPI is GET /openapi.json.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(openAPI)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPI)
}
